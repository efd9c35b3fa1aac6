"""python -m telemetry watch (telemetry/analysis/watch.py) over run directories written here: a live run
(status running, a torn last line), a finished one, the terminal and plain views, Ctrl-C."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from telemetry.analysis import watch as watch_mod
from telemetry.analysis.watch import RunWatch, plain_lines, rich_view, watch
from tests.conftest import REPO


def spread(values: list[float]) -> dict:
    top = max(values)
    return {"min": min(values), "mean": sum(values) / len(values), "max": top, "max_rank": values.index(top),
            "ranks": len(values), "median": None}


def make_run(path, steps: int, status: str = "running", slow_rank: int | None = None, torn: bool = False,
             loss_events: float = 0.0) -> None:
    (path / "ranks").mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps({"name": "demo", "status": status, "recipe": {"max_steps": 100},
                                               "hosts": [{"hostname": "a"}, {"hostname": "b"}]}))
    with open(path / "metrics.jsonl", "w") as m:
        for step in range(1, steps + 1):
            compute = [0.3 if r == slow_rank else 0.1 for r in range(2)]
            m.write(json.dumps({"step": step, "loss": 5.0 - step / 100, "step_time_s": 0.5, "tokens_per_s": 2000.0,
                                "time": 1000.0 + step * 0.5, "job_gpu_power_w": 650.0, "job_loss_events": loss_events,
                                "ranks": {"compute_s": spread(compute)}}) + "\n")
        if torn:
            m.write('{"step": %d, "loss"' % (steps + 1))
    for rank in range(2):
        with open(path / "ranks" / f"rank{rank:05d}.telemetry.jsonl", "w") as f:
            for step in range(1, steps + 1):
                f.write(json.dumps({"step": step, "step_time_s": 0.5 if rank == 0 else 0.6,
                                    "comm_time_s": 0.1 if rank == 0 else 0.3, "gpu_power_w": 325.0}) + "\n")


def test_a_running_run_shows_progress_eta_ranks_and_verdicts(tmp_path):
    make_run(tmp_path, 20, torn=True)
    state = RunWatch(str(tmp_path))
    state.poll()
    s = state.snapshot()
    assert s["step"] == 20 and s["max_steps"] == 100
    assert s["s_per_step"] == pytest.approx(0.5) and s["eta_s"] == pytest.approx(40.0)
    lines = plain_lines(s)
    assert lines[0].startswith("demo: running | step 20/100 | 0.500 s/step | eta 0:00:40 | loss 4.8000")
    assert "rank 1: step 20 | step time 0.600 s | comm 50.0% | GPU 325 W" in lines[2]
    assert lines[3] == "  slowest: rank 1 (0.600 s), rank 0 (0.500 s)"
    assert lines[4] == "  straggler: none in 20 steps"
    assert lines[5] == "  counters: clean: 0 loss events in 20 steps"
    # the torn line completes: read at the next poll
    with open(tmp_path / "metrics.jsonl", "a") as m:
        m.write(': 4.7, "step_time_s": 0.5, "time": 1010.5}\n')
    assert state.poll() and state.snapshot()["step"] == 21


def test_the_eta_counts_steps_not_lines(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"name": "demo", "status": "running", "recipe": {"max_steps": 100}}))
    # every other step logged: 2 s between lines is 1 s per step
    with open(tmp_path / "metrics.jsonl", "w") as m:
        for step in range(2, 22, 2):
            m.write(json.dumps({"step": step, "time": 1000.0 + step, "step_time_s": 0.9}) + "\n")
    state = RunWatch(str(tmp_path))
    state.poll()
    s = state.snapshot()
    assert s["s_per_step"] == pytest.approx(1.0) and s["eta_s"] == pytest.approx(80.0)


def test_server_power_is_shown_beside_gpu_power_where_recorded(tmp_path):
    make_run(tmp_path, 3)
    state = RunWatch(str(tmp_path))
    state.poll()
    assert "server power" not in plain_lines(state.snapshot())[0]
    with open(tmp_path / "metrics.jsonl", "a") as m:
        m.write(json.dumps({"step": 4, "time": 1002.0, "job_gpu_power_w": 650.0, "job_server_power_w": 1800.0}) + "\n")
    state.poll()
    s = state.snapshot()
    assert plain_lines(s)[0].endswith("GPU power 650 W | server power 1,800 W")
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(rich_view(s))
    assert "server power 1,800 W" in console.export_text()


def test_the_straggler_verdict_is_the_runs_own_detector(tmp_path):
    make_run(tmp_path, 20, slow_rank=1, loss_events=3.0)  # 20 steps of 0.5 s: the 10 s a compute finding needs
    state = RunWatch(str(tmp_path))
    state.poll()
    lines = plain_lines(state.snapshot())
    assert "straggler: straggler rank 1 on b: compute:" in lines[4]
    assert lines[5] == "  counters: LOSS: 60 drop/discard/error events in 20 steps"


def test_the_timing_coverage_verdict_is_shown_where_recorded(tmp_path):
    make_run(tmp_path, 2)
    with open(tmp_path / "metrics.jsonl", "a") as m:
        m.write(json.dumps({"step": 3, "comm_health": {"verdict": "timing covers 100% of calls and bytes"}}) + "\n")
    state = RunWatch(str(tmp_path))
    state.poll()
    assert "  timing: timing covers 100% of calls and bytes" in plain_lines(state.snapshot())


def test_plain_output_follows_until_the_run_ends(tmp_path, monkeypatch):
    make_run(tmp_path, 3)
    calls = []

    def finish(_):  # the run ends while the view waits
        calls.append(1)
        make_run(tmp_path, 5, status="completed")
    monkeypatch.setattr(watch_mod.time, "sleep", finish)
    out = io.StringIO()
    assert watch(str(tmp_path), out=out) == 0
    text = out.getvalue()
    assert "demo: running | step 3/100" in text and "demo: completed | step 5/100" in text and len(calls) == 1


def test_ctrl_c_is_exit_130_without_a_traceback(tmp_path, monkeypatch):
    make_run(tmp_path, 3)

    def interrupt(_):
        raise KeyboardInterrupt
    monkeypatch.setattr(watch_mod.time, "sleep", interrupt)
    assert watch(str(tmp_path), out=io.StringIO()) == 130


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_rich_view_redrawn_in_place(tmp_path, monkeypatch):
    make_run(tmp_path, 3)
    monkeypatch.setattr(watch_mod.time, "sleep", lambda _: make_run(tmp_path, 4, status="completed"))
    out = Terminal()
    assert watch(str(tmp_path), out=out) == 0
    text = out.getvalue()
    assert "\x1b[" in text and "step 4/100" in text and "50.0%" in text  # cursor moves: redrawn in place


@pytest.mark.integration
def test_sigint_to_the_command_exits_130_quietly(tmp_path):
    make_run(tmp_path, 3)
    proc = subprocess.Popen([sys.executable, "-m", "telemetry", "watch", str(tmp_path), "--interval", "0.2"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    line = proc.stdout.readline()  # the first view is out: the loop is running
    assert line.startswith("demo: running"), line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    assert proc.returncode == 130 and "Traceback" not in err, err


def test_a_big_job_shows_its_slowest_ranks_and_reads_only_the_rank_files_tails(tmp_path, monkeypatch):
    make_run(tmp_path, 3)
    for rank in range(2, 40):  # 40 ranks: rank 7 slow
        with open(tmp_path / "ranks" / f"rank{rank:05d}.telemetry.jsonl", "w") as f:
            f.write("x" * 5000 + "\n")  # an old line cut by the tail read: skipped, not misread
            for step in range(1, 4):
                f.write(json.dumps({"step": step, "step_time_s": 0.9 if rank == 7 else 0.5, "comm_time_s": 0.1}) + "\n")
    monkeypatch.setattr(watch_mod, "RANK_TAIL_BYTES", 1000)
    state = RunWatch(str(tmp_path))
    state.poll()
    lines = plain_lines(state.snapshot())
    shown = [x for x in lines if x.startswith("  rank ")]
    assert len(shown) == 8 and any(x.startswith("  rank 7: step 3 | step time 0.900 s") for x in shown)
    assert "  32 other ranks: median step time 0.500 s" in lines


def test_bad_arguments_are_one_error_line(tmp_path, capsys):
    from telemetry.__main__ import main

    assert main(["watch", str(tmp_path / "no" / "missing")]) == 2  # nor its parent: a typo, not a queued job
    assert main(["watch", str(tmp_path / "missing"), "--once"]) == 2  # --once does not wait
    assert main(["watch", str(tmp_path), "--interval", "0"]) == 2
    assert main(["watch", str(tmp_path), "--interval", "inf"]) == 2  # time.sleep(inf) overflowed after one view
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: watch: '{tmp_path / 'no' / 'missing'}' is not a directory (nor is {tmp_path / 'no'}); "
                   "allowed: a run directory (the recipe's output_dir), or one a queued job will create in an "
                   "existing directory",
                   f"error: watch: '{tmp_path / 'missing'}' is not a directory; allowed: a run directory (the "
                   "recipe's output_dir), or one a queued job will create in an existing directory",
                   "error: --interval: got 0.0; expected seconds > 0 and at most 3600",
                   "error: --interval: got inf; expected seconds > 0 and at most 3600"]


def test_a_run_directory_a_queued_job_has_not_made_yet_is_awaited(tmp_path, capsys):
    """`watch runs/x` before the job left the queue refused the directory; now it waits for it to appear."""
    import threading
    from telemetry.__main__ import main

    run = tmp_path / "queued"

    def job_starts():  # the directory appears whole (renamed into place): the test is about waiting, not tearing
        time.sleep(0.3)
        make_run(tmp_path / "staging", steps=3, status="completed")
        os.rename(tmp_path / "staging", run)
    threading.Thread(target=job_starts, daemon=True).start()
    assert main(["watch", str(run), "--interval", "0.05"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines()[0] == f"watch: waiting for {run} to be created (the job's output_dir; Ctrl-C to stop)"
    assert out.startswith("demo: completed | step 3/100")


def test_a_directory_that_is_no_run_is_refused_an_empty_one_is_awaited(tmp_path, capsys):
    from telemetry.__main__ import main

    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("not a run")
    assert main(["watch", str(other), "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: watch: '{other}' is not a run directory (no run.json, metrics.jsonl")
    starting = tmp_path / "starting"
    (starting / "logs").mkdir(parents=True)  # a run that has made its logs/ and nothing else yet
    assert main(["watch", str(starting), "--once"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["watch", str(empty), "--once"]) == 0


@pytest.mark.parametrize("content,expected", [
    (b'{"status": "comp', "not valid JSON ("),
    (b"[1, 2]", "holds a JSON list; allowed: the JSON object a run writes"),
    (b"\xff\xfe", "not UTF-8 text (byte 0xff at offset 0); allowed: the JSON object a run writes"),
    # shaped wrong inside: an AttributeError traceback from the view
    (b'{"telemetry": {"counters": "x"}}', "'telemetry.counters' is a JSON string; allowed: an object (or null)"),
    (b'{"hosts": ["a", 1]}', "'hosts[0]' is \"a\"; allowed: an object per rank"),
    (b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply to read"),
])
def test_a_damaged_run_json_is_one_error_line_not_a_run_starting(content, expected, tmp_path, capsys):
    """run.json is written atomically (telemetry/rundir.py), so a damaged one is damage: watch says so and exits 2
    instead of showing the run as `starting` forever."""
    from telemetry.__main__ import main

    (tmp_path / "run.json").write_bytes(content)
    assert main(["watch", str(tmp_path), "--once"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: watch: {tmp_path / 'run.json'}: ") and expected in err[0]


def test_damaged_metrics_lines_are_left_out_as_the_report_leaves_them(tmp_path):
    """A line the run could not have written (ranks a string: an AttributeError in the straggler detector; no
    step; a deep nest: a RecursionError) is skipped; the steps around it are shown."""
    make_run(tmp_path, 5, status="completed")
    with open(tmp_path / "metrics.jsonl", "a") as m:
        m.write('{"step": 6, "ranks": "x"}\n{"loss": 1.0}\n{"step": 7, "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with open(tmp_path / "ranks" / "rank00000.telemetry.jsonl", "a") as f:
        f.write('{"step": 6, "step_time_s": "slow"}\n')
    out = io.StringIO()
    assert watch(str(tmp_path), once=True, out=out) == 0
    assert out.getvalue().startswith("demo: completed | step 5/100")


def test_once_on_a_directory_the_run_has_not_written_yet(tmp_path):
    """Round 5 of the lab: watch on a sweep's directory while its lab came up showed a training view, `step - |
    n/a | eta n/a | loss n/a`, and `straggler: not checked (... one rank, or telemetry.cross_rank_every: 0)`,
    a reason that was not true of the job; before run.json there is nothing of the job to show."""
    out = io.StringIO()
    assert watch(str(tmp_path), once=True, out=out) == 0
    assert out.getvalue() == (f"{tmp_path.name}: starting | no run.json yet: the job has not started writing here (a "
                              "lab brings up its nodes and torchrun its ranks first)\n")


def test_a_collective_sweep_is_not_shown_as_steps_of_the_recipes_max_steps(tmp_path):
    """A lab sweep showed `step -/100`: the recipe's default max_steps, for a workload that has no steps."""
    (tmp_path / "run.json").write_text(json.dumps({"name": "collectives", "status": "running",
                                                   "recipe": {"workload": "collectives", "max_steps": 100}}))
    state = RunWatch(str(tmp_path))
    state.poll()
    s = state.snapshot()
    assert s["sweep"] and s["max_steps"] is None
    lines = plain_lines(s)
    assert lines[0].startswith("collectives: running | a collective sweep: 0 sizes measured") and "/100" not in lines[0]
    assert "/100" not in str(rich_view(s))


def test_a_resume_rewriting_metrics_is_read_as_the_new_file_not_added_twice(tmp_path):
    # a resume moves metrics.jsonl aside and writes the steps up to its checkpoint into a new one (telemetry/rundir.py
    # open_metrics): watch read the new file whole and added its lines to what it had, so the loss events of the kept
    # steps counted twice and the newest step read 12 after 20
    make_run(tmp_path, 20, loss_events=1.0)
    state = RunWatch(str(tmp_path))
    state.poll()
    assert plain_lines(state.snapshot())[5] == "  counters: LOSS: 20 drop/discard/error events in 20 steps"
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics.jsonl").replace(tmp_path / "logs" / "metrics.before-resume-1.jsonl")
    kept = (tmp_path / "logs" / "metrics.before-resume-1.jsonl").read_text().splitlines()[:12]
    (tmp_path / "metrics.jsonl").write_text("".join(x + "\n" for x in kept))
    assert state.poll()
    s = state.snapshot()
    assert s["step"] == 12 and plain_lines(s)[5] == "  counters: LOSS: 12 drop/discard/error events in 12 steps"


def test_a_lab_runs_shaped_queues_are_shown_beside_the_interface_counters(tmp_path):
    """Round 6 of the lab: watch read `counters: clean (run.json)` on a 3-node 10mbit lab run whose queues had
    dropped 271 packets at start-up (lab.json): the interface counters never see the tbf's drops."""
    make_run(tmp_path, 5)
    info = json.loads((tmp_path / "run.json").read_text())
    info["fabric"] = {"lab": {"rate": "10mbit", "rate_bps": 1e7, "nodes": 3}}
    (tmp_path / "run.json").write_text(json.dumps(info))
    state = RunWatch(str(tmp_path))
    state.poll()
    assert state.snapshot()["counters"] == ("clean: 0 loss events in 5 steps; lab links 10mbit: queue drops are read "
                                            "as the lab tears down (lab.json)")
    (tmp_path / "lab.json").write_text(json.dumps({"tbf_drops": 271, "tbf_drops_after_first_step": 0}))
    info["status"] = "completed"
    (tmp_path / "run.json").write_text(json.dumps(info))
    state.poll()
    assert state.snapshot()["counters"].endswith("; lab links 10mbit: queues dropped 271 packets at start-up, none "
                                                 "during the steps (lab.json)")
    info["fabric"]["lab"] = {"rate": "none", "rate_bps": None}  # unshaped: no queue to tell of
    (tmp_path / "run.json").write_text(json.dumps(info))
    state.poll()
    assert "lab links" not in state.snapshot()["counters"]


def test_unknown_values_say_n_a_with_their_reason_and_unit(tmp_path):
    """A CPU run (the tiny recipe under torchrun) records gpu_power_w null with gpu_energy_reason: watch showed
    a bare `GPU power n/a` on every line; before the first step the header read `| n/a | eta n/a | loss n/a |
    n/a |` (no unit saying which n/a is which) and a 2-rank run was `not checked (no cross-rank step times
    (one rank, or telemetry.cross_rank_every: 0))`, a reason that is not the run's."""
    (tmp_path / "ranks").mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"name": "cpu", "status": "running", "recipe": {"max_steps": 30},
                                                   "hosts": [{"hostname": "a"}, {"hostname": "a"}]}))
    state = RunWatch(str(tmp_path))
    state.poll()
    head, *rest = plain_lines(state.snapshot())
    assert head == "cpu: running | step -/30 | s/step n/a | eta n/a | loss n/a | tok/s n/a | GPU power n/a", head
    assert "  straggler: not checked (no steps recorded yet)" in rest
    reason = "no GPU is used by this rank"
    with open(tmp_path / "metrics.jsonl", "w") as m:
        m.write(json.dumps({"step": 1, "loss": 5.0, "step_time_s": 0.5, "tokens_per_s": 2000.0, "time": 1000.0,
                            "job_gpu_power_w": None, "gpu_power_w": None, "gpu_energy_reason": reason}) + "\n")
    for rank in range(2):
        with open(tmp_path / "ranks" / f"rank{rank:05d}.telemetry.jsonl", "w") as f:
            f.write(json.dumps({"step": 1, "step_time_s": 0.5, "comm_time_s": 0.1, "gpu_power_w": None,
                                "gpu_energy_reason": reason}) + "\n")
    state.poll()
    s = state.snapshot()
    lines = plain_lines(s)
    assert lines[0].endswith(f"| GPU power n/a ({reason})"), lines[0]
    assert lines[1] == "  rank 0: step 1 | step time 0.500 s | comm 20.0% | GPU n/a", lines[1]  # the reason: above
    assert f"GPU power n/a ({reason})" in "".join(seg.text for seg in _render(rich_view(s)))


def _render(renderable):
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200)
    return list(console.render(renderable))
