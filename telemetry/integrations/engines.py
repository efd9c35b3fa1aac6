"""Adapters for the two NeMo engines that are not Lightning: Megatron-Bridge and NeMo AutoModel.

Neither imports its engine: Megatron-Bridge's CallbackManager.add takes any object whose
on_train_* methods it finds (it compares them with its base class's by name), and the AutoModel
adapter subclasses whatever recipe class it is given. Both drive telemetry/integrations/recorder.py.
"""
from __future__ import annotations

from telemetry.integrations.recorder import RunRecorder
from telemetry.rundir import StepKey


class BridgeTelemetry:
    """For `megatron.bridge.training.finetune(config, forward_step, callbacks=[BridgeTelemetry(...)])`.
    Bridge fires on_train_step_start/end once per optimizer step on every rank."""

    def __init__(self, run_dir: str, **recorder_args):
        recorder_args.setdefault("engine", "megatron-bridge")
        self.recorder = RunRecorder(run_dir, **recorder_args)

    def on_train_start(self, context) -> None:
        cfg = getattr(context.state, "cfg", None)
        train, model = getattr(cfg, "train", None), getattr(cfg, "model", None)
        import torch.distributed as dist
        world = dist.get_world_size() if dist.is_initialized() else 1
        tp = getattr(model, "tensor_model_parallel_size", None)
        pp = getattr(model, "pipeline_model_parallel_size", None)
        dp = world // (tp * pp) if tp and pp and world % (tp * pp) == 0 else None
        gbs, mbs = getattr(train, "global_batch_size", None), getattr(train, "micro_batch_size", None)
        self.recorder.start(layout={"world_size": world, "dp": dp, "tp": tp, "pp": pp, "data_parallel": "megatron",
                                    "global_batch_size": gbs, "micro_batch_size": mbs,
                                    "grad_accum_steps": gbs // (mbs * dp) if gbs and mbs and dp else None,
                                    "per_rank_batch": gbs // dp if gbs and dp else None,
                                    "source": "read from the Megatron-Bridge config"})

    def on_train_step_start(self, context) -> None:
        self.recorder.begin_step(context.state.train_state.step + 1)

    def on_train_step_end(self, context) -> None:
        losses = context.loss_dict or {}
        loss = losses.get("lm loss", next(iter(losses.values()), None))
        lr = None
        if context.optimizer is not None:
            try:
                lr = context.optimizer.param_groups[0]["lr"]
            except (AttributeError, IndexError, KeyError, TypeError):
                lr = None
        self.recorder.end_step(context.state.train_state.step, loss=loss, lr=lr,
                               extra={StepKey.GRAD_NORM: context.grad_norm})

    def on_train_end(self, context) -> None:
        self.recorder.close("completed")


def automodel_recipe(recipe_cls, run_dir: str, **recorder_args):
    """A subclass of an AutoModel recipe class (e.g. TrainFinetuneRecipeForNextTokenPrediction) that
    brackets each optimizer step (`_run_train_optim_step`, every rank) with our telemetry and takes
    loss, lr and grad norm from the step's MetricsSample."""
    recorder_args.setdefault("engine", "nemo-automodel")

    class WithTelemetry(recipe_cls):
        def setup(self, *args, **kwargs):
            self._fabric_recorder = RunRecorder(run_dir, **recorder_args)
            return super().setup(*args, **kwargs)

        def _run_train_optim_step(self, *args, **kwargs):
            rec = self._fabric_recorder
            if not rec.started:
                rec.start()
            step = self.step_scheduler.step
            rec.begin_step(step + 1)
            out = super()._run_train_optim_step(*args, **kwargs)
            metrics = getattr(out, "metrics", None) or {}
            rec.end_step(step + 1, loss=metrics.get("loss"), lr=metrics.get("lr"),
                         extra={StepKey.GRAD_NORM: metrics.get("grad_norm")})  # the engine's own metric name
            return out

        def run_train_validation_loop(self, *args, **kwargs):
            try:
                out = super().run_train_validation_loop(*args, **kwargs)
            except BaseException as exc:
                self._fabric_recorder.fail(exc)
                raise
            self._fabric_recorder.close("completed")
            return out

    WithTelemetry.__name__ = WithTelemetry.__qualname__ = f"{recipe_cls.__name__}WithTelemetry"
    return WithTelemetry
