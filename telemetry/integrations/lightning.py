"""A Lightning callback that gives any Lightning job - NeMo 2 included - our run directory.

    from telemetry.integrations.lightning import TelemetryCallback
    trainer = lightning.pytorch.Trainer(..., callbacks=[TelemetryCallback("runs/nemo_llama")])

A step is one optimizer step, numbered as Lightning's global_step: with `accumulate_grad_batches` its training
batches together (OptimizerStep); NeMo's MegatronStrategy runs all of a step's micro-batches inside one
training_step. The run directory is written by telemetry/integrations/recorder.py.
Construct the callback before the fit starts (NCCL reads its logging settings at process-group init);
it refuses (telemetry.capture.early.ImportOrderError) when megatron/nemo bound their collectives before the
tracer existed. Lightning also finds it through the `lightning.pytorch.callbacks_factory` entry point
when FABRIC_HARNESS_RUN_DIR is set (`callbacks_factory`), so unmodified NeMo scripts and `nemo llm
finetune` get it without an edit (python -m telemetry.integrations.attach sets that up).
"""
from __future__ import annotations

import json
import os

import torch

from telemetry.integrations.attach import EXPECT_ENV, RECIPE_ENV, RUN_DIR_ENV
from telemetry.integrations.recorder import RunRecorder, number
from telemetry.capture.session import TelemetrySettings

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name (NeMo 1 containers)
    from pytorch_lightning.callbacks import Callback


def trainer_layout(trainer) -> dict:
    """The layout as far as the Lightning trainer says it: world size, Megatron's tp/pp (MegatronStrategy),
    the data module's global and micro batch (NeMo's data modules), else the dataloader's batch; null
    where it does not say."""
    world = int(getattr(trainer, "world_size", 1) or 1)
    strategy = getattr(trainer, "strategy", None)
    tp = getattr(strategy, "tensor_model_parallel_size", None)
    pp = getattr(strategy, "pipeline_model_parallel_size", None)
    megatron = tp is not None or pp is not None
    tp, pp = tp or 1, pp or 1
    data = getattr(trainer, "datamodule", None)
    gbs, mbs = getattr(data, "global_batch_size", None), getattr(data, "micro_batch_size", None)
    dp = world // (tp * pp) if world % (tp * pp) == 0 else None
    if gbs is None and not megatron:  # plain Lightning: loader batch x accumulation x data-parallel ranks
        loader = getattr(trainer, "train_dataloader", None)
        mbs = getattr(loader, "batch_size", None)
        accum = getattr(trainer, "accumulate_grad_batches", 1)
        gbs = mbs * accum * dp if mbs and dp else None
    accum = gbs // (mbs * dp) if gbs and mbs and dp and gbs % (mbs * dp) == 0 else None
    return {"world_size": world, "dp": dp, "tp": tp, "pp": pp,
            "data_parallel": type(strategy).__name__ if strategy is not None else None,
            "global_batch_size": gbs, "micro_batch_size": mbs, "grad_accum_steps": accum,
            "per_rank_batch": gbs // dp if gbs and dp else None, "source": "read from the Lightning trainer"}


class OptimizerStep:
    """One optimizer step's micro-batches: Lightning calls on_train_batch_start/_end for each of the
    `accumulate_grad_batches` batches of a step, and advances `global_step` only after the last one's optimizer
    step. `loss`: the sum of the batches' losses as Lightning returns them (each already divided by the
    accumulation count: their mean, the loss the step's gradient is of); None when any is not a number."""

    def __init__(self, before: int):
        self.before = before  # trainer.global_step when the step's first micro-batch began
        self.loss: float | None = 0.0

    def add(self, outputs) -> None:
        loss = number(outputs.get("loss") if isinstance(outputs, dict) else outputs)
        self.loss = self.loss + loss if loss is not None and self.loss is not None else None


class TelemetryCallback(Callback):
    """`recipe`/`layout`: what launch.nemo translated (recorded as given); without them the layout is
    read from the trainer (`trainer_layout`)."""

    def __init__(self, run_dir: str, name: str | None = None, settings: TelemetrySettings | None = None,
                 expect: str = "any", recipe: dict | None = None, layout: dict | None = None,
                 engine: str | None = None):
        self.recorder = RunRecorder(run_dir, name, settings, expect, recipe, layout, engine or "lightning")
        self._window: OptimizerStep | None = None  # the optimizer step whose micro-batches are running

    def on_train_start(self, trainer, pl_module) -> None:  # data loaders exist now
        rec = self.recorder
        rec.start(int(getattr(trainer, "global_rank", 0) or 0), trainer_layout(trainer))
        if not rec.started:  # another recorder of this process writes this run directory
            return
        model = getattr(getattr(trainer, "strategy", None), "model", None)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):  # its buckets: the traced all-reduce
            unseen = rec.attach_ddp(model)  # the job registered its own comm hook: its buckets stay unseen
            if unseen:
                rec.note(unseen)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._window is None:  # an optimizer step's first micro-batch (accumulate_grad_batches: the next ones too)
            self._window = OptimizerStep(trainer.global_step)
            self.recorder.begin_step(trainer.global_step + 1)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        window = self._window
        if window is None:
            return
        window.add(outputs)
        if trainer.global_step == window.before:  # accumulating: Lightning has not stepped the optimizer yet
            return
        self._window = None
        self.recorder.end_step(trainer.global_step, loss=window.loss, lr=self._lr(trainer))

    @staticmethod
    def _lr(trainer):
        try:
            return trainer.optimizers[0].param_groups[0]["lr"]
        except (AttributeError, IndexError, KeyError, TypeError):
            return None

    def on_train_end(self, trainer, pl_module) -> None:
        self.recorder.close("completed", 0, None)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.recorder.fail(exception)

    def teardown(self, trainer, pl_module, stage) -> None:  # a fit that ended without on_train_end
        if self.recorder.started and not self.recorder.closed:
            self.recorder.close("failed", 1, "the fit ended before training finished")


_FACTORY_MADE: dict = {}  # run directory -> the callback the entry point made last


def callbacks_factory() -> list:
    """Lightning's `lightning.pytorch.callbacks_factory` entry point: our callback for every Trainer
    when FABRIC_HARNESS_RUN_DIR is set (python -m telemetry.integrations.attach sets it), nothing otherwise."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return []
    # Two installed distributions declaring this entry point (an editable install next to a copy on the
    # path) make Lightning call us twice for one Trainer: the second call adds nothing.
    made = _FACTORY_MADE.get(os.path.abspath(run_dir))
    if made is not None and not made.recorder.started and not made.recorder.closed:
        return []
    given = json.loads(os.environ[RECIPE_ENV]) if os.environ.get(RECIPE_ENV) else {}
    callback = TelemetryCallback(run_dir, expect=os.environ.get(EXPECT_ENV, "any"), recipe=given.get("recipe"),
                                 layout=given.get("layout"), engine=given.get("engine"))
    _FACTORY_MADE[os.path.abspath(run_dir)] = callback
    return [callback]
