"""Switch counters from a Prometheus text endpoint the user names (telemetry.switch_metrics_url): read
before and after a run, deltas in run.json (docs/evidence.md).

Any exporter that speaks the Prometheus text format works: a SONiC exporter on the switch, snmp_exporter
(IF-MIB ifHCInOctets, ifInDiscards...), a vendor's gNMI bridge. Parsing is prometheus_client's. A series
is a counter when its `# TYPE` says so, whatever its name (IF-MIB names have no _total); series are
keyed by family name and labels, as prometheus_client reports them. A counter that went down between the
reads was reset (a switch reboot, a counter clear): its delta is the value after, and it is flagged.
Gauges keep both readings. Nothing here knows a switch's own credentials: the URL is recorded without any.
"""
from __future__ import annotations

import re
import time

from telemetry.capture.bmc_power import redact_url
from telemetry.errors import HarnessError

HTTP_TIMEOUT_S = 10.0
MAX_SERIES = 20000  # a large switch exports tens of thousands of series; deltas of more are cut, and said so
# series worth a line in the report: congestion and loss (PFC, ECN/WRED, drops, discards, errors, a link that
# went down); node_exporter spells errors "errs" (node_network_receive_errs_total) and IB "link_downed"
NOTABLE = re.compile(r"pfc|pause|ecn|wred|drop|discard|error|err_|errs|crc|fcs|downed", re.I)
SPEED = re.compile(r"ifHighSpeed|speed", re.I)


class SwitchMetricsError(HarnessError):
    """An endpoint that cannot be read or parsed; one line."""


def _key(name: str, labels: dict) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse(text: str) -> dict[str, tuple[str, float]]:
    """{series: (type, value)} for counters and gauges. Histogram/summary parts are left out (no delta
    means anything for them), and so are untyped series, except those named `..._total`: exporters that
    write no `# TYPE` lines still follow the convention that such a series is a counter."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, tuple[str, float]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            if fam.type in ("unknown", "untyped"):
                for s in fam.samples:
                    if s.name.endswith("_total"):
                        out[_key(s.name.removesuffix("_total"), s.labels)] = ("counter", float(s.value))
                continue
            if fam.type not in ("counter", "gauge"):
                continue
            for s in fam.samples:
                if fam.type == "counter" and s.name.endswith("_created"):
                    continue  # a counter's creation timestamp, not a count
                out[_key(fam.name, s.labels)] = (fam.type, float(s.value))
    except ValueError as exc:
        raise SwitchMetricsError(f"not Prometheus text: {exc}") from None
    return out


def scrape(url: str, session=None) -> dict:
    import requests

    session = session or requests
    try:
        resp = session.get(url, timeout=HTTP_TIMEOUT_S, headers={"Accept": "text/plain"})
    except requests.RequestException as exc:
        raise SwitchMetricsError(f"{redact_url(url)}: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise SwitchMetricsError(f"{redact_url(url)}: HTTP {resp.status_code}")
    return {"time": time.time(), "series": parse(resp.text)}


def deltas(before: dict, after: dict) -> dict:
    """Counter deltas (resets handled) and gauges before/after, between two scrapes."""
    b, a = before["series"], after["series"]
    counters, resets, gauges = {}, [], {}
    for key, (kind, value) in a.items():
        if key not in b:
            continue
        old = b[key][1]
        if kind == "counter":
            if value < old:
                resets.append(key)
                d = value
            else:
                d = value - old
            if d:
                counters[key] = d
        elif kind == "gauge" and value != old:
            gauges[key] = {"before": old, "after": value}
    items = sorted(counters.items(), key=lambda kv: -kv[1])
    # port speeds (IF-MIB ifHighSpeed in Mbit/s, or *speed* gauges) for utilization: they do not change, so
    # gauges_changed never holds them
    speeds = {k: v for k, (kind, v) in a.items() if kind == "gauge" and SPEED.search(k.split("{")[0])}
    return {"seconds": after["time"] - before["time"],
            "counters": dict(items[:MAX_SERIES]), "counters_cut": max(0, len(items) - MAX_SERIES),
            "notable": {k: v for k, v in items if NOTABLE.search(k)},
            "resets": resets, "gauges_changed": dict(list(gauges.items())[:MAX_SERIES]),
            "new_series": sorted(set(a) - set(b))[:100], "gone_series": sorted(set(b) - set(a))[:100],
            "port_speeds": dict(list(speeds.items())[:MAX_SERIES])}


# a switch's identity in the labels of an info series (value 1), as exporters write it: SONiC's hwsku and
# platform, node_exporter's node_os_info{name,version}, vendors' model / os_version / software_version
_MODEL_LABELS = ("model", "hwsku", "platform", "product_name", "product", "hardware_model", "chassis_model")
_OS_LABELS = ("os_version", "software_version", "sw_version", "sonic_os_version", "os", "version")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def identity(series: dict) -> dict:
    """{"switch_model", "switch_os", "series"} from the labels of `*_info` series: the model from the first that
    names one, the OS from that series where it names one too, else from the first that does."""
    found = []
    for key in sorted(series):
        name, _, rest = key.partition("{")
        if not name.endswith("_info") or not rest:
            continue
        labels = dict(_LABEL.findall(rest))
        model = next((labels[k] for k in _MODEL_LABELS if labels.get(k)), None)
        os_name = next((labels[k] for k in _OS_LABELS if labels.get(k)), None)
        if os_name and labels.get("name") and labels["name"] not in os_name:  # node_os_info{name="SONiC",version=...}
            os_name = f"{labels['name']} {os_name}"
        if model or os_name:
            found.append((name, model, os_name))
    with_model = [f for f in found if f[1]]
    first = with_model[0] if with_model else (found[0] if found else (None, None, None))
    os_name = first[2] or next((f[2] for f in found if f[2]), None)
    return {"switch_model": first[1], "switch_os": os_name, "series": first[0]}


class SwitchWatch:
    """Reads the endpoint at the start and at the end of a run; `finish()` gives run.json's block."""

    def __init__(self, url: str):
        self.url = url
        self.before, self.reason = None, None
        try:
            self.before = scrape(url)
        except SwitchMetricsError as exc:
            self.reason = f"first read failed: {exc}"

    def finish(self) -> dict:
        out = {"url": redact_url(self.url)}
        if self.before is None:
            return {**out, "deltas": None, "reason": self.reason}
        try:
            after = scrape(self.url)
        except SwitchMetricsError as exc:
            return {**out, "deltas": None, "reason": f"last read failed: {exc}"}
        return {**out, "series": len(after["series"]), "deltas": deltas(self.before, after),
                "identity": identity(self.before["series"])}
