"""The workload contract: every member the trainer calls, typed (trainer/run.py builds with it, trainer/loop.py
and trainer/engines/step.py train with it). `WorkloadDefaults` gives the optional members their defaults, so
the trainer reads every member directly; tests/trainer/test_workload_contract.py checks every shipped workload."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Protocol, runtime_checkable

import torch


@runtime_checkable
class Workload(Protocol):
    loss_terms: tuple[tuple[str, str], ...]  # (loss name, count name), e.g. (("loss", "label_tokens"),)
    has_tokens: bool  # tokens/s applies (language models)
    accuracy: str | None  # what eval_accuracy means ("top-1"), or None
    peak_ops: str  # which peak MFU divides by: "matmul", or "conv" (cuDNN's TF32 switch)
    loss_parallel: bool  # lm_head split over tp, loss-parallel cross-entropy
    load_stats: dict | None  # how this rank's weights were filled (sharded loads), None when not measured
    attention_flops_per_pair: float | None  # attention's FLOPs per (query, key) position pair
    position_pairs: Callable[[dict], int] | None  # a batch's attention pairs at its own length; None: not counted
    kernels: Any  # trainer.kernels.KernelChoice given by use_kernels before build_model (model.kernels)
    compiled_blocks: int  # decoder blocks parallelize compiled (train.compile=blocks)

    def model_type(self) -> str | None: ...  # the model family's name where fused kernels may apply
    def use_kernels(self, kernels: Any) -> None: ...  # the run's fused-kernel choice, before build_model
    def build_data(self, need_eval: bool) -> tuple[Any, Any]: ...
    def build_model(self) -> torch.nn.Module: ...
    def parallelize(self, model: torch.nn.Module, dims, device: torch.device,
                    compute_dtype: torch.dtype) -> torch.nn.Module: ...
    def flops(self, model: torch.nn.Module) -> tuple[float, str, str]: ...
    def describe(self, train_set) -> str: ...
    def loss_counts(self, batch: dict) -> dict: ...
    def input_tokens(self, batch: dict) -> int: ...
    def padded_tokens(self, batch: dict) -> int: ...
    def loss_sums(self, model: torch.nn.Module, batch: dict) -> dict: ...
    def eval_sums(self, model: torch.nn.Module, batch: dict) -> dict: ...
    def loss_context(self) -> ContextManager: ...


class WorkloadDefaults:
    """The optional members' defaults; a workload class derives from it and overrides what applies."""
    peak_ops = "matmul"
    loss_parallel = False
    load_stats: dict | None = None
    attention_flops_per_pair: float | None = None
    position_pairs: Callable[[dict], int] | None = None
    kernels: Any = None
    compiled_blocks = 0

    def model_type(self) -> str | None:  # no fused kernels for this family
        return None

    def use_kernels(self, kernels: Any) -> None:  # the workload keeps the choice: build_model/loss read it
        self.kernels = kernels

    @staticmethod
    def input_tokens(batch: dict) -> int:  # workloads without tokens (has_tokens False): never asked
        return 0

    @staticmethod
    def padded_tokens(batch: dict) -> int:
        return 0

    def loss_context(self) -> ContextManager:
        return contextlib.nullcontext()


class TokenWorkload(WorkloadDefaults):
    """A language model's token counts, read off the host-side batch: real tokens (the attention mask) and
    positions computed, padding included (what the GPUs spend FLOPs on)."""
    has_tokens = True

    @staticmethod
    def input_tokens(batch: dict) -> int:
        return int(batch["attention_mask"].sum())

    @staticmethod
    def padded_tokens(batch: dict) -> int:
        return int(batch["input_ids"].numel())
