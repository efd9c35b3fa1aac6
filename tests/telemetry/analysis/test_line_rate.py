"""% of line rate on hosts with several NICs: against the NICs the job used on a host x their rates, with
what one NIC carries; an 8-NIC host no longer reads "677% of line rate"."""
from __future__ import annotations

import pytest

from telemetry.analysis.compare import CompareError, compare
from telemetry.analysis.line_rate import LineRate, job_line_rate, of_line_text, parse_given
from telemetry.analysis.runs import load_run

from ..recorded import sweep_result, write_run
from .test_compare import NCCL_TABLES

NDR = "400 Gb/sec (4X NDR)"


def eight_nic_fabric(rate=NDR):
    devices = [{"device": f"mlx5_{i}", "port": 1, "link_layer": "InfiniBand"} for i in range(8)]
    return {"nccl": {"devices": devices, "network": "IB", "transport": "ib"},
            "hcas": [{"device": f"mlx5_{i}", "port": 1, "rate": rate} for i in range(8)]}


def inventory(rate=NDR, nics=8):
    return {"nics": [{"interface": f"ib{i}", "rdma_device": f"mlx5_{i}", "rate": rate} for i in range(nics)]}


def test_eight_nics_of_400g_are_3_2_tbit_per_host(tmp_path):
    run = load_run(str(write_run(tmp_path / "r", transport="ib", fabric_extra=eight_nic_fabric(),
                                 info_extra={"inventory": {"a": inventory(), "b": inventory()}})))
    rate = job_line_rate(run)
    assert rate.nics == 8 and rate.nic_bps == 400e9 and rate.total_bps == 3.2e12
    assert "NCCL's device list; rates from the inventory" in rate.why
    # 338.6 GB/s busbw (an 8-GPU H100 host pair's all-reduce) against one NIC would be 677%
    assert of_line_text(338.6, LineRate(400e9, 1, "")) == "; 677.2% of line rate (ABOVE the line rate: check the rate)"
    assert of_line_text(338.6, rate) == "; 84.7% of line rate (8 NICs: 339 Gbit/s per NIC of 400)"


def test_a_host_with_fewer_nics_sets_the_rate_and_run_json_is_the_fallback(tmp_path):
    hosts = {"a": inventory(), "b": {"nics": inventory()["nics"][:7] + [
        {"interface": "ib7", "rdma_device": "mlx5_7", "rate": "200 Gb/sec (4X HDR)"}]}}
    run = load_run(str(write_run(tmp_path / "r", transport="ib", fabric_extra=eight_nic_fabric(),
                                 info_extra={"inventory": hosts})))
    rate = job_line_rate(run)
    assert rate.total_bps == 3.0e12 and rate.nic_bps is None and "hosts differ: b, the smallest" in rate.why
    run = load_run(str(write_run(tmp_path / "s", transport="ib", fabric_extra=eight_nic_fabric())))
    assert job_line_rate(run).total_bps == 3.2e12 and "run.json's HCA list" in job_line_rate(run).why
    run = load_run(str(write_run(tmp_path / "t", transport="ib", fabric_extra=eight_nic_fabric(rate=None))))
    assert job_line_rate(run).total_bps is None and "no rate recorded for mlx5_0:1" in job_line_rate(run).why


def test_given_rate_counts_nics():
    assert parse_given("8x400gbit", "--rate").total_bps == 3.2e12
    assert parse_given("400gbit", "--rate").nics == 1


def test_compare_shows_the_host_rate_and_per_nic_share(tmp_path):
    fab = eight_nic_fabric()
    inv = {"inventory": {"a": inventory(), "b": inventory()}}
    big = sweep_result(scale=1.0)
    for op in big["ops"].values():  # 300 GB/s at 1 MB: an 8-NIC host's busbw
        for row in op["rows"]:
            for b in (row["out_of_place"], row["in_place"]):
                if b and row["size"] == 1048576:
                    b["busbw_GBps"] = 300.0
    a = write_run(tmp_path / "ndr", transport="ib", sweep=big, fabric_extra=fab, info_extra=inv)
    b = write_run(tmp_path / "one", transport="tcp", sweep=sweep_result(scale=2.0), rate_bps=1e10)
    result = compare([f"ndr={a}", f"one={b}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("| line rate | 8 x 400 Gbit/s = 3.2 Tbit/s per host (400 GB/s; 8 NICs per host: NCCL's device list; "
            "rates from the inventory) | 10 Gbit/s (1.25 GB/s; lab rate 10000mbit) |") in md
    assert "| all_reduce: peak busbw | 300 GB/s at 1 MB: 75.0% of line rate (8 NICs: 300 Gbit/s per NIC of 400) |" in md
    assert result["line_rates_bps"]["ndr"] == 3.2e12 and result["line_rate_nics"] == {"ndr": 8, "one": 1}


def test_line_rate_option_takes_a_nic_count(tmp_path):
    a, b = NCCL_TABLES / "all_reduce_perf_h100_16ranks.txt", NCCL_TABLES / "all_reduce_perf_2.20_unalign_excerpt.txt"
    compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "cmp"), line_rate=["h100=8x400gbit"])
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| line rate | 8 x 400 Gbit/s = 3.2 Tbit/s per host (400 GB/s; --line-rate) |" in md
    with pytest.raises(CompareError, match="--line-rate h100: got 'fast'; expected a tc rate"):
        compare([f"h100={a}", f"gb10={b}"], str(tmp_path / "x"), line_rate=["h100=8xfast"])


def test_a_slow_nodes_lab_names_traffic_that_does_not_cross_its_slow_egress(tmp_path):
    # 3 lab nodes at 20mbit, node 2's egress at 2mbit, 2026-11-29 (bench/results/lab_configs.md, fourth round): the
    # sweep's broadcast from rank 0 reached 1.52 MB/s at 64 KB (43 ms, as on the healthy lab): 608% of the slow
    # rate. Before: "above the line rate: the links' tc burst of 16 KiB ..." (16 KiB cannot explain 6x at 64 KB)
    lab = {"rate": "20mbit", "rate_bps": 20e6, "burst_bytes": 16384, "mtu": 1500, "nodes": 3, "slow_node": 2,
           "slow_rate": "2mbit", "slow_rate_bps": 2e6, "slow_burst_bytes": 16384}
    run = load_run(str(write_run(tmp_path / "r", fabric_extra={"lab": lab, "gloo": {"interface": "fab0"}})))
    rate = job_line_rate(run)
    assert rate.total_bps == 2e6 and rate.slow_node == 2 and rate.other_bps == 20e6
    text = of_line_text(0.00152, rate, 65536)
    assert text.startswith("; 608.0% of line rate (above the slow link's rate: it is node 2's egress")
    assert "60.8% of the other links' 20 Mbit/s)" in text and "burst" not in text
    # round 5: node 0 slow on 4 nodes, send/recv at 64 KB read 232%: half the ring's ranks never wait on node 0's
    # egress and the time is their mean; the line names that too
    assert "a time averaged over the ranks (sweep.time_reduction avg) counts the ranks whose transfers avoid it" in text
    # a ring's all_reduce crosses it: 97.9% of the slow rate, nothing to say
    assert of_line_text(0.000245, rate, 65536) == "; 98.0% of line rate"
    # the other links unshaped (--rate none): said so
    unshaped = load_run(str(write_run(tmp_path / "u", fabric_extra={"lab": {**lab, "rate": "none", "rate_bps": None},
                                                                    "gloo": {"interface": "fab0"}})))
    assert "the other links are unshaped" in of_line_text(0.00152, job_line_rate(unshaped), 65536)
    # where the bucket explains it (all_gather, a ring through node 2, at 107% at 64 KB), the bucket is named
    assert "tc burst of 16 KiB passes" in of_line_text(0.000268, rate, 65536)
    # an average over sizes: both
    avg = of_line_text(0.00106, rate)
    assert "node 2's egress" in avg and "also passes at the host's speed" in avg


def test_gloo_reduce_scatter_is_named_where_its_busbw_reads_half_the_link():
    """Round 7 of the lab (3 nodes at 10mbit, every collective): reduce_scatter read 47% of the line rate beside
    all_reduce's 93% at the same sizes, with nothing said; gloo runs it as an all_reduce of the whole buffer (its
    fab0 counters: the same bytes a call as all_reduce), so the tables say so; NCCL's reduce_scatter is not."""
    from telemetry.analysis.line_rate import backend_note
    from telemetry.analysis.sweep_comparison import average_table, line_rate_table
    rate = LineRate(10e6, 1, "lab rate 10mbit")
    rows = [{"size": s, "count": s // 12, "in_place": None,
             "out_of_place": {"time_us": s / 0.589e-3, "algbw_GBps": 0.000883, "busbw_GBps": 0.000589, "wrong": 0}}
            for s in (32760, 65532)]
    sweep = {"world_size": 3, "backend": "gloo", "ops": {"reduce_scatter": {"rows": rows}}, "latency_us": {}}
    (_, _, avg_rows), _ = average_table(["reduce_scatter"], ["lab"], [[sweep]], [rate])
    assert "47.1% of line rate (gloo runs reduce_scatter as an all_reduce of the whole buffer" in avg_rows[0][2]
    _, _, peak_rows = line_rate_table(["reduce_scatter"], ["lab"], [sweep], [rate])
    assert "half the line rate is the most it can read" in peak_rows[1][1]
    nccl = {**sweep, "backend": "nccl"}
    (_, _, avg_rows), _ = average_table(["reduce_scatter"], ["lab"], [[nccl]], [rate])
    assert avg_rows[0][2].endswith("47.1% of line rate")
    assert backend_note("all_reduce", "gloo") == "" and backend_note("reduce_scatter", None) == ""


def test_latency_table_keeps_a_test_only_one_fabric_measured():
    """Lab round 7: `telemetry compare` of a lab sweep with an nccl-tests table (which prints no latency table)
    read '_none recorded_' beside the lab's own all_reduce 4 B latency; now its row with 'not measured'."""
    from telemetry.analysis.sweep_comparison import latency_table
    lab = {"latency_us": {"all_reduce_4B_us": 1694.7, "sendrecv_48B_us": 105.2}}
    table = {"latency_us": {}}
    _, header, rows = latency_table(["lab", "nccl-tests"], [lab, table])
    assert header == ["test", "lab", "nccl-tests"]
    assert rows == [["all_reduce_4B", "1,695", "not measured"], ["sendrecv_48B", "105", "not measured"]]
    _, _, rows = latency_table(["nccl-tests", "lab"], [table, lab])
    assert rows[0] == ["all_reduce_4B", "not measured", "1,695"]
    _, _, rows = latency_table(["a", "b"], [lab, {"latency_us": {"all_reduce_4B_us": 3389.4}}])
    assert rows[0] == ["all_reduce_4B", "1,695", "3,389 (+100%)"]


def test_training_comparison_names_gloo_reduce_scatter_too():
    """Lab round 7, dp 2 x tp 2 x pp 2 (fsdp) at 20mbit: reduce_scatter read 597 kB/s a step, 24% of the rate."""
    from telemetry.analysis.training_comparison import comm_table
    rate = LineRate(20e6, 1, "lab rate 20mbit")
    c = {"time_per_step_s": 0.395, "busbw_GBps": 0.000597, "partial": False}
    _, _, rows = comm_table(["a", "b"], [{"backend": "gloo", "comm": {"reduce_scatter": c}},
                                         {"backend": "nccl", "comm": {"reduce_scatter": c}}], ["reduce_scatter"],
                            [rate, rate])
    assert "23.9% of line rate (gloo runs reduce_scatter as an all_reduce" in rows[0][1]
    assert rows[0][2].endswith("23.9% of line rate")


def test_a_size_within_the_labs_burst_below_the_rate_is_named_as_the_hosts_speed():
    """Round 8 of the lab: 2 nodes at --rate 100gbit (burst 25 MB), all_reduce 4 MB in-place 976 MB/s read "7.8% of
    line rate" with nothing said, as if the link ran at a tenth of its rate: below the rate a bucket that holds the
    whole transfer never runs dry (it refills at the rate), so the tbf held no packet and the host set the time."""
    from telemetry.analysis.line_rate import burst_text
    rate = LineRate(100e9, 1, "lab rate 100gbit", burst_bytes=25_000_000)
    text = of_line_text(0.976, rate, 4 * 2 ** 20)
    assert text.startswith("; 7.8% of line rate (within the links' tc burst of 23.8 MiB, below the rate: the tbf "
                           "held no packet, so the host's own speed set this, not the shaped rate)")
    # above the burst, or at the rate, or an average over sizes (no size): nothing added
    assert of_line_text(0.976, rate, 64 * 2 ** 20) == "; 7.8% of line rate"
    assert of_line_text(0.976, rate) == "; 7.8% of line rate"
    assert of_line_text(0.000122, LineRate(1e6, 1, "lab rate 1mbit", burst_bytes=65549), 131072) == "; 97.6% of line rate"
    # a real NIC has no bucket
    assert of_line_text(0.976, LineRate(100e9, 1, "NIC"), 4 * 2 ** 20) == "; 7.8% of line rate"
    # the bucket of a 1mbit lab at MTU 65535 (65,549 B) was printed "64.0127 KiB"
    assert burst_text(65549) == "64 KiB" and burst_text(16384) == "16 KiB" and burst_text(25_000_000) == "23.8 MiB"


def test_gloo_broadcast_across_ranks_is_named_as_a_tree_of_whole_buffers():
    """Round 9 of the lab (6 nodes at 50mbit, every collective): broadcast read 36-56% of the line rate beside
    all_gather's 82-98%, with nothing said; gloo broadcasts along a binomial tree of whole buffers."""
    from telemetry.analysis.line_rate import backend_note
    from telemetry.analysis.sweep_comparison import average_table
    rate = LineRate(50e6, 1, "lab rate 50mbit")
    rows = [{"size": s, "count": s // 4, "out_of_place": None,
             "in_place": {"time_us": s / 2.25, "algbw_GBps": 0.00225, "busbw_GBps": 0.00225, "wrong": 0}}
            for s in (65536, 131072)]
    sweep = {"world_size": 6, "backend": "gloo", "ops": {"broadcast": {"rows": rows}}, "latency_us": {}}
    (_, _, avg_rows), _ = average_table(["broadcast"], ["lab"], [[sweep]], [rate])
    assert ("36.0% of line rate (gloo broadcasts along a binomial tree of whole buffers: on 6 ranks the root sends "
            "the buffer 3 times through its link") in avg_rows[0][2], avg_rows
    assert backend_note("broadcast", "gloo", 2) == "" and backend_note("broadcast", "nccl", 6) == ""
    assert backend_note("broadcast", "gloo") == ""  # the world size unknown: nothing claimed
