"""`python -m telemetry report` on a recorded run, and on bad input."""
from __future__ import annotations

import json

import pytest

import subprocess
import sys

from telemetry.analysis.report import summarize
from telemetry.analysis.runs import load_run

from ...conftest import REPO
from ..recorded import write_run


def recorded_run(path, energy=True):
    return write_run(path, energy=energy, expectation={
        "expected": "roce", "detected": "tcp", "match": False,
        "warning": "FABRIC MISMATCH: the recipe expects 'roce' but this run used 'tcp'"})


def test_summary_numbers(tmp_path):
    s = summarize(load_run(str(recorded_run(tmp_path / "run"))))
    assert s["steps"] == 6  # the truncated line is skipped
    assert s["step_time_median_s"] == 1.0 and s["samples_per_s"] == 8.0  # warm-up and profiled steps left out
    assert s["comm_share"] == 0.25 and s["exposed_comm"]["share"] == 0.1 and s["exposed"]["share"] == 0.2
    assert s["energy"]["per_step_j"] == 500.0 and s["energy"]["per_sample_j"] == 62.5
    assert abs(s["straggler_s"] - 0.2) < 1e-12


def test_damaged_lines_are_said_in_the_report(tmp_path):
    from telemetry.analysis.report import write_report
    from telemetry.analysis.runs import damage_warning

    run = recorded_run(tmp_path / "run", energy=False)
    assert damage_warning(load_run(str(run))) is None  # the recorded run's cut last line is not damage
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[2] = "garbage\n"
    metrics.write_text("".join(lines))
    loaded = load_run(str(run))
    assert loaded.damaged == {"metrics.jsonl": [3]}
    write_report(str(run))
    assert "left out as damaged (not one JSON step record each): metrics.jsonl line 3" in (run / "report" / "report.md").read_text()


def test_a_step_written_again_counts_once_its_last_line_kept_and_named(tmp_path):
    # every step twice (two runs' lines in one file; an engine's own resume appends from its checkpoint) was
    # counted twice: steps 12 of 6, the medians over both copies
    from telemetry.analysis.runs import damage_warning

    run = recorded_run(tmp_path / "run", energy=False)
    metrics = run / "metrics.jsonl"
    lines = [x for x in metrics.read_text().splitlines(keepends=True) if x.endswith("\n")]
    steps = [json.loads(x)["step"] for x in lines]
    again = [json.dumps({**json.loads(x), "loss": 9.0}) + "\n" for x in lines[2:]]  # resumed after step 2
    metrics.write_text("".join(lines + again))
    loaded = load_run(str(run))
    assert [r["step"] for r in loaded.metrics] == steps and loaded.damaged == {}
    assert [r.get("loss") for r in loaded.metrics][2:] == [9.0] * len(again)  # the later attempt's lines
    assert damage_warning(loaded) == ("steps written more than once (a resumed attempt, or two runs' lines in one "
                                      "file), the last line of each kept: " + ", ".join(map(str, steps[2:7])))


def test_a_resumed_attempt_that_stopped_earlier_drops_the_superseded_tail(tmp_path):
    from telemetry.analysis.runs import damage_warning

    # steps 1-6, resumed from step 2's checkpoint, stopped again after step 4: 5 and 6 were the superseded attempt's
    # (the model the run left is at step 4), but the last line of each step kept them: 6 steps reported
    run = recorded_run(tmp_path / "run", energy=False)
    metrics = run / "metrics.jsonl"
    lines = [x for x in metrics.read_text().splitlines(keepends=True) if x.endswith("\n")]
    steps = [json.loads(x)["step"] for x in lines]
    again = [json.dumps({**json.loads(x), "loss": 9.0}) + "\n" for x in lines[2:4]]
    metrics.write_text("".join(lines + again))
    loaded = load_run(str(run))
    assert [r["step"] for r in loaded.metrics] == steps[:4]
    assert [r.get("loss") for r in loaded.metrics][2:] == [9.0, 9.0] and loaded.repeated_steps == steps[2:4]
    assert damage_warning(loaded).endswith("; steps of an earlier attempt past the later attempt's last step, left "
                                           f"out: {steps[4]}, {steps[5]}")


def test_a_rank_file_appended_by_a_resume_keeps_the_later_attempt(tmp_path):
    # our own resume sets metrics.jsonl's lines past the checkpoint aside, but each rank appends to its telemetry
    # file: the resumed steps were there twice (per-rank exports held each twice)
    from telemetry.rundir import RANK_TELEMETRY, rank_file

    run = recorded_run(tmp_path / "run", energy=False)
    lines = [x for x in (run / "metrics.jsonl").read_text().splitlines(keepends=True) if x.endswith("\n")]
    steps = [json.loads(x)["step"] for x in lines]
    path = run / rank_file(1, RANK_TELEMETRY)
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(lines + lines[2:]))  # resumed from step 2's checkpoint, run to the end again
    assert [r["step"] for r in load_run(str(run)).ranks[1]] == steps


@pytest.mark.integration
def test_report_writes_html_markdown_and_figures(tmp_path):
    run = recorded_run(tmp_path / "run", energy=False)
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = run / "report"
    md = (out / "report.md").read_text()
    assert "FABRIC MISMATCH" in md and "| all_reduce | 1 | 1 MB | 0.25 s |" in md
    assert "not available: NVML not available" in md
    assert "<table>" in (out / "report.html").read_text()
    for name in ("loss.png", "step_time.png", "comm.png", "energy.png", "counters.png"):
        assert (out / name).stat().st_size > 1000, name


@pytest.mark.integration
def test_shares_keep_their_order_and_the_profiled_figure_stands_apart(tmp_path):
    """exposed <= communication <= step time on every step gives the same order for the report's shares; the
    profiled windows' share (of the window, with the profiler on) is its own row, not the exposed share."""
    run = write_run(tmp_path / "run", step_time=0.27, comm_time=0.0625, exposed_time=0.05)
    s = summarize(load_run(str(run)))
    assert 0 <= s["exposed_comm"]["share"] <= s["comm_share"] <= 1.0
    assert s["exposed_comm"]["per_step_s"] == 0.05 and s["exposed_comm"]["reason"] is None
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    md = (run / "report" / "report.md").read_text()
    assert "| communication share of step | 23.1% |" in md and "| exposed communication share | 18.5% |" in md
    assert "| exposed share in profiled windows (of the window, profiler on) | 20.0% (1 windows) |" in md


def test_runs_recorded_under_the_old_names_are_read_under_the_new(tmp_path):
    import json

    run = write_run(tmp_path / "old", exposed_time=None)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip().endswith("}")]
    with open(run / "metrics.jsonl", "w") as f:
        for rec in lines:
            rec.pop("exposed_comm_s", None)
            rec["energy_j"], rec["net_tx_bytes"] = rec.pop("job_gpu_energy_j"), rec.pop("job_net_tx_bytes")
            rec["comm"]["all_reduce"]["busbw_gbps"] = rec["comm"]["all_reduce"].pop("busbw_GBps")
            f.write(json.dumps(rec) + "\n")
    loaded = load_run(str(run))
    assert all(r["job_gpu_energy_j"] == 500.0 and r["job_net_tx_bytes"] == 2e6 and "energy_j" not in r
               for r in loaded.metrics)
    assert all(r["comm"]["all_reduce"]["busbw_GBps"] == 0.004 for r in loaded.metrics)
    s = summarize(loaded)
    assert s["energy"]["per_step_j"] == 500.0 and s["comm"]["all_reduce"]["busbw_GBps"] == 0.004
    assert s["exposed_comm"]["share"] is None and "not recorded" in s["exposed_comm"]["reason"]
    from telemetry.analysis.runs import upgrade_sweep
    old_sweep = {"ops": {"all_reduce": {"avg_busbw_gbps": 1.5, "rows": [
        {"size": 8, "in_place": {"time_us": 1.0, "algbw_gbps": 0.008, "busbw_gbps": 0.008}, "out_of_place": None}]}}}
    new = upgrade_sweep(old_sweep)["ops"]["all_reduce"]
    assert new["avg_busbw_GBps"] == 1.5 and new["rows"][0]["in_place"] == {"time_us": 1.0, "algbw_GBps": 0.008,
                                                                           "busbw_GBps": 0.008}


@pytest.mark.integration
def test_report_on_a_missing_run_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(tmp_path / "nope")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: {tmp_path / 'nope'}: not a directory; allowed: a run directory (a run's output_dir, holding "
        "run.json and metrics.jsonl)")


TP_UNTIMED = {"all_gather": {"count": 2, "bytes": 4096, "time_s": None, "untimed": 2, "untimed_bytes": 4096,
                             "busbw_GBps": None,
                             "untimed_reason": "functional collectives are timed on NCCL only"}}


def test_untimed_bytes_mark_the_communication_share_partial(tmp_path):
    whole = summarize(load_run(str(write_run(tmp_path / "whole"))))
    assert whole["comm_partial"] is False and whole["comm_untimed_bytes_per_step"] == 0
    s = summarize(load_run(str(write_run(tmp_path / "tp", extra_comm=TP_UNTIMED))))
    assert s["comm_partial"] is True and s["comm_untimed_bytes_per_step"] == 4096
    assert s["comm"]["all_gather"]["partial"] and s["comm"]["all_gather"]["time_per_step_s"] is None
    assert not s["comm"]["all_reduce"]["partial"] and s["comm_share"] == 0.25  # timed calls only
    assert s["comm_untimed_reasons"] == ["functional collectives are timed on NCCL only"]
    # a record from before untimed_bytes existed: partial, amount unknown
    old = {"all_gather": {k: v for k, v in TP_UNTIMED["all_gather"].items() if k != "untimed_bytes"}}
    s_old = summarize(load_run(str(write_run(tmp_path / "old", extra_comm=old))))
    assert s_old["comm_partial"] is True and s_old["comm_untimed_bytes_per_step"] is None


@pytest.mark.integration
def test_report_says_partial_where_calls_had_no_time(tmp_path):
    run = write_run(tmp_path / "tp", extra_comm={**TP_UNTIMED, "sendrecv": {
        "count": 1, "bytes": 128, "time_s": 0.001, "untimed": 0, "untimed_bytes": 0, "busbw_GBps": 0.000128}})
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    md = (run / "report" / "report.md").read_text()
    assert ("| communication share of step | 25.0% (partial: 4.1 kB per step untimed: functional collectives "
            "are timed on NCCL only) |") in md
    assert "| all_gather | 2 | 4.1 kB | n/a | n/a | n/a (partial) | n/a | 4.1 kB |" in md
    assert "| sendrecv | 1 | 128 B | 0.001 s |" in md  # a coalesced send/recv batch is reported too
    whole = write_run(tmp_path / "whole")
    subprocess.run([sys.executable, "-m", "telemetry", "report", str(whole)], cwd=REPO, check=True, timeout=120,
                   capture_output=True)
    assert "(partial" not in (whole / "report" / "report.md").read_text()


def test_report_knows_every_op_the_tracer_records():
    from telemetry.capture.collectives import RECORDED_OPS
    from telemetry.analysis.report import RECORDED_OPS as reported
    assert reported == RECORDED_OPS


def test_harness_work_and_padded_tokens_are_summarized_and_shown(tmp_path):
    from telemetry.analysis.report import tables

    run = load_run(str(recorded_run(tmp_path / "run")))
    assert summarize(run)["harness_per_step_s"] is None  # recorded before the field: unknown, not 0
    for k, r in enumerate(run.metrics):
        r.update(harness_s=0.02 + 0.01 * (k % 2), tokens=900, padded_tokens=1024)
    s = summarize(run)
    assert 0.02 <= s["harness_per_step_s"] <= 0.03
    assert s["harness_share"] == pytest.approx(s["harness_per_step_s"] / s["step_time_median_s"])
    assert (s["tokens_per_step"], s["padded_tokens_per_step"]) == (900, 1024)
    rows = dict((r[0], r[1]) for _, _, t in tables(s)[:2] for r in t)
    assert rows["tokens per step: real / computed (padding included)"] == "900 / 1,024"
    assert "of the step time" in rows["harness work per step, outside step time (telemetry, stop vote, metrics write)"]


def test_steps_that_compiled_are_left_out_of_timing_statistics():
    """train.compile=blocks: the steps whose `compile_s` is above 0 are not steady state (docs/compile.md)."""
    from telemetry.analysis.runs import Run

    rows = [{"step": s, "step_time_s": t, "compile_s": c}
            for s, t, c in ((1, 60.0, 59.0), (2, 1.5, 0.4), (3, 1.0, 0.0), (4, 1.0, 0.0))]
    assert [r["step"] for r in Run("x", {}, rows).timed_steps()] == [3, 4]
    eager = [{"step": s, "step_time_s": 1.0} for s in (1, 2, 3)]
    assert [r["step"] for r in Run("x", {}, eager).timed_steps()] == [2, 3]
    assert [r["step"] for r in Run("x", {}, rows[:2]).timed_steps()] == [2]  # nothing steady yet: keep what there is


def test_a_collectives_calls_in_flight_together_are_named_where_their_times_pass_the_step():
    """Round 5 of the lab: tiny BERT on 2 nodes at 8 Mbit/s, DDP's 3 buckets a step each timed from its start on
    gloo's threads: 3.78 s of all_reduce in a 2.34 s step, read as 500 kB/s, '50.0% of line rate', where the link
    carried 1.89 MB in about 2.3 s. The cell now says the summed time passes the step."""
    from telemetry.analysis.report import overlap_note
    note = overlap_note({"count_per_step": 3.0, "share_of_step": 1.6127})
    assert note == (" (3 calls a step, in flight together: their times add up to 161% of the step, so this busbw "
                    "understates the link)")
    assert overlap_note({"count_per_step": 3.0, "share_of_step": 0.93}) == ""
    assert overlap_note({"count_per_step": 1.0, "share_of_step": 1.01}) == ""  # one call: the step's own clock
    assert overlap_note({"count_per_step": 3.0, "share_of_step": None}) == ""


@pytest.mark.parametrize("value,unit,text", [(999.7, "s", "1,000 s"), (999.4, "s", "999 s"),
                                             (0.012345, "s", "0.0123 s"), (1234.5, "s", "1,234 s")])
def test_fmt_never_writes_an_exponent_where_rounding_reaches_1000(value, unit, text):
    # review56: 999.7 s read "1e+03 s" (3 significant digits in exponent notation)
    from telemetry.analysis.report import fmt
    assert fmt(value, unit) == text


@pytest.mark.parametrize("n,text", [(999_700, "1 MB"), (999_400, "999 kB"), (999.7, "1 kB"), (150_000, "150 kB")])
def test_fmt_bytes_moves_to_the_next_unit_where_rounding_reaches_1000(n, text):
    from telemetry.analysis.report import fmt_bytes
    assert fmt_bytes(n) == text
