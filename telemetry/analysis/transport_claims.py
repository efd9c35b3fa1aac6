"""A fabric's claimed transport held against what its runs recorded (run.json's fabric identity).

Shared by the evaluation runner (a verdict per run, exit 3 on a mismatch) and `telemetry compare
--expect-transport` (the verdict in the compared report itself), so one rule decides both.
"""
from __future__ import annotations

# transport words a claim may use; anything else names an interface or HCA (eth0, fab0, mlx5_0)
TRANSPORTS = ("ib", "infiniband", "roce", "efa", "socket", "tcp", "tcpx", "intra-node")
_SYNONYMS = {"ib": "infiniband", "socket": "tcp"}
_DETECTED_AS = {"loopback": "intra-node", "none (single process)": "intra-node"}


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
