"""The step loop: gradient accumulation to the global batch, clipping, the recipe's optimizer and schedule.

Loss normalisation: each micro-batch contributes, per loss term, its summed loss divided by that term's
item count over the *whole global batch* (answer tokens, masked positions, images - on all micro-batches
and dp ranks), times dp because DDP/FSDP average gradients over dp. Any dp x grad-accum split therefore
takes the same step as one process.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from . import checkpoint
from .engines import deepspeed as ds
from .engines.step import step_engine
from .faults import FaultInjection
from .grad_clip import clip_grads
from .hook_list import HookList, Hooks
from .optim import build_optimizer
from .progress import Progress
from .stop import Interrupted
from .throughput import step_figures, step_flops
from .workloads.contract import Workload
from telemetry.rundir import StepKey


@dataclass
class LoopState:
    step: int = 0  # optimizer steps completed
    status: str = "running"
    last_loss: float | None = None
    last_eval_loss: float | None = None
    last_eval_accuracy: float | None = None
    target_reached_step: int | None = None
    resumed_from: int | None = None  # the checkpoint's step when this attempt resumed
    steps_done: bool = False  # no step follows `step`: what fails now fails after it, not in the next


class ScaleFromCounts:
    """dp / the global item count of each loss term, from a count all-reduce that may still be in flight:
    the first call waits for it (on a GPU, the compute stream waits, not the host), later calls reuse."""

    def __init__(self, work, counted: torch.Tensor, dp: int, n_terms: int):
        self.work, self.counted, self.dp, self.n = work, counted, dp, n_terms
        self.value: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self.value is None:
            if self.work is not None:
                self.work.wait()
            self.value = (self.dp / self.counted[:self.n].clamp(min=1.0)).float()
        return self.value


@dataclass
class TrainerParts:
    """Everything the loop is built from, typed: trainer/run.py's build phase fills it once."""
    recipe: Any  # trainer.config.Recipe
    layout: Any  # trainer.layout.Layout
    dims: Any  # trainer.distributed.ParallelDims: the meshes
    model: torch.nn.Module  # parallelized
    workload: Workload
    train_set: Any
    eval_set: Any
    sampler: Any  # trainer.data.sampler.StepSampler
    rundir: Any  # the run's writer (the recorder's RunDir)
    hooks: Hooks  # the recorder first: telemetry/integrations/recorder.py
    device: torch.device
    autocast_dtype: torch.dtype | None
    flops_per_unit: float | None = None  # the workload's model FLOPs per token/sample
    flops_unit: str = "token"
    peak_tflops: float | None = None  # None off-GPU or for an unknown device: MFU stays null
    stops: Any = None  # trainer.stop.StopRequests: SIGTERM or a lost agent, honoured at a step's end


class Trainer:
    def __init__(self, parts: TrainerParts):
        recipe, layout, model, hooks = parts.recipe, parts.layout, parts.model, parts.hooks
        self.recipe, self.layout, self.dims = recipe, layout, parts.dims
        self.model, self.workload = model, parts.workload
        self.train_set, self.eval_set, self.sampler = parts.train_set, parts.eval_set, parts.sampler
        self.rundir, self.hooks, self.device = parts.rundir, hooks, parts.device
        self.autocast_dtype = parts.autocast_dtype
        self.flops_per_unit, self.flops_unit, self.peak_tflops = parts.flops_per_unit, parts.flops_unit, parts.peak_tflops
        self.stops = parts.stops
        self.optimizer, self.scheduler = build_optimizer(model, recipe.train, recipe.max_steps)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.engine = None  # DeepSpeed: owns gradient reduction, clipping and the optimizer step
        if layout.data_parallel == "deepspeed":
            dtype = parts.autocast_dtype or torch.float32
            self.engine = self.model = ds.wrap(model, self.optimizer, recipe, layout, parts.device, dtype)
            if ds.comms_logger_enabled(recipe):  # DeepSpeed's own view of each step's collectives
                self.hooks = HookList([hooks, ds.CommsLog()])
        self.state = LoopState()
        self.progress = Progress(recipe.max_steps, recipe.train.log_every, enabled=dist.get_rank() == 0)
        self.dp_group = parts.dims.dp_group
        self.pipeline = getattr(model, "pipeline", None)  # pp > 1: the schedule runs forward and backward
        self.step_engine = step_engine(self)  # native, pipeline or DeepSpeed: trainer/engines/step.py
        self.faults = FaultInjection.from_recipe(recipe.debug, dist.get_rank())  # only when asked for
        # (step, batches, local counts, global counts on the device) built at the previous step's end, the global
        # counts reduced in the same all-reduce as that step's loss sums
        self._next: tuple[int, list, list, torch.Tensor] | None = None
        self._rng_before_next: tuple | None = None  # the host's RNG streams before _next was drawn

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
        self.state.resumed_from = self.state.step
        # the run's last loss and evaluation so far, so that a resume with nothing left to do keeps them
        done = self.rundir.metrics_up_to(self.state.step)
        self.state.last_loss = next((r[StepKey.LOSS] for r in reversed(done) if r.get(StepKey.LOSS) is not None),
                                    None)
        last_eval = next((r for r in reversed(done) if r.get(StepKey.EVAL_LOSS) is not None), {})
        self.state.last_eval_loss = last_eval.get(StepKey.EVAL_LOSS)
        self.state.last_eval_accuracy = last_eval.get(StepKey.EVAL_ACCURACY)
        return self.state.step

    def _save(self) -> None:
        step = self.state.step
        checkpoint.save(self.rundir.checkpoints, step, self.model, self.optimizer, self.scheduler,
                        {StepKey.STEP: step, StepKey.SAMPLES_SEEN: step * self.layout.global_batch_size,
                         "global_batch_size": self.layout.global_batch_size, "seed": self.recipe.seed},
                        rng=self._rng_before_next if self._next is not None else None)  # None: as they are
        self.progress.info(f"checkpoint saved at step {step}")

    # ------------------------------------------------------------ step

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _loss_context(self):
        """The workload's context for forward and backward (loss-parallel cross-entropy under TP)."""
        return self.workload.loss_context()

    def _host_to_device(self, t: torch.Tensor) -> torch.Tensor:
        """A copy from pageable memory makes the host wait for the device; a pinned one does not."""
        if self.device.type == "cuda" and not t.is_cuda:
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def _to_device(self, batch: dict) -> dict:
        return {k: self._host_to_device(v) for k, v in batch.items()}

    def _prepare(self, step: int) -> tuple[int, list, list]:
        """Step `step`'s micro-batches and this rank's item counts, read off the host-side batches. The
        native and DeepSpeed engines get the batches already copied to the device (the pipeline's
        schedule moves its own)."""
        wl = self.workload
        batches = [self.train_set.batch(idx) for idx in self.sampler.micro_batches(step - 1)]
        counts = [wl.loss_counts(b) for b in batches]
        local = [sum(c[count] for c in counts) for _, count in wl.loss_terms]
        local.append(sum(wl.input_tokens(b) for b in batches) if wl.has_tokens else 0)
        local.append(sum(wl.padded_tokens(b) for b in batches) if wl.has_tokens else 0)
        pairs_of = wl.position_pairs  # attention's work at each batch's own length
        local.append(sum(pairs_of(b) for b in batches) if pairs_of else 0)
        if self.pipeline is None:
            batches = [self._to_device(b) for b in batches]
        return step, batches, local

    def train_step(self, step: int) -> dict:
        """One optimizer step (numbered from 1) over the whole global batch; returns its record."""
        hooks, wl, dp = self.hooks, self.workload, self.layout.dp
        hooks.on_step_start(step)
        t0 = time.perf_counter()
        self.faults.before_step(step)
        ready, self._next = self._next, None
        terms = wl.loss_terms
        pairs_of = wl.position_pairs
        if ready is not None and ready[0] == step:
            # built at the previous step's end, while the device still ran that step; its global counts came
            # back with that step's loss sums (one all-reduce for both, not a second one here)
            _, batches, _, counted = ready
            scale = ScaleFromCounts(None, counted, dp, len(terms))
        else:  # the first step of a run (or of a resume): counted now
            _, batches, local = self._prepare(step)
            counted = self._host_to_device(torch.tensor(local, dtype=torch.float64))
            # global item counts stay on the device: the loss divides by them without waiting for the host;
            # the all-reduce is waited for only where the first loss needs it, so the first forward overlaps it
            scale = ScaleFromCounts(dist.all_reduce(counted, group=self.dp_group, async_op=True), counted, dp,
                                    len(terms))
        sums = self.step_engine.forward_backward(step, batches, scale, terms)
        scale()  # the counts are read below: waited for, whatever the engine did
        norm = self.step_engine.finish_gradients()
        lr = self.optimizer.param_groups[0]["lr"]
        hooks.before_optimizer_step(step)
        norm = self.step_engine.apply(norm)
        self.scheduler.step()
        hooks.after_optimizer_step(step)
        n = len(terms)
        reduced = sums.double()
        if step < self.recipe.max_steps:  # the host builds the next step's batches while the device works
            # where that drew from the RNG streams (an image set's crops), a checkpoint of this step holds them
            # as they were before: a run resumed from it draws the next step's batches again, from that state
            before = checkpoint.host_rng()
            ahead = self._prepare(step + 1)
            self._rng_before_next = before if checkpoint.host_rng_moved(before) else None
            # the next step's item counts ride in this step's loss all-reduce: one small collective per step
            # (at world 2 on gloo a second one cost ~1.5% of the step: docs/performance.md)
            reduced = torch.cat([reduced, self._host_to_device(torch.tensor(ahead[2], dtype=torch.float64))])
            self._next = (*ahead, reduced[n:])
        dist.all_reduce(reduced, group=self.dp_group)
        # the step's one host sync: losses, item counts and the gradient norm come back in one transfer
        host = torch.cat([reduced[:n], counted, norm.double().reshape(1)]).tolist()
        totals, grad_norm = host[n:-1], host[-1]
        term_losses = {name: host[k] / max(totals[k], 1.0) for k, (name, _) in enumerate(terms)}
        loss_value = sum(term_losses.values())
        grad_norm = grad_norm if math.isfinite(grad_norm) else None
        step_time = time.perf_counter() - t0
        samples = self.layout.global_batch_size
        tokens = int(totals[-3]) if wl.has_tokens else None  # real tokens: what tokens/s counts
        padded = int(totals[-2]) if wl.has_tokens else None  # positions computed: what MFU counts
        pairs = int(totals[-1]) if pairs_of else None
        if self.flops_per_unit is None:
            flops = None
        elif self.flops_unit == "token":
            flops = step_flops(padded or 0, pairs, self.flops_per_unit, wl.attention_flops_per_pair,
                               getattr(self.recipe.data, "seq_len", None))
        else:
            flops = samples * self.flops_per_unit
        record = {StepKey.STEP: step, StepKey.LOSS: loss_value, StepKey.LR: lr, StepKey.GRAD_NORM: grad_norm,
                  StepKey.STEP_TIME_S: step_time, StepKey.SAMPLES_PER_S: samples / step_time,
                  StepKey.TOKENS_PER_S: tokens / step_time if tokens is not None else None, StepKey.TOKENS: tokens,
                  StepKey.PADDED_TOKENS: padded}
        if len(terms) > 1:
            record.update(term_losses)
        record.update({count: int(totals[k]) for k, (_, count) in enumerate(terms)})
        record[StepKey.EPOCH] = self.sampler.epoch_of(step)
        record.update(step_figures(flops, step_time, self.layout.world_size, self.peak_tflops))
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss is {loss_value} at step {step}; stopping (lower train.lr, "
                                     "check the data, or use train.grad_clip)")
        return record

    def _clip(self) -> torch.Tensor:
        """Global gradient norm (before clipping) as a device tensor, clipped to train.grad_clip on the
        device (no host sync: the norm comes back with the loss); trainer/grad_clip.py."""
        group = self.pipeline.group if self.pipeline is not None else None
        return clip_grads(self.params, self.recipe.train.grad_clip, self.device, group)

    # ------------------------------------------------------------ eval

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Item-weighted eval metrics ("loss", and "accuracy" where the workload has one), sharded over dp."""
        self.model.eval()
        dp, rank = self.layout.dp, self.dims.dp_rank
        mine = list(range(rank, len(self.eval_set), dp))
        # a pipeline schedule takes whole per-rank batches (all its micro-batches) of a fixed shape
        size = self.layout.per_rank_batch if self.pipeline is not None else self.layout.micro_batch_size
        totals: dict[str, torch.Tensor] = {}
        # every rank runs the same number of forwards: FSDP2 and pipeline forwards are collective
        rounds = math.ceil(math.ceil(len(self.eval_set) / dp) / size)
        for r in range(rounds):
            idx = mine[r * size:(r + 1) * size]
            weight = 1.0 if idx else 0.0
            with self._autocast(), self._loss_context():
                parts = self._eval_parts(idx, size)
            for name, (total, count) in parts.items():
                pair = torch.stack([torch.as_tensor(x, device=self.device).double() for x in (total, count)])
                totals[name] = totals.get(name, torch.zeros(2, dtype=torch.float64, device=self.device)) + pair * weight
        names = sorted(totals)
        stacked = torch.stack([totals[n] for n in names])
        dist.all_reduce(stacked, group=self.dp_group)
        self.model.train()
        return {n: (stacked[k, 0] / stacked[k, 1].clamp(min=1)).item() for k, n in enumerate(names)}

    def _eval_parts(self, idx: list[int], size: int) -> dict:
        """{metric: (sum, count)} of one eval forward over samples `idx` (empty past this rank's share)."""
        if self.pipeline is None:
            return self.workload.eval_sums(self.model, self._to_device(self.eval_set.batch(idx or [0])))
        from .data.sft import IGNORE

        # fill the fixed shape with copies whose labels are all ignored, so they count for nothing
        batch = self.eval_set.batch(idx + [0] * (size - len(idx)))
        batch["labels"][len(idx):] = IGNORE
        return {"loss": self.pipeline.evaluate(batch)}

    def _target_reached(self, record: dict) -> str | None:
        train = self.recipe.train
        loss, acc = record.get(StepKey.EVAL_LOSS), record.get(StepKey.EVAL_ACCURACY)
        if train.target_eval_loss is not None and loss is not None and loss <= train.target_eval_loss:
            return f"eval loss {loss:.4f} <= target {train.target_eval_loss}"
        if train.target_eval_accuracy is not None and acc is not None and acc >= train.target_eval_accuracy:
            return f"eval {self.workload.accuracy} accuracy {acc:.4f} >= target {train.target_eval_accuracy}"
        return None

    def _eval_due(self, step: int) -> bool:
        every = self.recipe.train.eval_every_samples
        if not every or self.eval_set is None:
            return False
        gbs = self.layout.global_batch_size
        return (step * gbs) // every > ((step - 1) * gbs) // every

    # ------------------------------------------------------------ run

    def _steps_done(self) -> None:
        """No step follows (every rank stops after the same one): what telemetry has in flight completes here,
        and a failure from now on is after the last step, not in a next one."""
        self.state.steps_done = True
        self.hooks.on_steps_done()

    def run(self) -> LoopState:
        train, max_steps = self.recipe.train, self.recipe.max_steps
        start = self.maybe_resume()
        if start >= max_steps:
            self.progress.info(f"checkpoint is at step {start} of max_steps={max_steps}: nothing to do "
                               "(raise max_steps, or train.resume=never for a fresh run)")
        self.rundir.open_metrics(start)
        self.model.train()
        self.hooks.on_train_start({"start_step": start, "max_steps": max_steps, "layout": self.layout})
        if self.stops is not None:
            self.stops.start_loop(start)
        write_s = 0.0  # the previous step's metrics write: a record cannot time its own
        for step in range(start + 1, max_steps + 1):
            record = self.train_step(step)
            t_end = time.perf_counter()
            self.faults.at_step_end(step)
            self.hooks.on_step_end(step, record)  # the step ends here: evaluation is not part of it
            harness_s = time.perf_counter() - t_end  # telemetry's end-of-step work (and the other hooks')
            if self._eval_due(step):
                self.hooks.on_eval_start(step)
                for name, value in self.evaluate().items():
                    record[f"eval_{name}"] = value
                self.hooks.on_eval_end(step, record)
                self.state.last_eval_loss = record.get(StepKey.EVAL_LOSS)
                self.state.last_eval_accuracy = record.get(StepKey.EVAL_ACCURACY)
                record[StepKey.SAMPLES_SEEN] = step * self.layout.global_batch_size
            t_vote = time.perf_counter()
            # the same steps vote on every rank and every vote agrees: all ranks stop after the same step
            why = self.stops.agree(step) if self.stops is not None else None
            record[StepKey.HARNESS_S] = harness_s + (time.perf_counter() - t_vote) + write_s
            record[StepKey.TIME] = time.time()  # wall clock at the step's end: lines steps up with outside counters
            self.state.step, self.state.last_loss = step, record[StepKey.LOSS]
            t_write = time.perf_counter()
            self.rundir.write_metrics(record)
            self.progress.step(record)
            write_s = time.perf_counter() - t_write
            reached = self._target_reached(record)
            if reached:
                self.state.target_reached_step = step
                self.progress.info(f"{reached} at step {step}: stopping")
                break
            if train.save_every and step % train.save_every == 0 and step < max_steps:
                self._save()
            if why and step < max_steps:  # preempted: keep this step, so no completed step is recomputed
                if not (train.save_every and step % train.save_every == 0):
                    self._save()
                self._steps_done()  # every rank stops after this step (the vote agreed)
                raise Interrupted(f"{why}: stopped after step {step}, checkpoint saved")
            self.faults.after_step(step)
        self._steps_done()
        if train.save_final and self.state.step > start:
            self._save()
        self.state.status = "completed"
        return self.state
