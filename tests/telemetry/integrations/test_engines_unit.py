"""telemetry.integrations.engines in-process: BridgeTelemetry driven as Megatron-Bridge's CallbackManager
drives it (a context with .state.cfg, .state.train_state.step, .loss_dict, .optimizer, .grad_norm; see
launch/nemo/bridge.py), and the AutoModel recipe subclass around a stand-in with AutoModel's loop methods.
No process group: the recorder writes a world of one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
import torch
import torch.distributed as dist

import telemetry.capture.early
from telemetry.capture.early import ImportOrderError
from telemetry.integrations.engines import BridgeTelemetry, automodel_recipe
from tests.conftest import REPO


@pytest.fixture(autouse=True)
def process_tracer():
    """The recorder installs the process-wide tracer; leave torch.distributed as the other tests expect it."""
    yield
    telemetry.capture.early.reset()


def bridge_state(gbs=8, mbs=2, tp=1, pp=1):
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(global_batch_size=gbs, micro_batch_size=mbs),
                                model=types.SimpleNamespace(tensor_model_parallel_size=tp,
                                                            pipeline_model_parallel_size=pp))
    return types.SimpleNamespace(cfg=cfg, train_state=types.SimpleNamespace(step=0))


def context(state, **fields):
    return types.SimpleNamespace(state=state, **{"loss_dict": None, "optimizer": None, "grad_norm": None, **fields})


def read(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((run_dir / "run.json").read_text())


def test_bridge_callbacks_write_our_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    cb = BridgeTelemetry(str(run_dir), name="bridge_unit")
    state = bridge_state()
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.125)
    cb.on_train_start(context(state))
    for loss in (3.0, 2.0):
        cb.on_train_step_start(context(state))
        state.train_state.step += 1  # Bridge counts the step before firing step_end
        cb.on_train_step_end(context(state, loss_dict={"lm loss": torch.tensor(loss)}, optimizer=optimizer,
                                     grad_norm=0.5))
    cb.on_train_end(context(state))
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1, 2] and [r["loss"] for r in rows] == [3.0, 2.0]
    assert all(r["lr"] == 0.125 and r["grad_norm"] == 0.5 and r["samples_per_s"] > 0 for r in rows)
    assert all(r["tokens_per_s"] is None for r in rows)  # the engine's token count is unknown here, not 0
    assert info["status"] == "completed" and info["engine"] == "megatron-bridge" and info["name"] == "bridge_unit"
    lay = info["layout"]
    assert (lay["world_size"], lay["dp"], lay["tp"], lay["pp"]) == (1, 1, 1, 1)
    assert (lay["global_batch_size"], lay["micro_batch_size"], lay["grad_accum_steps"], lay["per_rank_batch"]) \
        == (8, 2, 4, 8)
    assert lay["source"] == "read from the Megatron-Bridge config"
    assert not dist.is_initialized()


def test_bridge_layout_it_cannot_derive_is_null(tmp_path):
    cb = BridgeTelemetry(str(tmp_path / "run"))
    state = bridge_state(tp=2, pp=1)  # a world of one cannot hold tp 2: dp unknown
    cb.on_train_start(context(state))
    cb.on_train_step_start(context(state))
    state.train_state.step += 1
    # no "lm loss": the first loss there is; an optimizer without param_groups: lr unknown
    cb.on_train_step_end(context(state, loss_dict={"loss": 1.5}, optimizer=object()))
    cb.on_train_end(context(state))
    rows, info = read(tmp_path / "run")
    assert info["layout"]["dp"] is None and info["layout"]["grad_accum_steps"] is None
    assert rows[0]["loss"] == 1.5 and rows[0]["lr"] is None and rows[0]["grad_norm"] is None


def test_recorder_refuses_collectives_bound_before_the_tracer(tmp_path, monkeypatch):
    """A megatron module that bound torch.distributed's all-gather at import, before the tracer: refused."""
    telemetry.capture.early.reset()
    fake = types.ModuleType("megatron.fake_mappings")
    fake.dist_all_gather_func = dist.all_gather_into_tensor
    monkeypatch.setitem(sys.modules, "megatron.fake_mappings", fake)
    with pytest.raises(ImportOrderError, match=r"megatron imported before the telemetry tracer: 1 collective"):
        BridgeTelemetry(str(tmp_path / "run"))


class StandIn:
    """AutoModel 0.7.0's loop interface, nothing more (setup, _run_train_optim_step returning a
    MetricsSample-like object, step_scheduler.step, run_train_validation_loop)."""

    fail_at = None

    def __init__(self, cfg):
        self.cfg, self.step_scheduler = cfg, types.SimpleNamespace(step=0)

    def setup(self):
        return "set up"

    def _run_train_optim_step(self, batches, max_grad_norm=None):
        self.step_scheduler.step += 1
        if self.step_scheduler.step == self.fail_at:
            raise RuntimeError("CUDA out of memory")
        return types.SimpleNamespace(metrics={"loss": 3.0 / self.step_scheduler.step, "lr": 1e-4, "grad_norm": 0.25})

    def run_train_validation_loop(self):
        for _ in range(3):
            self._run_train_optim_step([None])


def test_automodel_subclass_brackets_each_optimizer_step(tmp_path):
    cls = automodel_recipe(StandIn, str(tmp_path / "run"), layout={"world_size": 1, "global_batch_size": 4})
    assert cls.__name__ == "StandInWithTelemetry" and issubclass(cls, StandIn)
    recipe = cls({})
    assert recipe.setup() == "set up"
    recipe.run_train_validation_loop()
    rows, info = read(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["loss"] for r in rows] == [3.0, 1.5, 1.0]
    assert all(r["lr"] == 1e-4 and r["grad_norm"] == 0.25 and r["samples_per_s"] > 0 for r in rows)
    assert info["status"] == "completed" and info["engine"] == "nemo-automodel"


def test_automodel_failure_is_recorded_and_raised(tmp_path):
    class Failing(StandIn):
        fail_at = 2

    recipe = automodel_recipe(Failing, str(tmp_path / "run"), layout={"world_size": 1, "global_batch_size": 4})({})
    recipe.setup()
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        recipe.run_train_validation_loop()
    rows, info = read(tmp_path / "run")
    assert [r["step"] for r in rows] == [1]
    assert info["status"] == "failed" and info["exit_code"] == 1
    assert info["error"] == "RuntimeError: CUDA out of memory"


@pytest.mark.integration
def test_a_bridge_job_that_dies_without_on_train_end_is_recorded_at_exit(tmp_path):
    """Megatron-Bridge's callbacks have no exception event: a job that raises mid-training never calls
    on_train_end. Its process's exit still ends the record (failed, the exception that ended it) and closes
    the telemetry, instead of leaving run.json 'running' for good."""
    run_dir = tmp_path / "run"
    script = tmp_path / "job.py"
    script.write_text(
        "import types\n"
        "from telemetry.integrations.engines import BridgeTelemetry\n"
        "cfg = types.SimpleNamespace(train=None, model=None)\n"
        "state = types.SimpleNamespace(cfg=cfg, train_state=types.SimpleNamespace(step=0))\n"
        "ctx = types.SimpleNamespace(state=state, loss_dict={'lm loss': 2.0}, optimizer=None, grad_norm=None)\n"
        f"cb = BridgeTelemetry({str(run_dir)!r})\n"
        "cb.on_train_start(ctx)\n"
        "cb.on_train_step_start(ctx)\n"
        "state.train_state.step = 1\n"
        "cb.on_train_step_end(ctx)\n"
        "cb.on_train_step_start(ctx)\n"
        "raise RuntimeError('CUDA error: an illegal memory access was encountered')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "illegal memory access" in done.stderr
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1]
    assert (info["status"], info["exit_code"]) == ("failed", 1)
    assert info["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "telemetry" in info  # its summary: the telemetry was closed


def test_a_closed_run_is_left_alone_at_exit(tmp_path):
    cb = BridgeTelemetry(str(tmp_path / "run"))
    state = bridge_state()
    cb.on_train_start(context(state))
    cb.on_train_end(context(state))
    before = (tmp_path / "run" / "run.json").read_text()
    cb.recorder.at_exit()
    assert (tmp_path / "run" / "run.json").read_text() == before
