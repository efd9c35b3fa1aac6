"""The step loop: gradient accumulation to the global batch, clipping, AdamW, warm-up + cosine.

Loss normalisation: each micro-batch contributes its summed token loss divided by the answer-token
count of the *whole global batch* (all micro-batches on all dp ranks), times dp because DDP/FSDP
average gradients over dp. Any dp x grad-accum split therefore takes the same step as one process.
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import checkpoint
from .hooks import Hooks
from .parallelize import grad_sync
from .progress import Progress
from .throughput import step_figures


@dataclass
class LoopState:
    step: int = 0  # optimizer steps completed
    status: str = "running"
    last_loss: float | None = None
    last_eval_loss: float | None = None
    target_reached_step: int | None = None


def build_optimizer(model: torch.nn.Module, train, max_steps: int):
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=train.lr, betas=tuple(train.betas), eps=train.eps,
                            weight_decay=train.weight_decay)
    sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=train.warmup_steps,
                                                        num_training_steps=max_steps, min_lr=train.min_lr)
    return opt, sched


class Trainer:
    def __init__(self, recipe, layout, dims, model, workload, train_set, eval_set, sampler, rundir,
                 hooks: Hooks, device: torch.device, autocast_dtype: torch.dtype | None):
        self.recipe, self.layout, self.dims = recipe, layout, dims
        self.model, self.workload = model, workload
        self.train_set, self.eval_set, self.sampler = train_set, eval_set, sampler
        self.rundir, self.hooks, self.device = rundir, hooks, device
        self.autocast_dtype = autocast_dtype
        self.optimizer, self.scheduler = build_optimizer(model, recipe.train, recipe.max_steps)
        self.state = LoopState()
        self.flops_per_token: float | None = None  # set by the run: the workload's model FLOPs per token
        self.peak_tflops: float | None = None  # None off-GPU or for an unknown device: MFU stays null
        self.progress = Progress(recipe.max_steps, recipe.train.log_every, enabled=dist.get_rank() == 0)
        self.dp_group = dims.dp_group
        self.params = [p for p in model.parameters() if p.requires_grad]

    # ------------------------------------------------------------ resume

    def maybe_resume(self) -> int:
        """Load the checkpoint the recipe asks for; returns the step it holds (0 when starting fresh)."""
        mode = self.recipe.train.resume
        if mode == "never":
            return 0
        path = checkpoint.find_latest(self.rundir.checkpoints) if mode == "auto" else mode
        if path is None:
            return 0
        trainer_state, rng_restored = checkpoint.load(path, self.model, self.optimizer, self.scheduler)
        self.state.step = trainer_state["step"]
        if trainer_state.get("global_batch_size") != self.layout.global_batch_size:
            self.progress.warn(f"checkpoint was taken with global batch {trainer_state.get('global_batch_size')}, "
                               f"now {self.layout.global_batch_size}: data order will differ from an "
                               "uninterrupted run")
        if not rng_restored:
            self.progress.warn("this rank had no RNG state in the checkpoint (world size changed); "
                               "dropout streams restart from the seed")
        self.progress.info(f"resumed from {path} at step {self.state.step}")
        return self.state.step

    def _save(self) -> None:
        step = self.state.step
        checkpoint.save(self.rundir.checkpoints, step, self.model, self.optimizer, self.scheduler,
                        {"step": step, "samples_seen": step * self.layout.global_batch_size,
                         "global_batch_size": self.layout.global_batch_size, "seed": self.recipe.seed})
        self.progress.info(f"checkpoint saved at step {step}")

    # ------------------------------------------------------------ step

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def train_step(self, step: int) -> dict:
        """One optimizer step (numbered from 1) over the whole global batch; returns its record."""
        hooks, wl, dp = self.hooks, self.workload, self.layout.dp
        hooks.on_step_start(step)
        t0 = time.perf_counter()
        batches = [self.train_set.batch(idx) for idx in self.sampler.micro_batches(step - 1)]
        local = torch.tensor([sum(wl.count_label_tokens(b) for b in batches),
                              sum(wl.count_input_tokens(b) for b in batches)], dtype=torch.float64)
        totals = local.clone()
        dist.all_reduce(totals, group=self.dp_group)  # global token counts, needed before backward
        label_tokens = max(totals[0].item(), 1.0)
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float32)
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            with grad_sync(self.model, last):
                with self._autocast():
                    summed, _ = wl.loss_sum(self.model, self._to_device(batch))
                loss = summed * (dp / label_tokens)
                hooks.before_backward(step, i)
                loss.backward()
                hooks.after_backward(step, i)
            loss_sum += summed.detach().float()
        if hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(True)
        grad_norm = self._clip()
        lr = self.optimizer.param_groups[0]["lr"]
        hooks.before_optimizer_step(step)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        hooks.after_optimizer_step(step)
        dist.all_reduce(loss_sum, group=self.dp_group)  # also the step's one host sync point
        loss_value = loss_sum.item() / label_tokens
        step_time = time.perf_counter() - t0
        samples = self.layout.global_batch_size
        record = {"step": step, "loss": loss_value, "lr": lr, "grad_norm": grad_norm, "step_time_s": step_time,
                  "samples_per_s": samples / step_time, "tokens_per_s": totals[1].item() / step_time,
                  "tokens": int(totals[1].item()), "label_tokens": int(totals[0].item()),
                  "epoch": self.sampler.epoch_of(step),
                  **step_figures(int(totals[1].item()), step_time, self.layout.world_size, self.flops_per_token,
                                 self.peak_tflops)}
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss is {loss_value} at step {step}; stopping (lower train.lr, "
                                     "check the data, or use train.grad_clip)")
        return record

    def _clip(self) -> float | None:
        """Global gradient norm (before clipping), then clip to train.grad_clip.

        Gradients may be plain tensors (DDP, replicated LoRA A), FSDP2 shards or TP shards: squares are
        summed locally, then reduced once per group of ranks that a shard is split across.
        """
        by_groups: dict[tuple, torch.Tensor] = {}
        grads = [p.grad for p in self.params if p.grad is not None]
        for g in grads:
            groups: tuple = ()
            local = g
            if hasattr(g, "placements"):  # DTensor
                mesh = g.device_mesh
                # FSDP's dp placement over a TP-sharded dim is a _StridedShard, for which is_shard() is False
                groups = tuple(mesh.get_group(i) for i, pl in enumerate(g.placements)
                               if not (pl.is_replicate() or pl.is_partial()))
                local = g.to_local()
            sq = local.detach().float().pow(2).sum()
            by_groups[groups] = by_groups.get(groups, torch.zeros((), device=sq.device)) + sq
        total = torch.zeros((), device=self.device)
        for groups, sq in by_groups.items():
            for group in groups:
                dist.all_reduce(sq, group=group)
            total = total + sq.to(self.device)
        norm = float(total.sqrt())
        clip = self.recipe.train.grad_clip
        if clip is not None and math.isfinite(norm) and norm > clip:
            coef = clip / (norm + 1e-6)
            for g in grads:
                g.mul_(coef)
        return norm if math.isfinite(norm) else None

    # ------------------------------------------------------------ eval

    @torch.no_grad()
    def evaluate(self) -> float:
        """Token-weighted mean loss over the eval set, sharded across dp ranks."""
        self.model.eval()
        mbs, dp, rank = self.layout.micro_batch_size, self.layout.dp, self.dims.dp_rank
        mine = list(range(rank, len(self.eval_set), dp))
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)
        # every rank runs the same number of forwards: FSDP2 forwards are collective
        rounds = math.ceil(math.ceil(len(self.eval_set) / dp) / mbs)
        for r in range(rounds):
            idx = mine[r * mbs:(r + 1) * mbs]
            weight = 1.0 if idx else 0.0
            batch = self.eval_set.batch(idx or [0])
            with self._autocast():
                summed, count = self.workload.loss_sum(self.model, self._to_device(batch))
            sums += torch.stack([summed.double(), count.double()]) * weight
        dist.all_reduce(sums, group=self.dp_group)
        self.model.train()
        return (sums[0] / sums[1].clamp(min=1)).item()

    def _eval_due(self, step: int) -> bool:
        every = self.recipe.train.eval_every_samples
        if not every or self.eval_set is None:
            return False
        gbs = self.layout.global_batch_size
        return (step * gbs) // every > ((step - 1) * gbs) // every

    # ------------------------------------------------------------ run

    def run(self) -> LoopState:
        train, max_steps = self.recipe.train, self.recipe.max_steps
        start = self.maybe_resume()
        if start >= max_steps:
            self.progress.info(f"checkpoint is at step {start} of max_steps={max_steps}: nothing to do "
                               "(raise max_steps, or train.resume=never for a fresh run)")
        self.rundir.open_metrics(start)
        self.model.train()
        self.hooks.on_train_start({"start_step": start, "max_steps": max_steps, "layout": self.layout})
        crash_at = int(os.environ.get("FABRIC_HARNESS_CRASH_AFTER_STEP", "0"))  # fault injection for tests
        for step in range(start + 1, max_steps + 1):
            record = self.train_step(step)
            if self._eval_due(step):
                record["eval_loss"] = self.state.last_eval_loss = self.evaluate()
                record["samples_seen"] = step * self.layout.global_batch_size
            self.hooks.on_step_end(step, record)
            record["time"] = time.time()  # wall clock at the step's end: lines steps up with outside counters
            self.state.step, self.state.last_loss = step, record["loss"]
            self.rundir.write_metrics(record)
            self.progress.step(record)
            target = train.target_eval_loss
            if target is not None and record.get("eval_loss") is not None and record["eval_loss"] <= target:
                self.state.target_reached_step = step
                self.progress.info(f"eval loss {record['eval_loss']:.4f} <= target {target} at step {step}: stopping")
                break
            if train.save_every and step % train.save_every == 0 and step < max_steps:
                self._save()
            if crash_at and step == crash_at and dist.get_rank() == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        if train.save_final and self.state.step > start:
            self._save()
        self.state.status = "completed"
        return self.state
