"""telemetry.integrations.recorder in-process (no process group, a world of one): the run's end closes the
telemetry whatever fails on the way, and a failure of the telemetry's own while a run's failure is recorded
does not replace that failure."""
from __future__ import annotations

import json

import pytest
import torch.distributed as dist

import telemetry.capture.early
from telemetry.capture.session import Telemetry
from telemetry.integrations.recorder import RunRecorder
from telemetry.rundir import RUN_JSON

LOST_PEER = "Timed out waiting 10000ms for recv operation to complete"


@pytest.fixture(autouse=True)
def process_tracer():
    yield
    telemetry.capture.early.reset()  # an engine's recorder installed the process tracer


def run_json(run_dir) -> dict:
    return json.loads((run_dir / RUN_JSON).read_text())


def lose_the_peer_at_the_end(monkeypatch):
    """The end-of-run exchange (flush with collective=True) fails as a timed-out gloo wait does; a rank
    flushing alone (collective=False) still works."""
    real = Telemetry.flush

    def flush(self, collective=True, wait_s=None):
        if collective:
            raise RuntimeError(LOST_PEER)
        return real(self, collective, wait_s)

    monkeypatch.setattr(Telemetry, "flush", flush)


@pytest.mark.parametrize("harness", [True, False], ids=["harness", "engine"])
def test_a_failed_end_of_run_exchange_still_closes_the_telemetry(tmp_path, monkeypatch, harness):
    """The run is recorded failed and the error goes on, but the telemetry is closed too: the harness's tracer
    uninstalled (else a second run in this process would wrap its wrappers and a dead tracer would keep claiming
    completion reports), an engine's shared tracer handed on to the next run, the rank files closed."""
    original = dist.all_reduce
    run_dir = tmp_path / "run"
    rec = RunRecorder(str(run_dir), name="r", harness=harness)
    rec.open()
    rec.start(0)
    assert rec.telemetry.started and dist.all_reduce is not original
    rec.begin_step(1)
    rec.end_step(1, loss=1.0)
    lose_the_peer_at_the_end(monkeypatch)
    with pytest.raises(RuntimeError, match="Timed out"):
        rec.close("completed")
    assert not rec.telemetry.started
    if harness:
        assert dist.all_reduce is original
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"], info["error"]) == ("failed", 1, f"RuntimeError: {LOST_PEER}")


def test_a_telemetry_failure_while_recording_a_failure_keeps_the_runs_error(tmp_path, monkeypatch, capsys):
    """fail(exc) is called while the loop's own exception propagates (an engine's exception hook): the
    telemetry failing there is one stderr line; run.json keeps the loop's error and fail() does not raise,
    so the caller re-raises the loop's exception, not the telemetry's."""
    run_dir = tmp_path / "run"
    rec = RunRecorder(str(run_dir), name="r")
    rec.open()
    rec.start(0)
    rec.begin_step(1)
    rec.end_step(1, loss=1.0)

    def broken(self, collective=True, wait_s=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Telemetry, "flush", broken)
    rec.fail(RuntimeError("loss is NaN"))  # does not raise
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"], info["error"]) == ("failed", 1, "RuntimeError: loss is NaN")
    err = [line for line in capsys.readouterr().err.splitlines() if "No space left" in line]
    assert len(err) == 1 and err[0].startswith("[telemetry]")
    assert rec.closed and not rec.telemetry.started


def test_a_given_layout_for_another_world_is_not_recorded_as_this_runs(tmp_path, capsys):
    """launch.nemo hands the engine's callback the layout it translated (FABRIC_HARNESS_RECIPE_JSON). A job that
    runs at another world size (started by hand, a different srun) would have that layout in run.json, and
    report's per-rank and bandwidth figures would use a world that did not run: the layout the engine reports is
    recorded instead, with a note and a warning naming both sizes."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        run_dir = tmp_path / "run"
        translated = {"world_size": 8, "dp": 8, "tp": 1, "pp": 1, "global_batch_size": 64}
        engine = {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "global_batch_size": 8}
        rec = RunRecorder(str(run_dir), name="r", layout=translated)
        rec.start(0, engine)
        rec.close("completed")
    finally:
        dist.destroy_process_group()
    info = run_json(run_dir)
    assert info["layout"] == engine
    assert any("world_size 8" in n and "1 rank" in n for n in info["notes"]), info.get("notes")
    assert "world_size 8" in capsys.readouterr().err


def test_a_given_layout_for_another_world_when_the_engine_reports_none(tmp_path, capsys):
    """review58: an engine whose hook reports no layout (automodel_recipe calls rec.start() bare) at another world
    size than the given layout's: run.json's layout was null while the note said 'the layout recorded is the one
    the engine reports'. The process group's world size is recorded, and the note says the engine reported none."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        run_dir = tmp_path / "run"
        rec = RunRecorder(str(run_dir), name="r", layout={"world_size": 8, "dp": 8, "tp": 1, "pp": 1})
        rec.start(0)
        rec.close("completed")
    finally:
        dist.destroy_process_group()
    info = run_json(run_dir)
    assert info["layout"]["world_size"] == 1 and "dp" not in info["layout"], info["layout"]
    note = next(n for n in info["notes"] if "world_size 8" in n)
    assert "reports none" in note and "the one the engine reports" not in note, note
    capsys.readouterr()


def test_a_resumed_runs_tracer_health_covers_the_steps_before_its_checkpoint(tmp_path):
    """A resume continues the steps in metrics.jsonl, and run.json's `telemetry.comm_health` is "every step added
    up" (docs/run-directory.md). It held only the last attempt's: a rerun of a finished run (nothing left to do)
    made the report of 60 traced steps read "no collectives traced"."""
    from telemetry.rundir import METRICS, StepKey
    from telemetry.stragglers import StragglerDetector

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    group = {"calls": 3, "bytes": 300, "timed": 3, "timed_bytes": 300, "timing": "host"}
    earlier = [{StepKey.STEP: s, StepKey.COMM_HEALTH: {"calls": 3, "bytes": 300, "timed": 3, "timed_bytes": 300,
                                                       "by_group": {"dp": group}}} for s in (1, 2, 3)]
    (run_dir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in earlier))
    for r in earlier:  # two ranks' compute time outside collectives, as rank 0's lines carry it
        r[StepKey.RANKS] = {"compute_s": {"min": 1.0, "median": 1.0, "mean": 1.0, "max": 1.0, "max_rank": 0, "ranks": 2}}
    (run_dir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in earlier))
    rec = RunRecorder(str(run_dir), name="r", harness=True)
    rec.open()
    rec.start(0)
    rec.telemetry.stragglers = StragglerDetector(None)  # rank 0's, as a world of two has
    rec.telemetry.world = 2
    rec.rundir.open_metrics(2)  # resumed from step 2's checkpoint: step 3's line is set aside, as the loop does
    rec.on_train_start({"start_step": 2, "max_steps": 2})
    rec.close("completed")
    telemetry = run_json(run_dir)["telemetry"]
    health = telemetry[StepKey.COMM_HEALTH]
    assert (health["calls"], health["timed_bytes"], health["by_group"]["dp"]["calls"]) == (6, 600, 6)
    assert health["verdict"] == "timing covers 100% of calls and bytes"
    assert telemetry["stragglers"]["steps_checked"] == 2  # not "no cross-rank step times"


def test_a_resume_at_another_world_size_leaves_the_earlier_ranks_out_of_the_straggler_check(tmp_path):
    """The straggler check names ranks (and their hosts, from this attempt's layout): steps an earlier attempt
    ran on 4 ranks, where rank 3 was 5x slower, must not make rank 3 of a 2-rank resume (or no rank) a straggler."""
    from telemetry.rundir import METRICS, StepKey
    from telemetry.stragglers import StragglerDetector

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    slow = {"compute_s": {"min": 1.0, "median": 1.0, "mean": 2.0, "max": 5.0, "max_rank": 3, "ranks": 4}}
    earlier = [{StepKey.STEP: s, StepKey.STEP_TIME_S: 5.0, StepKey.RANKS: slow} for s in range(1, 41)]
    (run_dir / METRICS).write_text("".join(json.dumps(r) + "\n" for r in earlier))
    rec = RunRecorder(str(run_dir), name="r", harness=True)
    rec.open()
    rec.start(0)
    rec.telemetry.stragglers = StragglerDetector(None)
    rec.telemetry.world = 2  # resumed on 2 ranks
    rec.rundir.open_metrics(40)
    rec.on_train_start({"start_step": 40, "max_steps": 40})
    assert rec.telemetry.stragglers.steps == 0 and rec.telemetry.stragglers.findings == []
    rec.close("completed")
