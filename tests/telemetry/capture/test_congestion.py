"""Congestion counters by meaning: a fake sysfs tree with the mlx5 and bnxt_re hw_counters names from the
kernel drivers (drivers/infiniband/hw/{mlx5/counters.c,bnxt_re/hw_counters.c}), and ethtool -S text in
the drivers' own format (mlx5 en_stats.c, bnxt_en bnxt_ethtool.c)."""
from __future__ import annotations

import os

from telemetry.capture import congestion as cg
from telemetry.capture.counters import CounterReader, loss_verdict, merge_verdicts

from .test_counters import write

# ethtool -S prints 'NIC statistics:' and one indented 'name: value' per line; mlx5 en_stats.c names
# the storm warning counter with a trailing space ("tx_pause_storm_warning_events ")
MLX5_ETHTOOL = """NIC statistics:
     rx_packets: 1000
     rx_prio3_pause: {p}
     rx_prio3_pause_duration: {d}
     tx_prio3_pause: 7
     tx_prio3_pause_duration: 90
     rx_prio3_pause_transition: 4
     rx_global_pause: 0
     rx_discards_phy: {drop}
     tx_pause_storm_warning_events : 0
     tx_pause_storm_error_events: 0
"""
BNXT_ETHTOOL = """NIC statistics:
     rx_pfc_ena_frames_pri3: {p}
     tx_pfc_ena_frames_pri3: 2
     pfc_pri3_rx_duration_us: {d}
     pfc_pri3_rx_transitions: 1
"""


def bnxt_port(root, seq_naks=0, ecn=0, cnp_rx=0):
    port = root / "class" / "infiniband" / "bnxt_re0" / "ports" / "1"
    write(port / "link_layer", "Ethernet")
    write(port / "rate", "200 Gb/sec (2X HDR)")
    write(port / "state", "4: ACTIVE")
    write(port / "hw_counters" / "seq_err_naks_rcvd", seq_naks)
    write(port / "hw_counters" / "to_retransmits", 0)
    write(port / "hw_counters" / "rx_ecn_marked_pkts", ecn)
    write(port / "hw_counters" / "rx_cnp_pkts", cnp_rx)
    write(port / "hw_counters" / "tx_cnp_pkts", 0)
    write(port / "hw_counters" / "lifespan", 10)  # not a counter: never read


def mlx5_port(root, oos=0, ecn=0, cnp_sent=0, handled=0):
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    write(port / "link_layer", "Ethernet")
    write(port / "rate", "400 Gb/sec (4X NDR)")
    write(port / "state", "4: ACTIVE")
    for name, v in (("out_of_sequence", oos), ("np_ecn_marked_roce_packets", ecn), ("np_cnp_sent", cnp_sent),
                    ("rp_cnp_handled", handled), ("rp_cnp_ignored", 0), ("packet_seq_err", 0),
                    ("local_ack_timeout_err", 0)):
        write(port / "hw_counters" / name, v)
    (root / "class" / "infiniband" / "mlx5_0" / "device" / "net" / "eth2").mkdir(parents=True, exist_ok=True)


def test_classification_by_driver_names():
    assert cg.classify("out_of_sequence") == ("reorder", None)
    assert cg.classify("seq_err_naks_rcvd") == ("loss", None) and cg.classify("oos_drop_count") == ("loss", None)
    assert cg.classify("rx_prio5_pause_duration") == ("rx_pause_duration", 5)
    assert cg.classify("pfc_pri3_tx_duration_us") == ("tx_pause_duration", 3)
    assert cg.classify("rx_discards_phy") == ("loss", None) and cg.classify("rx_packets") is None
    assert cg.parse_ethtool_stats(MLX5_ETHTOOL.format(p=1, d=2, drop=0))["tx_pause_storm_warning_events"] == 0


def test_mlx5_step_counts_pfc_ecn_cnp_and_keeps_reordering_apart(tmp_path):
    mlx5_port(tmp_path)
    text = {"eth2": MLX5_ETHTOOL.format(p=10, d=100, drop=0)}
    eth = cg.EthtoolReader(["eth2"], run=lambda i: text[i])
    reader = CounterReader(interfaces=[], root=str(tmp_path), ethtool=eth)
    mlx5_port(tmp_path, oos=5, ecn=40, cnp_sent=12, handled=3)
    text["eth2"] = MLX5_ETHTOOL.format(p=25, d=700, drop=0)
    step = reader.delta()
    figures = cg.summarize(step)
    assert figures["pfc"]["rx_pause"] == {"prio3": 15} and figures["pfc"]["rx_pause_duration"] == {"prio3": 600}
    assert figures["ecn_marked"] == 40 and figures["cnp_sent"] == 12 and figures["cnp_received"] == 3
    verdict = loss_verdict([step])
    assert verdict["verdict"] == "clean" and verdict["reordering"] == {"rdma:mlx5_0/1:out_of_sequence": 5}
    text["eth2"] = MLX5_ETHTOOL.format(p=25, d=700, drop=9)  # the port dropped frames: PFC did not hold
    later = loss_verdict([reader.delta()])
    assert later["verdict"] == "loss" and later["counts"] == {"eth:eth2:rx_discards_phy": 9}
    both = merge_verdicts(verdict, later)
    assert both["verdict"] == "loss" and both["reordering"] == verdict["reordering"]


def test_bnxt_names(tmp_path):
    bnxt_port(tmp_path)
    text = {"ens1": BNXT_ETHTOOL.format(p=0, d=0)}
    reader = CounterReader(interfaces=[], root=str(tmp_path), ethtool=cg.EthtoolReader(["ens1"], run=text.get))
    bnxt_port(tmp_path, seq_naks=2, ecn=8, cnp_rx=8)
    text["ens1"] = BNXT_ETHTOOL.format(p=6, d=1500)
    step = reader.delta()
    assert "lifespan" not in step["rdma:bnxt_re0/1"]
    figures = cg.summarize(step)
    assert figures["pfc"]["rx_pause"] == {"prio3": 6} and figures["pfc"]["rx_pause_duration"] == {"prio3": 1500}
    assert figures["ecn_marked"] == 8 and figures["cnp_received"] == 8 and figures["cnp_sent"] == 0
    assert loss_verdict([step])["counts"] == {"rdma:bnxt_re0/1:seq_err_naks_rcvd": 2}


def test_virtual_interfaces_are_dropped_and_unknown_stays_none():
    eth = cg.EthtoolReader(["veth0"], run=lambda i: "NIC statistics:\n     peer_ifindex: 7\n")
    assert eth.interfaces == [] and eth.read() == {}
    assert cg.summarize({}) == {"pfc": None, "ecn_marked": None, "cnp_sent": None, "cnp_received": None}


def test_session_records_congestion_and_reordering_per_step(tmp_path):
    from telemetry.capture.session import Telemetry, TelemetrySettings

    mlx5_port(tmp_path)
    tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, sysfs=str(tmp_path), ethtool=False,
                                      interfaces=[]))
    tel.start()
    tel.start_step(0)
    mlx5_port(tmp_path, oos=4, ecn=9, cnp_sent=9, handled=2)
    tel.counters.sample_now()  # what the sampler thread does every telemetry.counter_sample_interval_s
    rec = tel.end_step(0)
    summary = tel.summary()
    tel.close()
    assert rec["host"]["congestion"]["ecn_marked"] == 9 and rec["host"]["congestion"]["cnp_received"] == 2
    assert rec["job_reorder_events"] == 4 and rec["job_loss_events"] == 0
    assert summary["counters"]["verdict"] == "clean" and summary["counters"]["reordering"]


# --- published ethtool -S and hw_counters from real hosts (evidence_fixtures/README.md) ---

FIX = os.path.join(os.path.dirname(__file__), "..", "evidence_fixtures")


def published(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def ours(driver: str) -> dict[str, int]:
    """The counters of a published `ethtool -S` that this module keeps, with their values since boot."""
    stats = cg.parse_ethtool_stats(published(f"ethtool_S_{driver}_ethq.txt"))
    return {k: v for k, v in stats.items() if cg.classify(k) is not None}


def test_bnxt_en_published_counters():
    kept = ours("bnxt_en")
    figures = cg.summarize({"eth:bnxt": kept})
    assert figures["pfc"]["rx_pause"] == {f"prio{p}": 0 for p in range(8)}
    assert figures["pfc"]["tx_pause_duration"] == {f"prio{p}": 0 for p in range(8)}
    assert figures["pfc"]["pause_storm_warning"] == {"global": 0}  # continuous_(roce_)pause_events
    # since boot this port dropped frames on its host rings and at the MAC: both are loss
    verdict = loss_verdict([{"eth:bnxt": kept}])
    assert verdict["counts"] == {"eth:bnxt:rx_total_ring_discards": 655430134, "eth:bnxt:rx_stat_discard": 49337}
    assert not any(k.startswith("[") for k in kept)  # the per-ring "[0]: rx_discards" lines are not ours


def test_mlx5_core_published_counters_count_pause_once():
    kept = ours("mlx5_core")
    assert "rx_pause_ctrl_phy" not in kept and kept["rx_global_pause"] == 0  # both count the same frames
    assert {"rx_discards_phy", "tx_discards_phy", "rx_out_of_buffer", "rx_crc_errors_phy"} <= set(kept)
    assert cg.summarize({"eth:mlx5": kept})["pfc"] == {"rx_pause_global": {"global": 0},
                                                      "tx_pause_global": {"global": 0},
                                                      "rx_pause_duration": {"global": 0},
                                                      "tx_pause_duration": {"global": 0}}


def test_intel_ice_and_i40e_pause_frames_are_xoff_frames():
    ice, i40e = ours("ice"), ours("i40e")
    assert cg.classify("rx_priority_3_xoff.nic") == ("rx_pause", 3) and cg.classify("port.tx_priority_3_xoff") == ("tx_pause", 3)
    assert {"link_xoff_rx.nic", "rx_dropped.nic", "rx_crc_errors.nic", "tx_dropped_link_down.nic"} <= set(ice)
    assert {"port.link_xoff_rx", "port.rx_dropped", "port.rx_crc_errors"} <= set(i40e)
    assert "rx_dropped" not in ice  # the netdev's own count: /sys/class/net statistics has it already
    for kept in (ice, i40e):
        pfc = cg.summarize({"eth:intel": kept})["pfc"]
        assert pfc["rx_pause"] == {f"prio{p}": 0 for p in range(8)} and pfc["tx_pause_global"] == {"global": 0}
        assert "rx_pause_duration" not in pfc  # Intel keeps no pause time: absent, not 0


def test_efa_hw_counters_from_a_published_listing(tmp_path):
    """A sysfs tree made from a published `grep .` of an EFA device's hw_counters: traffic is read from
    hw_counters (EFA has no port_xmit_data), rx_drops is loss, lifespan is not a counter."""
    values = {}
    for line in published("efa_hw_counters_grep.txt").splitlines():
        if line.startswith("/sys/"):
            path, _, value = line.rpartition(":")
            values[path] = value
    for path, value in values.items():
        write(tmp_path / path[len("/sys/"):], value)
    port = tmp_path / "class" / "infiniband" / "rdmap144s27" / "ports" / "1"
    reader = CounterReader(interfaces=[], root=str(tmp_path))
    snap = reader.read()["rdma:rdmap144s27/1"]
    assert snap["tx_bytes"] == 84417311044934 and snap["rdma_read_bytes"] == 83829566349996
    assert snap["rx_drops"] == 0 and snap["rdma_read_wr_err"] == 0 and "lifespan" not in snap
    write(port / "hw_counters" / "rx_drops", 3)  # the next read: three packets dropped
    write(port / "hw_counters" / "tx_bytes", 84417311044934 + 4096)
    step = reader.delta()
    assert step["rdma:rdmap144s27/1"]["tx_bytes"] == 4096
    # the session's RDMA traffic (job_rdma_tx_bytes) reads port_xmit_bytes: from EFA's own byte counts
    assert step["rdma:rdmap144s27/1"]["port_xmit_bytes"] == 4096 and step["rdma:rdmap144s27/1"]["port_rcv_bytes"] == 0
    assert loss_verdict([step])["counts"] == {"rdma:rdmap144s27/1:rx_drops": 3}


def test_irdma_ecn_and_cnp_names():
    step = {"rdma:irdma0/1": {"RxECNMrkd": 5, "cnpSent": 5, "cnpHandled": 2, "ip4InDiscards": 0}}
    assert cg.summarize(step) == {"pfc": None, "ecn_marked": 5, "cnp_sent": 5, "cnp_received": 2}
