"""`python -m telemetry compare RUN_A RUN_B [...] --out DIR`: the tables a fabric evaluation publishes.

The first run is the baseline: percentages are relative to it. Runs of different recipes are refused
(a fabric comparison must change the fabric only) unless --allow-mismatch is given.
"""
from __future__ import annotations

import json
import math
import os

from .projection import measured_profile, project
from .report import fmt, fmt_bytes, partial_note, summarize, write_documents
from .runs import Run, RunError, load_run

# Recipe parts that legitimately differ between runs of one fabric comparison.
IGNORED_KEYS = {"output_dir", "name", "recipe_path", "telemetry", "fabric", "distributed"}


class CompareError(Exception):
    """Runs that cannot be compared; the message says why and what to do."""


def _flatten(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def recipe_differences(a: Run, b: Run) -> list[str]:
    ra = {k: v for k, v in _flatten(a.info.get("recipe")).items() if k.split(".")[0] not in IGNORED_KEYS}
    rb = {k: v for k, v in _flatten(b.info.get("recipe")).items() if k.split(".")[0] not in IGNORED_KEYS}
    diffs = [f"{k} ({ra.get(k)!r} vs {rb.get(k)!r})" for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
    wa, wb = (a.info.get("layout") or {}).get("world_size"), (b.info.get("layout") or {}).get("world_size")
    if wa != wb:
        diffs.append(f"world size ({wa} vs {wb})")
    return diffs


def label(run: Run) -> str:
    fab = run.info.get("fabric") or {}
    lab = fab.get("lab") or {}
    if lab:
        return f"{lab.get('rate')} lab" if lab.get("rate_bps") else "unshaped lab"
    return f"{fab.get('transport') or fab.get('backend') or 'run'}: {run.name}"


def _pct(value, base):
    if value is None or base in (None, 0):
        return None
    return (value - base) / base


def _fmt_pct(p):
    return "" if p is None else f" ({p * 100:+.1f}%)"


def loss_parity(runs: list[Run]) -> dict:
    base = {r["step"]: r["loss"] for r in runs[0].metrics if r.get("loss") is not None}
    worst, at = 0.0, None
    for run in runs[1:]:
        for r in run.metrics:
            if r.get("step") in base and r.get("loss") is not None:
                d = abs(r["loss"] - base[r["step"]])
                if d > worst:
                    worst, at = d, r["step"]
    common = min(len(base), *(len(r.metrics) for r in runs[1:])) if len(runs) > 1 else len(base)
    if worst == 0.0:
        verdict = "identical"
    elif worst <= 1e-4 * max(abs(v) for v in base.values()):
        verdict = "equal within 1e-4 (summation order)"
    else:
        verdict = f"DIFFERENT: max |delta loss| {worst:.3g} at step {at}"
    return {"verdict": verdict, "max_abs_diff": worst, "at_step": at, "steps_compared": common}


# ---------------------------------------------------------------- sweeps

def _load(path: str) -> Run:
    """A run directory, or an nccl-tests text file (the user's own nccl-tests run, a vendor's published table)."""
    if os.path.isfile(path):
        from .nccl_tests import NcclTestsError, as_run
        try:
            return as_run(path)
        except NcclTestsError as exc:
            raise CompareError(str(exc)) from None
    return load_run(path)


def _sweep(run: Run) -> dict | None:
    if "nccl_tests" in run.info:  # read from a text file
        return run.info["nccl_tests"]
    path = os.path.join(run.path, "collectives.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _best_block(row):
    blocks = [b for b in (row.get("out_of_place"), row.get("in_place")) if b]
    return min(blocks, key=lambda b: b["time_us"]) if blocks else None


def compare_sweeps(runs, labels, sweeps, out, plt) -> tuple[list, list]:
    tables, figures = [], []
    ops = [op for op in sweeps[0]["ops"] if all(op in s["ops"] for s in sweeps)]
    if not ops:
        raise CompareError("no collective in common: " + "; ".join(
            f"{lab} has {', '.join(s['ops']) or 'none'}" for lab, s in zip(labels, sweeps)))
    header = ["collective", "size (B)"] + [f"{lab} time (us)" for lab in labels] + [f"{lab} busbw (GB/s)" for lab in labels]
    rows = []
    for op in ops:
        base_rows = sweeps[0]["ops"][op]["rows"]
        picks = sorted({0, len(base_rows) // 2, len(base_rows) - 1})
        for i in picks:
            size = base_rows[i]["size"]
            blocks = []
            for s in sweeps:
                match = next((r for r in s["ops"][op]["rows"] if r["size"] == size), None)
                blocks.append(_best_block(match) if match else None)
            t0 = blocks[0]["time_us"] if blocks[0] else None
            rows.append([op, str(size)] + [fmt(b["time_us"]) + (_fmt_pct(_pct(b["time_us"], t0)) if j else "")
                                           if b else "n/a" for j, b in enumerate(blocks)]
                        + [fmt(b["busbw_gbps"]) if b else "n/a" for b in blocks])
    tables.append(("Collectives: time and bus bandwidth (smallest, middle, largest size)", header, rows))
    avg_rows = [[op] + [fmt(s["ops"][op]["avg_busbw_gbps"]) for s in sweeps] for op in ops]
    tables.append(("Average bus bandwidth (GB/s)", ["collective"] + labels, avg_rows))
    lat_keys = [k for k in sweeps[0].get("latency_us", {}) if all(k in s.get("latency_us", {}) for s in sweeps)]
    lat_rows = []
    for k in lat_keys:
        base = sweeps[0]["latency_us"][k]
        vals = [s["latency_us"][k] for s in sweeps]
        lat_rows.append([k.removesuffix("_us")] + [fmt(v) + (f" ({_pct(v, base) * 100:+.0f}%)" if j and base else "")
                                                    for j, v in enumerate(vals)])
    tables.append(("Small-message latency (us), change relative to the first run", ["test"] + labels, lat_rows))
    for op in ops:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for lab, s in zip(labels, sweeps):
            pts = [(r["size"], _best_block(r)) for r in s["ops"][op]["rows"] if _best_block(r)]
            a1.loglog([p[0] for p in pts], [p[1]["time_us"] for p in pts], "o-", label=lab, ms=3)
            a2.semilogx([p[0] for p in pts], [p[1]["busbw_gbps"] for p in pts], "o-", label=lab, ms=3)
        a1.set_xlabel("size (B)"), a1.set_ylabel("time (us)"), a1.legend(fontsize=8), a1.grid(alpha=0.3)
        a2.set_xlabel("size (B)"), a2.set_ylabel("busbw (GB/s)"), a2.grid(alpha=0.3)
        fig.suptitle(op)
        fig.tight_layout()
        name = f"sweep_{op}.png"
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        figures.append((name, f"{op}: time and bus bandwidth versus size"))
    return tables, figures


# ---------------------------------------------------------------- training

def compare_training(runs, labels, out, plt) -> tuple[list, list, dict]:
    sums = [summarize(r) for r in runs]
    b = sums[0]

    def row(name, key, unit="", pct=True, fn=None):
        vals = [fn(s) if fn else s.get(key) for s in sums]
        return [name] + [fmt(v, unit) + (_fmt_pct(_pct(v, vals[0])) if pct and j and isinstance(v, float) else "")
                         for j, v in enumerate(vals)]

    energy = lambda k: (lambda s: s["energy"].get(k))  # noqa: E731
    rows = [
        row("iteration time, median", "step_time_median_s", "s"), row("iteration time, p95", "step_time_p95_s", "s"),
        row("samples/s", "samples_per_s"), row("tokens/s", "tokens_per_s"),
        ["communication share"] + [fmt(s["comm_share"], "%") + partial_note(s) for s in sums],
        row("exposed communication share", None, "%", pct=False, fn=lambda s: (s["exposed"] or {}).get("share")),
        row("straggler spread", "straggler_s", "s", pct=False),
        row("energy per step", None, "J", fn=energy("per_step_j")),
        row("energy per sample", None, "J", fn=energy("per_sample_j")),
        ["transport detected"] + [str(s["transport"]) for s in sums],
        ["expected fabric"] + [f"{(s['expectation'] or {}).get('expected', 'any')}: "
                               + {True: "match", False: "MISMATCH", None: "not checked"}[(s["expectation"] or {}).get("match")]
                               for s in sums],
        ["counter verdict"] + [str(s["counters"].get("verdict")) for s in sums],
    ]
    parity = loss_parity(runs)
    tables = [("Training: iteration time, throughput, communication, energy (relative to the first run)",
               ["", *labels], rows),
              ("Loss-curve parity", ["", ""], [["verdict", parity["verdict"]],
                                               ["steps compared", str(parity["steps_compared"])]])]
    comm_ops = sorted({op for s in sums for op in s["comm"]})
    comm_rows = [[op] + [fmt((s["comm"].get(op) or {}).get("time_per_step_s"), "s") + " / "
                         + fmt((s["comm"].get(op) or {}).get("busbw_gbps"), "GB/s")
                         + (" (partial)" if (s["comm"].get(op) or {}).get("partial") else "") for s in sums]
                 for op in comm_ops]
    tables.append(("Communication per step: time / busbw (median)", ["collective", *labels], comm_rows))

    # projection from the baseline to every other run's link rate, against what was measured
    prof = measured_profile(runs[0], sums[0])
    proj_rows, proj = [], []
    for run, lab, s in zip(runs[1:], labels[1:], sums[1:]):
        links = (run.info.get("fabric") or {}).get("lab") or {}
        rate = links.get("rate_bps")
        if rate is None or s["step_time_median_s"] is None:
            continue
        p = project(prof, rate, burst_bytes=links.get("burst_bytes") or 0)
        err = _pct(p["step_time_s"], s["step_time_median_s"])
        proj.append({"label": lab, "rate_bps": rate, "predicted_s": p["step_time_s"],
                     "measured_s": s["step_time_median_s"], "error": err, "partial": p["partial"]})
        proj_rows.append([lab, fmt(p["step_time_s"], "s"), fmt(s["step_time_median_s"], "s"), f"{err * 100:+.1f}%"])
    if proj_rows:
        # the projection rescales measured collective times: untimed calls are missing from them
        caveat = (f"; partial: the baseline has {fmt_bytes(prof['untimed_bytes'])} per step untimed"
                  if prof.get("partial") else "")
        tables.append((f"Projection from {labels[0]} (compute + bytes x bus factor / rate): predicted vs measured"
                       + caveat, ["fabric", "predicted iteration", "measured iteration", "error"], proj_rows))

    figures = []
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for lab, run in zip(labels, runs):
        ax.plot([r["step"] for r in run.metrics], [r.get("loss") for r in run.metrics], label=lab, alpha=0.8)
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    ax.set_title(f"loss parity: {parity['verdict']}", fontsize=9)
    fig.tight_layout(), fig.savefig(os.path.join(out, "loss.png"), dpi=110), plt.close(fig)
    figures.append(("loss.png", "Loss curves overlaid"))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for lab, run in zip(labels, runs):
        ax.plot([r["step"] for r in run.metrics], [r.get("step_time_s") for r in run.metrics], label=lab)
    ax.set_xlabel("step"), ax.set_ylabel("step time (s)"), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout(), fig.savefig(os.path.join(out, "step_time.png"), dpi=110), plt.close(fig)
    figures.append(("step_time.png", "Iteration time per step"))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = range(len(runs))
    bottom = [0.0] * len(runs)
    for op in comm_ops:
        vals = [(s["comm"].get(op) or {}).get("time_per_step_s") or 0.0 for s in sums]
        ax.bar(x, vals, bottom=bottom, label=op)
        bottom = [a + v for a, v in zip(bottom, vals)]
    ax.plot(list(x), [s["step_time_median_s"] or 0 for s in sums], "k_", ms=40, mew=2, label="iteration time")
    ax.set_xticks(list(x), labels, fontsize=8), ax.set_ylabel("seconds per step")
    ax.legend(fontsize=8, markerscale=0.25)
    fig.tight_layout(), fig.savefig(os.path.join(out, "comm.png"), dpi=110), plt.close(fig)
    figures.append(("comm.png", "Communication time per step by collective, against the iteration time"))
    if proj:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        xs = range(len(proj))
        ax.bar([i - 0.2 for i in xs], [p["predicted_s"] for p in proj], width=0.4, label="predicted")
        ax.bar([i + 0.2 for i in xs], [p["measured_s"] for p in proj], width=0.4, label="measured")
        ax.set_xticks(list(xs), [p["label"] for p in proj], fontsize=8, rotation=15)
        ax.set_ylabel("iteration time (s)")
        ax.legend(fontsize=8)
        fig.tight_layout(), fig.savefig(os.path.join(out, "projection.png"), dpi=110), plt.close(fig)
        figures.append(("projection.png", "Projected versus measured iteration time"))
    return tables, figures, {"summaries": sums, "parity": parity, "projection": proj}


# ---------------------------------------------------------------- entry

def compare(paths: list[str], out: str, allow_mismatch: bool = False) -> dict:
    if len(paths) < 2:
        raise CompareError("compare needs at least two run directories")
    runs = [_load(p) for p in paths]
    problems, notes = [], []
    for run in runs[1:]:
        if "nccl_tests" in run.info or "nccl_tests" in runs[0].info:
            # a text table has no recipe to hold against the other run; say what differs that it does show
            wa, wb = ((r.info.get("layout") or {}).get("world_size") for r in (runs[0], run))
            if wa != wb:
                notes.append(f"{run.path} against {runs[0].path}: world size {wa} vs {wb} (a text table: "
                             "no recipe to compare)")
            continue
        diffs = recipe_differences(runs[0], run)
        if diffs:
            problems.append(f"{run.path} differs from {runs[0].path} in " + "; ".join(diffs[:8])
                            + (f" and {len(diffs) - 8} more" if len(diffs) > 8 else ""))
    if problems and not allow_mismatch:
        raise CompareError("refusing to compare runs of different recipes (a fabric comparison should change "
                           "only the fabric): " + " | ".join(problems) + "; pass --allow-mismatch to compare anyway")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    labels = [label(r) for r in runs]
    for i, lab in enumerate(labels):  # keep labels unique
        if labels.count(lab) > 1:
            labels[i] = f"{lab} #{i + 1}"
    sweeps = [_sweep(r) for r in runs]
    if all(sweeps):
        tables, figures = compare_sweeps(runs, labels, sweeps, out, plt)
        data = {"kind": "sweep"}
    elif any(sweeps):
        raise CompareError("cannot compare a collective sweep with a training run")
    else:
        tables, figures, data = compare_training(runs, labels, out, plt)
        data["kind"] = "training"
    overview = [[lab, r.path, str((r.info.get("fabric") or {}).get("transport")), str(r.info.get("status"))]
                for lab, r in zip(labels, runs)]
    tables.insert(0, ("Runs", ["label", "run directory", "transport", "status"], overview))
    warnings = [w for r in runs if (w := ((r.info.get("fabric") or {}).get("expectation") or {}).get("warning"))]
    if problems:
        warnings.append("compared despite different recipes: " + " | ".join(problems))
    warnings += notes
    title = "fabric-harness comparison: " + " vs ".join(labels)
    write_documents(out, "compare", title, None, warnings, tables, figures)
    result = {"labels": labels, "runs": paths, **{k: v for k, v in data.items() if k != "summaries"},
              "figures": [n for n, _ in figures]}
    with open(os.path.join(out, "compare.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o))
    return result


__all__ = ["compare", "CompareError", "RunError", "recipe_differences", "loss_parity"]
