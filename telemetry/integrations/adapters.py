"""Callbacks that drive a bare `Telemetry` (no run directory) from a Hugging Face Trainer or Lightning loop.

Each only translates its framework's step boundaries into start_step/end_step and hands the fields on; on NCCL
a step's communication fields are held for late completion reports as in every loop (telemetry/integrations/recorder.py
owns a whole run directory's lifecycle).
"""
from __future__ import annotations

import contextlib
import gc
import json
import time
import warnings

import torch

from telemetry.analysis.exports import export_after_close
from telemetry.capture.collective_calls import own_hook_reason
from telemetry.capture.session import Telemetry
from telemetry.rundir import InOrder, StepKey


class _StepClock:
    """Shared by the framework callbacks: time a step, collect its fields, optionally write JSON lines."""

    def __init__(self, telemetry: Telemetry, metrics_path: str | None):
        self.telemetry, self.metrics_path = telemetry, metrics_path
        self.records: list[dict] = []
        self._lines = InOrder(self._write)
        self._t0 = None

    def begin(self, step: int) -> None:
        self.telemetry.start_step(step)
        self._t0 = time.perf_counter()

    def end(self, step: int, extra: dict | None = None) -> dict:
        step_time = time.perf_counter() - self._t0 if self._t0 is not None else None
        record = {StepKey.STEP: step, StepKey.STEP_TIME_S: step_time, **(extra or {})}
        self.telemetry.end_step(step, step_time, into=record)  # on NCCL: completed at a later step's end
        self.records.append(record)
        self._lines.put(record)
        return record

    def finish(self) -> None:
        """The run's end (every rank together): the held last step completed, every line written. A failure on
        the way (a peer lost in the exchange) is raised after the telemetry is closed: no tracer left installed."""
        try:
            self.telemetry.flush(collective=True)
            self._lines.drain()
        except BaseException:
            with contextlib.suppress(Exception):
                self.telemetry.close()
            raise
        self.telemetry.close()
        export_after_close(self.telemetry)

    def _write(self, record: dict) -> None:
        record.pop("_held", None)
        if self.metrics_path and self.telemetry.rank == 0:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")


def attach_ddp_wrapper(telemetry: Telemetry, model) -> str | None:
    """Route the gradient buckets of the DDP that wraps `model` through the traced all-reduce; the reason when
    they stay unseen (the job registered its own comm hook), warned once. DDP's C++ reducer issues them past
    every Python wrapper: unattached, gloo shows nothing and NCCL only unclaimed reports. A Hugging Face
    Trainer hands callbacks the unwrapped model and keeps its DDP to itself, so the wrapper is looked up on the
    heap (once, at train start, only where a process group exists)."""
    ddp_type = torch.nn.parallel.DistributedDataParallel
    if isinstance(model, ddp_type):
        wrappers = [model]
    elif model is None or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    else:
        wrappers = [o for o in gc.get_objects() if isinstance(o, ddp_type) and getattr(o, "module", None) is model]
    reason = None
    for ddp in wrappers:  # every one: a wrapper with the job's own hook leaves the next one to attach
        try:
            telemetry.attach_ddp(ddp)
        except RuntimeError as exc:  # register_comm_hook may be called once: the job's own hook stays
            if reason is None:
                reason = own_hook_reason(exc)
                warnings.warn(reason, stacklevel=2)
    return reason


def hf_callback(telemetry: Telemetry, metrics_path: str | None = None):
    """A transformers.TrainerCallback; steps are numbered as the Trainer's global_step after the step.
    Whoever built the Trainer has imported transformers already (on CPU-only torch next to a CUDA
    torchvision wheel, after whatever fix that needed), so this import finds it loaded."""
    from transformers import TrainerCallback

    class TelemetryCallback(TrainerCallback):
        def __init__(self):
            self.clock = _StepClock(telemetry, metrics_path)

        def on_train_begin(self, args, state, control, **kwargs):
            telemetry.start()
            attach_ddp_wrapper(telemetry, kwargs.get("model"))  # the Trainer wrapped it in DDP already

        def on_step_begin(self, args, state, control, **kwargs):
            self.clock.begin(state.global_step + 1)

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.end(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            self.clock.finish()

    return TelemetryCallback()


def lightning_callback(telemetry: Telemetry, metrics_path: str | None = None):
    """A lightning.pytorch Callback (NeMo 2 trainers are Lightning trainers); a step is an optimizer step, its
    accumulated micro-batches together (telemetry/integrations/lightning.py's OptimizerStep)."""
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:  # the older package name
        from pytorch_lightning.callbacks import Callback
    from telemetry.integrations.lightning import OptimizerStep

    class TelemetryCallback(Callback):
        def __init__(self):
            self.clock = _StepClock(telemetry, metrics_path)
            self.window = None

        def on_train_start(self, trainer, pl_module):
            telemetry.start()
            wrapped = getattr(getattr(trainer, "strategy", None), "model", None)
            if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
                attach_ddp_wrapper(telemetry, wrapped)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.window is None:  # an optimizer step's first micro-batch (accumulate_grad_batches)
                self.window = OptimizerStep(trainer.global_step)
                self.clock.begin(trainer.global_step + 1)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            window = self.window
            if window is None:
                return
            window.add(outputs)
            if trainer.global_step == window.before:  # accumulating: no optimizer step yet
                return
            self.window = None
            self.clock.end(trainer.global_step, {"loss": window.loss} if window.loss is not None else {})

        def on_train_end(self, trainer, pl_module):
            self.clock.finish()

    return TelemetryCallback()
