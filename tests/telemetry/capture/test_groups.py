"""Communication per process group and scope: identity, per-group summaries, report, exports, projection."""
from __future__ import annotations

import json

import pytest
import torch

from telemetry.capture import comm_groups, completion_hooks
from telemetry.capture.collectives import (CollectiveTracer, DIST_SPECS, group_identity, ranks_name, register_group,
                                   set_host_map)
from telemetry.analysis.projection import measured_profile, project
from telemetry.analysis.report import group_rows, summarize
from telemetry.analysis.runs import load_run

from ..recorded import write_run


class Group:
    """A process group as the tracer sees it: size, global ranks, and a description (DeviceMesh sets mesh_<dim>)."""

    def __init__(self, ranks, desc="undefined"):
        self.ranks, self.group_desc, self.group_name = list(ranks), desc, f"pg{id(self)}"

    def size(self):
        return len(self.ranks)


@pytest.fixture(autouse=True)
def hosts():
    set_host_map(["n0", "n0", "n1", "n1"])  # 2 nodes x 2 ranks
    yield
    set_host_map(None)


def test_a_group_is_named_by_its_mesh_dimension_and_scoped_by_its_ranks_hosts():
    tp, dp = Group([0, 1]), Group([0, 2])
    register_group(tp, "tp")
    register_group(dp, "dp")
    assert group_identity(tp) == {"name": "tp", "dim": "tp", "size": 2, "ranks": [0, 1], "scope": "intra", "hosts": 1}
    assert group_identity(dp)["scope"] == "inter" and group_identity(dp)["hosts"] == 2
    register_group(tp, "cp")  # the first name stays
    assert group_identity(tp)["name"] == "tp"
    # DeviceMesh's own description names the dimension where nobody registered it
    assert group_identity(Group([2, 3], desc="mesh_tp"))["name"] == "tp"
    # a framework's own group: a stable name from its ranks
    foreign = Group([1, 3])
    assert group_identity(foreign)["name"] == "g[1,3]" and group_identity(foreign)["dim"] is None
    assert ranks_name(list(range(0, 64, 8))) == "g[0,8,16,24,32,40,48,56]"
    assert ranks_name(list(range(0, 64, 2))) == "g[0..62/2]"
    assert ranks_name([0, 1, 5, 6, 7, 8, 9, 10, 11]) == "g[0,1,...,11](9)"


def test_without_a_host_map_the_scope_is_unknown_with_the_reason():
    set_host_map(None)
    ident = group_identity(Group([0, 1]))
    assert ident["scope"] is None and ident["scope_reason"] == comm_groups.NO_HOSTS


def test_the_step_breaks_down_by_group_with_each_groups_bus_factor(monkeypatch):
    tp, dp = Group([0, 1]), Group([0, 1, 2, 3])
    register_group(tp, "tp")
    register_group(dp, "dp")
    tracer = CollectiveTracer()
    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: "gloo")
    reduce = tracer._wrap_dist("all_reduce", lambda tensor, op=None, group=None, async_op=False: None,
                               DIST_SPECS["all_reduce"])
    tracer.begin_step()
    for _ in range(3):
        reduce(torch.ones(256), group=tp)  # 1 KiB each, inside a node
    reduce(torch.ones(1024), group=dp)  # 4 KiB across nodes
    step = tracer.end_step()
    groups = step.group_summary()
    assert set(groups) == {"tp", "dp"}
    assert (groups["tp"]["count"], groups["tp"]["bytes"], groups["tp"]["scope"]) == (3, 3072, "intra")
    assert (groups["dp"]["count"], groups["dp"]["bytes"], groups["dp"]["scope"]) == (1, 4096, "inter")
    dp_call = next(c for c in step.calls if c.group["name"] == "dp")
    # busbw with the group's own size: all_reduce over 4 ranks moves 2(4-1)/4 of S per link
    assert groups["dp"]["busbw_GBps"] == pytest.approx(4096 * 1.5 / dp_call.duration_s / 1e9)
    assert groups["dp"]["by_op"]["all_reduce"]["bytes"] == 4096
    # the per-type summary is unchanged by groups
    assert step.summary()["all_reduce"]["bytes"] == 3 * 1024 + 4096


def grouped_run(tmp_path, name="grouped", rate_bps=None, dp_time=0.2, tp_time=0.05):
    """A 2 nodes x 2 ranks run (tp inside a node, dp across) whose steps carry comm_groups."""
    path = write_run(tmp_path / name, name=name, rate_bps=rate_bps, comm_time=dp_time + tp_time,
                     exposed_time=dp_time + tp_time,
                     info_extra={"layout": {"world_size": 4, "dp": 2, "tp": 2, "pp": 1, "data_parallel": "replicate",
                                            "global_batch_size": 8},
                                 "hosts": [{"hostname": h} for h in ("n0", "n0", "n1", "n1")]})
    lines = (path / "metrics.jsonl").read_text().splitlines()
    out = []
    for line in lines[:-1]:
        rec = json.loads(line)
        groups = {"tp": {"dim": "tp", "size": 2, "scope": "intra", "bytes": 9_000_000, "count": 60, "time_s": tp_time,
                         "untimed": 0, "busbw_GBps": 0.18,
                         "by_op": {"all_reduce": {"count": 60, "bytes": 9_000_000, "time_s": tp_time, "untimed": 0}}},
                  "dp": {"dim": "dp", "size": 2, "scope": "inter", "bytes": 100_000, "count": 3, "time_s": dp_time,
                         "untimed": 0, "busbw_GBps": 0.0005,
                         "by_op": {"all_reduce": {"count": 3, "bytes": 100_000, "time_s": dp_time, "untimed": 0}}}}
        rec["comm"] = {"all_reduce": {"count": 63, "bytes": 9_100_000, "time_s": dp_time + tp_time, "untimed": 0,
                                      "busbw_GBps": 0.03}}
        rec["ranks"]["comm_time_s_by_op"] = {"all_reduce": {"min": dp_time + tp_time}}
        rec["comm_groups"] = groups
        out.append(json.dumps(rec))
    (path / "metrics.jsonl").write_text("\n".join(out) + "\n")
    return path


def test_report_shows_groups_and_the_fabric_share(tmp_path):
    s = summarize(load_run(str(grouped_run(tmp_path))))
    assert s["comm_groups"]["dp"]["scope"] == "inter" and s["comm_groups"]["tp"]["bytes_per_step"] == 9_000_000
    assert s["fabric_share"]["groups"] == ["dp"] and s["fabric_share"]["bytes_per_step"] == 100_000
    title, header, rows = group_rows(s)
    assert "scope" in header and rows[-1][0] == "fabric share (inter-node groups)"
    assert any(r[0] == "tp" and r[3] == "intra-node" for r in rows)


def test_a_run_recorded_before_groups_reads_as_before(tmp_path):
    run = load_run(str(write_run(tmp_path / "old")))
    s = summarize(run)
    assert s["comm_groups"] == {} and s["fabric_share"] is None and group_rows(s) is None
    prof = measured_profile(run, s)
    assert prof["groups"] == {}
    p = project(prof, 8e6, efficiency=1.0)
    # every byte on the target link with the world's bus factor: 1 MB x 2(2-1)/2 at 1 MB/s
    assert p["by_op"]["all_reduce"]["wire_s"] == pytest.approx(1.0) and p["by_group"] == {}


def test_projection_moves_only_the_inter_node_groups_onto_the_target_link(tmp_path):
    run = load_run(str(grouped_run(tmp_path)))
    prof = measured_profile(run)
    assert set(prof["groups"]) == {"dp", "tp"}
    assert prof["groups"]["dp"]["ops"]["all_reduce"]["time_s"] == pytest.approx(0.2)
    p = project(prof, 8e6, efficiency=1.0)  # 1 MB/s
    dp, tp = p["by_group"]["dp"], p["by_group"]["tp"]
    # dp: 100 kB x 2(2-1)/2 = 100 kB at 1 MB/s, at least the unshaped run's 0.2 s
    assert dp["on_target_link"] and dp["wire_s"] == pytest.approx(0.1) and dp["predicted_s"] == pytest.approx(0.2)
    # tp's 9 MB stay inside the node, as measured (the old model put them on the link: 9 s)
    assert not tp["on_target_link"] and tp["predicted_s"] == pytest.approx(0.05) and tp["wire_s"] == 0.0
    assert p["wire_s"] == pytest.approx(0.1)
    slow = project(prof, 0.8e6, efficiency=1.0)  # 10x slower: only dp changes
    assert slow["by_group"]["dp"]["predicted_s"] == pytest.approx(1.0)
    assert slow["by_group"]["tp"]["predicted_s"] == pytest.approx(0.05)
    # intra-node links given their own rate: 9 MB x 1 at 8 Mbit/s = 9 s
    intra = project(prof, 8e6, efficiency=1.0, intra_bps=8e6)
    assert intra["by_group"]["tp"]["predicted_s"] == pytest.approx(9.0)
    # on twice the nodes the dp group doubles (bus factor 2(4-1)/4), tp keeps its size
    more = project(prof, 8e6, efficiency=1.0, nodes=4)
    assert more["by_group"]["dp"]["size_new"] == 4 and more["by_group"]["tp"]["size_new"] == 2
    assert more["by_group"]["dp"]["wire_s"] == pytest.approx(0.15)


def test_the_dp_groups_of_a_node_share_its_link(tmp_path):
    """tp 2 x dp 2 on 2 nodes: the two dp groups ({0,2} and {1,3}) all-reduce at the same point of the step
    and both cross each node's link. With one link per node (the lab) the link carries both: twice one
    group's wire bytes; with a link per rank (a NIC per GPU) each carries one, as before."""
    from telemetry.analysis.projection import sharing

    run = load_run(str(grouped_run(tmp_path)))
    prof = measured_profile(run)
    assert prof["links_per_node"] is None  # not a lab run, no RDMA port list: unknown, no sharing assumed
    one_link = project({**prof, "links_per_node": 1}, 8e6, efficiency=1.0)
    assert one_link["by_group"]["dp"]["link_sharing"] == 2.0
    assert one_link["by_group"]["dp"]["wire_s"] == pytest.approx(0.2)  # 2 x 100 kB at 1 MB/s
    assert one_link["by_group"]["tp"]["wire_s"] == 0.0  # inside the node: not on the link at all
    per_rank = project({**prof, "links_per_node": 2}, 8e6, efficiency=1.0)
    assert per_rank["by_group"]["dp"]["link_sharing"] == 1.0 and per_rank["by_group"]["dp"]["wire_s"] == pytest.approx(0.1)
    # on 4 nodes (world 8, dp 4): still world / size = 2 dp groups per node's link
    more = project({**prof, "links_per_node": 1}, 8e6, efficiency=1.0, nodes=4)
    assert more["by_group"]["dp"]["wire_s"] == pytest.approx(2 * 0.15)
    assert sharing(64, 64, 1) == 1.0 and sharing(64, 8, 8) == 1.0 and sharing(64, 8, 4) == 2.0


def test_parquet_has_one_row_per_rank_step_group_and_collective(tmp_path):
    pytest.importorskip("pyarrow")
    from telemetry.analysis.exports.parquet import group_rows as parquet_group_rows
    path = grouped_run(tmp_path)
    (path / "ranks").mkdir()
    lines = (path / "metrics.jsonl").read_text().splitlines()
    (path / "ranks" / "rank00000.telemetry.jsonl").write_text("\n".join(lines) + "\n")
    rows = parquet_group_rows(load_run(str(path)))
    assert len(rows) == 2 * 6 and {r["group"] for r in rows} == {"tp", "dp"}
    dp = next(r for r in rows if r["group"] == "dp")
    assert (dp["scope"], dp["group_size"], dp["op"], dp["bytes"]) == ("inter", 2, "all_reduce", 100_000)


def test_compare_shows_groups_and_says_so_for_older_runs(tmp_path):
    from telemetry.analysis.compare import group_tables
    new, old = summarize(load_run(str(grouped_run(tmp_path)))), summarize(load_run(str(write_run(tmp_path / "old"))))
    [(title, header, rows)] = group_tables([[new], [old]], ["new", "old"])
    assert header == ["group", "new", "old"]
    dp = next(r for r in rows if r[0].startswith("dp"))
    assert dp[0] == "dp (inter-node (fabric), 2 ranks)" and dp[2] == "n/a (not recorded)"
    assert rows[-1][0] == "fabric share (inter-node groups)" and rows[-1][2] == "n/a (no groups recorded)"
    assert group_tables([[old]], ["old"]) == []


def test_held_metrics_lines_are_written_in_order_once_released(tmp_path):
    from trainer.run_writer import RunDir

    rundir = RunDir(str(tmp_path / "run"), 0)
    rundir.create()
    rundir.open_metrics(0)
    first, second = {"step": 1, "_held": True}, {"step": 2, "_held": True}
    rundir.write_metrics(first)
    rundir.write_metrics(second)
    lines = lambda: [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert lines() == []  # step 1 waits for its reports, and step 2 behind it
    del first["_held"]
    first["comm_bytes"] = 10  # completed in place by telemetry
    rundir.write_metrics({"step": 3})
    assert lines() == [{"step": 1, "comm_bytes": 10}]
    rundir.close()  # a run ending with a step still held: written as it is, without the mark
    assert lines() == [{"step": 1, "comm_bytes": 10}, {"step": 2}, {"step": 3}]


def test_tensorboard_and_wandb_scalars_per_group_and_the_fabric_share(tmp_path):
    from telemetry.analysis.exports import step_scalars
    rec = json.loads((grouped_run(tmp_path) / "metrics.jsonl").read_text().splitlines()[2])
    s = step_scalars(rec)
    assert s["comm_group/dp/bytes"] == 100_000 and s["comm_group/tp/count"] == 60
    assert s["comm/fabric_bytes"] == 100_000 and s["comm/fabric_time_s"] == pytest.approx(0.2)
    old = json.loads((write_run(tmp_path / "old") / "metrics.jsonl").read_text().splitlines()[2])
    assert not any(k.startswith("comm_group/") or k.startswith("comm/fabric") for k in step_scalars(old))


def test_project_names_the_group_size_it_projects_onto(tmp_path, capsys):
    from telemetry.__main__ import main
    run = str(grouped_run(tmp_path))
    assert main(["project", run, "--rate", "10mbit", "--nodes", "2", "--nodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "group dp (inter-node, 2 ranks): " in out  # as measured
    assert "group dp (inter-node, 2 ranks measured, 4 projected): " in out  # the group grows with the nodes
    assert "group tp (intra-node, 2 ranks): " in out and "group tp (intra-node, 2 ranks measured" not in out


class _NoWeakref:
    __slots__ = ()  # like a C++ process group binding without weak-reference support


def test_a_per_group_value_is_weak_where_it_can_be_and_kept_by_id_where_not():
    import gc

    cache = comm_groups.PerGroup()
    weakable, strong = torch.nn.Module(), _NoWeakref()
    for pg, value in ((weakable, "dp"), (strong, "tp")):
        cache.setdefault(pg, value)
        cache.setdefault(pg, "later")  # the first name stays
        assert cache.get(pg) == value
    cache.set(strong, "pp")
    assert cache.get(strong) == "pp" and cache.get(_NoWeakref()) is None
    del weakable
    gc.collect()
    assert len(cache._weak) == 0  # the entry went with its group
    cache.pop(strong)
    assert cache.get(strong) is None
    cache.set(strong, "x")
    cache.clear()
    assert cache.get(strong) is None
