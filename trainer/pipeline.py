"""Pipeline parallelism for the Llama family with torch.distributed.pipelining, split by hand.

The tracer front end (`pipeline()` with split points) fails on HF Llama (docs/reference.md section 8), so a
stage is built from the single-device model's own modules: a contiguous run of decoder layers, the
embeddings on the first stage, the final norm and lm_head on the last. Hidden states are the only
tensor passed between stages; each stage recomputes the (parameter-free) rotary embeddings and the
causal mask. No padding mask crosses stages: batches are right-padded and attention is causal, so real
tokens never see padding, and padded positions carry no label - the loss equals the unsplit model's.

Under tensor parallel the last stage's lm_head is split over the vocabulary (trainer/parallelize.py): the
stage returns this rank's vocabulary slice of the logits, and `_loss` rebuilds the split logits for
loss-parallel cross-entropy (the loop enters `loss_parallel` around the schedule).

Loss: the last stage sums token cross-entropy per micro-batch and scales it by dp / (global answer
tokens), as the non-pipelined loop does, with the schedule's own 1/n_microbatches scaling off. The sum
(unscaled again) is then reduced over the pp group, so every rank reports the same loss.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .data.sft import IGNORE
from .error_report import InputError
from .workloads.hf import pp_layers_problem


class LlamaStage(nn.Module):
    """Layers [first, last) of a (LoRA-wrapped) Llama; keys keep the layers' global indices."""

    def __init__(self, causal_lm: nn.Module, layer_ids: list[int], has_embed: bool, has_head: bool):
        super().__init__()
        inner = causal_lm.model
        self.config = causal_lm.config
        self._no_split_modules = getattr(causal_lm, "_no_split_modules", None)
        self.embed_tokens = inner.embed_tokens if has_embed else None
        self.layers = nn.ModuleDict({str(i): inner.layers[i] for i in layer_ids})
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if has_head else None
        self.lm_head = causal_lm.lm_head if has_head else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask

        from .positions import plain_positions

        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        position_ids = plain_positions(h.shape[1], h.device)  # no packed-sequence device read (positions.py)
        mask = create_causal_mask(**_mask_arguments(create_causal_mask, config=self.config, inputs_embeds=h,
                                                    attention_mask=None, position_ids=position_ids))
        position_embeddings = self.rotary_emb(h, position_ids=position_ids)
        for layer in self.layers.values():
            h = layer(h, attention_mask=mask, position_ids=position_ids, position_embeddings=position_embeddings)
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def split_layers(num_layers: int, num_stages: int) -> list[list[int]]:
    """Contiguous, as even as possible; earlier stages take the remainder."""
    if problem := pp_layers_problem(num_layers, num_stages):
        raise InputError(problem)
    if num_layers < num_stages:  # a model without layers (the recipe check's range names its config key)
        raise InputError(f"parallel.pp: {num_stages} pipeline stages need decoder layers; the model has "
                         f"{num_layers}; allowed: a model with at least {num_stages} decoder layers")
    base, extra = divmod(num_layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = base + (1 if s < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def stage_ids(pp_rank: int, pp: int, per_rank: int) -> list[int]:
    """Stages a rank holds: one, or for interleaved schedules every pp-th ("looped") stage."""
    return [pp_rank + v * pp for v in range(per_rank)]


def summed_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy over labelled tokens (the llm_lora loss, on the last stage)."""
    logits = logits[:, :-1].float()
    labels = labels[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                           reduction="sum")


class StageList(nn.ModuleList):
    """This rank's (wrapped) stage modules as one module, for the optimizer, checkpoints and fingerprints;
    `pipeline` runs them."""

    def __init__(self, modules: list[nn.Module], pipeline: "Pipeline"):
        super().__init__(modules)
        self.pipeline = pipeline


class Pipeline:
    """The rank's stages and the schedule that runs them; the loop calls train() and evaluate()."""

    SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}

    def __init__(self, peft_model: nn.Module, dims, recipe, device: torch.device):
        from torch.distributed import pipelining

        self.dims, self.device = dims, device
        par, lay = recipe.parallel, dims.layout
        causal_lm = peft_model.get_base_model() if hasattr(peft_model, "get_base_model") else peft_model
        if getattr(causal_lm.config, "tie_word_embeddings", False):
            raise InputError("parallel.pp: the model ties its input and output embeddings (tie_word_embeddings), "
                             "which live on different pipeline stages; allowed: pp 1 for this model")
        self.pp, self.pp_rank = lay.pp, dims.mesh("pp").get_local_rank()
        self.group = dims.mesh("pp").get_group()
        self.n_micro = lay.grad_accum_steps
        num_stages = lay.pp * par.pp_stages_per_rank
        layers = split_layers(causal_lm.config.num_hidden_layers, num_stages)
        self.ids = stage_ids(self.pp_rank, lay.pp, par.pp_stages_per_rank)
        # stages of a meta-device model stay there: the workload fills each rank's own stages afterwards
        self.stage_modules = [LlamaStage(causal_lm, layers[s], s == 0, s == num_stages - 1) for s in self.ids]
        self.first, self.last = 0 in self.ids, (num_stages - 1) in self.ids
        self.num_stages, self.schedule_name = num_stages, par.pp_schedule
        self._scale = 1.0
        self.vocab_parallel = False  # set by the workload: lm_head split over tp on the last stage
        self._pipelining = pipelining
        self.schedule = None

    def build_schedule(self, wrapped: list[nn.Module]) -> None:
        """After tensor/data parallel wrapped the stage modules: make the stages and the schedule."""
        pl = self._pipelining
        stages = [pl.PipelineStage(m, s, self.num_stages, self.device, group=self.group)
                  for m, s in zip(wrapped, self.ids)]
        cls = getattr(pl, self.SCHEDULES[self.schedule_name])
        if self.schedule_name == "interleaved_1f1b":
            self.schedule = cls(stages, n_microbatches=self.n_micro, loss_fn=self._loss, scale_grads=False)
        else:
            self.schedule = cls(stages[0], n_microbatches=self.n_micro, loss_fn=self._loss, scale_grads=False)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.vocab_parallel:  # this rank's vocabulary slice: the split logits, for loss_parallel
            from torch.distributed.tensor import DTensor, Shard

            logits = DTensor.from_local(logits, self.dims.mesh("tp"), [Shard(-1)], run_check=False)
            loss = summed_ce(logits, labels)
            return loss.to_local() * self._scale
        return summed_ce(logits, labels) * self._scale

    def _run(self, inputs: torch.Tensor, labels: torch.Tensor, train: bool) -> torch.Tensor:
        # The schedule's `losses` holds one entry per real micro-batch (its first step and a switch
        # between step and eval also run a shape-inference forward through loss_fn, not listed there).
        losses: list[torch.Tensor] = []
        args = (inputs.to(self.device),) if self.first else ()
        target = labels.to(self.device) if self.last else None
        if train:
            self.schedule.step(*args, target=target, losses=losses if self.last else None)
        else:
            self.schedule.eval(*args, target=target, losses=losses if self.last else None)
        if losses:
            total = torch.stack([x.detach().float() for x in losses]).sum() / self._scale
        else:
            total = torch.zeros((), device=self.device)
        dist.all_reduce(total, group=self.group)  # only the last stage has it: every rank reports it
        return total

    def train(self, batches: list[dict], scale: float) -> torch.Tensor:
        """One optimizer step's forward and backward over the grad-accum micro-batches; the summed loss."""
        self._scale = scale
        inputs = torch.cat([b["input_ids"] for b in batches])
        labels = torch.cat([b["labels"] for b in batches])
        return self._run(inputs, labels, train=True)

    @torch.no_grad()
    def evaluate(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed loss, answer tokens) of one per-rank batch (n_microbatches x micro_batch samples)."""
        self._scale = 1.0
        total = self._run(batch["input_ids"], batch["labels"], train=False)
        return total, (batch["labels"][:, 1:] != IGNORE).sum()


def _mask_arguments(create_causal_mask, **given) -> dict:
    """create_causal_mask's arguments for the installed transformers: no cache (named `cache` from 5.x,
    `past_key_values` before), and cache_position where the version still asks for it."""
    import inspect

    params = inspect.signature(create_causal_mask).parameters
    out = {k: v for k, v in given.items() if k in params}
    out["cache" if "cache" in params else "past_key_values"] = None
    if "cache_position" in params:
        out["cache_position"] = given["position_ids"][0]
    return out
