"""What each fabric of a comparison was, from run.json: the rows at the top of a fabric evaluation.

Link rate, interfaces and MTU, NCCL version, transport and GPUDirect RDMA, hosts and duration. A value the
run did not record reads "unknown" with the reason; where repeats of one fabric disagree, each distinct
value is shown.
"""
from __future__ import annotations

import os

from telemetry.analysis.runs import Run


def _used_interfaces(fab: dict) -> list[str]:
    """The interfaces or HCAs the job's traffic used: NCCL's devices, else gloo's interface."""
    devices = ((fab.get("nccl") or {}).get("devices")) or []
    names = [d["device"] + (f":{d['port']}" if d.get("port") is not None else "") for d in devices if d.get("device")]
    if names:
        return names
    gloo = (fab.get("gloo") or {}).get("interface")
    return [gloo] if gloo else []


def _link_rate(fab: dict, used: list[str]) -> str:
    lab = fab.get("lab") or {}
    if lab:
        return f"{lab.get('rate')} (emulated: tc tbf)" if lab.get("rate_bps") else "unshaped (emulated lab)"
    hcas = {h["device"]: h for h in fab.get("hcas") or []}
    rates = [hcas[u.split(":")[0]].get("rate") for u in used if u.split(":")[0] in hcas]
    if any(rates):
        return ", ".join(r for r in rates if r)
    nics = {i["name"]: i for i in fab.get("interfaces") or []}
    speeds = [nics[u]["speed_mbps"] for u in used if u in nics and nics[u].get("speed_mbps")]
    if speeds:
        return ", ".join(f"{s / 1000:g} Gbit/s" if s >= 1000 else f"{s} Mbit/s" for s in speeds)
    if not used:
        return "unknown (no interface recorded as used)"
    if used == ["lo"]:
        return "n/a (loopback: every rank on one host)"
    return f"unknown ({', '.join(used)} reports no speed)"


def _interfaces(fab: dict, used: list[str]) -> str:
    if not used:
        return "unknown (no interface recorded as used)"
    nics = {i["name"]: i for i in fab.get("interfaces") or []}
    parts = []
    for u in used:
        mtu = (nics.get(u) or {}).get("mtu")
        parts.append(f"{u} (MTU {mtu})" if mtu else f"{u} (MTU unknown: not in the interface list)")
    return ", ".join(parts)


def _nccl_version(run: Run, fab: dict) -> str:
    nccl = fab.get("nccl") or {}
    version = fab.get("nccl_version") or nccl.get("nccl_version") or (run.info.get("software") or {}).get("nccl")
    if version:
        return str(version)
    backend = fab.get("backend") or run.info.get("backend")
    if backend == "gloo":
        return "not used (gloo)"
    return f"unknown ({(nccl.get('unknown') or {}).get('nccl_version', 'not recorded')})"


def _transport(fab: dict) -> str:
    transport = fab.get("transport") or "unknown"
    nccl = fab.get("nccl")
    if not nccl:
        return f"{transport}; GDR n/a ({fab.get('backend') or 'no NCCL log'})"
    gdr = nccl.get("gpudirect_rdma")
    why = (nccl.get("unknown") or {}).get("gpudirect_rdma")
    gdr_text = {True: "GDR on", False: "GDR off"}.get(gdr, f"GDR unknown ({why or 'not in the log'})")
    return f"{transport}; {gdr_text}"


def _hosts(run: Run) -> str:
    names = list(dict.fromkeys(h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")))
    if not names:
        return "unknown (no hosts in run.json)"
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    return f"{len(names)}: {shown}"


def _duration(run: Run) -> str:
    d = run.info.get("duration_s")
    if d is None:
        return f"unknown (status {run.info.get('status')}: no end recorded)"
    return f"{d:,.0f} s" if d >= 100 else f"{d:.3g} s"


def facts(run: Run) -> dict[str, str]:
    """The fabric rows for one run, as text."""
    fab = run.info.get("fabric") or {}
    used = _used_interfaces(fab)
    return {"link rate": _link_rate(fab, used), "interfaces (MTU)": _interfaces(fab, used),
            "NCCL version": _nccl_version(run, fab), "transport; GPUDirect RDMA": _transport(fab),
            "hosts": _hosts(run), "duration": _duration(run)}


def fabric_rows(groups: list[list[Run]]) -> list[list[str]]:
    """One row per fact, one column per fabric; repeats that differ show each distinct value."""
    per_group = [[facts(r) for r in runs] for runs in groups]
    rows = [["runs"] + [f"{len(runs)}: " + ", ".join(os.path.basename(os.path.normpath(r.path)) for r in runs)
                        for runs in groups]]
    for key in per_group[0][0]:
        cells = []
        for group in per_group:
            values = list(dict.fromkeys(f[key] for f in group))
            cells.append(values[0] if len(values) == 1 else " / ".join(values))
        rows.append([key] + cells)
    return rows

