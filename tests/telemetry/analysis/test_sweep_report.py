"""`telemetry report` of a collective sweep shows the sweep (found in the lab, 2026-11-29: the report of a
3-node sweep at 1mbit was the training report, every row n/a, the tracer 'not recorded (a run from before the
tracer health)', five empty figures, and none of the sizes, bandwidths or latencies the sweep measured)."""
from __future__ import annotations

from telemetry.analysis.sweep_report import write_run_report as write_report

from ..recorded import sweep_result, write_run


def test_a_sweep_report_shows_sizes_bandwidths_line_rate_and_latency(tmp_path):
    lab = {"rate": "10gbit", "rate_bps": 1e10, "burst_bytes": 16384, "mtu": 1500, "nodes": 2, "topology": "veth pair"}
    run = write_run(tmp_path / "sweep", sweep=sweep_result(), fabric_extra={"lab": lab})
    result = write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert "| lab links | 10gbit; 2 nodes, veth pair, MTU 1500; queue drops not recorded (lab.json) |" in md
    assert "## all_reduce: time and bandwidth at every size" in md and "## sendrecv: time and bandwidth" in md
    # 1 MB in 1.0686 ms: 981 MB/s busbw, 78.5% of a 10 Gbit/s lab link
    assert "| 1 MB | in-place | 1.07 ms | 981 MB/s | 981 MB/s | 78.5% of line rate | 0 |" in md
    assert "all_reduce_4B | 40" in md and "line rate | 10 Gbit/s" in md
    assert "step time median" not in md and "a run from before" not in md
    assert result["figures"] == ["sweep_all_reduce.png", "sweep_sendrecv.png"]
    assert (run / "report" / "sweep_all_reduce.png").stat().st_size > 1000


def test_busbw_above_a_lab_rate_is_put_down_to_the_token_bucket_only_where_it_can_be(tmp_path):
    """A 16 KiB tc burst lets a small message through at the host's speed: 2 KB send/recv read 150% of a
    1mbit link in the lab. At 1 MB the bucket adds under 2%: far above the rate, the rate itself is wrong."""
    lab = {"rate": "10mbit", "rate_bps": 1e7, "burst_bytes": 16384, "mtu": 1500, "nodes": 2, "topology": "veth pair"}
    run = write_run(tmp_path / "sweep", sweep=sweep_result(), fabric_extra={"lab": lab})
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    small = next(line for line in md.splitlines() if line.startswith("| 8 B | in-place"))
    big = next(line for line in md.splitlines() if line.startswith("| 1 MB | in-place"))
    # below the rate and within the bucket: the tbf held nothing, the time is the host's (round 8 of the lab)
    assert "32.0% of line rate (within the links' tc burst of 16 KiB, below the rate: the tbf held no packet" in small
    assert "(ABOVE the line rate: check the rate)" in big
    from telemetry.analysis.line_rate import LineRate, of_line_text
    rate = LineRate(1e6, 1, "lab rate 1mbit", burst_bytes=16384)
    assert "tc burst of 16 KiB" in of_line_text(188e-6, rate, 2048)
    assert "check the rate" in of_line_text(188e-6, LineRate(1e6, 1, "interface speed"), 2048)


def test_a_sweep_cut_short_reports_the_sizes_its_table_holds(tmp_path):
    """A sweep that fails or is killed keeps collectives.txt (written as each size is measured) but writes no
    collectives.json: the report showed only 'the sweep did not finish'; now it shows what was measured."""
    from .test_sweep_progress import FOOTER, HEAD, ROWS
    import json
    run = tmp_path / "cut"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"name": "collectives", "status": "failed",
                                              "recipe": {"workload": "collectives"}}))
    second = HEAD.replace("all_reduce", "all_gather").replace("sum      -1", "none     -1")
    (run / "collectives.txt").write_text(HEAD + "\n".join(ROWS) + "\n" + FOOTER + second + ROWS[0].replace(
        "sum", "none") + "\n" + ROWS[1][:20])
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert ("| result | the sweep did not finish (run.json status failed): 5 sizes in 2 tests measured before it "
            "stopped, read from collectives.txt (no collectives.json) |") in md
    assert "| sizes | 8 B to 64 B, 5 timed iterations each after 1 warm-up |" in md
    assert "## all_reduce: time and bandwidth at every size" in md and "## all_gather: time and bandwidth" in md
    assert "| 32 B | in-place | 112 us |" in md
    # a sweep still running (or killed before it could say so: run.json still says running) has not stopped
    (run / "run.json").write_text((run / "run.json").read_text().replace("failed", "running"))
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert ("| result | the sweep has not finished (run.json status running: still running, or killed before it "
            "could say so): 5 sizes in 2 tests measured so far, read from collectives.txt (no collectives.json) |"
            ) in md
    (run / "collectives.txt").write_text(HEAD)  # started, nothing measured
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert "no collectives.json: the sweep did not finish, and its collectives.txt holds no measured size" in md
    import os
    (run / "collectives.txt").unlink()
    os.mkfifo(run / "collectives.txt")  # not opened (it would wait for a writer); it was said to hold no size
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert ("no collectives.json: the sweep did not finish, and its collectives.txt is a FIFO (named pipe), not a "
            "regular file (not read)") in md


def test_a_finished_sweep_of_the_p2p_matrix_only_is_not_called_unfinished(tmp_path):
    """sweep.ops=[p2p_matrix] (docs/nccl-tests.md) writes collectives.json with no collective test in ops: the
    report said 'no collectives.json: the sweep did not finish' of a finished run."""
    import json
    run = tmp_path / "p2p"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"name": "collectives", "status": "finished",
                                              "recipe": {"workload": "collectives", "sweep": {"ops": ["p2p_matrix"]}}}))
    (run / "collectives.json").write_text(json.dumps({
        "source": "fabric-harness", "world_size": 2, "ops": {}, "min_bytes": 8, "max_bytes": 1048576,
        "p2p_matrix": {"size": 1048576, "p2p_disabled": False, "bandwidth_GBps": [[None, 10.0], [10.0, None]],
                       "latency_us": [[None, 5.0], [5.0, None]]}}))
    (run / "collectives.txt").write_text("# fabric-harness collective sweep: 2 ranks on 1 host(s), float32, 8 to "
                                         "1048576 bytes x2, warm-up 5, iters 20, time avg\n")
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert "did not finish" not in md
    assert ("| result | collectives.json holds no collective test: this sweep measured the GPU pairs' p2p matrix "
            "only (python -m telemetry p2p RUN shows it) |") in md


def test_a_row_being_written_is_left_for_the_next_read(tmp_path):
    """A running sweep's last line may be half written: cut inside its last number ('#wrong' 12 read as 1) it
    parsed as a whole row with a wrong value. The sweep writes whole lines, so a line without its newline waits."""
    from .test_sweep_progress import HEAD, ROWS
    from telemetry.analysis import nccl_tests

    row = ROWS[1][:-1] + "12"  # 12 wrong elements, in the last column
    path = tmp_path / "collectives.txt"
    path.write_text(HEAD + ROWS[0] + "\n" + row[:-1])  # the writer has written all but the final "2\n"
    torn = nccl_tests.read(str(path))
    assert torn["ops"]["all_reduce"]["rows"][-1]["in_place"]["wrong"] == 1  # what a plain read makes of it
    waiting = nccl_tests.read(str(path), being_written=True)
    assert [r["size"] for r in waiting["ops"]["all_reduce"]["rows"]] == [8] and waiting["rows_skipped"] == 0


def test_a_slow_labs_sweep_cut_short_shows_its_bandwidth_not_0_percent(tmp_path):
    """Round 5: a 2-node sweep at 1mbit stopped by Ctrl-C after 4 sizes; its report read every row `0.00 GB/s
    (under 5 MB/s as printed)` and `0.0% of line rate` (the table's two decimals of GB/s), where 32 KB in 282 ms is
    116 kB/s, 93% of the link. A printed 0.00 that cannot be computed is an unknown share, never 0%."""
    import json

    from telemetry.analysis.line_rate import LineRate, of_line_text
    run = tmp_path / "cut"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"name": "collectives", "status": "interrupted", "recipe": {
        "workload": "collectives"}, "fabric": {"lab": {"rate": "1mbit", "rate_bps": 1e6, "burst_bytes": 16384,
                                                       "mtu": 1500, "nodes": 2, "topology": "veth pair"}}}))
    head = ("# fabric-harness collective sweep: 2 ranks on 2 host(s), float32, 4096 to 262144 bytes x2, warm-up 1, "
            "iters 2, time avg\n#\n# Collective test starting: all_reduce_perf\n# fabric-harness test: all_reduce\n"
            "# nThread 1 nGpus 1 minBytes 4096 maxBytes 262144 step: 2(factor) warmup iters: 1 iters: 2 agg iters: 1 "
            "validation: 1 graph: 0 unalign: 0\n#\n# Using devices\n"
            "#  Rank  0 Group  0 Pid  22621 on  lab-node0 device -1 [cpu] CPU x86_64\n"
            "#  Rank  1 Group  0 Pid  22623 on  lab-node1 device -1 [cpu] CPU x86_64\n#\n"
            "#                                                              out-of-place                       in-place\n"
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n")
    (run / "collectives.txt").write_text(head + "       32768          8192     float     sum      -1      N/A     N/A     "
                                         "N/A     N/A   282348    0.00    0.00       0\n")
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    # 32768 B / 0.282348 s = 116 kB/s, x 2(2-1)/2 = 1: 92.8% of 125 kB/s
    assert "| 32 KB | in-place | 282 ms | 116 kB/s | 116 kB/s | 92.8% of line rate | 0 |" in md, md
    assert "0.0% of line rate" not in md
    assert of_line_text(0.0, LineRate(1e6, 1, "lab rate 1mbit")) == (
        "; share of line rate unknown (0.00 GB/s as printed: under its two decimals)")


def test_two_runs_collectives_txt_are_labelled_by_their_directory(tmp_path):
    """Round 5: `telemetry compare A/collectives.txt B/collectives.txt` labelled them `collectives.txt #1` and
    `#2`; each is now named by its run directory."""
    from telemetry.analysis.compare_inputs import nccl_tests_run as as_run

    from .test_sweep_progress import FOOTER, HEAD, ROWS
    for name in ("sweep-1mbit", "sweep-5mbit"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "collectives.txt").write_text(HEAD + "\n".join(ROWS) + "\n" + FOOTER)
    assert as_run(str(tmp_path / "sweep-1mbit" / "collectives.txt")).name == "sweep-1mbit/collectives.txt"
    (tmp_path / "all_reduce_perf.txt").write_text(HEAD + "\n".join(ROWS) + "\n" + FOOTER)
    assert as_run(str(tmp_path / "all_reduce_perf.txt")).name == "all_reduce_perf.txt"  # any other file: its name


def test_a_damaged_collectives_json_is_one_line_and_damaged_size_lines_are_left_out(tmp_path):
    """A half-written collectives.json was a JSONDecodeError traceback, a FIFO in its place a report waiting
    forever; a binary line in sweep.jsonl was a UnicodeDecodeError traceback in compare's power and congestion
    tables, a list where a size's record goes an AttributeError."""
    import json
    import os

    import pytest

    from telemetry.analysis.congestion_summary import sweep_totals
    from telemetry.analysis.power_table import readings
    from telemetry.analysis.runs import RunError

    run = write_run(tmp_path / "sweep", sweep=sweep_result())
    (run / "collectives.json").write_text('{"ops": {"all_reduce": ')
    with pytest.raises(RunError) as exc:
        write_report(str(run))
    assert str(exc.value).startswith(f"{run / 'collectives.json'}: not valid JSON (Expecting value")
    assert str(exc.value).endswith("; allowed: the JSON object the sweep writes at its end (a sweep cut short has "
                                   "none: remove the file and its collectives.txt is read)")
    (run / "collectives.json").unlink()
    os.mkfifo(run / "collectives.json")
    with pytest.raises(RunError, match="collectives.json: is a FIFO \\(named pipe\\), not a regular file; allowed"):
        write_report(str(run))
    good = {"op": "all_reduce", "size": 8, "gpu_power_w_sum": 300.0, "loss_events": 2, "ranks": [{"counters": {}}]}
    (run / "sweep.jsonl").write_bytes(b"\xff\xfe\x00\n[1, 2]\n" + json.dumps({"op": 5, "size": "x"}).encode()
                                      + b"\n" + json.dumps(good).encode() + b"\n")
    assert list(sweep_totals(str(run))) == [("all_reduce", 8)]
    assert [r["gpu_w_per_server"] for r in readings(str(run)).values()] == [150.0]  # 300 W over its 2 hosts


def test_all_to_all_with_several_ranks_a_node_names_its_ceiling():
    """Lab round 7: 3 nodes x 2 ranks at 10mbit, all_to_all read 65.2% of the rate at 128 KB beside all_gather's
    99.9%, with nothing said: each node's link carries 2 x 4/6 of the size where busbw counts 5/6."""
    from telemetry.analysis.sweep_report import ceiling_note
    note = ceiling_note("all_to_all", 6, 3)
    assert note.startswith(" (2 ranks a node: each node's link carries 2 x 4/6 of the size where busbw counts 5/6")
    assert "reads 62.5% here" in note
    assert ceiling_note("all_to_all", 3, 3) == ""  # one rank a node: busbw is the link
    assert ceiling_note("all_gather", 6, 3) == "" and ceiling_note("all_to_all", 6, 0) == ""
    assert "reads 23.4% here" in ceiling_note("all_to_all", 16, 2)  # 2 nodes x 8 ranks: 15 / (8 x 8)
