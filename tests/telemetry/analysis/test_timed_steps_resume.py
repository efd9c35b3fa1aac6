"""Timing statistics leave out each attempt's first step: a resumed run warms up again (process start, the
communicators' first collective, allocator and autotuning), so its first step after the resume is a warm-up
step like step 1, not a steady one (measured: a 2-rank gloo run resumed at step 6 re-ran its set-up)."""
from __future__ import annotations

import json

from telemetry.analysis.runs import load_run
from telemetry.analysis.report import summarize
from telemetry.rundir import StepKey


def _resumed_run(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    # attempt 1: steps 1-3 (01:00:00 on); attempt 2 resumed at step 4 (01:10:00 on)
    t1, t2 = 1_795_914_000.0, 1_795_914_600.0
    times = [5.0, 1.0, 1.0, 4.0, 1.0, 1.0]
    rows, clock = [], t1 + 1
    for step, st in enumerate(times, 1):
        if step == 4:
            clock = t2 + 2
        clock += st
        rows.append({"step": step, "loss": 3.0, "step_time_s": st, "time": clock})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "run.json").write_text(json.dumps({
        "name": "resumed", "status": "completed", "attempt": 2, "start_time": "2026-11-29T01:10:00+00:00",
        "layout": {"world_size": 2, "global_batch_size": 8},
        "attempts": [{"attempt": 1, "start_time": "2026-11-29T01:00:00+00:00", "status": "interrupted"},
                     {"attempt": 2, "start_time": "2026-11-29T01:10:00+00:00", "status": "completed"}]}))
    return load_run(str(d))


def test_each_attempts_first_step_is_warm_up(tmp_path):
    run = _resumed_run(tmp_path)
    assert [r[StepKey.STEP] for r in run.timed_steps()] == [2, 3, 5, 6]
    s = summarize(run)
    assert s["step_time_median_s"] == 1.0 and s["step_time_p95_s"] == 1.0


def test_a_run_without_attempts_drops_step_one_only(tmp_path):
    run = _resumed_run(tmp_path)
    run.info.pop("attempts")
    run.info.pop("start_time")
    assert [r[StepKey.STEP] for r in run.timed_steps()] == [2, 3, 4, 5, 6]


def test_steps_kept_from_an_attempt_on_another_lab_are_left_out(tmp_path):
    """Round 6 of the lab: a 3-node run resumed at 20mbit from a 5mbit checkpoint kept step 2 (0.47 s, at 5mbit)
    among steps of 0.19 s; launch.lab now records when the lab changed (lab.json `earlier_labs`, `replaced_at`)."""
    run = _resumed_run(tmp_path)
    lab = {"nodes": 2, "rate": "20mbit", "earlier_labs": [{"nodes": 2, "rate": "5mbit", "replaced_at": 1_795_914_590.0}]}
    (tmp_path / "run" / "lab.json").write_text(json.dumps(lab))
    assert run.lab_since() == 1_795_914_590.0
    assert [r[StepKey.STEP] for r in run.timed_steps()] == [5, 6]
    (tmp_path / "run" / "lab.json").write_text(json.dumps({"nodes": 2, "rate": "20mbit"}))  # one lab all along
    assert run.lab_since() is None and [r[StepKey.STEP] for r in run.timed_steps()] == [2, 3, 5, 6]
    (tmp_path / "run" / "lab.json").write_text("[1, 2]")  # damaged: read as no record
    assert run.lab_since() is None
