"""NIC and RDMA counters on a fake sysfs tree and on the real /sys/class/net."""
from __future__ import annotations

import socket

from telemetry.capture.counters import CounterReader, list_hcas, list_interfaces, loss_verdict


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
