"""Every adapter holds a step's communication fields for NCCL's late completion reports, as our own loop does.

Each adapter (Lightning/NeMo 2, Megatron-Bridge, AutoModel, the Hugging Face and bare Lightning callbacks) is
driven through its own entry points by stand-ins for its engine's objects, over the pretend ProcessGroupNCCL of
test_collectives_nccl_fake.py with a clock: reports arrive ~100 ms after the device finished, the device 30 ms
behind the host. Every step's line must count every call timed, in step order.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from telemetry.capture import collective_calls, collectives, completion_hooks, early, session
from telemetry.capture.collectives import DIST_SPECS
from telemetry.capture.session import Telemetry, TelemetrySettings
from telemetry.integrations import adapters, recorder
from tests.telemetry.capture.test_collectives_nccl_fake import Clock, FakeProcessGroupNCCL, all_reduce, coalescing_manager

STEPS = 5
SETTINGS = dict(cross_rank_every=0, link_probe_every=0, nccl_debug=False, power_sample_interval_s=60.0,
                sysfs="/nonexistent")


class OneRankNccl:
    """torch.distributed as the telemetry session sees it in a one-rank NCCL job: the default group's backend
    is what decides holding; everything else is torch.distributed itself."""

    def __getattr__(self, name):
        return getattr(dist, name)

    is_initialized = staticmethod(lambda: True)
    get_backend = staticmethod(lambda group=None: "nccl")
    get_rank = staticmethod(lambda group=None: 0)
    get_world_size = staticmethod(lambda group=None: 1)


@pytest.fixture
def late_nccl(monkeypatch):
    """The clock every module reads, a tp and a dp group reporting late, torch.distributed saying NCCL."""
    clock = Clock()
    for module in (collectives, collective_calls, completion_hooks, session, recorder, adapters):
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: getattr(pg, "backend", None))
    monkeypatch.setattr(session, "dist", OneRankNccl())
    collectives.set_host_map(["a", "a", "b", "b"])
    early.reset()
    groups = {dim: FakeProcessGroupNCCL(f"{dim}-pg", ranks=ranks, dim=dim, clock=clock, device_lag_s=0.03,
                                        report_delay_s=0.1) for dim, ranks in (("tp", [0, 1]), ("dp", [0, 2]))}
    yield SimpleNamespace(clock=clock, **groups)
    early.reset()
    collectives.set_host_map(None)


def step_body(env, tracer, step: int) -> None:
    """A tp x dp step: forward tp all-reduces inside a node, backward dp buckets in coalescing blocks across nodes.
    After the last step the device and the watchdog catch up before the loop ends (the simulated clock does
    not move while the run's end waits for them)."""
    reduce = tracer._wrap_dist("all_reduce", all_reduce, DIST_SPECS["all_reduce"])
    block = tracer._wrap_coalescing(coalescing_manager)
    for _ in range(4):
        env.clock.advance(0.004)
        reduce(torch.ones(2000), group=env.tp)
    for _ in range(3):
        env.clock.advance(0.01)
        with block(group=env.dp, async_ops=True):
            for _ in range(4):
                reduce(torch.ones(500), group=env.dp, async_op=True)
    env.clock.advance(0.02 if step < STEPS else 0.5)


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def assert_every_call_timed(rows: list[dict]) -> None:
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for r in rows:
        assert "_held" not in r
        ar = r["comm"]["all_reduce"]
        assert ar["count"] == 4 + 3 and ar["untimed"] == 0, r["comm"]
        assert r["comm_groups"]["dp"]["untimed"] == 0 and r["comm_groups"]["tp"]["untimed"] == 0


def run_lightning(env, tmp_path) -> list[dict]:
    from telemetry.integrations.lightning import TelemetryCallback

    cb = TelemetryCallback(str(tmp_path), settings=TelemetrySettings(**SETTINGS))
    trainer = SimpleNamespace(global_rank=0, world_size=1, strategy=None, datamodule=None, train_dataloader=None,
                              accumulate_grad_batches=1, global_step=0, optimizers=[])
    cb.on_train_start(trainer, None)
    for step in range(1, STEPS + 1):
        trainer.global_step = step - 1
        cb.on_train_batch_start(trainer, None, None, step - 1)
        step_body(env, early.process_tracer(), step)
        trainer.global_step = step
        cb.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0)}, None, step - 1)
    cb.on_train_end(trainer, None)
    return lines(tmp_path / "metrics.jsonl")


def run_bridge(env, tmp_path) -> list[dict]:
    from telemetry.integrations.engines import BridgeTelemetry

    cb = BridgeTelemetry(str(tmp_path), settings=TelemetrySettings(**SETTINGS))
    state = SimpleNamespace(cfg=None, train_state=SimpleNamespace(step=0))
    context = SimpleNamespace(state=state, loss_dict={"lm loss": 2.0}, optimizer=None, grad_norm=1.0)
    cb.on_train_start(context)
    for step in range(1, STEPS + 1):
        state.train_state.step = step - 1
        cb.on_train_step_start(context)
        step_body(env, early.process_tracer(), step)
        state.train_state.step = step
        cb.on_train_step_end(context)
    cb.on_train_end(context)
    return lines(tmp_path / "metrics.jsonl")


def run_automodel(env, tmp_path) -> list[dict]:
    from telemetry.integrations.engines import automodel_recipe

    class Recipe:  # AutoModel's recipe shape: setup, then the loop calling one optimizer step at a time
        def setup(self):
            self.step_scheduler = SimpleNamespace(step=0)

        def _run_train_optim_step(self):
            step_body(env, early.process_tracer(), self.step_scheduler.step + 1)
            return SimpleNamespace(metrics={"loss": 1.5, "lr": 1e-3, "grad_norm": 0.5})

        def run_train_validation_loop(self):
            for step in range(STEPS):
                self.step_scheduler.step = step
                self._run_train_optim_step()

    job = automodel_recipe(Recipe, str(tmp_path), settings=TelemetrySettings(**SETTINGS))()
    job.setup()
    job.run_train_validation_loop()
    return lines(tmp_path / "metrics.jsonl")


def run_hf(env, tmp_path) -> list[dict]:
    pytest.importorskip("transformers")
    telemetry = Telemetry(TelemetrySettings(**SETTINGS), run_dir=str(tmp_path))
    cb = adapters.hf_callback(telemetry, str(tmp_path / "metrics.jsonl"))
    state = SimpleNamespace(global_step=0)
    cb.on_train_begin(None, state, None)
    for step in range(1, STEPS + 1):
        state.global_step = step - 1
        cb.on_step_begin(None, state, None)
        step_body(env, telemetry.tracer, step)
        state.global_step = step
        cb.on_step_end(None, state, None)
    cb.on_train_end(None, state, None)
    return lines(tmp_path / "metrics.jsonl")


def run_bare_lightning(env, tmp_path) -> list[dict]:
    telemetry = Telemetry(TelemetrySettings(**SETTINGS), run_dir=str(tmp_path))
    cb = adapters.lightning_callback(telemetry, str(tmp_path / "metrics.jsonl"))
    trainer = SimpleNamespace(global_step=0)
    cb.on_train_start(trainer, None)
    for step in range(1, STEPS + 1):
        trainer.global_step = step - 1
        cb.on_train_batch_start(trainer, None, None, step - 1)
        step_body(env, telemetry.tracer, step)
        trainer.global_step = step
        cb.on_train_batch_end(trainer, None, {"loss": torch.tensor(1.0)}, None, step - 1)
    cb.on_train_end(trainer, None)
    return lines(tmp_path / "metrics.jsonl")


ADAPTERS = {"lightning": run_lightning, "megatron_bridge": run_bridge, "automodel": run_automodel,
            "hf_trainer": run_hf, "bare_lightning": run_bare_lightning}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_every_adapter_times_every_call_under_late_reports(late_nccl, tmp_path, adapter):
    assert_every_call_timed(ADAPTERS[adapter](late_nccl, tmp_path))


def test_without_holding_the_late_reports_go_untimed(late_nccl, tmp_path, monkeypatch):
    """The check above can fail: with hold_reports_s = 0 the same loop loses the steps' last reports."""
    monkeypatch.setitem(SETTINGS, "hold_reports_s", 0.0)
    rows = run_bridge(late_nccl, tmp_path)
    assert all(r["comm"]["all_reduce"]["untimed"] > 0 for r in rows[:-1])  # the last step waited for its own


def test_the_recorder_writes_only_declared_fields(late_nccl, tmp_path):
    """run.json's keys as an engine loop's recorder writes them are the schema's (telemetry/rundir.py)."""
    from telemetry.rundir import RUN_FIELDS, RUN_JSON, field_names

    run_bridge(late_nccl, tmp_path)
    info = json.loads((tmp_path / RUN_JSON).read_text())
    assert set(info) - field_names(RUN_FIELDS) == set()
    assert info["status"] == "completed" and info["engine"] == "megatron-bridge"


def test_a_failed_end_of_run_exchange_is_not_recorded_as_completed(tmp_path):
    """An engine loop's recorder closes a completed run: the cross-rank exchange still drains there, and a peer
    lost at that moment fails it. run.json then says failed with the error, not completed, and the error goes on
    to the caller. (The telemetry here is a stand-in whose flush fails as a timed-out gloo wait does.)"""
    from telemetry.integrations.recorder import RunRecorder

    class LostPeerAtTheEnd:
        def flush(self, collective=True, wait_s=None):
            raise RuntimeError("Timed out waiting 10000ms for recv operation to complete")

    rec = RunRecorder(str(tmp_path / "run"), name="engine_run")
    rec.open()
    rec.telemetry = LostPeerAtTheEnd()
    with pytest.raises(RuntimeError, match="Timed out"):
        rec.close("completed")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (info["status"], info["exit_code"]) == ("failed", 1)
    assert info["error"] == "RuntimeError: Timed out waiting 10000ms for recv operation to complete"
