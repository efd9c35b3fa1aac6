"""A collective sweep's progress from its text table (telemetry/analysis/sweep_progress.py), as `telemetry watch`
shows it: sizes done per test against the planned count, the last size's bus bandwidth, a test done only with
its footer, a torn last line waiting, and the tests not started yet."""
from __future__ import annotations


import json

from telemetry.analysis.sweep_progress import SweepProgress, lines
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
    # 16 B in 519.78 us prints 0.00 GB/s: the size over the time x 2(n-1)/n at 2 ranks (the sweep's first line)
    assert text[1:3] == ["  all_reduce: 2/4 sizes, last 16 B: busbw 30.8 kB/s (in-place)", "  not started: all_gather"]
    assert text[0].endswith("python -m telemetry report RUN once it is done")
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


def _table(tests: list[str], rows: int, last_rows: int | None = None) -> str:
    """A sweep's table: `tests` concluded in turn, the last with `last_rows` rows and no footer when given."""
    text = HEAD.split("\n", 1)[0] + "\n"
    section = HEAD.split("\n", 1)[1]
    for i, op in enumerate(tests):
        n = last_rows if last_rows is not None and i == len(tests) - 1 else rows
        body = "\n".join(ROWS[j % 4] for j in range(n)) + ("\n" if n else "")
        text += section.replace("all_reduce", op) + body
        if last_rows is None or i < len(tests) - 1:
            text += FOOTER.replace("all_reduce", op)
    return text


def test_a_long_sweep_is_not_parsed_again_from_its_start_at_every_read(tmp_path, monkeypatch):
    """watch reads the table every 2 s: a 4,096-size sweep's table is MBs, and parsing all of it at every read
    made watch's cost grow with the sweep (0.6 s a read at 4.4 MB). Concluded tests are read once; each read
    parses the test in progress only, and shows what a read of the whole table shows."""
    from telemetry.analysis import sweep_progress
    parsed: list[int] = []
    real = sweep_progress.nccl_tests.parse
    monkeypatch.setattr(sweep_progress.nccl_tests, "parse", lambda text, *a, **k: parsed.append(len(text)) or real(text))
    ops = ["all_reduce", "all_gather", "broadcast"]
    run = sweep_dir(tmp_path, _table(ops[:2], 40))
    p = SweepProgress(str(run))
    assert p.poll()
    first = sum(parsed)
    for n in range(1, 4):
        (run / "collectives.txt").write_text(_table(ops, 40, last_rows=n))
        parsed.clear()
        assert p.poll()
        assert sum(parsed) < first / 4  # the broadcast test's lines, not the two concluded tests again
        whole = SweepProgress(str(run))
        whole.poll()
        assert p.snapshot() == whole.snapshot()
    t = p.snapshot()["tests"]
    assert [(x["op"], x["sizes_done"], x["done"]) for x in t] == [("all_reduce", 40, True), ("all_gather", 40, True),
                                                                  ("broadcast", 3, False)]


def test_a_table_written_again_from_the_start_is_read_again(tmp_path):
    """A rerun into the directory truncates collectives.txt (or a copy replaces it): what was read is dropped."""
    run = sweep_dir(tmp_path, _table(["all_reduce", "all_gather"], 4))
    p = SweepProgress(str(run))
    p.poll()
    (run / "collectives.txt").write_text(_table(["all_reduce"], 4, last_rows=2))
    assert p.poll()
    assert [(x["op"], x["sizes_done"]) for x in p.snapshot()["tests"]] == [("all_reduce", 2)]
    replaced = tmp_path / "new.txt"
    replaced.write_text(_table(["broadcast"], 4, last_rows=1) + "\n" * 4000)
    replaced.replace(run / "collectives.txt")
    assert p.poll()
    assert [(x["op"], x["sizes_done"]) for x in p.snapshot()["tests"]] == [("broadcast", 1)]


def test_plain_watch_prints_a_test_concluding_and_the_latency_table_without_a_new_size(tmp_path, monkeypatch):
    """Into a pipe, watch printed a new view only on a new size or status: a test's footer, and the latency table
    after the last test (minutes at a slow link), stayed unseen until something else changed."""
    import io

    from telemetry.analysis import watch as watch_mod
    run = sweep_dir(tmp_path, HEAD + "\n".join(ROWS) + "\n")
    table = run / "collectives.txt"
    steps = [FOOTER, "#\n# fabric-harness latency (us): all_reduce_4B 80.50, sendrecv_48B 95.25\n"]

    def later(_):
        if steps:
            with open(table, "a") as f:
                f.write(steps.pop(0))
        else:
            (run / "run.json").write_text((run / "run.json").read_text().replace("running", "finished"))
    monkeypatch.setattr(watch_mod.time, "sleep", later)
    out = io.StringIO()
    assert watch_mod.watch(str(run), out=out) == 0
    text = out.getvalue()
    assert "  all_reduce: 4/4 sizes, done: avg bus bandwidth 0.16 GB/s" in text
    views = text.split("collectives: ")[1:]
    assert [v.split(" |")[0] for v in views] == ["running", "running", "running", "finished"]
    assert "latency: all_reduce_4B 80.50 us" in views[2]


def test_a_sweep_of_the_p2p_matrix_only_is_not_waiting_for_a_size(tmp_path):
    """sweep.ops=[p2p_matrix] writes no collective test: watch said 'no size measured yet' to the end."""
    run = sweep_dir(tmp_path, HEAD.split("\n", 1)[0] + "\n", status="completed")
    (run / "run.json").write_text((run / "run.json").read_text().replace(
        '["all_reduce", "all_gather", "p2p_matrix"]', '["p2p_matrix"]'))
    state = RunWatch(str(run))
    state.poll()
    text = plain_lines(state.snapshot())
    assert not any("no size measured yet" in line for line in text)
    assert ("  no collective test: sweep.ops holds p2p_matrix only (python -m telemetry p2p RUN shows it once "
            "the sweep is done)") in text


def test_the_pair_tests_the_hosts_have_are_listed_as_not_started(tmp_path):
    """With sweep.pairs, a sweep ends with a send/recv test per pair its hosts have: watch never listed them."""
    run = sweep_dir(tmp_path, HEAD + "\n".join(ROWS[:2]) + "\n")
    info = json.loads((run / "run.json").read_text())
    info["recipe"]["sweep"]["ops"] = ["all_reduce", "sendrecv"]
    # 3 ranks, two on node-a: both pair tests (the first two ranks of a host; the first ranks of two hosts)
    info["hosts"] = [{"rank": r, "hostname": h} for r, h in ((2, "node-b"), (0, "node-a"), (1, "node-a"))]
    (run / "run.json").write_text(json.dumps(info))
    state = RunWatch(str(run))
    state.poll()
    s = state.snapshot()
    assert s["sweep_ops"] == ["all_reduce", "sendrecv", "sendrecv_intra_node", "sendrecv_inter_node"]
    assert "  not started: sendrecv, sendrecv_intra_node, sendrecv_inter_node" in plain_lines(s)
    info["recipe"]["sweep"]["pairs"] = False  # or one host of one rank each: no pair test
    info["hosts"] = [{"rank": 0, "hostname": "a"}, {"rank": 1, "hostname": "b"}]
    (run / "run.json").write_text(json.dumps(info))
    state = RunWatch(str(run))
    state.poll()
    assert state.snapshot()["sweep_ops"] == ["all_reduce", "sendrecv"]
    info["recipe"]["sweep"]["pairs"] = True
    (run / "run.json").write_text(json.dumps(info))
    state = RunWatch(str(run))
    state.poll()
    assert state.snapshot()["sweep_ops"] == ["all_reduce", "sendrecv", "sendrecv_inter_node"]


def test_a_slow_links_bandwidth_is_not_shown_as_0_and_a_finished_sweep_is_not_waited_for(tmp_path):
    """Round 5 of the lab: a 3-node sweep at 5 Mbit/s read `busbw 0 GB/s` at every size in watch (the table prints
    two decimals of GB/s) and `avg bus bandwidth 0.000575137 GB/s`; the rows' times give the bandwidth, and a
    completed sweep's headline no longer says `once it is done`."""
    head = HEAD.replace("2 ranks on 1 host(s), float32, 8 to 64 bytes x2", "3 ranks on 3 host(s), float32, 16384 to "
                        "32768 bytes +16384").replace("all_reduce", "all_gather")
    rows = ["       16384          1365     float    none      -1  20522.0    0.00    0.00       0  20297.1    0.00    0.00       0",
            "       32760          2730     float    none      -1  38719.4    0.00    0.00       0  38697.9    0.00    0.00       0"]
    run = sweep_dir(tmp_path, head + rows[0] + "\n")
    p = SweepProgress(str(run))
    p.poll()
    t = p.snapshot()["tests"][0]
    assert t["sizes_planned"] == 2 and abs(t["last_busbw_GBps"] - 16384 / 0.0205220 * 2 / 3 / 1e9) < 1e-12
    assert lines(p.snapshot(), ["all_gather"]) == ["  all_gather: 1/2 sizes, last 16 KB: busbw 532 kB/s (out-of-place)"]
    footer = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.000568019\n#\n# Collective test concluded: all_gather_perf\n"
    sweep_dir(tmp_path, head + "\n".join(rows) + "\n" + footer, status="completed")
    state = RunWatch(str(run))
    state.poll()
    text = plain_lines(state.snapshot())
    assert text[0].endswith("the whole table: python -m telemetry report RUN"), text[0]
    assert text[1] == "  all_gather: 2/2 sizes, done: avg bus bandwidth 568 kB/s"
    # a row whose time is unknown stays unknown, never 0
    assert lines({"tests": [{**t, "last_busbw_GBps": None}]}, None)[0].endswith("busbw n/a")


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
