"""`python -m telemetry compare [LABEL=]RUN ... [--sweep LABEL=DIR ...] --out DIR`: a fabric evaluation.

Runs are grouped by fabric label (given as LABEL=RUN, else derived from the fabric each run used: the lab's
rate, or the transport and link rate); runs with one label are repeats, shown as mean and spread. The first
fabric is the baseline: percentages are relative to it. Runs of different recipes are refused (a fabric
comparison must change the fabric only) unless --allow-mismatch is given. A training comparison includes
each fabric's collective sweep when one belongs to its runs (in the run directory, or --sweep).
"""
from __future__ import annotations

import json
import math
import os

from . import compare_figures
from .fabric_summary import fabric_rows
from .projection import ProjectionError, combine_profiles, measured_profile, project
from .repeats import merge_sweeps, spread
from .report import fmt, fmt_bytes, partial_note, scope_label, summarize, write_documents
from .runs import Run, RunError, load_run, upgrade_sweep

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
    """The fabric a run used, as a short label: runs with the same label are repeats of one fabric."""
    fab = run.info.get("fabric") or {}
    lab = fab.get("lab") or {}
    if lab:
        return f"{lab.get('rate')} lab" if lab.get("rate_bps") else "unshaped lab"
    if "nccl_tests" in run.info:  # a text table says nothing of its fabric: it is its own label
        return f"{fab.get('backend')}: {run.name}"
    rate = _link_speed(fab)
    return f"{fab.get('transport') or fab.get('backend') or 'unknown transport'}" + (f" {rate}" if rate else "")


def _link_speed(fab: dict) -> str | None:
    """The used NIC's speed (Mb/s from sysfs), or the used HCA port's rate, as a label suffix."""
    gloo = (fab.get("gloo") or {})
    if gloo.get("speed_mbps"):
        return f"{gloo['speed_mbps'] / 1000:g}G"
    used = {d.get("device") for d in ((fab.get("nccl") or {}).get("devices") or [])}
    rates = {h.get("rate") for h in fab.get("hcas") or [] if h.get("device") in used and h.get("rate")}
    return rates.pop().split(" (")[0].replace(" Gb/sec", "G") if len(rates) == 1 else None


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
    return _read_sweep(path) if os.path.exists(path) else None


def _read_sweep(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return upgrade_sweep(json.load(f))  # older sweeps' unit names too


def is_sweep(run: Run) -> bool:
    """A collective sweep (the collectives workload, or an nccl-tests text file) rather than training."""
    workload = (run.info.get("recipe") or {}).get("workload")
    return "nccl_tests" in run.info or workload == "collectives" or (workload is None and _sweep(run) is not None)


def sweep_of_training_run(run: Run) -> tuple[dict, str] | None:
    """A sweep that belongs to a training run: collectives.json in its directory, or a sweep run directory
    inside it (e.g. output_dir=RUN/sweep). (sweep, where) or None."""
    if os.path.isfile(os.path.join(run.path, "collectives.json")):
        return _sweep(run), os.path.join(run.path, "collectives.json")
    for sub in sorted(os.listdir(run.path)) if os.path.isdir(run.path) else []:
        path = os.path.join(run.path, sub, "collectives.json")
        if os.path.isfile(path):
            return _read_sweep(path), path
    return None


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
                        + [fmt(b["busbw_GBps"]) if b else "n/a" for b in blocks])
    tables.append(("Collectives: time and bus bandwidth (smallest, middle, largest size)"
                   + ("; repeats: their mean" if any(s.get("merged_sweeps") for s in sweeps) else ""), header, rows))
    avg_rows = [[op] + [fmt(s["ops"][op]["avg_busbw_GBps"]) + (f" ± {fmt(sd)} (n={s['merged_sweeps']})" if (
        sd := s["ops"][op].get("avg_busbw_GBps_sd")) else "") for s in sweeps] for op in ops]
    tables.append(("Average bus bandwidth (GB/s)", ["collective"] + labels, avg_rows))
    lat_keys = [k for k in sweeps[0].get("latency_us", {}) if all(k in s.get("latency_us", {}) for s in sweeps)]
    lat_rows = []
    for k in lat_keys:
        base = sweeps[0]["latency_us"][k]
        vals = [s["latency_us"][k] for s in sweeps]
        sds = [(s.get("latency_sd_us") or {}).get(k) for s in sweeps]
        lat_rows.append([k.removesuffix("_us")] + [fmt(v) + (f" ± {fmt(sd)} (n={s['merged_sweeps']})" if sd else "")
                                                    + (f" ({_pct(v, base) * 100:+.0f}%)" if j and base else "")
                                                    for j, (v, sd, s) in enumerate(zip(vals, sds, sweeps))])
    tables.append(("Small-message latency (us), change relative to the first run", ["test"] + labels, lat_rows))
    for op in ops:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
        for lab, s in zip(labels, sweeps):
            pts = [(r["size"], _best_block(r)) for r in s["ops"][op]["rows"] if _best_block(r)]
            # repeats: error bars of one standard deviation (none for a single sweep)
            a1.errorbar([p[0] for p in pts], [p[1]["time_us"] for p in pts], fmt="o-", label=lab, ms=3, capsize=2,
                        yerr=[p[1].get("time_us_sd") or 0.0 for p in pts] if s.get("merged_sweeps") else None)
            a2.errorbar([p[0] for p in pts], [p[1]["busbw_GBps"] for p in pts], fmt="o-", label=lab, ms=3, capsize=2,
                        yerr=[p[1].get("busbw_GBps_sd") or 0.0 for p in pts] if s.get("merged_sweeps") else None)
        a1.set_xscale("log"), a1.set_yscale("log"), a2.set_xscale("log")
        a1.set_xlabel("size (B)"), a1.set_ylabel("time (us)"), a1.legend(fontsize=8), a1.grid(alpha=0.3)
        a2.set_xlabel("size (B)"), a2.set_ylabel("busbw (GB/s)"), a2.grid(alpha=0.3)
        fig.suptitle(op)
        fig.tight_layout()
        name = f"sweep_{op}.png"
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        figures.append((name, f"{op}: time and bus bandwidth versus size"
                        + (" (mean of repeats, bars: one standard deviation)" if any(s.get("merged_sweeps") for s in sweeps)
                           else "")))
    return tables, figures


# ---------------------------------------------------------------- training

# figures that get a mean and a spread over repeats: (summary key or path, )
_NUMERIC = ("step_time_median_s", "step_time_p95_s", "samples_per_s", "tokens_per_s", "comm_share", "straggler_s",
            "comm_time_per_step_s")


def _get(s: dict, key: str):
    """A summary figure by dotted key (energy.per_step_j, exposed_comm.share)."""
    for part in key.split("."):
        s = (s or {}).get(part) if isinstance(s, dict) else None
    return s


def group_summary(sums: list[dict]) -> dict:
    """One summary per fabric: the first run's, with its figures replaced by the means over the repeats;
    `spread` holds {mean, sd, n, min, max} per figure."""
    g = dict(sums[0])
    g["spread"] = {}
    for key in (*_NUMERIC, "energy.per_step_j", "energy.per_sample_j", "exposed_comm.share"):
        st = spread(_get(s, key) for s in sums)
        g["spread"][key] = st
        if "." not in key:
            g[key] = st["mean"] if st else None
    if len(sums) > 1:
        g["energy"] = {**g["energy"], **{k: (g["spread"][f"energy.{k}"] or {}).get("mean")
                                         for k in ("per_step_j", "per_sample_j") if k in g["energy"]}}
        g["exposed_comm"] = {**g["exposed_comm"], "share": (g["spread"]["exposed_comm.share"] or {}).get("mean")}
        g["comm"] = {}
        for op in sorted({op for s in sums for op in s["comm"]}):
            per = [s["comm"][op] for s in sums if op in s["comm"]]
            g["comm"][op] = {**per[0], **{k: (spread(c.get(k) for c in per) or {}).get("mean")
                                          for k in ("time_per_step_s", "busbw_GBps", "bytes_per_step")},
                             "partial": any(c.get("partial") for c in per)}
        g["comm_partial"] = any(s.get("comm_partial") for s in sums)
    return g


def _cell(st: dict | None, unit: str, base: dict | None, pct: bool, missing: str = "n/a") -> str:
    """'mean unit ± sd (n=N) (+x.x%)': the spread only with repeats, the % only against a known baseline."""
    if st is None:
        return missing
    text = fmt(st["mean"], unit)
    if st["sd"] is not None:
        sd = f"{st['sd'] * 100:.1f}%" if unit == "%" else fmt(st["sd"], unit)
        text += f" ± {sd} (n={st['n']})"
    if pct and base is not None and base is not st:
        text += _fmt_pct(_pct(st["mean"], base["mean"]))
    return text


def time_to_train(run: Run) -> dict | None:
    """Seconds from the start of the first step to the end of the step that reached the recipe's target
    (evaluations included, start-up and model loading not); None for a run without a target."""
    train = (run.info.get("recipe") or {}).get("train") or {}
    target = {k: train.get(k) for k in ("target_eval_loss", "target_eval_accuracy") if train.get(k) is not None}
    if not target:
        return None
    step = (run.info.get("final") or {}).get("target_reached_step")
    what = ", ".join(f"{k.removeprefix('target_')} {v}" for k, v in target.items())
    if not step:
        return {"target": what, "seconds": None, "why": f"target not reached ({run.info.get('status')})"}
    rows = [r for r in run.metrics if r.get("step") is not None and r["step"] <= step]
    first = rows[0] if rows else None
    end = next((r for r in rows if r["step"] == step), None)
    if first and end and first.get("time") is not None and end.get("time") is not None and first.get("step_time_s"):
        return {"target": what, "seconds": end["time"] - (first["time"] - first["step_time_s"]), "step": step}
    times = [r.get("step_time_s") for r in rows]
    if rows and None not in times and rows[0]["step"] == 1 and len(rows) == step:
        return {"target": what, "seconds": sum(times), "step": step, "note": "sum of step times"}
    return {"target": what, "seconds": None, "why": "steps up to the target are missing from metrics.jsonl"}


def group_tables(run_sums: list[list[dict]], labels: list[str]) -> list[tuple]:
    """Communication per process group and scope, one column per fabric (its first run), with the fabric's
    share (the inter-node groups); [] when no run recorded groups (runs from before groups)."""
    firsts = [ss[0] for ss in run_sums]
    names = sorted({n for s in firsts for n in (s.get("comm_groups") or {})})
    if not names:
        return []
    rows = []
    for name in names:
        known = next(s["comm_groups"][name] for s in firsts if name in (s.get("comm_groups") or {}))
        head = f"{name} ({scope_label(known)}, {known.get('size')} ranks)"
        rows.append([head] + [
            (fmt_bytes(g["bytes_per_step"]) + " / " + fmt(g["time_per_step_s"], "s") + " / "
             + fmt(g["busbw_GBps"], "GB/s") + (" (partial)" if g["partial"] else "")) if g else "n/a"
            for g in ((s.get("comm_groups") or {}).get(name) for s in firsts)])
    shares = []
    for s in firsts:
        f = s.get("fabric_share")
        shares.append("n/a (no groups recorded)" if f is None else
                      f"{fmt_bytes(f['bytes_per_step'])} ({fmt(f['bytes_share'], '%')}) / {fmt(f['time_per_step_s'], 's')}"
                      f": {', '.join(f['groups']) or 'none'}")
    rows.append(["fabric share (inter-node groups)"] + shares)
    return [("Communication per process group: bytes / time / busbw per step (median)", ["group", *labels], rows)]


def compare_training(groups, labels, out, plt) -> tuple[list, list, dict]:
    """groups: the runs of each fabric (repeats), baseline first; labels: one per fabric."""
    runs = [g[0] for g in groups]  # one run stands for its fabric where a single run is needed
    all_runs = [r for g in groups for r in g]
    run_sums = [[summarize(r) for r in g] for g in groups]
    sums = [group_summary(ss) for ss in run_sums]
    repeats = any(len(g) > 1 for g in groups)

    def row(name, key, unit="", pct=True, missing="n/a"):
        stats = [s["spread"].get(key) for s in sums]
        return [name] + [_cell(st, unit, stats[0], pct, missing) for st in stats]

    def same(values):  # repeats that disagree show each distinct value
        values = list(dict.fromkeys(values))
        return values[0] if len(values) == 1 else " / ".join(values)

    energy_missing = [f"not measured: {s['energy'].get('reason')}" if "reason" in s["energy"] else "n/a" for s in sums]
    rows = [
        row("iteration time, median", "step_time_median_s", "s"), row("iteration time, p95", "step_time_p95_s", "s"),
        row("samples/s", "samples_per_s"), row("tokens/s", "tokens_per_s"),
        ["communication share"] + [_cell(s["spread"]["comm_share"], "%", None, False) + partial_note(s) for s in sums],
        row("exposed communication share", "exposed_comm.share", "%", pct=False),
        row("straggler spread", "straggler_s", "s", pct=False),
    ]
    for key, name in (("energy.per_step_j", "energy per step"), ("energy.per_sample_j", "energy per sample")):
        stats = [s["spread"][key] for s in sums]
        rows.append([name] + [_cell(st, "J", stats[0], True, miss) for st, miss in zip(stats, energy_missing)])
    ttt = [[time_to_train(r) for r in g] for g in groups]
    if any(t for g in ttt for t in g):
        cells = []
        for g in ttt:
            done = spread(t["seconds"] for t in g if t and t.get("seconds") is not None)
            misses = [t["why"] for t in g if t and t.get("seconds") is None]
            target = next((t["target"] for t in g if t), None)
            text = (_cell(done, "s", None, False) + f" to {target}" if done else
                    "no target in the recipe" if target is None else f"n/a: {same(misses)}")
            if done and misses:
                text += f"; {len(misses)} of {len(g)} runs: {same(misses)}"
            cells.append(text)
        base = spread(t["seconds"] for t in ttt[0] if t and t.get("seconds") is not None)
        for j, g in enumerate(ttt[1:], 1):
            mine = spread(t["seconds"] for t in g if t and t.get("seconds") is not None)
            if base and mine:
                cells[j] += _fmt_pct(_pct(mine["mean"], base["mean"]))
        rows.append(["time to train"] + cells)
    rows += [
        ["transport detected"] + [same(str(s["transport"]) for s in ss) for ss in run_sums],
        ["expected fabric"] + [same(f"{(s['expectation'] or {}).get('expected', 'any')}: "
                                    + {True: "match", False: "MISMATCH", None: "not checked"}[
                                        (s["expectation"] or {}).get("match")] for s in ss) for ss in run_sums],
        ["counter verdict"] + [same(str(s["counters"].get("verdict")) for s in ss) for ss in run_sums],
    ]
    parity = loss_parity(all_runs)
    title = "Training: iteration time, throughput, communication, energy (relative to the first fabric)"
    if repeats:
        title += "; repeats: mean ± standard deviation (n runs)"
    tables = [(title, ["", *labels], rows),
              ("Loss-curve parity", ["", ""], [["verdict", parity["verdict"]],
                                               ["steps compared", str(parity["steps_compared"])]])]
    comm_ops = sorted({op for s in sums for op in s["comm"]})
    comm_rows = [[op] + [fmt((s["comm"].get(op) or {}).get("time_per_step_s"), "s") + " / "
                         + fmt((s["comm"].get(op) or {}).get("busbw_GBps"), "GB/s")
                         + (" (partial)" if (s["comm"].get(op) or {}).get("partial") else "") for s in sums]
                 for op in comm_ops]
    tables.append(("Communication per step: time / busbw (median)", ["collective", *labels], comm_rows))
    tables += group_tables(run_sums, labels)

    # projection from the baseline to every other run's link rate, against what was measured
    # from the baseline's runs: several are repeats, projected from together (their medians and spread)
    profiles = [measured_profile(r, rs) for r, rs in zip(groups[0], run_sums[0])]
    try:
        prof = combine_profiles([p for p in profiles if p["step_time_s"] is not None] or profiles[:1])
    except ProjectionError:  # repeats of another layout or link: the first run alone, as before
        prof = profiles[0]
    proj_rows, proj = [], []
    for run, lab, s in zip(runs[1:], labels[1:], sums[1:]):
        links = (run.info.get("fabric") or {}).get("lab") or {}
        rate = links.get("rate_bps")
        if rate is None or s["step_time_median_s"] is None:
            continue
        # a lab run on more (or fewer) nodes is projected onto its node count
        p = project(prof, rate, burst_bytes=links.get("burst_bytes") or 0, nodes=links.get("nodes"))
        err = _pct(p["step_time_s"], s["step_time_median_s"])
        lo, hi = p["interval_s"]
        inside = lo <= s["step_time_median_s"] <= hi
        proj.append({"label": lab, "rate_bps": rate, "predicted_s": p["step_time_s"], "interval_s": [lo, hi],
                     "measured_s": s["step_time_median_s"], "error": err, "inside": inside, "partial": p["partial"]})
        proj_rows.append([lab, fmt(p["step_time_s"], "s"), f"{fmt(lo, 's')} - {fmt(hi, 's')}",
                          fmt(s["step_time_median_s"], "s"), f"{err * 100:+.1f}%", "yes" if inside else "no"])
    if proj_rows:
        # the projection rescales measured collective times: untimed calls are missing from them
        caveat = (f"; partial: the baseline has {fmt_bytes(prof['untimed_bytes'])} per step untimed"
                  if prof.get("partial") else "")
        tables.append((f"Projection from {labels[0]} (compute + bytes x bus factor / rate): predicted vs measured"
                       + caveat, ["fabric", "predicted iteration", "interval", "measured iteration", "error", "in interval"],
                       proj_rows))

    figures = []
    for key, name, ylabel, what in (("step_time_median_s", "iteration_time.png", "iteration time, median (s)",
                                     "Iteration time"),
                                    ("samples_per_s", "samples_per_s.png", "samples/s", "Throughput")):
        stats = [s["spread"][key] for s in sums]
        compare_figures.bars(plt, out, name, labels, stats, ylabel,
                             f"{what} per fabric, % difference from {labels[0]}"
                             + (" (mean; bars: one standard deviation)" if repeats else ""))
        figures.append((name, f"{what} per fabric with the % difference from the first"))
    curves = [[(r["step"], r["loss"]) for r in run.metrics if r.get("loss") is not None] for run in runs]
    compare_figures.loss_curves(plt, out, labels, curves, f"loss parity: {parity['verdict']}")
    figures.append(("loss.png", "Loss curves overlaid (one line style and marker per fabric, so identical curves "
                                "stay visible" + ("; the first run of each fabric" if repeats else "") + ")"))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, (lab, group) in enumerate(zip(labels, groups)):
        for k, run in enumerate(group):  # repeats: the fabric's color, thinner, so the spread shows
            ax.plot([r["step"] for r in run.metrics], [r.get("step_time_s") for r in run.metrics], color=f"C{i}",
                    label=lab if k == 0 else None, linewidth=1.5 if k == 0 else 0.8, alpha=1.0 if k == 0 else 0.6)
    ax.set_xlabel("step"), ax.set_ylabel("step time (s)"), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout(), fig.savefig(os.path.join(out, "step_time.png"), dpi=110), plt.close(fig)
    figures.append(("step_time.png", "Iteration time per step" + (" (every run; thin lines: repeats)" if repeats else "")))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = range(len(runs))
    bottom = [0.0] * len(runs)
    for op in comm_ops:
        vals = [(s["comm"].get(op) or {}).get("time_per_step_s") or 0.0 for s in sums]
        ax.bar(x, vals, bottom=bottom, label=op)
        bottom = [a + v for a, v in zip(bottom, vals)]
    ax.errorbar(list(x), [s["step_time_median_s"] or 0 for s in sums], fmt="k_", ms=40, mew=2, capsize=4,
                yerr=[(s["spread"]["step_time_median_s"] or {}).get("sd") or 0.0 for s in sums] if repeats else None,
                label="iteration time")
    ax.set_xticks(list(x), labels, fontsize=8), ax.set_ylabel("seconds per step")
    ax.legend(fontsize=8, markerscale=0.25)
    fig.tight_layout(), fig.savefig(os.path.join(out, "comm.png"), dpi=110), plt.close(fig)
    figures.append(("comm.png", "Communication time per step by collective, against the iteration time"))
    if proj:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        xs = range(len(proj))
        ax.bar([i - 0.2 for i in xs], [p["predicted_s"] for p in proj], width=0.4, label="predicted (interval)",
               yerr=[[p["predicted_s"] - p["interval_s"][0] for p in proj],
                     [p["interval_s"][1] - p["predicted_s"] for p in proj]], capsize=4)
        ax.bar([i + 0.2 for i in xs], [p["measured_s"] for p in proj], width=0.4, label="measured")
        ax.set_xticks(list(xs), [p["label"] for p in proj], fontsize=8, rotation=15)
        ax.set_ylabel("iteration time (s)")
        ax.legend(fontsize=8)
        fig.tight_layout(), fig.savefig(os.path.join(out, "projection.png"), dpi=110), plt.close(fig)
        figures.append(("projection.png", "Projected versus measured iteration time"))
    stats = [{k: v for k, v in s["spread"].items() if v} for s in sums]
    return tables, figures, {"summaries": sums, "parity": parity, "projection": proj, "stats": stats,
                             "time_to_train": ttt}


# ---------------------------------------------------------------- entry

def split_label(arg: str) -> tuple[str | None, str]:
    """'LABEL=PATH' -> (LABEL, PATH); a path that exists as written (even with '=' in it) has no label."""
    if os.path.exists(arg) or "=" not in arg:
        return None, arg
    lab, path = arg.split("=", 1)
    return (lab.strip() or None), path


def _group(runs: list[Run], given: list[str | None]) -> tuple[list[str], list[list[Run]], str | None]:
    """Fabric labels in order of first appearance and the runs of each; runs with one label are repeats.
    Unlabelled runs that all derive the same label are each their own column (nothing would be compared)."""
    derived = [g or label(r) for r, g in zip(runs, given)]
    note = None
    if len(set(derived)) == 1 and not any(given):
        note = (f"every run is on one fabric ({derived[0]}): each run is its own column; give LABEL=RUN to "
                "group repeats")
        derived = [f"{lab} #{i + 1}" for i, lab in enumerate(derived)]
    elif len(set(derived)) == 1:
        raise CompareError(f"every run is labelled {derived[0]!r}: a comparison needs at least two fabrics")
    labels = list(dict.fromkeys(derived))
    return labels, [[r for r, d in zip(runs, derived) if d == lab] for lab in labels], note


def _fabric_index(name: str, labels: list[str], groups: list[list[Run]]) -> int | None:
    """The fabric a --sweep names: by its label, or by one of its run directories (path or basename)."""
    if name in labels:
        return labels.index(name)
    want = os.path.normpath(name)
    for i, g in enumerate(groups):
        if any(want in (os.path.normpath(r.path), os.path.basename(os.path.normpath(r.path))) for r in g):
            return i
    return None


def _attach_sweeps(labels, groups, sweep_args) -> tuple[list, list[str]]:
    """Per fabric, the sweeps that belong to it (--sweep LABEL=DIR, else found in its run directories)."""
    found: list[list[dict]] = [[] for _ in labels]
    where: list[list[str]] = [[] for _ in labels]
    for arg in sweep_args or []:
        name, _, path = arg.partition("=")
        idx = _fabric_index(name, labels, groups) if path else None
        if idx is None:
            raise CompareError(f"--sweep {arg}: expected LABEL=DIR, LABEL one of {', '.join(map(repr, labels))} "
                               "or a run directory given above, DIR a sweep run directory or nccl-tests output")
        sweep_run = _load(path)
        if not is_sweep(sweep_run) or _sweep(sweep_run) is None:
            raise CompareError(f"--sweep {arg}: {path} holds no collective sweep (collectives.json or an "
                               "nccl-tests text file)")
        found[idx].append(_sweep(sweep_run))
        where[idx].append(path)
    for i, g in enumerate(groups):
        for run in g if not found[i] else []:
            if own := sweep_of_training_run(run):
                found[i].append(own[0])
                where[i].append(own[1])
    return found, where


def compare(paths: list[str], out: str, allow_mismatch: bool = False, sweeps: list[str] | None = None) -> dict:
    if len(paths) < 2:
        raise CompareError("compare needs at least two run directories")
    given, paths = zip(*(split_label(p) for p in paths))
    paths = list(paths)
    runs = [_load(p) for p in paths]
    kinds = ["sweep" if is_sweep(r) else "training" for r in runs]
    if len(set(kinds)) > 1:
        s_path, t_path = paths[kinds.index("sweep")], paths[kinds.index("training")]
        raise CompareError(f"cannot compare a collective sweep with a training run: {s_path} is a sweep, {t_path} "
                           f"a training run; compare sweeps with sweeps and training runs with training runs, or "
                           f"add the sweep to its fabric's training runs with --sweep LABEL={s_path}")
    if sweeps and kinds[0] == "sweep":
        raise CompareError("--sweep adds a fabric's sweep to a training comparison; these runs are sweeps already")
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
    labels, groups, group_note = _group(runs, list(given))
    if group_note:
        notes.append(group_note)
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # run names are text: "$" in one is no formula
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    attached = None
    if kinds[0] == "sweep":
        merged = [merge_sweeps([_sweep(r) for r in g]) for g in groups]
        tables, figures = compare_sweeps([g[0] for g in groups], labels, merged, out, plt)
        data = {"kind": "sweep"}
    else:
        tables, figures, data = compare_training(groups, labels, out, plt)
        data["kind"] = "training"
        found, where = _attach_sweeps(labels, groups, sweeps)
        if all(found):
            sweep_tables, sweep_figures = compare_sweeps([g[0] for g in groups], labels,
                                                         [merge_sweeps(f) for f in found], out, plt)
            tables += [(f"Sweeps of these fabrics - {t}", h, r) for t, h, r in sweep_tables]
            figures += sweep_figures
            attached = dict(zip(labels, where))
        elif any(found):
            notes.append("collective sweeps left out: " + ", ".join(f"{lab} has none" for lab, f in zip(labels, found)
                                                                    if not f)
                         + " (give one with --sweep LABEL=DIR)")
    facts = fabric_rows(groups)
    facts.append(["status"] + [" / ".join(dict.fromkeys(str(r.info.get("status")) for r in g)) for g in groups])
    tables.insert(0, ("Fabrics", ["", *labels], facts))
    warnings = [w for r in runs if (w := ((r.info.get("fabric") or {}).get("expectation") or {}).get("warning"))]
    if problems:
        warnings.append("compared despite different recipes: " + " | ".join(problems))
    warnings += notes
    title = "fabric-harness comparison: " + " vs ".join(labels)
    write_documents(out, "compare", title, None, warnings, tables, figures)
    result = {"labels": labels, "runs": paths, "groups": {lab: [r.path for r in g] for lab, g in zip(labels, groups)},
              **{k: v for k, v in data.items() if k != "summaries"}, "sweeps": attached,
              "figures": [n for n, _ in figures]}
    with open(os.path.join(out, "compare.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o))
    return result


__all__ = ["compare", "CompareError", "RunError", "recipe_differences", "loss_parity", "time_to_train"]
