"""What a host can read of its fabric's configuration, per NIC: FEC (`ethtool --show-fec`, with its
corrected and uncorrectable block counters where the driver gives them: `-I`), PFC per priority (iproute2's
`dcb pfc show dev IF`, else Mellanox's `mlnx_qos -i IF`), ECN per priority (mlx5's sysfs
`/sys/class/net/IF/ecn/roce_np/enable/P` (notification point: the receiver sends CNPs) and
`roce_rp/enable/P` (reaction point: the sender slows down, DCQCN)) and the port speed (sysfs).

Every value names its source; a value that cannot be read is None with the reason. Parsers skip `#` lines
(the test fixtures' source notes).
"""
from __future__ import annotations

import os
import re
import subprocess
from telemetry.capture.host_tool import run_tool

_ACTIVE_FEC = re.compile(r"^\s*Active FEC encoding:\s*(.+?)\s*$", re.M)
_CONFIGURED_FEC = re.compile(r"^\s*(?:Supported/)?Configured FEC encodings:\s*(.+?)\s*$", re.M)
_LEGACY_FEC = re.compile(r"^\s*FEC encodings:\s*(.+?)\s*$", re.M)
_FEC_COUNTER = re.compile(r"^\s*(corrected_blocks|uncorrectable_blocks|corrected_bits):\s*(\d+)", re.M)
_PRIO_PFC = re.compile(r"prio-pfc((?:\s+\d:(?:on|off))+)")


def _text(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def parse_show_fec(text: str) -> dict:
    """ethtool --show-fec (4.15's `FEC encodings:` and later `Active FEC encoding:`), with -I's counters."""
    text = _text(text)
    active = _ACTIVE_FEC.search(text) or _LEGACY_FEC.search(text)
    configured = _CONFIGURED_FEC.search(text)
    counters = {m.group(1): int(m.group(2)) for m in _FEC_COUNTER.finditer(text)}
    return {"active": active.group(1) if active else None,
            "configured": configured.group(1).split() if configured else None,
            "corrected_blocks": counters.get("corrected_blocks"),
            "uncorrectable_blocks": counters.get("uncorrectable_blocks")}


def parse_dcb_pfc(text: str) -> list[int] | None:
    """`dcb pfc show dev IF`: the priorities with PFC on; None where the line is missing."""
    m = _PRIO_PFC.search(_text(text))
    if not m:
        return None
    return sorted(int(p) for p, state in re.findall(r"(\d):(on|off)", m.group(1)) if state == "on")


def parse_mlnx_qos(text: str) -> dict:
    """`mlnx_qos -i IF`: trust state and the priorities whose `enabled` column under PFC is 1."""
    text = _text(text)
    trust = re.search(r"Priority trust state:\s*(\S+)", text)
    pfc = None
    block = re.search(r"PFC configuration:\s*\n\s*priority:?((?:\s+\d)+)\s*\n\s*enabled:?((?:\s+\d)+)", text)
    if block:
        prios, enabled = block.group(1).split(), block.group(2).split()
        if len(prios) == len(enabled):
            pfc = [int(p) for p, e in zip(prios, enabled) if e == "1"]
    return {"trust": trust.group(1) if trust else None, "pfc_enabled": pfc}


def read_ecn(root: str, interface: str) -> dict | None:
    """{"np": [priorities], "rp": [priorities]} with ECN enabled (mlx5 sysfs), None without the directory."""
    base = os.path.join(root, "class", "net", interface, "ecn")
    if not os.path.isdir(base):
        return None
    out = {}
    for side in ("np", "rp"):
        d = os.path.join(base, f"roce_{side}", "enable")
        prios = []
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    if name.isdigit() and f.read().strip() == "1":
                        prios.append(int(name))
            except OSError:
                continue
        out[side] = sorted(prios)
    return out




def collect(interface: str, root: str = "/sys", run=subprocess.run) -> dict:
    """One NIC's FEC, PFC, ECN and speed, each with `sources[field]` or `reasons[field]`."""
    out: dict = {"sources": {}, "reasons": {}}
    speed = None
    try:
        with open(os.path.join(root, "class", "net", interface, "speed"), encoding="utf-8") as f:
            speed = int(f.read().strip())
    except (OSError, ValueError):
        pass
    out["speed_mbps"] = speed if speed and speed > 0 else None
    if out["speed_mbps"]:
        out["sources"]["speed_mbps"] = f"/sys/class/net/{interface}/speed"
    else:
        out["reasons"]["speed_mbps"] = f"/sys/class/net/{interface}/speed unreadable or -1 (link down, virtual)"

    text, why = run_tool(run, "ethtool", "-I", "--show-fec", interface, timeout=10, limit=120)
    if text is None:  # -I (counters) is newer than --show-fec
        text, why = run_tool(run, "ethtool", "--show-fec", interface, timeout=10, limit=120)
    out["fec"] = parse_show_fec(text) if text else None
    if out["fec"] and out["fec"]["active"]:
        out["sources"]["fec"] = f"ethtool --show-fec {interface}"
    else:
        out["fec"] = None
        out["reasons"]["fec"] = why or "ethtool --show-fec named no encoding"

    text, why = run_tool(run, "dcb", "pfc", "show", "dev", interface, timeout=10, limit=120)
    pfc, source = (parse_dcb_pfc(text), f"dcb pfc show dev {interface}") if text else (None, None)
    if pfc is None:
        qos, why2 = run_tool(run, "mlnx_qos", "-i", interface, timeout=10, limit=120)
        parsed = parse_mlnx_qos(qos) if qos else {}
        pfc, source = parsed.get("pfc_enabled"), f"mlnx_qos -i {interface}"
        if parsed.get("trust"):
            out["trust"] = parsed["trust"]
        why = "; ".join(w for w in (why, why2) if w) or "no PFC table in dcb's or mlnx_qos's output"
    out["pfc_priorities"] = pfc
    if pfc is not None:
        out["sources"]["pfc_priorities"] = source
    else:
        out["reasons"]["pfc_priorities"] = why

    out["ecn"] = read_ecn(root, interface)
    if out["ecn"] is not None:
        out["sources"]["ecn"] = f"/sys/class/net/{interface}/ecn/roce_{{np,rp}}/enable/*"
    else:
        out["reasons"]["ecn"] = f"no /sys/class/net/{interface}/ecn (not an mlx5 RoCE port)"
    return out
