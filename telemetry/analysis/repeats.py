"""Repeats: several runs of one fabric, reduced to a mean and a spread for every figure of a comparison.

The spread is the sample standard deviation (n - 1) next to n, min and max: with the two to five repeats a
fabric evaluation can afford, that is what a reader can judge; a single run has no spread (None, not 0).
"""
from __future__ import annotations

import statistics


def spread(values) -> dict | None:
    """{mean, sd, n, min, max} of the known values (None ignored); None when no value is known."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    return {"mean": statistics.fmean(known), "sd": statistics.stdev(known) if len(known) > 1 else None,
            "n": len(known), "min": min(known), "max": max(known)}


def _merge_block(blocks: list[dict | None]) -> dict | None:
    blocks = [b for b in blocks if b]
    if not blocks:
        return None
    out = {}
    for key in ("time_us", "algbw_GBps", "busbw_GBps"):
        s = spread(b.get(key) for b in blocks)
        out[key] = s["mean"] if s else None
        if s and s["n"] > 1:
            out[f"{key}_sd"] = s["sd"]
    wrong = [b.get("wrong") for b in blocks]
    out["wrong"] = None if None in wrong else sum(wrong)
    out["merged_sweeps"] = len(blocks)
    return out


def merge_sweeps(sweeps: list[dict]) -> dict:
    """One sweep from several of one fabric: per collective and size, the mean of each block's time and
    bandwidths (with `<key>_sd` where two or more repeats have the size), latency means likewise.
    A single sweep comes back unchanged."""
    if len(sweeps) == 1:
        return sweeps[0]
    first = sweeps[0]
    ops = {}
    # the collectives every repeat measured, and each at every size any repeat measured (a size the first repeat
    # lacked was dropped), merged over the repeats that have it: its blocks' merged_sweeps says how many
    for op in first["ops"]:
        if not all(op in s["ops"] for s in sweeps):
            continue
        having = [s["ops"][op] for s in sweeps]
        sizes = sorted({r["size"] for h in having for r in h["rows"]})
        rows = []
        for size in sizes:
            same = [r for h in having if (r := next((x for x in h["rows"] if x["size"] == size), None)) is not None]
            rows.append({**same[0], **{b: _merge_block([r.get(b) for r in same]) for b in ("out_of_place", "in_place")}})
        avg = spread(h.get("avg_busbw_GBps") for h in having)
        ops[op] = {**having[0], "rows": rows, "avg_busbw_GBps": avg["mean"] if avg else None,
                   "avg_busbw_GBps_sd": avg["sd"] if avg else None}
    latency, latency_sd, latency_n = {}, {}, {}
    for key in dict.fromkeys(k for sw in sweeps for k in sw.get("latency_us") or {}):
        s = spread((sw.get("latency_us") or {}).get(key) for sw in sweeps)
        if s:
            latency[key], latency_sd[key], latency_n[key] = s["mean"], s["sd"], s["n"]
    return {**first, "ops": ops, "latency_us": latency, "latency_sd_us": latency_sd, "latency_n": latency_n,
            "merged_sweeps": len(sweeps)}
