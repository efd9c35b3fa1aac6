"""Tracer health: how much of the communication the collective timing covers, and why the rest has no time.

One dict shape for a step (metrics.jsonl `comm_health`, built by telemetry/capture/comm_step.py) and for
a run (run.json `telemetry.comm_health`, the steps added up), read by the report and the comparison. Pure
Python: every room imports it.

Counts, in total and per process group (`by_group`):
- `calls`, `bytes`: the calls the tracer saw; `timed`, `timed_bytes`: those with a duration;
- why the others have none: `late` (no completion report when the step closed), `no_duration` (a report
  without a duration), `captured` (issued in CUDA graph capture: no report comes), `compiled` (traced into a
  torch.compile graph), `no_timing` (a group with neither a completion hook nor CUDA events), `other_untimed`
  (gloo functional collectives, asynchronous calls under the CUDA-event fallback, ...; their reasons in the
  group's `other_reasons`);
- what happened between steps: `reported_after_close` (reports of earlier steps' late calls that came
  after all; those steps' records keep them untimed), `never_reported` (late calls given up on), and
  `unclaimed_reports` (completion reports no traced call claimed: collectives the tracer never saw, such as
  those run inside compiled graphs or issued from C++), `queue_full` (a group's report queue was found full at
  a drain: its oldest reports were lost).
"""
from __future__ import annotations

import math

UNTIMED = ("late", "no_duration", "captured", "compiled", "no_timing", "other_untimed")
BETWEEN = ("reported_after_close", "never_reported", "unclaimed_reports", "queue_full")
COUNTS = ("calls", "bytes", "timed", "timed_bytes", *UNTIMED, *BETWEEN)
WORDS = {"late": "not reported when the step closed", "no_duration": "reported without a duration",
         "captured": "issued in CUDA graph capture", "compiled": "traced into a compiled graph",
         "no_timing": "on a group with no timing mechanism", "other_untimed": "untimed for another reason",
         "never_reported": "never reported", "unclaimed_reports": "completion reports matched no traced call",
         "queue_full": "times the group's report queue was found full (the oldest reports lost)"}
FULL = "timing covers 100% of calls and bytes"


def empty() -> dict:
    return dict.fromkeys(COUNTS, 0)


def add(total: dict, part: dict) -> dict:
    """Add `part`'s counts (and its groups') into `total`, in place."""
    for k in COUNTS:
        total[k] = total.get(k, 0) + (part.get(k) or 0)
    for name, g in (part.get("by_group") or {}).items():
        mine = total.setdefault("by_group", {}).setdefault(name, {**empty(), "timing": g.get("timing")})
        for k in COUNTS:
            mine[k] = mine.get(k, 0) + (g.get(k) or 0)
        if mine.get("timing") is None:
            mine["timing"] = g.get("timing")
        if g.get("other_reasons"):
            mine["other_reasons"] = sorted(set(mine.get("other_reasons") or ()) | set(g["other_reasons"]))
    return total


def share(part: int, whole: int) -> float | None:
    """part / whole in percent, never rounded up to 100 when something is missing; None for no whole."""
    if not whole:
        return None
    if part >= whole:
        return 100.0
    return math.floor(1000.0 * part / whole) / 10.0


def finish(h: dict) -> dict:
    """Add the shares and the verdict to a dict of counts (step or run); returns it."""
    h["calls_pct"] = share(h.get("timed", 0), h.get("calls", 0))
    h["bytes_pct"] = share(h.get("timed_bytes", 0), h.get("bytes", 0))
    h["verdict"] = verdict(h)
    return h


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}%"


def verdict(h: dict) -> str:
    """One sentence: FULL, or the shares covered and what is missing, group by group."""
    groups = h.get("by_group") or {}
    if not h.get("calls"):
        head = "no collectives traced"
    elif h.get("timed", 0) >= h["calls"]:
        head = FULL
    else:
        missing = []
        for name in sorted(groups):
            g = groups[name]
            why = [f"{g[k]} {WORDS[k]}" + (f" ({'; '.join(g['other_reasons'])})"
                                          if k == "other_untimed" and g.get("other_reasons") else "")
                   for k in UNTIMED if g.get(k)]
            if why:
                missing.append(f"{name}: " + ", ".join(why))
        head = (f"timing covers {_pct(share(h['timed'], h['calls']))} of calls and "
                f"{_pct(share(h.get('timed_bytes', 0), h.get('bytes', 0)))} of bytes; missing: "
                + ("; ".join(missing) or "calls of unknown groups"))
    notes = []
    for k in ("never_reported", "unclaimed_reports", "queue_full"):
        where = [f"{g[k]} on {name}" for name, g in sorted(groups.items()) if g.get(k)]
        if where:
            notes.append(f"{WORDS[k]}: {', '.join(where)}")
    if any(g.get("unclaimed_reports") for g in groups.values()):
        notes.append("those are collectives the tracer did not see (compiled graphs, calls from C++)")
    return head + ("; " + "; ".join(notes) if notes else "")


def differs(healths: dict[str, dict | None]) -> str | None:
    """A comparison's note when its variants' timing covers different shares (label -> run health), else None."""
    known = {label: h for label, h in healths.items() if h}
    if not known:  # run directories from before the health was recorded
        return None
    shares = {label: (h.get("calls_pct"), h.get("bytes_pct")) for label, h in known.items()}
    if len(set(shares.values())) <= 1 and len(known) == len(healths):
        return None
    parts = [f"{label}: {_pct(c)} of calls, {_pct(b)} of bytes" for label, (c, b) in shares.items()]
    parts += [f"{label}: not recorded" for label in healths if label not in known]
    return ("the variants' collective timing covers different shares (" + "; ".join(parts) + "): their "
            "communication times are not like for like")
