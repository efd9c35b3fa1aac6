"""The training comparison's tables with repeats (review56: the communication-per-group table showed each
fabric's first run alone, 0.00458 s for a fabric whose three runs' all_reduce, the group's only collective,
read 0.0119 s as their mean in the table above it)."""
from __future__ import annotations

from telemetry.analysis.training_comparison import group_tables


def _summary(time_s, bytes_=1000, busbw=0.5, scope="inter"):
    g = {"dim": "dp", "size": 2, "scope": scope, "bytes_per_step": bytes_, "time_per_step_s": time_s,
         "busbw_GBps": busbw, "partial": False}
    share = {"groups": ["dp"] if scope == "inter" else [], "bytes_per_step": bytes_ if scope == "inter" else 0,
             "bytes_share": 1.0 if scope == "inter" else 0.0, "time_per_step_s": time_s if scope == "inter" else None}
    return {"comm_groups": {"dp": g}, "fabric_share": share}


def test_group_cells_are_the_mean_over_the_repeats():
    run_sums = [[_summary(0.1), _summary(0.2), _summary(0.6)], [_summary(1.0)]]
    (title, header, rows), = group_tables(run_sums, ["a", "b"])
    assert header == ["group", "a", "b"]
    dp = rows[0]
    assert dp[1].startswith("1 kB / 0.3 s / 500 MB/s") and "n=3" in dp[1], dp
    assert dp[2] == "1 kB / 1 s / 500 MB/s", dp  # one run: its values, no n
    assert "0.3 s" in rows[1][1] and "n=3" in rows[1][1], rows[1]
    assert "repeats: their mean" in title


def test_a_fabric_without_inter_node_groups_says_so_in_its_share():
    (_, _, rows), = group_tables([[_summary(0.1, scope="intra")] * 2], ["a"])
    assert rows[-1][1] == "none: every group stayed inside one node (0 B a step on the fabric)", rows[-1]


def test_the_projection_table_states_what_it_assumed(tmp_path):
    """The link efficiency, the tc bucket and the interval's sources beside the numbers (review56: the table gave
    a predicted time and its interval with none of them; `telemetry project` prints them)."""
    from telemetry.analysis.compare import compare

    from ..recorded import write_run
    a = write_run(tmp_path / "a", rate_bps=100e6, step_time=1.0, comm_time=0.1)
    b = write_run(tmp_path / "b", rate_bps=10e6, step_time=1.8, comm_time=0.9)
    compare([f"fast={a}", f"slow={b}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| error | in interval | assumed |" in md
    row = next(line for line in md.splitlines() if line.startswith("| slow | 1.77 s |"))
    assert "link efficiency 0.94" in row and "tc bucket 0 B" in row, row
    assert "interval: compute's 10th-90th percentile, wire at 85-100%" in md


def test_the_per_collective_table_says_its_cells_are_means_of_repeats():
    from telemetry.analysis.line_rate import LineRate
    from telemetry.analysis.training_comparison import comm_table, group_summary
    one = {"comm": {"all_reduce": {"time_per_step_s": 0.1, "busbw_GBps": 0.02, "bytes_per_step": 1000}},
           "energy": {}, "exposed_comm": {}}
    two = {**one, "comm": {"all_reduce": {"time_per_step_s": 0.3, "busbw_GBps": 0.04, "bytes_per_step": 1000}}}
    sums = [group_summary([one, two]), group_summary([one])]
    _, _, rows = comm_table(["a", "b"], sums, ["all_reduce"], [LineRate(None, 1, "unknown")] * 2)
    assert rows[0][1] == "0.2 s / 30 MB/s (mean, n=2)", rows
    assert rows[0][2] == "0.1 s / 20 MB/s", rows
