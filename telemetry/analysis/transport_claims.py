"""A fabric's claimed transport held against what its runs recorded (run.json's fabric identity).

Shared by the evaluation runner (a verdict per run, exit 3 on a mismatch) and `telemetry compare
--expect-transport` (the verdict in the compared report itself), so one rule decides both.
"""
from __future__ import annotations

import difflib
import re

# transport words a claim may use; anything else names an interface or HCA (eth0, fab0, mlx5_0)
TRANSPORTS = ("ib", "infiniband", "roce", "efa", "socket", "tcp", "tcpx", "intra-node")
_IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")  # a Linux interface or RDMA device name
_SYNONYMS = {"ib": "infiniband", "socket": "tcp"}
_DETECTED_AS = {"loopback": "intra-node", "none (single process)": "intra-node"}


def claim_problem(value, path: str) -> str | None:
    """None when `value` is a transport word or an interface name (with a digit: eth0, fab0, mlx5_0, or lo);
    else the problem, with a did-you-mean for a near transport word (IB, Infiniband, rcoe)."""
    allowed = f"one of {', '.join(TRANSPORTS)}, or an interface name such as eth0 or fab0"
    if not isinstance(value, str) or not value:
        return f"{path}: got {value!r}; expected {allowed}"
    if value in TRANSPORTS or value == "lo":
        return None
    if _IFACE.match(value) and any(c.isdigit() for c in value):
        return None
    close = difflib.get_close_matches(value.lower(), TRANSPORTS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{path}: got {value!r}; {hint}expected {allowed}"


def used_interfaces(fabric: dict) -> list[str]:
    """The interfaces (gloo) or socket interfaces / HCAs (NCCL) the run's traffic used."""
    names = set()
    if (fabric.get("gloo") or {}).get("interface"):
        names.add(fabric["gloo"]["interface"])
    for d in (fabric.get("nccl") or {}).get("devices") or []:
        if d.get("device"):
            names.add(d["device"])
    return sorted(names)


def check_transport(expected: str, fabric: dict | None) -> dict:
    """Hold a claim against one run's fabric identity: verdict ok, mismatch or unknown (with the reason)."""
    fabric = fabric or {}
    detected = fabric.get("transport")
    used = used_interfaces(fabric)
    out = {"expected": expected, "detected": detected, "interfaces": used, "backend": fabric.get("backend")}
    if expected in TRANSPORTS:
        want = _SYNONYMS.get(expected, expected)
        if detected is None:
            why = ((fabric.get("nccl") or {}).get("unknown") or {}).get("transport") or "run.json has no transport"
            return {**out, "verdict": "unknown", "reason": f"transport not detected: {why}"}
        ok = _DETECTED_AS.get(detected, detected) == want
        return {**out, "verdict": "ok" if ok else "mismatch",
                "reason": None if ok else f"expected {expected}, the run used {detected}"
                + (f" over {', '.join(used)}" if used else "")}
    if not used:
        return {**out, "verdict": "unknown", "reason": "run.json names no interface or HCA the traffic used"}
    ok = used == [expected]
    return {**out, "verdict": "ok" if ok else "mismatch",
            "reason": None if ok else f"expected interface {expected}, the run used {', '.join(used)}"}


def group_verdict(checks: list[dict]) -> str:
    """One fabric's runs: mismatch if any mismatched, else unknown if any could not be checked, else ok."""
    verdicts = {c["verdict"] for c in checks}
    return "mismatch" if "mismatch" in verdicts else "unknown" if "unknown" in verdicts or not checks else "ok"
