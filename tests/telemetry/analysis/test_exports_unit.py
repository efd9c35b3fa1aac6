"""telemetry.analysis.exports in-process: TensorBoard and W&B (offline) written from a recorded run directory
and read back with each library's own reader."""
from __future__ import annotations

import glob
import json
import os

import pytest

from telemetry.analysis.exports import check_kinds, export_run, step_scalars
from tests.telemetry.recorded import write_run


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path / "run", name="exported", times=True, energy=False)


def test_step_scalars_leave_unknown_values_out():
    s = step_scalars({"step": 1, "loss": 2.0, "lr": None, "mfu": float("nan"), "grad_norm": True,
                      "comm": {"all_reduce": {"time_s": 0.5, "bytes": 10, "count": 1, "busbw_GBps": None}},
                      "exposed": {"exposed_share": 0.25}, "ranks": {"step_time_s": {"max": 1.5, "min": 1.0}},
                      "eval_loss": 1.5})
    assert s == {"train/loss": 2.0, "comm/all_reduce/time_s": 0.5, "comm/all_reduce/bytes": 10.0,
                 "comm/all_reduce/count": 1.0, "comm/exposed_share": 0.25, "ranks/step_time_s_max": 1.5,
                 "ranks/step_time_s_min": 1.0, "eval/loss": 1.5}


def test_unknown_kind_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"telemetry.export: got \['csv'\]; allowed: .*tensorboard"):
        check_kinds(["tensorboard", "csv"])
    assert check_kinds(["parquet", "parquet", "trace"]) == ["parquet", "trace"]


def test_tensorboard_scalars_read_back(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = export_run(str(run_dir), ["tensorboard"])
    assert result["tensorboard"]["path"] == str(run_dir / "exports" / "tensorboard")
    acc = EventAccumulator(result["tensorboard"]["path"])
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "perf/step_time_s", "comm/all_reduce/bytes", "comm/exposed_share"} <= tags
    assert "energy/job_gpu_energy_j" not in tags  # unknown energy is absent, not 0
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert loss == pytest.approx({s: 3.0 - 0.1 * s for s in range(1, 7)})  # the torn last line is not a step
    assert [e.step for e in acc.Scalars("comm/exposed_share")] == [4]  # only the profiled step has it
    manifest = json.loads((run_dir / "exports" / "manifest.json").read_text())
    assert manifest == {"tensorboard": {"path": result["tensorboard"]["path"]}}


def test_wandb_offline_run_written_without_network(run_dir, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: offline must not need it
    monkeypatch.setenv("WANDB_MODE", "offline")  # restored after the test (the writer sets these too)
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = export_run(str(run_dir), ["wandb"])
    path = result["wandb"].get("path")
    assert path, result
    assert os.path.basename(path).startswith("offline-run-") and path.startswith(str(run_dir / "exports" / "wandb"))
    files = glob.glob(os.path.join(path, "run-*.wandb"))
    assert len(files) == 1 and open(files[0], "rb").read(4) == b":W&B"


def test_a_failing_kind_is_recorded_and_the_others_written(run_dir):
    (run_dir / "ranks").mkdir(exist_ok=True)
    result = export_run(str(run_dir), ["trace", "tensorboard"])  # no events files: the trace has nothing
    assert result["trace"]["path"] is None and result["trace"]["error"]
    assert result["tensorboard"]["path"]
    manifest = json.loads((run_dir / "exports" / "manifest.json").read_text())
    assert set(manifest) == {"trace", "tensorboard"} and manifest["trace"]["error"] == result["trace"]["error"]
