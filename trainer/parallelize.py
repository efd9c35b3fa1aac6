"""Data parallelism applied from outside the model: DDP or FSDP2 over the dp mesh."""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from .distributed import ParallelDims


def _block_classes(model: torch.nn.Module) -> tuple[str, ...]:
    """Transformer block class names, from the HF model's own `_no_split_modules`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return tuple(getattr(base, "_no_split_modules", None) or ())


def apply_data_parallel(model: torch.nn.Module, dims: ParallelDims, mode: str, device: torch.device,
                        compute_dtype: torch.dtype) -> torch.nn.Module:
    mesh = dims.mesh("dp")
    if mode == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        # LoRA models have only constant buffers (rotary frequencies): re-broadcasting them every
        # forward is wasted traffic (torch 2.13 renamed the switch)
        sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters
                else {"broadcast_buffers": False})
        return DDP(model, process_group=mesh.get_group(), device_ids=ids, **sync)
    # FSDP2: shard each transformer block, then the root; reduce gradients in fp32.
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    blocks = _block_classes(model)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def grad_sync(model: torch.nn.Module, enabled: bool):
    """Skip the gradient collective on all but the last micro-batch of an accumulation."""
    if isinstance(model, DDP):
        return contextlib.nullcontext() if enabled else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(enabled)
    return contextlib.nullcontext()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DDP) else model
