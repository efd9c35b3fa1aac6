"""Congestion and loss per fabric and per sweep size: hosts' PFC/ECN/CNP/out-of-sequence figures as the
session records them (known sums), the switch's deltas and port utilization (snmp_exporter IF-MIB names,
parsed by prometheus_client from the exporter's text), in the comparison's tables."""
from __future__ import annotations

import json

import pytest

from telemetry.analysis import congestion_summary as cs
from telemetry.analysis.compare import compare
from telemetry.capture.switch_metrics import deltas, parse

from ..recorded import sweep_result, write_run


def host_step(step, pfc_rx=10, pause_us=500, ecn=4, cnp=3, ooo=2, pkts=1000):
    return {"step": step, "host": {
        "congestion": {"pfc": {"rx_pause": {"prio3": pfc_rx}, "rx_pause_duration": {"prio3": pause_us}},
                       "ecn_marked": ecn, "cnp_sent": cnp, "cnp_received": cnp},
        "counters": {"rdma:mlx5_0:1": {"out_of_sequence": ooo, "port_rcv_packets": pkts},
                     "net:eth0": {"rx_packets": 5}}}}


def with_hosts(run, steps=3, **kw):
    (run / "ranks").mkdir()
    for rank in (0, 8):  # each host's local rank 0
        (run / "ranks" / f"rank{rank:05d}.telemetry.jsonl").write_text(
            "\n".join(json.dumps(host_step(s, **kw)) for s in range(1, steps + 1)) + "\n")
    return run


SWITCH = """# TYPE ifHCInOctets counter
ifHCInOctets{{ifIndex="1",ifName="Ethernet0"}} {octets}
# TYPE ifHighSpeed gauge
ifHighSpeed{{ifIndex="1",ifName="Ethernet0"}} 400000
# TYPE ifInDiscards counter
ifInDiscards{{ifIndex="1",ifName="Ethernet0"}} {discards}
"""


def switch_block(octets_delta=5e11, seconds=10.0, discards=3):
    before = {"time": 100.0, "series": parse(SWITCH.format(octets=1e9, discards=10))}
    after = {"time": 100.0 + seconds, "series": parse(SWITCH.format(octets=1e9 + octets_delta,
                                                                    discards=10 + discards))}
    return {"url": "http://switch:9116/metrics", "deltas": deltas(before, after)}


def test_run_totals_sum_hosts_and_steps(tmp_path):
    run = with_hosts(write_run(tmp_path / "r"))
    t = cs.run_totals(str(run))
    assert t["pfc_rx_frames"] == 60 and t["pfc_rx_pause_us"] == 3000 and t["ecn_marked"] == 24
    assert t["cnp_sent"] == 18 and t["out_of_sequence"] == 12 and t["packets_received"] == 6000
    assert t["out_of_sequence_per_packet"] == pytest.approx(0.002) and t["pfc_tx_frames"] is None
    assert cs.run_totals(str(write_run(tmp_path / "none"))) is None


def test_switch_deltas_and_utilization():
    s = cs.switch_totals(switch_block())
    assert s["drops_discards"] == 3 and s["pfc_pause"] is None
    # 5e11 octets in 10 s = 400 Gbit/s on a 400000 Mbit/s port: 100%
    assert s["port_utilization"] == {"Ethernet0 in": pytest.approx(1.0)}


def test_compare_table_per_fabric_and_per_size(tmp_path):
    a = with_hosts(write_run(tmp_path / "roce", rate_bps=1e9), pfc_rx=0, ecn=0, cnp=0, ooo=0)
    b = with_hosts(write_run(tmp_path / "ar", rate_bps=1e8, step_time=2.0, info_extra={"switch_metrics":
                                                                                       switch_block()}))
    sweep = write_run(tmp_path / "sweep-ar", sweep=sweep_result())
    lines = [{"op": "all_reduce", "size": 1048576, "loss_events": 0,
              "ranks": [{"congestion": {"pfc": {"rx_pause": {"prio3": 7}}, "ecn_marked": 2, "cnp_sent": 1},
                         "counters": {}}]}]
    (sweep / "sweep.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    plain = write_run(tmp_path / "sweep-roce", sweep=sweep_result())  # a sweep without sweep.jsonl
    compare([f"roce={a}", f"ar={b}"], str(tmp_path / "cmp"), sweeps=[f"ar={sweep}", f"roce={plain}"])
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| hosts: PFC pause frames received | 0 | 60 |" in md
    assert "| hosts: PFC pause time received | 3 ms | 3 ms |" in md
    assert "| hosts: PFC pause frames sent | n/a (no device reports it) | n/a (no device reports it) |" in md
    assert "| hosts: out-of-sequence per packet received | 0 (0 packets) | 0.002 (12 packets) |" in md
    assert "| switch: drops, discards | n/a (no switch exporter read) | 3 |" in md
    assert "| switch: port utilization (octets x 8 / s / speed) | n/a (no switch exporter read) | 100.0% (Ethernet0 in" in md
    assert "| 1 MB | n/a | 7 / 2 / 1 / 0 |" in md
