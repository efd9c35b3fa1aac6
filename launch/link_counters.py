"""Host counters and the switch exporter around a link test: read before and after, the same verdict a
training run gets (telemetry/capture/counters.py: clean or loss, reordering apart) and the same congestion
figures (PFC pauses per priority, ECN marks, CNPs).

A node is read through --exec with a shell loop over sysfs (`/sys/class/net/*/statistics/*`, the RDMA ports'
`counters/*` and `hw_counters/*`) and `ethtool -S` of each physical NIC: nothing of the harness needs to be
installed there.
"""
from __future__ import annotations

import re
import subprocess

from telemetry.capture.congestion import classify, parse_ethtool_stats
from telemetry.capture.congestion import summarize as congestion_figures
from telemetry.capture.counters import IB_HW_COUNTERS, IB_PORT_COUNTERS, NET_STATS, loss_verdict

SNAPSHOT = r"""for f in /sys/class/net/*/statistics/* /sys/class/infiniband/*/ports/*/counters/* \
/sys/class/infiniband/*/ports/*/hw_counters/*; do [ -r "$f" ] && printf '%s %s\n' "$f" "$(cat "$f" 2>/dev/null)"; done
for d in /sys/class/net/*; do i=${d##*/}; [ -e "$d/device" ] && ethtool -S "$i" 2>/dev/null | sed "s|^|ethtool:$i |"
done; true"""
_NET = re.compile(r"^/sys/class/net/([^/]+)/statistics/(\w+) (-?\d+)$")
_IB = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/(?:hw_)?counters/(\w+) (-?\d+)$")
_ETH = re.compile(r"^ethtool:(\S+) (.*)$")
WORDS = ("port_xmit_data", "port_rcv_data")


def parse_snapshot(text: str) -> dict[str, dict[str, int]]:
    """The snapshot's lines as CounterReader keys them: net:IF, rdma:DEV/PORT, eth:IF."""
    out: dict[str, dict[str, int]] = {}
    eth: dict[str, list[str]] = {}
    for line in text.splitlines():
        if m := _NET.match(line):
            if m.group(2) in NET_STATS:
                out.setdefault(f"net:{m.group(1)}", {})[m.group(2)] = int(m.group(3))
        elif m := _IB.match(line):
            if m.group(3) in IB_PORT_COUNTERS or m.group(3) in IB_HW_COUNTERS:
                out.setdefault(f"rdma:{m.group(1)}/{m.group(2)}", {})[m.group(3)] = int(m.group(4))
        elif m := _ETH.match(line):
            eth.setdefault(m.group(1), []).append(m.group(2))
    for iface, lines in eth.items():
        wanted = {k: v for k, v in parse_ethtool_stats("\n".join(lines)).items() if classify(k) is not None}
        if wanted:
            out[f"eth:{iface}"] = wanted
    return out


def delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    out = {}
    for dev, values in after.items():
        old = before.get(dev, {})
        d = {k: v - old[k] for k, v in values.items() if k in old}
        for k in WORDS:  # bytes, not 4-byte words, as the training runs record them
            if k in d:
                d[k.replace("_data", "_bytes")] = d.pop(k) * 4
        out[dev] = d
    return out


def snapshot(prefix: list[str]) -> tuple[dict | None, str | None]:
    try:
        proc = subprocess.run(prefix + ["sh", "-c", SNAPSHOT], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    snap = parse_snapshot(proc.stdout)
    return (snap, None) if snap else (None, "no counter readable (sysfs) on the node")


def node_result(before: dict | None, after: dict | None, why: str | None) -> dict:
    if before is None or after is None:
        return {"verdict": None, "reason": why or "not read", "congestion": None, "deltas": None}
    d = delta(before, after)
    verdict = loss_verdict([d])
    ooo = sum(v.get("out_of_sequence", 0) for v in d.values())
    return {**verdict, "congestion": congestion_figures(d), "out_of_sequence": ooo, "deltas": d}


def verdict_line(node: str, role: str, r: dict) -> str:
    """'counters nodeB (client): clean: no drops, ...; PFC pause frames received 0 ...' (the run's words)."""
    if r.get("verdict") is None:
        return f"counters {node} ({role}): not read: {r.get('reason')}"
    c = r.get("congestion") or {}
    pfc = c.get("pfc") or {}

    def total(kind):
        return sum((pfc.get(kind) or {}).values()) if pfc.get(kind) else "n/a"
    figures = (f"PFC pause frames received {total('rx_pause')} / sent {total('tx_pause')}, ECN-marked "
               f"{c.get('ecn_marked') if c.get('ecn_marked') is not None else 'n/a'}, CNPs sent "
               f"{c.get('cnp_sent') if c.get('cnp_sent') is not None else 'n/a'} / handled "
               f"{c.get('cnp_received') if c.get('cnp_received') is not None else 'n/a'}")
    return f"counters {node} ({role}): {r['verdict']}: {r['reason']}; {figures}"


def switch_line(block: dict) -> str:
    from telemetry.analysis.congestion_summary import fmt_count, switch_totals
    if not block.get("deltas"):
        return f"switch {block.get('url')}: not read: {block.get('reason')}"
    t = switch_totals(block)
    util = t.get("port_utilization")
    busiest = (f"; busiest port {max(util.items(), key=lambda kv: kv[1])[0]} "
               f"{max(util.values()) * 100:.1f}% of its speed" if util else f"; utilization n/a: {t['utilization_reason']}")
    return (f"switch {block.get('url')}: drops/discards {fmt_count(t['drops_discards'])}, PFC/pause "
            f"{fmt_count(t['pfc_pause'])}, ECN/WRED {fmt_count(t['ecn_wred'])}, errors {fmt_count(t['errors'])}"
            + busiest)
