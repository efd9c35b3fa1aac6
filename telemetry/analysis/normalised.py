"""One table of every fabric normalised to the first (the reference system), across what the comparison
measured: the GPU pair matrices (the sweep's NCCL pairs, and launch.p2p_bandwidth's copy-engine pairs when
its --out was the run directory; mean bandwidth and latency over the pairs), each collective's
average bus bandwidth from the sweeps, training throughput, and the step time of the profiled steps
(the fourth published evaluation's normalised table). A ratio above 1 is that many times the reference's
value; for times, the reference's value over this one's, so above 1 is always better.
"""
from __future__ import annotations

import json
import os
import statistics

from telemetry.rundir import StepKey


def _p2p(run_dir: str) -> dict | None:
    try:
        with open(os.path.join(run_dir, "collectives.json"), encoding="utf-8") as f:
            m = json.load(f).get("p2p_matrix")
    except (OSError, json.JSONDecodeError):
        return None
    if not m:
        return None
    bw = [v for i, row in enumerate(m["bandwidth_GBps"]) for j, v in enumerate(row) if i != j and v is not None]
    lat = [v for i, row in enumerate(m["latency_us"]) for j, v in enumerate(row) if i != j and v is not None]
    return {"p2p bidirectional bandwidth (GB/s, mean over pairs)": (statistics.fmean(bw) * 2 if bw else None, True),
            "p2p latency (us, mean over pairs)": (statistics.fmean(lat) if lat else None, False)}


def _p2p_bandwidth(run_dir: str) -> dict:
    """launch.p2p_bandwidth's result where its --out was the run directory: the copy engine's pairs with
    P2P enabled (the sample's default figures), mean over the ordered pairs."""
    from telemetry.analysis.p2p_matrix import measured
    e = ((measured(run_dir) or {}).get("engines") or {}).get("ce")
    if not e:
        return {}
    m = e["matrices"]

    def pairs(fam):
        x = (m.get(fam) or {}).get("enabled") or []
        v = [c for i, row in enumerate(x) for j, c in enumerate(row) if i != j and c is not None]
        return statistics.fmean(v) if v else None
    return {"p2p copy engine unidirectional bandwidth, P2P enabled (GB/s, mean over pairs)":
            (pairs("unidirectional"), True),
            "p2p copy engine bidirectional bandwidth, P2P enabled (GB/s, mean over pairs)": (pairs("bidirectional"), True),
            "p2p copy engine GPU latency, P2P enabled (us, mean over pairs)": (pairs("latency_gpu"), False)}


def _sweep(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "collectives.json"), encoding="utf-8") as f:
            ops = json.load(f).get("ops") or {}
    except (OSError, json.JSONDecodeError):
        return {}
    return {f"{op}: average busbw (GB/s)": (d.get("avg_busbw_GBps"), True) for op, d in ops.items()}


def figures(run_dirs: list[str], summary: dict | None, metrics_by_run: list[list[dict]]) -> dict[str, tuple]:
    """name -> (value, higher_is_better) for one fabric: with repeats, each figure is the mean over the runs
    that have it (the first run's alone made this table disagree with the averages beside it)."""
    found: dict[str, list] = {}
    for d in run_dirs:
        for k, (v, higher) in {**(_p2p(d) or {}), **_p2p_bandwidth(d), **_sweep(d)}.items():
            found.setdefault(k, ([], higher))[0].append(v)
    out: dict[str, tuple] = {k: (_mean(vals), higher) for k, (vals, higher) in found.items()}
    if summary:
        sps = ((summary.get("spread") or {}).get(StepKey.SAMPLES_PER_S) or {}).get("mean")
        out["throughput (samples/s)"] = (sps, True)
    per_run = []
    for metrics in metrics_by_run:
        prof = [r.get(StepKey.STEP_TIME_S) for r in metrics
                if r.get(StepKey.PROFILED) and r.get(StepKey.STEP_TIME_S) is not None]
        per_run.append(statistics.median(prof) if prof else None)
    if any(metrics_by_run):
        out["profiled step time (s, median)"] = (_mean(per_run), False)
    return out


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def table(labels: list[str], per_fabric: list[dict[str, tuple]]) -> tuple[str, list[str], list[list[str]]] | None:
    names = [n for n in dict.fromkeys(k for f in per_fabric for k in f)
             if any(f.get(n, (None,))[0] is not None for f in per_fabric)]
    if not names or len(per_fabric) < 2:
        return None
    rows = []
    for n in names:
        base = per_fabric[0].get(n, (None, True))
        cells = []
        for j, f in enumerate(per_fabric):
            v, higher = f.get(n, (None, True))
            if v is None:
                cells.append("n/a (not measured)")
            elif j == 0:
                cells.append(f"{v:.4g} (1x)")
            elif not base[0]:
                cells.append(f"{v:.4g} (no reference value)")
            else:
                ratio = v / base[0] if higher else base[0] / v if v else None
                cells.append(f"{v:.4g} ({ratio:.3g}x)" if ratio is not None else f"{v:.4g}")
        rows.append([n] + cells)
    return (f"Normalised to {labels[0]} (the reference system): value (ratio; above 1 is better, for times the "
            "reference's over this one's)", ["", *labels], rows)
