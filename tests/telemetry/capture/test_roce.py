"""RoCE's GID index and type and the traffic class: sysfs as the kernel lays it out (a tree built here),
NCCL's queue-pair lines from public logs (tests/telemetry/nccl_tuning/README.md), the Fabrics table row."""
from __future__ import annotations

import shutil
from pathlib import Path

from telemetry.analysis.roce_summary import gid_indices_from_log, roce_fact
from telemetry.analysis.runs import load_run
from telemetry.capture import roce

from ..recorded import write_run

LOGS = Path(__file__).parent.parent / "nccl_tuning"


def sysfs(tmp_path) -> Path:
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    for i, (gid, kind) in enumerate([("fe80:0000:0000:0000:0a6a:c0ff:fe64:1000", "IB/RoCE v1"),
                                     ("fe80:0000:0000:0000:0a6a:c0ff:fe64:1000", "RoCE v2"),
                                     ("0000:0000:0000:0000:0000:ffff:c0a8:6410", "IB/RoCE v1"),
                                     ("0000:0000:0000:0000:0000:ffff:c0a8:6410", "RoCE v2"),
                                     ("0000:0000:0000:0000:0000:0000:0000:0000", None)]):
        (port / "gids").mkdir(parents=True, exist_ok=True)
        (port / "gids" / str(i)).write_text(gid + "\n")
        if kind:
            (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
            (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
    tc = tmp_path / "class" / "infiniband" / "mlx5_0" / "tc" / "1"
    tc.mkdir(parents=True)
    tc.joinpath("traffic_class").write_text("Global tclass=106\n")
    return tmp_path


def test_gid_table_and_traffic_class_from_sysfs(tmp_path):
    root = str(sysfs(tmp_path))
    table = roce.gid_table(root, "mlx5_0", 1)
    assert [(g["index"], g["type"]) for g in table] == [(0, "IB/RoCE v1"), (1, "RoCE v2"), (2, "IB/RoCE v1"),
                                                        (3, "RoCE v2")]  # the zero GID 4 is unused
    assert roce.traffic_class(root, "mlx5_0", 1) == 106 and roce.traffic_class(root, "mlx5_1", 1) is None
    hcas = [{"device": "mlx5_0", "port": 1, "link_layer": "Ethernet"}, {"device": "mlx5_1", "port": 1,
                                                                         "link_layer": "InfiniBand"}]
    assert list(roce.describe(root, hcas)) == ["mlx5_0:1"]
    assert roce.describe(root, hcas[1:]) is None


def test_gid_index_from_ncclss_queue_pair_lines():
    assert gid_indices_from_log((LOGS / "roce_gid_qp_lines.log").read_text().splitlines()) == {3, 1}


def test_fabric_row(tmp_path):
    root = str(sysfs(tmp_path / "sys"))
    fab = {"roce": roce.describe(root, [{"device": "mlx5_0", "port": 1, "link_layer": "Ethernet"}])}
    run = write_run(tmp_path / "run", transport="roce", fabric_extra=fab)
    (run / "logs").mkdir()
    lines = (LOGS / "roce_gid_qp_lines.log").read_text().splitlines()[:1]
    (run / "logs" / "nccl.a.1.log").write_text("\n".join(lines) + "\n")
    assert roce_fact(load_run(str(run))) == ("GID 3 (NCCL's log; RoCE v2); traffic class 106 (the port's global "
                                             "setting, sysfs; NCCL_IB_TC unset)")
    env = write_run(tmp_path / "env", transport="roce", fabric_extra={
        **fab, "environment": {"NCCL_IB_GID_INDEX": "1", "NCCL_IB_TC": "41"}})
    assert roce_fact(load_run(str(env))) == "GID 1 (NCCL_IB_GID_INDEX; RoCE v2); traffic class 41 (NCCL_IB_TC)"
    assert roce_fact(load_run(str(write_run(tmp_path / "tcp")))) == "n/a (no RoCE port recorded)"
    shutil.rmtree(run / "logs")
    assert roce_fact(load_run(str(run))).startswith("GID unknown (not in NCCL's log")
