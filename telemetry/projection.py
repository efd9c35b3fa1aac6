"""Projecting a measured run's iteration time onto a fabric not at hand.

From one run we know, per step (medians over timed steps): the step time T, and per collective type
its bytes S (nccl-tests' size) and measured time t - taken on the rank that waited least (the cross-rank
minimum), since the others' extra time is waiting for a late peer, not communication. On a link of bandwidth B (bytes/s) a collective
over n ranks moves S x factor(n) bytes over its busiest link - that is what busbw means - so it takes

    t'(op) = L(op) + S x factor(n) / (B x efficiency)

where L(op) is the part of the measured time that does not scale with bandwidth (per-call software
overhead and latency: t - S x factor / (B_measured x efficiency), or all of t when the measured run's
links were not shaped) plus `latency_s` x calls where a latency for the new fabric is given.

Overlap: profiled windows tell how much communication was exposed. The overlapped part (comm - exposed)
can stay hidden behind the same compute, so

    T' = (T - exposed) + max(0, sum t'(op) - hidden),    hidden = measured comm - exposed

Shaped links (the lab's tbf, cloud shapers) hold a token bucket: after idling through the step's
compute, up to `burst` bytes pass at once, so only the rest waits for the rate.

Without profiled windows all communication counts as exposed (true for CPU/gloo steps, conservative
on GPUs). `efficiency` is the fraction of the line rate a collective achieves at large sizes: measure it
with a sweep on the target fabric (bench/) or take the default, measured for gloo over tbf links on
the development machines (all_reduce and send/recv busbw 92-96% of the shaped rate).
"""
from __future__ import annotations

from .formulas import bus_factor
from .report import summarize
from .runs import Run, median

DEFAULT_EFFICIENCY = 0.94


def measured_profile(run: Run, summary: dict | None = None) -> dict:
    """What the projection needs from a run, as medians over its timed steps (`summary`: the run's
    summarize() result when the caller already has it)."""
    s = summary or summarize(run)
    world = (run.info.get("layout") or {}).get("world_size") or len(run.info.get("hosts") or []) or 1
    lab = (run.info.get("fabric") or {}).get("lab") or {}
    ops = {}
    for op, c in s["comm"].items():
        steps = [r for r in run.timed_steps() if op in (r.get("comm") or {})]
        # the rank that arrived last waited least: its time is the collective itself, the others'
        # extra is waiting for it (imbalance, which a faster fabric does not remove)
        last_arrival = median([((r.get("ranks") or {}).get("comm_time_s_by_op") or {}).get(op, {}).get("min")
                               for r in steps])
        t = last_arrival if last_arrival is not None else c["time_per_step_s"]
        ops[op] = {"bytes": c["bytes_per_step"], "time_s": t or 0.0,
                   "calls": median([r["comm"][op]["count"] for r in steps]) or 0}
    comm = sum(o["time_s"] for o in ops.values())
    exposed = s["exposed"]["share"] * s["step_time_median_s"] if s["exposed"] and s["step_time_median_s"] else comm
    return {"step_time_s": s["step_time_median_s"], "comm_time_s": comm, "exposed_s": min(exposed, comm),
            "ops": ops, "world_size": world, "link_bps": lab.get("rate_bps"), "burst_bytes": lab.get("burst_bytes"),
            "label": run.name,
            # measured times leave out calls without a time: what is projected from them is partial too
            "partial": bool(s.get("comm_partial")), "untimed_bytes": s.get("comm_untimed_bytes_per_step")}


def _credit(burst_bytes: float, link_bps: float | None, idle_s: float) -> float:
    """Bytes a token-bucket-shaped link lets through at once after idling (0 for a NIC at line rate)."""
    if not burst_bytes or not link_bps:
        return 0.0
    return min(burst_bytes, link_bps / 8 * max(idle_s, 0.0))


def project(profile: dict, link_bps: float | None, latency_s: float = 0.0,
            efficiency: float = DEFAULT_EFFICIENCY, burst_bytes: float = 0.0) -> dict:
    """Predicted step time on a fabric of `link_bps` bits/s per link (None: unshaped, as fast as measured).

    `burst_bytes`: the token bucket of a shaped link (the lab's tbf burst; 0 for real NICs). The link idles
    while the step computes, so up to that many bytes of each step pass without waiting for tokens.
    """
    if profile["step_time_s"] is None:
        raise ValueError("the measured run has no timed steps to project from")
    n = profile["world_size"]
    measured_Bps = profile["link_bps"] / 8 * efficiency if profile["link_bps"] else None
    target_Bps = link_bps / 8 * efficiency if link_bps else None
    idle = profile["step_time_s"] - profile["comm_time_s"]
    wires = {op: o["bytes"] * bus_factor(op, n) for op, o in profile["ops"].items()}
    total = sum(wires.values()) or 1.0
    credit_measured = _credit(profile.get("burst_bytes") or 0, profile["link_bps"], idle)
    credit_target = _credit(burst_bytes, link_bps, idle)
    per_op, comm_new = {}, 0.0
    for op, o in profile["ops"].items():
        wire = wires[op]
        share = wire / total  # the step's credit, spread over its collectives by their bytes
        fixed = o["time_s"] - (max(wire - credit_measured * share, 0.0) / measured_Bps if measured_Bps else 0.0)
        fixed = max(fixed, 0.0)
        on_wire = max(wire - credit_target * share, 0.0)
        t_new = fixed + (on_wire / target_Bps if target_Bps else 0.0) + latency_s * o["calls"]
        per_op[op] = {"bytes": o["bytes"], "wire_bytes": wire, "measured_s": o["time_s"], "fixed_s": fixed,
                      "predicted_s": t_new}
        comm_new += t_new
    hidden = profile["comm_time_s"] - profile["exposed_s"]
    compute = profile["step_time_s"] - profile["exposed_s"]
    step = compute + max(0.0, comm_new - hidden)
    return {"step_time_s": step, "comm_time_s": comm_new, "compute_s": compute, "hidden_s": hidden,
            "link_bps": link_bps, "latency_s": latency_s, "efficiency": efficiency, "by_op": per_op,
            "from": profile["label"], "partial": bool(profile.get("partial")),
            "untimed_bytes": profile.get("untimed_bytes")}
