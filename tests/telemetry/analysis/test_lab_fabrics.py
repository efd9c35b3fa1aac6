"""What a lab run's fabric was, beyond its rate: its node layout and a slow node.

Found in the lab (2026-11-29): a 2-node run at 100mbit with node 1's egress at 2mbit stepped exactly as a
run at 2mbit everywhere (0.686 s), yet `telemetry project` took it as measured at 100mbit: it predicted
1.35 s at 2mbit and called the communication negligible; `compare` labelled it `100mbit lab`, a repeat of a
healthy run. A 2 x 2 and a 4 x 1 run at one rate were both `5mbit lab`: "every run is on one fabric".
"""
from __future__ import annotations

import pytest

from telemetry.analysis.compare_inputs import label
from telemetry.analysis.fabric_summary import lab_slowest_link, line_rate_bps
from telemetry.analysis.projection import measured_profile, project
from telemetry.analysis.report import write_report
from telemetry.analysis.runs import load_run

from ..recorded import write_run


def lab(rate="100mbit", rate_bps=1e8, nodes=2, **slow) -> dict:
    return {"rate": rate, "rate_bps": rate_bps, "burst_bytes": 16384, "mtu": 1500, "nodes": nodes,
            "slow_node": None, "slow_rate": None, "slow_rate_bps": None, **slow}


SLOW = {"slow_node": 1, "slow_rate": "2mbit", "slow_rate_bps": 2e6}


def lab_run(tmp_path, name, links, world=2):
    hosts = [{"hostname": f"lab-node{i * links['nodes'] // world}"} for i in range(world)]
    return load_run(str(write_run(tmp_path / name, fabric_extra={"lab": links},
                                  info_extra={"hosts": hosts, "layout": {"world_size": world, "dp": world, "tp": 1,
                                                                         "pp": 1, "global_batch_size": 8}})))


def test_the_slowest_link_is_the_rate_the_collectives_waited_on():
    assert lab_slowest_link(lab())[:2] == (1e8, 16384)
    bps, burst, why = lab_slowest_link(lab(**SLOW))
    assert (bps, burst) == (2e6, 16384) and why.startswith("node 1's egress at 2mbit (--slow-node)")
    # an unshaped lab with one slow node: that node's egress is the only shaped link
    assert lab_slowest_link(lab("none", None, **SLOW))[0] == 2e6
    # and says the others are unshaped (before: "the slowest link (none elsewhere)", a 3-node --rate none lab at MTU
    # 9000 with node 1 at 10mbit, bench/results/lab_configs.md fourth round)
    assert lab_slowest_link(lab("none", None, **SLOW))[2].endswith("the slowest link (unshaped elsewhere)")
    assert lab_slowest_link(lab(**SLOW))[2].endswith("the slowest link (100mbit elsewhere)")
    assert lab_slowest_link(lab("none", None))[0] is None


def test_a_slow_node_run_is_projected_from_its_slow_link(tmp_path):
    slow = measured_profile(lab_run(tmp_path, "slow", lab(**SLOW)))
    uniform = measured_profile(lab_run(tmp_path, "uniform", lab("2mbit", 2e6)))
    assert slow["link_bps"] == 2e6 and "node 1's egress at 2mbit" in slow["link_note"]
    assert uniform["link_note"] is None
    for target in (2e6, 1e8):  # the same figures as from a run at that rate on every link
        assert project(slow, target)["step_time_s"] == pytest.approx(project(uniform, target)["step_time_s"])
    assert line_rate_bps(lab_run(tmp_path, "slow2", lab(**SLOW)))[0] == 2e6


def test_labels_tell_layouts_and_slow_nodes_apart(tmp_path):
    assert label(lab_run(tmp_path, "a", lab())) == "100mbit lab"  # the lab's default 2 x 1
    assert label(lab_run(tmp_path, "b", lab(nodes=4), world=4)) == "100mbit lab 4x1"
    assert label(lab_run(tmp_path, "c", lab(), world=4)) == "100mbit lab 2x2"
    assert label(lab_run(tmp_path, "d", lab(**SLOW))) == "100mbit lab, node 1 at 2mbit"
    assert label(lab_run(tmp_path, "e", lab("none", None, nodes=3), world=3)) == "unshaped lab 3x1"


def test_the_report_of_a_lab_run_names_its_links_and_their_queue_drops(tmp_path):
    """The report said nothing of the lab: not its rate or slow node, not the 887 packets its queues dropped
    (the counters table read 'clean: no drops', from interfaces that never see a tbf drop)."""
    lab_run(tmp_path, "r", {**lab(**SLOW), "topology": "veth pair"})
    (run_dir := tmp_path / "r").joinpath("lab.json").write_text('{"tbf_drops": 887, "tbf_drops_after_first_step": 0}')
    write_report(str(run_dir))
    md = (run_dir / "report" / "report.md").read_text()
    assert ("| lab links | 100mbit, node 1's egress 2mbit; 2 nodes, veth pair, MTU 1500; queues dropped 887 packets "
            "at start-up, none during the steps (lab.json) |") in md


def test_a_comparison_projects_onto_the_runs_own_ranks_per_node_or_says_why_not(tmp_path):
    """A 2 x 2 baseline against a 4 x 1 run: the projection went onto 4 nodes x 2 = 8 ranks, not the run's 4,
    and was flagged PROJECTION MISSED (+16.9%). A run measured on several nodes keeps its ranks per node."""
    from telemetry.analysis.compare import compare
    lab_run(tmp_path, "two", lab("5mbit", 5e6), world=4)
    lab_run(tmp_path, "four", lab("5mbit", 5e6, nodes=4), world=4)
    result = compare([str(tmp_path / "two"), str(tmp_path / "four")], str(tmp_path / "cmp"), allow_mismatch=True)
    assert result["labels"] == ["5mbit lab 2x2", "5mbit lab 4x1"]
    assert ("no projection onto 5mbit lab 4x1: its 1 rank(s) per node: the run was measured on 2 nodes of 2 rank(s)"
            in " ".join(result["warnings"]))
    assert not [w for w in result["warnings"] if w.startswith("PROJECTION MISSED")]


def test_bytes_without_a_time_stay_off_the_target_link_as_their_time_stays_in_the_step(tmp_path):
    """A tp 2 x pp 2 lab run on 2 x 2 at 50mbit: gloo's send/recv between the pipeline stages (1 MB a step) have
    no time, which is inside the measured step. Their bytes went on the link all the same: projected onto its
    own link the run was predicted at 0.865 s against 0.512 s measured, while the projection said it left
    them out."""
    untimed = {"send": {"count": 4, "bytes": 524288, "time_s": None, "untimed": 4, "untimed_bytes": 524288,
                        "busbw_GBps": None, "untimed_reason": "this backend's work has no future to time it"}}
    with_p2p = measured_profile(load_run(str(write_run(tmp_path / "p", rate_bps=5e7, extra_comm=untimed))))
    without = measured_profile(load_run(str(write_run(tmp_path / "w", rate_bps=5e7))))
    assert with_p2p["partial"] and with_p2p["ops"]["send"]["bytes"] == 0
    for target in (5e7, 5e6):
        assert project(with_p2p, target)["step_time_s"] == pytest.approx(project(without, target)["step_time_s"])


def test_untimed_bytes_of_a_group_inside_one_node_still_go_on_a_link_a_target_gives_it(tmp_path):
    """Inside the node measured they crossed no link (tp's DTensor all-reduces on gloo have no time): onto more
    nodes their bytes are what the new link carries, so only a group that crossed the measured link drops them."""
    import json

    def run(name, scope, hosts):
        path = write_run(tmp_path / name, info_extra={"hosts": [{"hostname": h} for h in hosts]})
        lines = (path / "metrics.jsonl").read_text().splitlines()
        out = []
        for line in lines[:-1]:  # the last one is cut mid-line on purpose
            rec = json.loads(line)
            rec["comm_groups"] = {"dp": {"dim": "dp", "size": 2, "scope": scope, "ranks": [0, 1], "by_op": {
                "all_reduce": {"count": 1, "bytes": 1_000_000, "time_s": 0.25, "untimed": 1,
                               "untimed_bytes": 600_000}}}}
            out.append(json.dumps(rec))
        (path / "metrics.jsonl").write_text("\n".join(out) + "\n")
        return measured_profile(load_run(str(path)))

    assert run("one", "intra", ["a", "a"])["groups"]["dp"]["ops"]["all_reduce"]["bytes"] == 1_000_000
    assert run("two", "inter", ["a", "b"])["groups"]["dp"]["ops"]["all_reduce"]["bytes"] == 400_000


def test_the_lab_burst_rule_is_the_one_the_lab_shapes_with():
    from launch.lab import burst_bytes
    from telemetry.analysis.fabric_summary import lab_burst_bytes

    for rate in (8, 100, 476, 1e6, 2e6, 100e6, 1e9, 10e9, 80e9):
        for mtu in (576, 1500, 9000, 65535):
            assert lab_burst_bytes(rate, mtu) == burst_bytes(rate, mtu)


def test_labels_and_the_report_tell_frame_sizes_and_given_buckets_apart(tmp_path):
    """Round 8 of the lab: a 10mbit run with a one-frame queue (`--burst 1514 --limit 1514`: 10,345 drops, 2-34% of
    the rate) was labelled `10mbit lab` like one on the lab's own queue, and so was one at MTU 9000: `telemetry
    compare` took them as repeats of one fabric; the report's link row did not say the queue was set by hand."""
    given = {**lab("10mbit", 1e7), "burst_bytes": 1514, "queue_bytes": 1514, "burst_given": True, "limit_given": True}
    assert label(lab_run(tmp_path, "a", given)) == "10mbit lab, burst 1514 B, queue 1514 B"
    assert label(lab_run(tmp_path, "b", {**lab("10mbit", 1e7), "mtu": 9000})) == "10mbit lab, MTU 9000"
    assert label(lab_run(tmp_path, "c", {**lab("10mbit", 1e7), "queue_bytes": 262144})) == "10mbit lab"
    lab_run(tmp_path, "r", {**given, "topology": "veth pair"})
    (run_dir := tmp_path / "r").joinpath("lab.json").write_text('{"tbf_drops": 10345}')
    write_report(str(run_dir))
    md = (run_dir / "report" / "report.md").read_text()
    assert ("| lab links | 10mbit; 2 nodes, veth pair, MTU 1500; tbf burst 1,514 B, queue 1,514 B (--burst, --limit); "
            "queues dropped 10,345 packets: TCP retransmitted them (lab.json) |") in md


def test_a_bucket_given_to_the_slow_link_alone(tmp_path):
    """review58: `--rate none --slow-node 1 --slow-rate 10mbit --burst 64k --limit 1m` shapes one link, the slow
    node's: lab.json's burst_bytes and queue_bytes (the --rate links') are null with burst_given/limit_given true,
    and the report's link row raised TypeError (None formatted with ','); the label did not name the bucket."""
    from launch.lab import Lab
    links = Lab(2, "none", slow_node=1, slow_rate="10mbit", burst="64k", limit="1m").describe()
    assert links["slow_queue_bytes"] == 2 ** 20 and links["queue_bytes"] is None
    assert label(lab_run(tmp_path, "a", links)).endswith(", burst 65536 B, queue 1048576 B")
    lab_run(tmp_path, "r", {**links, "topology": "veth pair"})
    (run_dir := tmp_path / "r").joinpath("lab.json").write_text('{"tbf_drops": 0}')
    write_report(str(run_dir))
    md = (run_dir / "report" / "report.md").read_text()
    assert "tbf burst 65,536 B, queue 1,048,576 B (--burst, --limit)" in md


def test_the_group_table_names_each_fabrics_group_size_and_a_slow_busbw_in_its_unit():
    """Round 8 of the lab: an evaluation of 1gbit (2 nodes), 20mbit (3 nodes) and 5mbit labs printed the dp row as
    `dp (inter-node (fabric), 2 ranks)` for all three and its busbw as `0.000655 GB/s` beside the per-collective
    table's `655 kB/s`."""
    from telemetry.analysis.training_comparison import group_tables
    from telemetry.rundir import StepKey

    def summary(size, gbps):
        return [{StepKey.COMM_GROUPS: {"dp": {"size": size, "scope": "inter", "bytes_per_step": 149544,
                                              "time_per_step_s": 0.228, "busbw_GBps": gbps, "partial": False}},
                 "fabric_share": None}]
    (_title, _head, rows), = group_tables([summary(2, 0.0145), summary(3, 0.000655)], ["gig", "slow"])
    assert rows[0][0] == "dp (inter-node (fabric), 2 / 3 ranks)"
    assert rows[0][1].endswith("/ 14.5 MB/s") and rows[0][2].endswith("/ 655 kB/s"), rows
