"""NIC and RDMA counters on a fake sysfs tree and on the real /sys/class/net."""
from __future__ import annotations

import os
import socket

import pytest

from telemetry.capture import counters
from telemetry.capture.counters import CounterReader, SysfsFiles, list_hcas, list_interfaces, loss_verdict, on_sysfs


def write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def fake_sysfs(root, tx=1000, words=100, oos=0, drops=0):
    net = root / "class" / "net" / "eth0"
    write(net / "speed", 100000)
    write(net / "operstate", "up")
    write(net / "mtu", 9000)
    for k in ("tx_bytes", "rx_bytes"):
        write(net / "statistics" / k, tx)
    for k in ("tx_dropped", "rx_dropped", "tx_errors", "rx_errors", "tx_packets", "rx_packets"):
        write(net / "statistics" / k, drops if "dropped" in k else 0)
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    write(port / "link_layer", "Ethernet")
    write(port / "rate", "400 Gb/sec (4X NDR)")
    write(port / "state", "4: ACTIVE")
    write(port / "counters" / "port_xmit_data", words)
    write(port / "counters" / "port_rcv_data", words)
    write(port / "counters" / "port_xmit_discards", 0)
    write(port / "hw_counters" / "out_of_sequence", oos)
    write(port / "hw_counters" / "np_cnp_sent", 3)
    return root


def test_inventory_of_interfaces_and_hcas(tmp_path):
    fake_sysfs(tmp_path)
    assert list_interfaces(str(tmp_path)) == [{"name": "eth0", "operstate": "up", "mtu": 9000, "speed_mbps": 100000}]
    assert list_hcas(str(tmp_path)) == [{"device": "mlx5_0", "port": 1, "link_layer": "Ethernet",
                                         "rate": "400 Gb/sec (4X NDR)", "state": "4: ACTIVE"}]


def test_deltas_convert_rdma_words_to_bytes_and_reordering_is_not_loss(tmp_path):
    fake_sysfs(tmp_path)
    reader = CounterReader(root=str(tmp_path))
    fake_sysfs(tmp_path, tx=1500, words=350, oos=2)
    step = reader.delta()
    assert step["net:eth0"]["tx_bytes"] == 500
    assert step["rdma:mlx5_0/1"]["port_xmit_bytes"] == 250 * 4 and "port_xmit_data" not in step["rdma:mlx5_0/1"]
    assert step["rdma:mlx5_0/1"]["out_of_sequence"] == 2 and step["rdma:mlx5_0/1"]["np_cnp_sent"] == 0
    verdict = loss_verdict([step])
    # out_of_sequence is reordering (adaptive routing, packet spraying), counted apart from loss
    assert verdict["verdict"] == "clean" and verdict["counts"] == {}
    assert verdict["reordering"] == {"rdma:mlx5_0/1:out_of_sequence": 2} and "out of sequence" in verdict["reason"]
    fake_sysfs(tmp_path, tx=1500, words=350, oos=2, drops=3)
    lossy = loss_verdict([reader.delta()])
    assert lossy["verdict"] == "loss" and lossy["counts"] == {"net:eth0:tx_dropped": 3, "net:eth0:rx_dropped": 3}
    quiet = reader.delta()
    assert quiet["net:eth0"]["tx_bytes"] == 0
    assert loss_verdict([quiet])["verdict"] == "clean"


def test_no_counters_is_unknown_not_clean(tmp_path):
    reader = CounterReader(root=str(tmp_path))
    assert reader.delta() == {}
    assert loss_verdict([reader.delta()])["verdict"] is None


def test_real_loopback_counts_traffic_we_send():
    reader = CounterReader(interfaces=["lo"])
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    conn, _ = server.accept()
    client.sendall(b"x" * 100_000)
    got = 0
    while got < 100_000:
        got += len(conn.recv(65536))
    for s in (client, conn, server):
        s.close()
    assert reader.delta()["net:lo"]["tx_bytes"] >= 100_000


def test_kept_descriptors_only_on_a_real_sysfs(tmp_path):
    """A fake tree of plain files may be rewritten by replacing them: it is read by path every time."""
    fake_sysfs(tmp_path)
    assert on_sysfs(str(tmp_path)) is False and CounterReader(root=str(tmp_path))._files is None
    if not on_sysfs("/sys"):
        pytest.skip("/sys is not a sysfs mount here")
    reader = CounterReader(interfaces=["lo"], root="/sys")
    assert reader._files is not None
    before = reader.read()["net:lo"]
    # traffic on loopback between the two reads: the kept descriptors see the kernel's new values
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(50):
        s.sendto(b"x" * 1000, ("127.0.0.1", 9))
    s.close()
    after = reader.read()["net:lo"]
    assert after["tx_bytes"] - before["tx_bytes"] >= 50 * 1000
    with open("/sys/class/net/lo/statistics/tx_bytes", encoding="ascii") as f:
        assert int(f.read()) >= after["tx_bytes"]  # read by path afterwards: never behind the kept descriptor
    reader.close()
    assert reader._files._fds == {}


def test_a_descriptor_that_fails_is_reopened(tmp_path, monkeypatch):
    """A fake os.pread that fails once, as a read on a removed device's attribute does (ENODEV)."""
    path = tmp_path / "tx_bytes"
    path.write_text("7\n")
    files = SysfsFiles()
    assert files.read_int(str(path)) == 7
    real = os.pread
    failed = []

    def pread_fails_once(fd, n, offset):
        if not failed:
            failed.append(fd)
            raise OSError(19, "No such device")
        return real(fd, n, offset)
    monkeypatch.setattr(counters.os, "pread", pread_fails_once)
    assert files.read_int(str(path)) is None and files._fds == {}  # dropped, not read as 0
    path.write_text("9\n")
    assert files.read_int(str(path)) == 9  # opened afresh
    assert files.read_int(str(tmp_path / "missing")) is None
    files.close()
