"""A step's collective calls as records (`Call`), and their per-step accounting: summaries, per-group totals, tracer health."""
from __future__ import annotations

from dataclasses import dataclass, field

from telemetry import coverage
from telemetry.capture.comm_groups import UNKNOWN_GROUP
from telemetry.formulas import bus_factor

# Why a call has no time (the summary lists the reasons of its untimed calls).
LATE = "completion reported after the step ended"
FUNCOL_GLOO = "functional collectives are timed on NCCL only"
NO_FUTURE = "this backend's work has no future to time it"
UNFINISHED = "not complete when the step ended"
CAPTURED = "issued during CUDA graph capture (no completion report)"
COMPILED = ("traced while torch.compile was compiling (run inside the compiled graph, or after a graph break, "
            "without the tracer: its works' reports show as unclaimed)")
NO_DURATION = "the completion report carried no duration"
EVENTS_ASYNC = ("asynchronous NCCL call on a group timed by CUDA events (the end of its work is not on the issuing "
                "stream)")


@dataclass(eq=False)  # identity, not field equality: queues remove the very call that completed
class Call:
    op: str
    nbytes: int
    group_size: int
    backend: str | None
    source: str
    t_issue: float
    t_done: float | None = None
    duration_s: float | None = None
    untimed_reason: str | None = None
    blocking: bool = False  # completed on the calling thread before the call returned (gloo, not async)
    t_returned: float | None = None  # when the call gave the caller back its thread (issuing can take a while)
    # NCCL: filled from completion reports, never from a Work
    types: frozenset = frozenset()
    token: int | None = None
    works: int | None = None  # reports expected; None while the call is still issuing
    seen: int = 0
    acc_s: float = 0.0
    bad: bool = False
    queued: bool = False
    closed: bool = False
    step_no: int = 0
    group: dict | None = None  # group_identity() of the process group it ran on (None: unknown)
    t_start: float | None = None  # NCCL: where its works ran on the device, on the host timeline (`place`)
    finished_seen: float | None = None  # NCCL: when the watchdog saw its last work complete (host clock)
    coalesced: int = 0  # calls folded into this one _coalescing_manager block's single work
    folded: bool = False  # this call is one of those: the block's entry counts and times it
    replayed: bool = False  # issued in a CUDA graph's capture: counted at each replay of the graph, not here
    events: list | None = None  # EVENTS: [start, end] CUDA events around the call, until they are read
    timing: str | None = None  # NCCL: HOOK or EVENTS, the mechanism that times it

    def resolve(self) -> None:
        if self.duration_s is not None or self.token is not None:
            return
        if self.t_done is not None:
            self.duration_s = max(self.t_done - self.t_issue, 0.0)
        elif self.untimed_reason is None:
            self.untimed_reason = UNFINISHED


def call_group(call: "Call") -> str:
    return (call.group or {}).get("name") or UNKNOWN_GROUP


def untimed_kind(reason: str | None) -> str:
    """The tracer-health category of an untimed call, from its reason."""
    if reason == LATE:
        return "late"
    if reason == NO_DURATION:
        return "no_duration"
    if reason == CAPTURED:
        return "captured"
    if reason == COMPILED:
        return "compiled"
    if reason and reason.startswith("no completion hook"):
        return "no_timing"
    return "other_untimed"


@dataclass
class StepComm:
    calls: list[Call] = field(default_factory=list)
    # what the tracer saw between the previous step's end and this one's, by group name: reports of earlier
    # steps' calls that came after those steps closed, calls given up on, reports no traced call claimed
    events: dict = field(default_factory=dict)

    def summary(self) -> dict:
        per_op: dict[str, dict] = {}
        for c in self.calls:
            c.resolve()
            s = per_op.setdefault(c.op, {"count": 0, "bytes": 0, "time_s": 0.0, "untimed": 0, "untimed_bytes": 0,
                                         "_bus": 0.0, "_reasons": set()})
            s["count"] += 1
            s["bytes"] += c.nbytes
            if c.duration_s is None:
                s["untimed"] += 1
                s["untimed_bytes"] += c.nbytes
                s["_reasons"].add(c.untimed_reason or "unknown")
            else:
                s["time_s"] += c.duration_s
                s["_bus"] += c.nbytes * bus_factor(c.op, max(c.group_size, 1))
        out = {}
        for op, s in per_op.items():
            timed = s["count"] - s["untimed"]
            time_s = s["time_s"] if timed else None
            busbw = s["_bus"] / time_s / 1e9 if time_s else None
            out[op] = {"count": s["count"], "bytes": s["bytes"], "time_s": time_s, "untimed": s["untimed"],
                       "untimed_bytes": s["untimed_bytes"], "busbw_GBps": busbw}
            if s["untimed"]:
                out[op]["untimed_reason"] = "; ".join(sorted(s["_reasons"]))
        return out

    def health(self) -> dict:
        """The step's tracer health (telemetry/coverage.py): calls timed, and why the others are not, per group."""
        out = coverage.empty()
        groups: dict[str, dict] = {}
        for c in self.calls:
            c.resolve()
            name = (c.group or {}).get("name") or UNKNOWN_GROUP
            g = groups.setdefault(name, {**coverage.empty(), "timing": None})
            g["timing"] = g["timing"] or c.timing or (("host" if c.backend == "gloo" else c.backend)
                                                      if c.backend != "nccl" else None)
            g["calls"] += 1
            g["bytes"] += c.nbytes
            if c.duration_s is not None:
                g["timed"] += 1
                g["timed_bytes"] += c.nbytes
            else:
                kind = untimed_kind(c.untimed_reason)
                g[kind] += 1
                if kind == "other_untimed":
                    g.setdefault("other_reasons", set()).add(c.untimed_reason or "unknown")
        for kind, by_group in self.events.items():
            for name, n in by_group.items():
                groups.setdefault(name, {**coverage.empty(), "timing": None})[kind] += n
        for g in groups.values():
            if "other_reasons" in g:
                g["other_reasons"] = sorted(g["other_reasons"])
        coverage.add(out, {"by_group": groups})
        for g in groups.values():
            for k in coverage.COUNTS:
                out[k] += g[k]
        return coverage.finish(out)

    def group_summary(self) -> dict:
        """The step's communication per process group: {name: {dim, size, scope, bytes, count, time_s,
        untimed, untimed_bytes, busbw_GBps, by_op}}; busbw takes the bus factor at that group's size."""
        by_group: dict[str, list[Call]] = {}
        for c in self.calls:
            by_group.setdefault((c.group or {}).get("name") or UNKNOWN_GROUP, []).append(c)
        out = {}
        for name, calls in by_group.items():
            ident = calls[0].group or {"dim": None, "size": max(calls[0].group_size, 1), "scope": None,
                                       "scope_reason": "the call's process group is not known"}
            entry = {"dim": ident.get("dim"), "size": ident.get("size"), "scope": ident.get("scope")}
            if ident.get("scope") is None:
                entry["scope_reason"] = ident.get("scope_reason")
            if ident.get("hosts") is not None:
                entry["hosts"] = ident["hosts"]
            if ident.get("ranks") is not None and len(ident["ranks"]) <= 64:
                entry["ranks"] = ident["ranks"]
            by_op = StepComm(calls).summary()
            entry.update(group_totals(by_op, ident.get("size") or 1))
            entry["by_op"] = by_op
            out[name] = entry
        return out



def group_totals(by_op: dict, size: int) -> dict:
    """A group's totals over its collective types: bytes, count, time (None if no call was timed), untimed
    bytes and busbw at the group's size (the timed calls' bus bytes over their time)."""
    timed = [(op, s) for op, s in by_op.items() if s["time_s"] is not None]
    time_s = sum(s["time_s"] for _, s in timed) if timed else None
    bus = sum(s["busbw_GBps"] * s["time_s"] for _, s in timed if s["busbw_GBps"] is not None)
    return {"bytes": sum(s["bytes"] for s in by_op.values()), "count": sum(s["count"] for s in by_op.values()),
            "time_s": time_s, "untimed": sum(s["untimed"] for s in by_op.values()),
            "untimed_bytes": sum(s["untimed_bytes"] for s in by_op.values()),
            "busbw_GBps": bus / time_s if time_s else None}


def totals(summary: dict) -> tuple[int, float | None]:
    """Total bytes and total known time over all collective types of a step."""
    nbytes = sum(s["bytes"] for s in summary.values())
    times = [s["time_s"] for s in summary.values() if s["time_s"] is not None]
    return nbytes, (sum(times) if times else None)


def untimed_bytes(summary: dict) -> int | None:
    """Bytes of the step's calls with no time (None for records written before this field existed)."""
    if any("untimed_bytes" not in s and s.get("untimed") for s in summary.values()):
        return None
    return sum(s.get("untimed_bytes", 0) for s in summary.values())
