"""Why a fabric behaved as it did: congestion and loss per run (and per sweep size), from what the hosts
and the switch counted, for the comparison and the link tests.

Per host (each host's local rank 0 reads its NICs, ranks/rank*.telemetry.jsonl `host`; a sweep's
sweep.jsonl `ranks[]`): PFC pause frames and pause time (`congestion.pfc`, per direction and priority,
microseconds as mlx5 and bnxt count them), ECN-marked packets, CNPs sent and handled, out-of-sequence
packets (mlx5 `out_of_sequence`) as a share of the packets received (`port_rcv_packets`, else the
interface's `rx_packets`), and drops/discards/retransmissions (the loss counters). From the switch
exporter (run.json `switch_metrics`): the counter deltas by kind and each port's utilization, octets x 8 /
seconds / the port's speed (IF-MIB ifHighSpeed, Mbit/s). A figure no device reports is None, not 0.
"""
from __future__ import annotations

import json
import os
import re

from telemetry.rundir import RANK_TELEMETRY, SWEEP_SIZES, RunKey, StepKey, is_size_record, rank_files, read_jsonl

FIELDS = ("pfc_rx_frames", "pfc_tx_frames", "pfc_rx_pause_us", "pfc_tx_pause_us", "ecn_marked", "cnp_sent",
          "cnp_received", "out_of_sequence", "packets_received", "loss_events")
_OCTETS = re.compile(r"(ifHCInOctets|ifHCOutOctets|ifInOctets|ifOutOctets|octets|_bytes_total|_bytes)", re.I)
_PORT_LABELS = ("ifName", "interface", "port", "ifDescr", "device", "ifIndex")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _add(acc: dict, key: str, value) -> None:
    if value is not None:
        acc[key] = (acc.get(key) or 0) + value


def add_interval(acc: dict, congestion: dict | None, counters: dict | None, loss_events=None) -> None:
    """Fold one host interval (its `congestion` figures and raw counter deltas) into acc."""
    if congestion:
        for kind, field in (("rx_pause", "pfc_rx_frames"), ("tx_pause", "pfc_tx_frames"),
                            ("rx_pause_duration", "pfc_rx_pause_us"), ("tx_pause_duration", "pfc_tx_pause_us")):
            per = (congestion.get("pfc") or {}).get(kind)
            if per:
                _add(acc, field, sum(per.values()))
                for prio, v in per.items():
                    _add(acc.setdefault("pfc_by_priority", {}), f"{kind} {prio}", v)
        for key in ("ecn_marked", "cnp_sent", "cnp_received"):
            _add(acc, key, congestion.get(key))
    if counters:
        rdma_pkts = [v.get("port_rcv_packets") for d, v in counters.items() if d.startswith("rdma:")]
        net_pkts = [v.get("rx_packets") for d, v in counters.items() if d.startswith("net:")]
        pkts = [p for p in rdma_pkts if p is not None] or [p for p in net_pkts if p is not None]
        if pkts:
            _add(acc, "packets_received", sum(pkts))
        ooo = [v.get("out_of_sequence") for v in counters.values() if v.get("out_of_sequence") is not None]
        if ooo:
            _add(acc, "out_of_sequence", sum(ooo))
    _add(acc, "loss_events", loss_events)


def finish(acc: dict) -> dict:
    out = {k: acc.get(k) for k in FIELDS}
    out["pfc_by_priority"] = acc.get("pfc_by_priority")
    ooo, pkts = out["out_of_sequence"], out["packets_received"]
    out["out_of_sequence_per_packet"] = ooo / pkts if ooo is not None and pkts else None
    return out


def _host_lines(run_dir: str):
    for path in rank_files(run_dir, RANK_TELEMETRY):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a truncated last line
                if isinstance(rec, dict) and isinstance(rec.get(StepKey.HOST), dict):
                    yield rec[StepKey.HOST]


def run_totals(run_dir: str, metrics: list[dict] | None = None) -> dict | None:
    """The run's figures summed over its hosts and steps; None where no host recorded counters."""
    acc: dict = {}
    seen = False
    for host in _host_lines(run_dir):
        if "counters" in host or "congestion" in host:
            seen = True
            add_interval(acc, host.get("congestion"), host.get("counters"))
    if not seen and metrics:  # an older run, or no per-rank files: rank 0's host from metrics.jsonl
        for rec in metrics:
            host = rec.get(StepKey.HOST) or {}
            if "counters" in host or "congestion" in host:
                seen = True
                add_interval(acc, host.get("congestion"), host.get("counters"))
    if not seen:
        return None
    if metrics:
        losses = [r.get(StepKey.JOB_LOSS_EVENTS) for r in metrics if r.get(StepKey.JOB_LOSS_EVENTS) is not None]
        if losses:
            acc["loss_events"] = sum(losses)
    return finish(acc)


def sweep_totals(run_dir: str) -> dict[tuple[str, int], dict]:
    """(op, size) -> the figures over that size's interval (sweep.jsonl), summed over hosts."""
    path = os.path.join(run_dir, SWEEP_SIZES)
    out: dict[tuple[str, int], dict] = {}
    if not os.path.isfile(path):
        return out
    for rec in read_jsonl(path, check=is_size_record):  # a damaged or wrongly shaped line is left out
        acc: dict = {}
        for r in rec.get("ranks") or []:
            if "counters" in r or "congestion" in r:
                add_interval(acc, r.get("congestion"), r.get("counters"))
        acc["loss_events"] = rec.get("loss_events")
        out[(rec.get("op"), rec.get("size"))] = finish(acc)
    return out


def _port(key: str) -> str:
    labels = dict(_LABEL.findall(key.partition("{")[2]))
    return next((labels[k] for k in _PORT_LABELS if labels.get(k)), key.partition("{")[2].rstrip("}") or "all")


def switch_totals(switch: dict | None) -> dict | None:
    """From run.json switch_metrics: notable deltas summed by kind, and the busiest port's utilization."""
    if not switch or not switch.get("deltas"):
        return None
    d = switch["deltas"]
    kinds = {"pfc_pause": re.compile(r"pfc|pause", re.I), "ecn_wred": re.compile(r"ecn|wred", re.I),
             "drops_discards": re.compile(r"drop|discard", re.I), "errors": re.compile(r"error|err_|errs|crc|fcs", re.I)}
    out = {k: None for k in kinds}
    for series, v in (d.get("notable") or {}).items():
        name = series.split("{")[0]
        for k, rx in kinds.items():
            if rx.search(name):
                out[k] = (out[k] or 0) + v
                break
    seconds = d.get("seconds") or 0
    speeds = {_port(k): v for k, v in (d.get("port_speeds") or {}).items()}
    util = {}
    for series, v in (d.get("counters") or {}).items():
        if not _OCTETS.search(series.split("{")[0]):
            continue
        port = _port(series)
        mbps = speeds.get(port)
        if mbps and seconds > 0:
            util[f"{port} {'in' if re.search('in|rx|receive', series.split('{')[0], re.I) else 'out'}"] = \
                v * 8 / seconds / (mbps * 1e6)
    out["seconds"] = seconds or None
    out["port_utilization"] = util or None
    out["utilization_reason"] = None if util else (
        "no octet counter with a port speed (IF-MIB ifHighSpeed) in the exporter's series")
    return out


def fmt_count(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def compare_rows(run_infos: list[list[tuple[str, dict, list]]]) -> list[list[str]]:
    """Rows per figure, one column per fabric (its runs summed, then the mean over repeats)."""
    per = []
    for runs in run_infos:
        tots = [t for t in (run_totals(path, metrics) for path, _, metrics in runs) if t]
        sw = [s for s in (switch_totals(info.get(RunKey.SWITCH_METRICS)) for _, info, _ in runs) if s]
        per.append((tots, sw, len(runs)))

    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    def cell(tots, key, scale=1.0, unit=""):
        if not tots:
            return "n/a (no host counters recorded)"
        v = mean([t.get(key) for t in tots])
        return "n/a (no device reports it)" if v is None else fmt_count(v * scale) + unit

    rows = []
    for name, key, scale, unit in (("PFC pause frames received", "pfc_rx_frames", 1, ""),
                                   ("PFC pause frames sent", "pfc_tx_frames", 1, ""),
                                   ("PFC pause time received", "pfc_rx_pause_us", 1e-3, " ms"),
                                   ("PFC pause time sent", "pfc_tx_pause_us", 1e-3, " ms"),
                                   ("ECN-marked packets", "ecn_marked", 1, ""), ("CNPs sent", "cnp_sent", 1, ""),
                                   ("CNPs handled", "cnp_received", 1, ""),
                                   ("drops, discards, retransmissions", "loss_events", 1, "")):
        rows.append([f"hosts: {name}"] + [cell(t, key, scale, unit) for t, _, _ in per])
    ooo = []
    for tots, _, _ in per:
        v = mean([t.get("out_of_sequence_per_packet") for t in tots]) if tots else None
        raw = mean([t.get("out_of_sequence") for t in tots]) if tots else None
        ooo.append("n/a (no host counters recorded)" if not tots else
                   f"{v:.3g} ({fmt_count(raw)} packets)" if v is not None else
                   "n/a (no out_of_sequence or packet counter)")
    rows.append(["hosts: out-of-sequence per packet received"] + ooo)
    for name, key in (("PFC / pause", "pfc_pause"), ("ECN / WRED marks", "ecn_wred"),
                      ("drops, discards", "drops_discards"), ("errors", "errors")):
        rows.append([f"switch: {name}"] + [
            ("n/a (no switch exporter read)" if not sw else fmt_count(mean([s.get(key) for s in sw])))
            for _, sw, _ in per])
    util = []
    for _, sw, _ in per:
        if not sw:
            util.append("n/a (no switch exporter read)")
            continue
        ports = [s["port_utilization"] for s in sw if s.get("port_utilization")]
        if not ports:
            util.append(f"n/a ({sw[0]['utilization_reason']})")
            continue
        top = max(ports[0].items(), key=lambda kv: kv[1])
        util.append(f"{top[1] * 100:.1f}% ({top[0]}, the busiest of {len(ports[0])})")
    rows.append(["switch: port utilization (octets x 8 / s / speed)"] + util)
    return rows


def sweep_rows(labels: list[str], run_dirs: list[str], op: str) -> list[list[str]] | None:
    """Per size of one collective: each fabric's PFC / ECN / CNP / loss over that size's interval."""
    per = [sweep_totals(d) for d in run_dirs]
    sizes = sorted({size for p in per for (o, size) in p if o == op})
    if not sizes or not any(p for p in per):
        return None
    rows = []
    for size in sizes:
        cells = []
        for p in per:
            t = p.get((op, size))
            if t is None:
                cells.append("n/a")
                continue
            cells.append(" / ".join(fmt_count(t.get(k)) for k in ("pfc_rx_frames", "ecn_marked", "cnp_sent",
                                                                    "loss_events")))
        rows.append([str(size)] + cells)
    return rows
