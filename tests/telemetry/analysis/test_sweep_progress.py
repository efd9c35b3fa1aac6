"""A collective sweep's progress from its text table (telemetry/analysis/sweep_progress.py), as `telemetry watch`
shows it: sizes done per test against the planned count, the last size's bus bandwidth, a test done only with
its footer, a torn last line waiting, and the tests not started yet."""
from __future__ import annotations

import json

from telemetry.analysis.sweep_progress import SweepProgress, human_bytes, lines, planned_sizes
from telemetry.analysis.watch import RunWatch, plain_lines

HEAD = """# fabric-harness collective sweep: 2 ranks on 1 host(s), float32, 8 to 64 bytes x2, warm-up 1, iters 5, time avg
#
# Collective test starting: all_reduce_perf
# fabric-harness test: all_reduce
# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
"""
ROWS = ["           8             2     float     sum      -1      N/A     N/A     N/A     N/A   142.01    0.00    0.00       0",
        "          16             4     float     sum      -1      N/A     N/A     N/A     N/A   519.78    0.00    0.00       0",
        "          32             8     float     sum      -1      N/A     N/A     N/A     N/A   112.07    0.29    0.29       0",
        "          64            16     float     sum      -1      N/A     N/A     N/A     N/A   180.74    0.35    0.35       0"]
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.16\n#\n# Collective test concluded: all_reduce_perf\n"


def sweep_dir(tmp_path, text: str, status: str = "running"):
    (tmp_path / "run.json").write_text(json.dumps({
        "name": "collectives", "status": status,
        "recipe": {"workload": "collectives", "max_steps": 100,
                   "sweep": {"ops": ["all_reduce", "all_gather", "p2p_matrix"]}}}))
    (tmp_path / "collectives.txt").write_text(text)
    return tmp_path


def test_planned_sizes_follow_the_sweeps_own_rule():
    assert planned_sizes(8, 64, 2) == 4 and planned_sizes(8, 100, 4) == 2 and planned_sizes(8, 67108864, 2) == 24
    assert planned_sizes(0, 8, 2) is None and planned_sizes(8, 4, 2) is None and planned_sizes(8, 64, 1) is None
    assert human_bytes(8) == "8 B" and human_bytes(1 << 20) == "1 MiB" and human_bytes(None) == "n/a"


def test_a_test_in_progress_shows_its_sizes_and_last_bandwidth_and_waits_for_a_torn_line(tmp_path):
    run = sweep_dir(tmp_path, HEAD + "\n".join(ROWS[:3]) + "\n" + ROWS[3][:30])  # the 4th row is being written
    p = SweepProgress(str(run))
    assert p.poll() and not p.poll()  # read again only when the file changed
    t = p.snapshot()["tests"][0]
    assert (t["op"], t["sizes_done"], t["sizes_planned"], t["last_size"], t["done"]) == ("all_reduce", 3, 4, 32, False)
    assert (t["last_busbw_GBps"], t["last_block"]) == (0.29, "in-place")  # all_reduce has no out-of-place block
    out = lines(p.snapshot(), ["all_reduce", "all_gather"])
    assert out == ["  all_reduce: 3/4 sizes, last 32 B: busbw 0.29 GB/s (in-place)", "  not started: all_gather"]


def test_a_test_is_done_only_with_its_footer(tmp_path):
    run = sweep_dir(tmp_path, HEAD + "\n".join(ROWS) + "\n")
    p = SweepProgress(str(run))
    p.poll()
    assert not p.snapshot()["tests"][0]["done"]  # every size, but no footer yet: the average is not nccl-tests'
    with open(run / "collectives.txt", "a") as f:
        f.write(FOOTER)
    assert p.poll()
    assert lines(p.snapshot(), ["all_reduce"]) == ["  all_reduce: 4/4 sizes, done: avg bus bandwidth 0.16 GB/s"]


def test_watch_shows_a_running_sweeps_sizes_not_steps(tmp_path):
    run = sweep_dir(tmp_path, HEAD + "\n".join(ROWS[:2]) + "\n")
    state = RunWatch(str(run))
    assert state.poll()
    s = state.snapshot()
    assert s["sweep"] and s["max_steps"] is None and s["sweep_ops"] == ["all_reduce", "all_gather"]
    text = plain_lines(s)
    assert text[0].startswith("collectives: running | a collective sweep: 2 sizes measured in 1 tests")
    assert text[1:3] == ["  all_reduce: 2/4 sizes, last 16 B: busbw 0 GB/s (in-place)", "  not started: all_gather"]
    assert "/100" not in "\n".join(text)


def test_a_sweep_without_its_table_yet_says_so(tmp_path):
    run = sweep_dir(tmp_path, "")
    (run / "collectives.txt").unlink()
    state = RunWatch(str(run))
    state.poll()
    assert "  no size measured yet (the table is written as each size is measured)" in plain_lines(state.snapshot())


def test_a_sweep_that_stopped_before_a_row_is_not_said_to_measure_one_yet(tmp_path):
    run = sweep_dir(tmp_path, HEAD, status="failed")
    state = RunWatch(str(run))
    state.poll()
    assert plain_lines(state.snapshot())[1] == "  all_reduce: 0/4 sizes: none measured before the sweep stopped"
    (run / "collectives.txt").write_text("")
    state = RunWatch(str(run))
    state.poll()
    assert plain_lines(state.snapshot())[1] == "  no size measured: the table (collectives.txt) holds no complete row"


def test_a_test_the_sweep_skipped_is_not_waiting_to_start(tmp_path):
    """A sweep of one rank skips sendrecv and says so in its table: watch listed it as 'not started' to the end."""
    skipped = "# fabric-harness: all_gather skipped: it needs at least 2 ranks (this world has 1)\n"
    run = sweep_dir(tmp_path, HEAD.replace("#\n# Collective test starting", skipped + "#\n# Collective test starting", 1)
                    + "\n".join(ROWS) + "\n" + FOOTER, status="finished")
    p = SweepProgress(str(run))
    p.poll()
    out = lines(p.snapshot(), ["all_reduce", "all_gather"])
    assert "  not started: all_gather" not in out
    assert out[-1] == "  skipped: all_gather (it needs at least 2 ranks (this world has 1))"


def test_a_table_that_is_not_a_regular_file_is_not_opened_and_odd_recipes_are_not_guessed(tmp_path):
    """collectives.txt as a FIFO: the view's open waited for a writer forever; a /dev/zero link was read as text.
    run.json's recipe.sweep as a word, or its ops as a number, were an AttributeError / TypeError traceback."""
    import os

    run = sweep_dir(tmp_path, "")
    (run / "collectives.txt").unlink()
    os.mkfifo(run / "collectives.txt")
    p = SweepProgress(str(run))
    assert p.poll() and not p.poll()
    assert lines(p.snapshot(), ["all_reduce"]) == [
        "  the sweep's table cannot be read: collectives.txt is a FIFO (named pipe), not a regular file (the sweep "
        "writes it as a file)"]
    for sweep in ("all_reduce", {"ops": 5}, {"ops": ["all_reduce", None, 3]}):
        info = json.loads((run / "run.json").read_text())
        info["recipe"]["sweep"] = sweep
        (run / "run.json").write_text(json.dumps(info))
        state = RunWatch(str(run))
        state.poll()
        s = state.snapshot()
        assert s["sweep_ops"] == (["all_reduce"] if isinstance(sweep, dict) and sweep["ops"] != 5 else None)
        assert plain_lines(s)[0].startswith("collectives: running | a collective sweep: 0 sizes")
