"""Parsers for raw link tests, on real published perftest and iperf3 output (evidence_fixtures/README.md)."""
from __future__ import annotations

import os

import pytest

from telemetry.analysis import link_tests as lt

FIX = os.path.join(os.path.dirname(__file__), "evidence_fixtures")


def read(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def test_bandwidth_table_in_mb_per_second_becomes_gbps():
    r = lt.parse_perftest(read("perftest_write_bw_mb.txt"))
    assert r["test"] == "RDMA_Write BW Test" and r["kind"] == "bandwidth"
    assert r["device"] == "mlx4_0" and r["link_type"] == "IB" and r["bw_unit"] == "MB/sec"
    assert len(r["rows"]) == 23 and r["rows"][0]["bytes"] == 2 and r["rows"][-1]["bytes"] == 8388608
    big = r["rows"][-1]
    assert big["iterations"] == 20000 and big["msg_rate_mpps"] == pytest.approx(0.000458)
    # 3665.25 MiB/s = 30.75 Gb/s: a 40 Gb/s QDR link carries 32 Gb/s of data after 8b/10b
    assert big["bw_avg_gbps"] == pytest.approx(3665.25 * 2**20 * 8 / 1e9)
    assert 30 < big["bw_avg_gbps"] < 32


def test_bandwidth_table_in_gbits_with_tabs_and_no_peak():
    r = lt.parse_perftest(read("perftest_write_bw_gbits_issue273.txt"))
    assert r["test"] == "RDMA_Write Post List BW Test" and r["link_type"] == "Ethernet"
    (row,) = r["rows"]
    assert row == {"bytes": 8, "iterations": 224958464, "bw_peak_gbps": None, "bw_avg_gbps": 0.48,
                   "msg_rate_mpps": 7.498617}


def test_latency_table():
    r = lt.parse_perftest(read("perftest_write_lat.txt"))
    assert r["kind"] == "latency" and r["test"] == "RDMA_Write Latency Test" and len(r["rows"]) == 23
    first = r["rows"][0]
    assert first == {"bytes": 2, "iterations": 20000, "t_min_us": 0.88, "t_max_us": 6.84, "t_typical_us": 0.98,
                     "t_avg_us": 1.03, "t_stdev_us": 0.20, "p99_us": 1.21, "p99_9_us": 5.42}
    assert r["rows"][-1]["p99_9_us"] == 2335.48


def test_latency_columns_that_ran_together_are_split_at_two_decimals():
    (row,) = lt.parse_perftest(read("perftest_send_lat_rxe_glued.txt"))["rows"]
    assert row["t_stdev_us"] == 2465.90 and row["p99_us"] == 1216.65 and row["p99_9_us"] == 37330.73


def test_not_perftest_output_is_refused():
    with pytest.raises(lt.ParseError, match="no perftest result table"):
        lt.parse_perftest("Couldn't connect to 10.0.0.2:18515\n")


def test_out_json_units_come_from_the_command_line():
    bw = lt.parse_perftest_json(read("perftest_out_json_bw_from_source.json"), report_gbits=True)
    assert bw["device"] == "mlx5_0" and bw["rows"][0]["bw_avg_gbps"] == 97.45 and bw["bw_unit"] == "Gb/sec"
    mib = lt.parse_perftest_json(read("perftest_out_json_bw_from_source.json"), report_gbits=False)
    assert mib["rows"][0]["bw_avg_gbps"] == pytest.approx(97.45 * 2**20 * 8 / 1e9)
    lat = lt.parse_perftest_json(read("perftest_out_json_lat_from_source.json"), report_gbits=True)
    assert lat["kind"] == "latency" and lat["rows"][0]["p99_us"] == 1.57 and lat["rows"][0]["p99_9_us"] == 1.93


def test_iperf3_tcp_receiver_rate_and_retransmits():
    r = lt.parse_iperf3(read("iperf3_tcp_cloudpilot.json"))
    assert r["protocol"] == "TCP" and r["version"] == "iperf 3.9" and r["error"] is None
    assert r["received_bps"] == pytest.approx(1863405012.088609) and r["retransmits"] == 1006
    assert lt.percent_of_line(r["received_bps"] / 1e9, 10.0) == pytest.approx(18.634, rel=1e-3)


def test_iperf3_udp_loss_and_bidir_reverse():
    udp = lt.parse_iperf3(read("iperf3_udp_loopback.json"))
    assert udp["protocol"] == "UDP" and udp["lost_packets"] == 0 and udp["packets"] == 77
    assert udp["retransmits"] is None and udp["jitter_ms"] > 0
    bidir = lt.parse_iperf3(read("iperf3_bidir_loopback.json"))
    assert bidir["bidir"] and bidir["received_bps"] > 0 and bidir["reverse_received_bps"] > 0
    assert bidir["reverse_retransmits"] is not None


def test_iperf3_error_report():
    r = lt.parse_iperf3(read("iperf3_error_refused.json"))
    assert r["error"].startswith("unable to connect") and r["received_bps"] is None
    with pytest.raises(lt.ParseError):
        lt.parse_iperf3('{"start": {}}')


def test_line_rates():
    assert lt.ib_rate_gbps("400 Gb/sec (4X NDR)") == 400.0 and lt.ib_rate_gbps(None) is None
    assert lt.percent_of_line(50.0, None) is None and lt.percent_of_line(None, 100.0) is None
