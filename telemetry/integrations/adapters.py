"""Adapters that drive `Telemetry` from a training loop: ours, a Hugging Face Trainer, Lightning (NeMo 2).

Each only translates its framework's step boundaries into start_step/end_step and hands the fields on.
"""
from __future__ import annotations

import json
import time

from telemetry.analysis.exports import export_after_close
from telemetry.capture.hooks import Hooks
from telemetry.capture.session import Telemetry


class HarnessHooks(Hooks):
    """For trainer.loop: adds the telemetry fields to each step's metrics record."""

    def __init__(self, telemetry: Telemetry):
        self.telemetry = telemetry

    def on_step_start(self, step: int) -> None:
        self.telemetry.start_step(step)

    def on_step_end(self, step: int, record: dict) -> None:
        # filled in place: on NCCL the communication fields may follow at the next step's end (held)
        self.telemetry.end_step(step, record.get("step_time_s"), into=record)

    def on_train_end(self, status: str) -> None:
        # every rank ends a completed run here together: the held last step is reduced across ranks as usual
        self.telemetry.flush(collective=status in ("completed", "target_reached"))

    def on_eval_start(self, step: int) -> None:
        self.telemetry.start_eval(step)

    def on_eval_end(self, step: int, record: dict) -> None:
        record.update(self.telemetry.end_eval(step))

    # phase boundaries: the exposed-communication estimate and the trace export read them
    def before_backward(self, step: int, micro_batch: int) -> None:
        self.telemetry.mark("backward_begin")

    def after_backward(self, step: int, micro_batch: int) -> None:
        self.telemetry.mark("backward_end")

    def before_optimizer_step(self, step: int) -> None:
        self.telemetry.mark("optimizer_begin")

    def after_optimizer_step(self, step: int) -> None:
        self.telemetry.mark("optimizer_end")


class _StepClock:
    """Shared by the framework callbacks: time a step, collect its fields, optionally write JSON lines."""

    def __init__(self, telemetry: Telemetry, metrics_path: str | None):
        self.telemetry, self.metrics_path = telemetry, metrics_path
        self.records: list[dict] = []
        self._t0 = None

    def begin(self, step: int) -> None:
        self.telemetry.start_step(step)
        self._t0 = time.perf_counter()

    def end(self, step: int, extra: dict | None = None) -> dict:
        step_time = time.perf_counter() - self._t0 if self._t0 is not None else None
        record = {"step": step, "step_time_s": step_time, **(extra or {}),
                  **self.telemetry.end_step(step, step_time)}
        self.records.append(record)
        if self.metrics_path and self.telemetry.rank == 0:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")
        return record


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

        def on_step_begin(self, args, state, control, **kwargs):
            self.clock.begin(state.global_step + 1)

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.end(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            telemetry.close()
            export_after_close(telemetry)

    return TelemetryCallback()


def lightning_callback(telemetry: Telemetry, metrics_path: str | None = None):
    """A lightning.pytorch Callback (NeMo 2 trainers are Lightning trainers)."""
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:  # the older package name
        from pytorch_lightning.callbacks import Callback

    class TelemetryCallback(Callback):
        def __init__(self):
            self.clock = _StepClock(telemetry, metrics_path)

        def on_train_start(self, trainer, pl_module):
            telemetry.start()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.clock.begin(trainer.global_step + 1)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            extra = {"loss": float(loss)} if loss is not None and hasattr(loss, "__float__") else {}
            self.clock.end(trainer.global_step, extra)

        def on_train_end(self, trainer, pl_module):
            telemetry.close()
            export_after_close(telemetry)

    return TelemetryCallback()
