"""How one optimizer step's gradients are made and applied, behind one seam. The loop (trainer/loop.py)
owns the step's bookkeeping (batches, item counts, the one host sync, the record); an engine owns:

    forward_backward(step, batches, scale, terms) -> summed loss terms (device tensor); scale() gives
                          dp / each term's global item count, waiting for its all-reduce on first use
    finish_gradients() -> the gradient norm before clipping (device tensor), or None where the engine
                          computes it in apply (DeepSpeed)
    apply(norm) -> the norm, after the optimizer step and zeroing the gradients

Three engines: native (DDP, FSDP2, TP, replicated LoRA: torch's own wrappers), pipeline (the schedule
runs every micro-batch's forward and backward), DeepSpeed (its engine reduces, clips and steps).
"""
from __future__ import annotations

import torch

from ..parallelize import grad_sync, reduce_trainable_grads
from . import deepspeed as ds


class NativeStep:
    def __init__(self, trainer):
        self.t = trainer

    def forward_backward(self, step: int, batches: list, scale, terms) -> torch.Tensor:
        t, hooks, wl = self.t, self.t.hooks, self.t.workload
        sums = torch.zeros(len(terms), device=t.device, dtype=torch.float32)
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            with grad_sync(t.model, last), t._loss_context():
                with t._autocast():
                    parts = wl.loss_sums(t.model, t._to_device(batch))
                factors = scale()  # after the first forward: that forward overlapped the count all-reduce
                loss = sum(parts[name] * factors[k] for k, (name, _) in enumerate(terms))
                hooks.before_backward(step, i)
                self.backward(loss, last)
                hooks.after_backward(step, i)
            sums += torch.stack([parts[name].detach().float() for name, _ in terms])
        return sums

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def finish_gradients(self) -> torch.Tensor | None:
        t = self.t
        if hasattr(t.model, "set_requires_gradient_sync"):
            t.model.set_requires_gradient_sync(True)
        if t.layout.data_parallel == "replicate":  # replicas: only the trainable gradients cross dp
            reduce_trainable_grads(t.params, t.dp_group, t.layout.dp)
        return t._clip()

    def apply(self, norm: torch.Tensor | None) -> torch.Tensor:
        self.t.optimizer.step()
        self.t.optimizer.zero_grad(set_to_none=True)
        return norm


class PipelineStep(NativeStep):
    """pp > 1: the micro-batches are the pipeline's; it owns forward, backward and gradient sync."""

    def forward_backward(self, step: int, batches: list, scale, terms) -> torch.Tensor:
        t = self.t
        sums = torch.zeros(len(terms), device=t.device, dtype=torch.float32)
        t.hooks.before_backward(step, 0)
        with t._autocast(), t._loss_context():
            sums += t.pipeline.train(batches, scale()[0])
        t.hooks.after_backward(step, 0)
        return sums


class DeepSpeedStep(NativeStep):
    """DeepSpeed's engine reduces the gradients, clips them (train.grad_clip) and steps."""

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        ds.backward(self.t.engine, loss, last)

    def finish_gradients(self) -> torch.Tensor | None:
        if hasattr(self.t.model, "set_requires_gradient_sync"):
            self.t.model.set_requires_gradient_sync(True)
        return None

    def apply(self, norm: torch.Tensor | None) -> torch.Tensor:
        return ds.step(self.t.engine).to(self.t.device)


def step_engine(trainer) -> NativeStep:
    """The engine for this trainer's layout."""
    if trainer.engine is not None:
        return DeepSpeedStep(trainer)
    if trainer.pipeline is not None:
        return PipelineStep(trainer)
    return NativeStep(trainer)
