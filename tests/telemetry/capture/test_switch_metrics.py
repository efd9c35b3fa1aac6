"""Switch counters from a Prometheus text endpoint on loopback: snmp_exporter IF-MIB names (counters
without _total, declared by # TYPE) and SONiC-exporter-style names, deltas between two reads, a reset."""
from __future__ import annotations

import pytest

from telemetry.capture import switch_metrics as sm

from .loopback import LoopbackServer, QuietHandler

PAGE = """# HELP ifHCInOctets The total number of octets received on the interface - 1.3.6.1.2.1.31.1.1.1.6
# TYPE ifHCInOctets counter
ifHCInOctets{ifIndex="1",ifName="Ethernet0"} {octets}
ifHCInOctets{ifIndex="2",ifName="Ethernet4"} 5.0e+06
# HELP ifInDiscards The number of inbound packets which were chosen to be discarded - 1.3.6.1.2.1.2.2.1.13
# TYPE ifInDiscards counter
ifInDiscards{ifIndex="1",ifName="Ethernet0"} {discards}
# HELP sonic_interface_pfc_rx_packets_total PFC frames received per priority
# TYPE sonic_interface_pfc_rx_packets_total counter
sonic_interface_pfc_rx_packets_total{interface="Ethernet0",priority="3"} {pfc}
# HELP sonic_queue_watermark_bytes Queue watermark
# TYPE sonic_queue_watermark_bytes gauge
sonic_queue_watermark_bytes{interface="Ethernet0",queue="3"} {wm}
# HELP scrape_duration_seconds untyped
scrape_duration_seconds 0.02
"""


class Exporter(LoopbackServer):
    """A Prometheus text endpoint at /metrics serving `page` with the current `values` filled in."""

    def __init__(self, page: str = PAGE):
        self.page = page
        self.values = {"octets": "1.0e+09", "discards": "10", "pfc": "100", "wm": "2048"}
        exporter = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                page = exporter.page
                for k, v in exporter.values.items():
                    page = page.replace("{" + k + "}", v)
                self.reply(200, page.encode(), "text/plain; version=0.0.4")

        super().__init__(Handler)
        self.url += "/metrics"


@pytest.fixture
def exporter():
    e = Exporter()
    yield e
    e.close()


def test_deltas_between_two_reads(exporter):
    watch = sm.SwitchWatch(exporter.url)
    exporter.values.update(octets="1.5e+09", discards="13", pfc="40", wm="4096")  # pfc went down: a reset
    got = watch.finish()
    d = got["deltas"]
    assert got["url"] == exporter.url and got["series"] == 5
    e0 = 'ifHCInOctets{ifIndex="1",ifName="Ethernet0"}'
    assert d["counters"][e0] == 5e8 and 'ifHCInOctets{ifIndex="2",ifName="Ethernet4"}' not in d["counters"]
    assert d["counters"]['ifInDiscards{ifIndex="1",ifName="Ethernet0"}'] == 3
    pfc = 'sonic_interface_pfc_rx_packets{interface="Ethernet0",priority="3"}'
    assert d["resets"] == [pfc] and d["counters"][pfc] == 40  # counted from zero after the reset
    assert set(d["notable"]) == {'ifInDiscards{ifIndex="1",ifName="Ethernet0"}', pfc}
    assert d["gauges_changed"] == {'sonic_queue_watermark_bytes{interface="Ethernet0",queue="3"}':
                                   {"before": 2048.0, "after": 4096.0}}
    assert not any(k.startswith("scrape_duration") for k in d["counters"])  # untyped: no delta


def test_unreachable_and_garbage():
    watch = sm.SwitchWatch("http://127.0.0.1:9/metrics")
    assert watch.finish()["deltas"] is None and "first read failed" in watch.reason
    with pytest.raises(sm.SwitchMetricsError, match="not Prometheus text"):
        sm.parse("# TYPE x counter\nx{ 1 2 3\n")


def test_report_rows_show_server_power_and_the_switch_counters_that_moved(exporter):
    from telemetry.analysis.report import evidence_rows

    watch = sm.SwitchWatch(exporter.url)
    exporter.values.update(discards="25")
    rows = evidence_rows({"source": "redfish", "mean_w": 812.5, "energy_j": 9750.0}, watch.finish())
    text = {r[0]: r[1] for r in rows}
    assert text["server power (BMC, mean)"].startswith("812") and "counters moved" in text["switch counters"]
    assert text['switch: ifInDiscards{ifIndex="1",ifName="Ethernet0"}'] == "15"
    unknown = evidence_rows({"source": None, "reason": "telemetry.bmc is not set", "mean_w": None}, None)
    assert unknown == [["server power (BMC, mean)", "not available: telemetry.bmc is not set"]]
    sweep = evidence_rows({"node1": {"source": "redfish", "mean_w": 344.0, "energy_j": 100.0}}, None)  # per host
    assert sweep[0][0] == "server power (BMC, mean) node1" and sweep[0][1].startswith("344")


def test_node_exporter_page_served_on_loopback():
    """node_exporter's own end-to-end output (evidence_fixtures/README.md) read from a real HTTP server:
    _total families are keyed without the suffix, gauges are kept apart, and its loss counters
    ("errs", "link_downed", "discards", "drop") are the ones the report shows when they move."""
    import os

    with open(os.path.join(os.path.dirname(__file__), "..", "evidence_fixtures", "prometheus_node_exporter_e2e_network.prom"),
              encoding="utf-8") as f:
        page = f.read()
    e = Exporter(page)
    try:
        before, after = sm.scrape(e.url), sm.scrape(e.url)
    finally:
        e.close()
    series = after["series"]
    assert len(series) == 55
    assert series['node_infiniband_port_discards_transmitted{device="mlx4_0",port="1"}'] == ("counter", 5.0)
    assert series['node_infiniband_rate_bytes_per_second{device="mlx4_0",port="1"}'] == ("gauge", 5e9)
    assert series['node_network_receive_errs{device="lo"}'][0] == "counter"
    d = sm.deltas(before, after)
    assert d["counters"] == {} and d["resets"] == [] and d["new_series"] == [] and d["gone_series"] == []
    notable = {k.split("{")[0] for k in series if sm.NOTABLE.search(k)}
    assert {"node_network_receive_errs", "node_network_transmit_drop", "node_infiniband_link_downed",
            "node_infiniband_port_discards_received", "node_infiniband_port_errors_received"} <= notable
    assert "node_network_receive_bytes" not in notable


def test_untyped_total_series_are_counters():
    """An exporter that writes no # TYPE lines: `_total` series are counters by convention (keyed as a
    typed counter family would be), other untyped series stay out."""
    text = ('ifInDiscards_total{ifName="Ethernet0"} 7\n'
            'port_rx_pfc_total{port="1",priority="3"} 12\n'
            "scrape_duration_seconds 0.02\n")
    assert sm.parse(text) == {'ifInDiscards{ifName="Ethernet0"}': ("counter", 7.0),
                              'port_rx_pfc{port="1",priority="3"}': ("counter", 12.0)}
    before = {"time": 0.0, "series": sm.parse(text)}
    after = {"time": 1.0, "series": sm.parse(text.replace(" 7\n", " 9\n"))}
    assert sm.deltas(before, after)["counters"]['ifInDiscards{ifName="Ethernet0"}'] == 2
