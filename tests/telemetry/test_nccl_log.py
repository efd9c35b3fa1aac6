"""The NCCL log parser on lines in NCCL's own formats (REFERENCE.md section 4)."""
from __future__ import annotations

from telemetry.nccl_log import parse_dir, parse_lines

ROCE_GDR = """\
gpu-node-01:12345:12345 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-node-01:12345:12345 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)
gpu-node-01:12345:12345 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
gpu-node-01:12345:12345 [0] NCCL INFO Using network IB
gpu-node-01:12345:12400 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-node-01:12345:12400 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
gpu-node-01:12345:12400 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
gpu-node-01:12345:12400 [0] NCCL INFO Channel 01/0 : 15[7] -> 0[0] [receive] via NET/IB/1/GDRDMA
"""

IB_NO_GDR = """\
n1:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.2
n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ib0:192.168.1.5<0>
n1:1:1 [0] NCCL INFO Using network IB
n1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
n1:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
"""

SOCKET_FALLBACK = """\
n1:7:7 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
n1:7:7 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
n1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>
n1:7:7 [0] NCCL INFO Using network Socket
n1:7:9 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0
n1:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
"""

SINGLE_NODE = """\
h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
h:1:1 [0] NCCL INFO NET/IB : No device found.
h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>
h:1:1 [0] NCCL INFO Using network Socket
h:1:3 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer
"""

PLUGIN = """\
n:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v8)
n:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB bond0:10.1.0.1<0>
n:1:1 [0] NCCL INFO Using network IBext_v8
n:1:2 [0] NCCL INFO Channel 02/0 : 3[3] -> 4[0] [send] via NET/IBext_v8/0/GDRDMA
"""


def test_roce_with_gpudirect_rdma():
    out = parse_lines(ROCE_GDR.splitlines())
    assert out["transport"] == "roce" and out["network"] == "IB" and out["nccl_version"] == "2.21.5"
    assert [d["device"] for d in out["ib_devices"]] == ["mlx5_0", "mlx5_1"]
    assert out["ib_devices"][0]["link_layer"] == "RoCE" and out["oob_interface"] == "eth0:10.0.0.1<0>"
    assert out["gpudirect_rdma"] is True and out["gdr_by_hca"] == {"mlx5_0": True}
    assert out["channels"] == {"P2P": 1, "NET/IB": 2}


def test_infiniband_without_gdr_and_shm_inside_the_node():
    out = parse_lines(IB_NO_GDR.splitlines())
    assert out["transport"] == "infiniband" and out["gpudirect_rdma"] is False
    assert out["channels"] == {"NET/IB": 1, "SHM": 1}


def test_silent_fallback_to_tcp_sockets():
    out = parse_lines(SOCKET_FALLBACK.splitlines())
    assert out["transport"] == "tcp" and out["network"] == "Socket"
    assert [d["interface"] for d in out["socket_devices"]] == ["eth0", "eth1"]
    assert out["gpudirect_rdma"] is False


def test_single_node_uses_only_p2p():
    out = parse_lines(SINGLE_NODE.splitlines())
    assert out["transport"] == "intra-node" and out["ib_absent"] is True
    assert out["channels"] == {"P2P": 2} and out["gpudirect_rdma"] is None


def test_net_plugin_counts_as_rdma():
    out = parse_lines(PLUGIN.splitlines())
    assert out["transport"] == "roce" and out["network"] == "IBext_v8"
    assert out["net_plugin"].startswith("Loaded net plugin") and out["gpudirect_rdma"] is True


def test_unknown_when_nothing_was_logged(tmp_path):
    assert parse_lines(["some unrelated line"])["transport"] is None
    assert parse_dir(str(tmp_path)) is None
    (tmp_path / "nccl.h.1.log").write_text(ROCE_GDR)
    (tmp_path / "nccl.h.2.log").write_text(SOCKET_FALLBACK)
    mixed = parse_dir(str(tmp_path))
    assert mixed["log_files"] == 2 and mixed["channels"]["NET/Socket"] == 2
