"""The comparison of training runs: iteration time, throughput, communication and energy per fabric (repeats:
mean and spread), loss-curve parity, time to train, communication per process group, the projection from the
baseline to the other fabrics' link rates, and the figures."""
from __future__ import annotations

import statistics

from telemetry import coverage
from telemetry.analysis import compare_figures
from telemetry.analysis.compare_figures import pct_change, pct_text, rate_text, time_text
from telemetry.analysis.fabric_summary import lab_slowest_link
from telemetry.analysis.line_rate import LineRate, backend_note, of_line_text
from telemetry.analysis.projection import (EFFICIENCY_RANGE, ProjectionError, combine_profiles, measured_profile,
                                           project)
from telemetry.analysis.repeats import spread
from telemetry.analysis.report import fmt, fmt_bytes, overlap_note, partial_note, scope_label, summarize
from telemetry.analysis.runs import Run
from telemetry.rundir import StepKey


def loss_parity(runs: list[Run], labels: list[str] | None = None) -> dict:
    """The largest loss difference of any run from the first at the same step. `labels` (one per run) name the
    run that differs most, which matters with more than two fabrics; a world size other than the first run's
    changes the order of the gradient sums, so a difference there is said to be expected."""
    base = {r[StepKey.STEP]: r[StepKey.LOSS] for r in runs[0].metrics if r.get(StepKey.LOSS) is not None}
    worst, at, who = 0.0, None, None
    for run in runs[1:]:
        for r in run.metrics:
            if r.get(StepKey.STEP) in base and r.get(StepKey.LOSS) is not None:
                d = abs(r[StepKey.LOSS] - base[r[StepKey.STEP]])
                if d > worst:
                    worst, at, who = d, r[StepKey.STEP], run
    common = min(len(base), *(len(r.metrics) for r in runs[1:])) if len(runs) > 1 else len(base)
    if worst == 0.0:
        verdict = "identical"
    elif worst <= 1e-4 * max(abs(v) for v in base.values()):
        verdict = "equal within 1e-4 (summation order)"
    else:
        verdict = f"DIFFERENT: max |delta loss| {worst:.3g} at step {at}"
        if labels and len(runs) > 2:
            verdict += f" ({labels[runs.index(who)]} against {labels[0]})"
        worlds = [(r.info.get("layout") or {}).get("world_size") for r in (runs[0], who)]
        if None not in worlds and worlds[0] != worlds[1]:
            verdict += (f"; expected where the world size differs ({worlds[0]} vs {worlds[1]} ranks): the gradient "
                        "sums run in another order")
    return {"verdict": verdict, "max_abs_diff": worst, "at_step": at, "steps_compared": common}


# figures that get a mean and a spread over repeats: (summary key or path, )
_NUMERIC = ("step_time_median_s", "step_time_mean_s", "step_time_sd_s", "step_time_p95_s", StepKey.SAMPLES_PER_S,
            StepKey.TOKENS_PER_S, "comm_share", "straggler_s", "comm_time_per_step_s", "harness_per_step_s",
            "padded_tokens_per_step")


def step_time_stats(run: Run) -> dict:
    """Mean and sample standard deviation of the timed steps' times (the median is summarize()'s)."""
    times = [r[StepKey.STEP_TIME_S] for r in run.timed_steps() if r.get(StepKey.STEP_TIME_S) is not None]
    return {"step_time_mean_s": statistics.fmean(times) if times else None,
            "step_time_sd_s": statistics.stdev(times) if len(times) > 1 else None, "timed_steps": len(times)}


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
                             "partial": any(c.get("partial") for c in per), "runs": len(per)}
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
        text += pct_text(pct_change(st["mean"], base["mean"]))
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
    rows = [r for r in run.metrics if r.get(StepKey.STEP) is not None and r[StepKey.STEP] <= step]
    first = rows[0] if rows else None
    end = next((r for r in rows if r[StepKey.STEP] == step), None)
    if first and end and first.get(StepKey.TIME) is not None and end.get(StepKey.TIME) is not None \
            and first.get(StepKey.STEP_TIME_S):
        return {"target": what, "seconds": end[StepKey.TIME] - (first[StepKey.TIME] - first[StepKey.STEP_TIME_S]),
                "step": step}
    times = [r.get(StepKey.STEP_TIME_S) for r in rows]
    if rows and None not in times and rows[0]["step"] == 1 and len(rows) == step:
        return {"target": what, "seconds": sum(times), "step": step, "note": "sum of step times"}
    return {"target": what, "seconds": None, "why": "steps up to the target are missing from metrics.jsonl"}


def _mean_of(dicts: list[dict], key: str):
    """The mean of `key` over the dicts that know it; None when none does."""
    st = spread(d.get(key) for d in dicts)
    return st["mean"] if st else None


def _group_cell(gs: list[dict]) -> str:
    """One group of one fabric: bytes / time / busbw per step, the mean over the runs that recorded it."""
    if not gs:
        return "n/a (not recorded)"
    text = (fmt_bytes(_mean_of(gs, "bytes_per_step")) + " / " + fmt(_mean_of(gs, "time_per_step_s"), "s") + " / "
            + _busbw_text(_mean_of(gs, "busbw_GBps")) + (" (partial)" if any(g.get("partial") for g in gs) else ""))
    return text + (f" (mean, n={len(gs)})" if len(gs) > 1 else "")


def _busbw_text(gbps) -> str:
    """busbw in the unit it reads in, as the per-collective table above (0.000655 GB/s there read 655 kB/s)."""
    return rate_text(gbps) if gbps is not None else "n/a"


def _share_cell(shares: list[dict]) -> str:
    if not shares:
        return "n/a (no groups recorded)"
    f = shares[0]
    if not any(x.get("groups") for x in shares):  # its time was "n/a: none", read as an unknown time
        return "none: every group stayed inside one node (0 B a step on the fabric)"
    text = (f"{fmt_bytes(_mean_of(shares, 'bytes_per_step'))} ({fmt(_mean_of(shares, 'bytes_share'), '%')}) / "
            f"{fmt(_mean_of(shares, 'time_per_step_s'), 's')}: {', '.join(f['groups']) or 'none'}")
    return text + (f" (mean, n={len(shares)})" if len(shares) > 1 else "")


def group_tables(run_sums: list[list[dict]], labels: list[str]) -> list[tuple]:
    """Communication per process group and scope, one column per fabric (repeats: the mean over its runs; the
    first run's alone disagreed with the per-collective table beside it), with the fabric's share (the
    inter-node groups); [] when no run recorded groups (runs from before groups)."""
    names = sorted({n for ss in run_sums for s in ss for n in (s.get(StepKey.COMM_GROUPS) or {})})
    if not names:
        return []
    rows = []
    for name in names:
        known = next(s[StepKey.COMM_GROUPS][name] for ss in run_sums for s in ss
                     if name in (s.get(StepKey.COMM_GROUPS) or {}))
        # the group's size per fabric (a 2-node and a 3-node lab: dp of 2 and 3 ranks, labelled "2 ranks" for both)
        sizes = list(dict.fromkeys(str(g.get("size")) for ss in run_sums for s in ss
                                   if (g := (s.get(StepKey.COMM_GROUPS) or {}).get(name))))
        head = f"{name} ({scope_label(known)}, {' / '.join(sizes)} ranks)"
        rows.append([head] + [_group_cell([g for s in ss if (g := (s.get(StepKey.COMM_GROUPS) or {}).get(name))])
                              for ss in run_sums])
    rows.append(["fabric share (inter-node groups)"]
                + [_share_cell([s["fabric_share"] for s in ss if s.get("fabric_share") is not None]) for ss in run_sums])
    repeats = any(len(ss) > 1 for ss in run_sums)
    return [("Communication per process group: bytes / time / busbw per step (median)"
             + ("; repeats: their mean" if repeats else ""), ["group", *labels], rows)]


def _coverage_text(h: dict | None) -> str:
    if not h:
        return "not recorded"
    if not h.get("calls"):
        return "no collectives traced"
    shares = " / ".join("n/a" if v is None else f"{v:g}%" for v in (h.get("calls_pct"), h.get("bytes_pct")))
    return shares + ("" if h.get("verdict") == coverage.FULL else f" ({h.get('verdict')})")


def _same(values) -> str:
    """Repeats that disagree show each distinct value."""
    values = list(dict.fromkeys(values))
    return values[0] if len(values) == 1 else " / ".join(values)


def _row(sums: list[dict], name: str, key: str, unit: str = "", pct: bool = True, missing: str = "n/a") -> list:
    stats = [s["spread"].get(key) for s in sums]
    return [name] + [_cell(st, unit, stats[0], pct, missing) for st in stats]


def _time_to_train_row(ttt: list[list[dict | None]]) -> list[str]:
    """Per fabric the mean time to its recipe's target over the runs that reached it, against the baseline."""
    cells = []
    for g in ttt:
        done = spread(t["seconds"] for t in g if t and t.get("seconds") is not None)
        misses = [t["why"] for t in g if t and t.get("seconds") is None]
        target = next((t["target"] for t in g if t), None)
        text = (_cell(done, "s", None, False) + f" to {target}" if done else
                "no target in the recipe" if target is None else f"n/a: {_same(misses)}")
        if done and misses:
            text += f"; {len(misses)} of {len(g)} runs: {_same(misses)}"
        cells.append(text)
    base = spread(t["seconds"] for t in ttt[0] if t and t.get("seconds") is not None)
    for j, g in enumerate(ttt[1:], 1):
        mine = spread(t["seconds"] for t in g if t and t.get("seconds") is not None)
        if base and mine:
            cells[j] += pct_text(pct_change(mine["mean"], base["mean"]))
    return ["time to train"] + cells


def headline_rows(sums: list[dict], run_sums: list[list[dict]], ttt: list[list[dict | None]]) -> list[list]:
    """The training table: iteration time, throughput, communication, energy, time to train, and what each
    fabric's runs detected."""
    energy_missing = [f"not measured: {s['energy'].get('reason')}" if "reason" in s["energy"] else "n/a" for s in sums]
    rows = [
        _row(sums, "iteration time, median", "step_time_median_s", "s"),
        _row(sums, "iteration time, mean", "step_time_mean_s", "s"),
        ["iteration time, sd over steps"] + [_cell(s["spread"]["step_time_sd_s"], "s", None, False,
                                                   "n/a (fewer than 2 timed steps)")
                                             + (f" ({_same(str(r['timed_steps']) for r in rs)} timed steps)"
                                                if s["spread"]["step_time_sd_s"] else "")
                                             for s, rs in zip(sums, run_sums)],
        _row(sums, "iteration time, p95", "step_time_p95_s", "s"),
        _row(sums, "samples/s", StepKey.SAMPLES_PER_S), _row(sums, "tokens/s", StepKey.TOKENS_PER_S),
        ["communication share"] + [_cell(s["spread"]["comm_share"], "%", None, False) + partial_note(s) for s in sums],
        _row(sums, "exposed communication share", "exposed_comm.share", "%", pct=False),
        _row(sums, "straggler spread", "straggler_s", "s", pct=False),
        _row(sums, "computed tokens per step (padding included)", "padded_tokens_per_step", pct=False,
             missing="n/a (not recorded)"),
        _row(sums, "harness work per step, outside the iteration time", "harness_per_step_s", "s", pct=False,
             missing="n/a (not recorded)"),
    ]
    for key, name in (("energy.per_step_j", "energy per step"), ("energy.per_sample_j", "energy per sample")):
        stats = [s["spread"][key] for s in sums]
        rows.append([name] + [_cell(st, "J", stats[0], True, miss) for st, miss in zip(stats, energy_missing)])
    if any(t for g in ttt for t in g):
        rows.append(_time_to_train_row(ttt))
    rows += [
        ["transport detected"] + [_same(str(s["transport"]) for s in ss) for ss in run_sums],
        ["expected fabric"] + [_same(f"{(s['expectation'] or {}).get('expected', 'any')}: "
                                     + {True: "match", False: "MISMATCH", None: "not checked"}[
                                         (s["expectation"] or {}).get("match")] for s in ss) for ss in run_sums],
        ["counter verdict"] + [_same(str(s["counters"].get("verdict")) for s in ss) for ss in run_sums],
        ["collective timing coverage (calls / bytes timed)"] + [_same(_coverage_text(s.get(StepKey.COMM_HEALTH))
                                                                      for s in ss) for ss in run_sums],
    ]
    return rows


def _comm_cell(c: dict, rate, op: str, backend) -> str:
    busbw = c.get("busbw_GBps")
    share = of_line_text(busbw, rate).replace("; ", ", ", 1)
    return (fmt(c.get("time_per_step_s"), "s") + " / " + (rate_text(busbw) if busbw is not None else "n/a")
            + share + (backend_note(op, backend) if share else "") + (" (partial)" if c.get("partial") else "")
            + overlap_note(c) + (f" (mean, n={c['runs']})" if c.get("runs", 1) > 1 else ""))


def comm_table(labels: list[str], sums: list[dict], comm_ops: list[str], rates: list) -> tuple:
    """Communication per step and collective: time / busbw, with the % of line rate where it is known."""
    comm_rows = [[op] + [_comm_cell(s["comm"].get(op) or {}, rate, op, s.get("backend")) for s, rate in zip(sums, rates)]
                 for op in comm_ops]
    return ("Communication per step: time / busbw (median), with the % of line rate where it is known",
            ["collective", *labels], comm_rows)


def _baseline_profile(groups, run_sums) -> dict:
    """The profile to project from: the baseline's runs; several are repeats, projected from together (their
    medians and spread)."""
    profiles = [measured_profile(r, rs) for r, rs in zip(groups[0], run_sums[0])]
    try:
        return combine_profiles([p for p in profiles if p[StepKey.STEP_TIME_S] is not None] or profiles[:1])
    except ProjectionError:  # repeats of another layout or link: the first run alone, as before
        return profiles[0]


def projection_section(groups, labels: list[str], sums: list[dict], run_sums: list[list[dict]]
                       ) -> tuple[list[tuple], list[dict], list[str]]:
    """Projection from the baseline to every other run's link rate, against what was measured: its table
    (none when nothing is projected), the projections, and warnings."""
    runs = [g[0] for g in groups]
    prof = _baseline_profile(groups, run_sums)
    proj_rows, proj, warnings = [], [], []
    # each fabric by its least-covered run: a comparison of times is like for like only at equal coverage
    worst = {lab: min((s.get(StepKey.COMM_HEALTH) or {} for s in ss), key=lambda h: (h.get("calls_pct") is None,
                                                                                h.get("calls_pct") or 0.0))
             for lab, ss in zip(labels, run_sums)}
    note = coverage.differs(worst)
    if note:
        warnings.append(note)
    for run, lab, s in zip(runs[1:], labels[1:], sums[1:]):
        links = (run.info.get("fabric") or {}).get("lab") or {}
        rate, burst, _ = lab_slowest_link(links)  # a run with a slow node: the rate its collectives waited on
        if rate is None or s["step_time_median_s"] is None:
            continue
        # a lab run on more (or fewer) nodes is projected onto its node count and its ranks per node: a 2 x 2
        # baseline onto a 4 x 1 run was projected onto 4 x 2 = 8 ranks, not the run's 4
        nodes = links.get("nodes")
        world = (run.info.get("layout") or {}).get("world_size")
        per_node = world // nodes if nodes and world and world % nodes == 0 else None
        try:
            p = project(prof, rate, burst_bytes=burst or 0, nodes=nodes, ranks_per_node=per_node)
        except ProjectionError as exc:
            warnings.append(f"no projection onto {lab}: " + str(exc).replace(f"--ranks-per-node {per_node}: ",
                                                                          f"its {per_node} rank(s) per node: "))
            continue
        err = pct_change(p[StepKey.STEP_TIME_S], s["step_time_median_s"])
        lo, hi = p["interval_s"]
        inside = lo <= s["step_time_median_s"] <= hi
        proj.append({"label": lab, "rate_bps": rate, "predicted_s": p[StepKey.STEP_TIME_S], "interval_s": [lo, hi],
                     "measured_s": s["step_time_median_s"], "error": err, "inside": inside, "partial": p["partial"]})
        assumed = "; ".join([f"link efficiency {p['efficiency']:.2f}", f"tc bucket {fmt_bytes(burst or 0)}",
                             *(p.get("notes") or [])])
        proj_rows.append([lab, fmt(p[StepKey.STEP_TIME_S], "s"), f"{fmt(lo, 's')} - {fmt(hi, 's')}",
                          fmt(s["step_time_median_s"], "s"), f"{err * 100:+.1f}%",
                          "yes" if inside else "NO: measured " + ("above" if s["step_time_median_s"] > hi else "below")
                          + " the interval", assumed])
        if not inside:
            warnings.append(f"PROJECTION MISSED {lab}: predicted {fmt(p['step_time_s'], 's')} against "
                            f"{fmt(s['step_time_median_s'], 's')} measured ({err * 100:+.1f}%), outside its interval "
                            f"{fmt(lo, 's')} - {fmt(hi, 's')}: the model leaves out something this fabric does "
                            "(see docs/projection.md); do not quote the projection for it")
    if not proj_rows:
        return [], proj, warnings
    # the projection rescales measured collective times: untimed calls are missing from them
    caveat = (f"; partial: the baseline has {fmt_bytes(prof['untimed_bytes'])} per step untimed"
              if prof.get("partial") else "")
    lo_eff, hi_eff = EFFICIENCY_RANGE
    return [(f"Projection from {labels[0]} (compute + bytes x bus factor / rate): predicted vs measured "
             "median iteration time" + caveat + "; interval: compute's 10th-90th percentile, wire at "
             f"{lo_eff * 100:.0f}-{hi_eff * 100:.0f}% of the rate (docs/projection.md)",
             ["fabric", "predicted iteration", "interval", "measured iteration", "error", "in interval", "assumed"],
             proj_rows)], proj, warnings


def training_figures(plt, out: str, groups, labels: list[str], sums: list[dict], comm_ops: list[str],
                     parity: dict, proj: list[dict], repeats: bool) -> list[tuple[str, str]]:
    """Bars of iteration time and throughput, loss curves, iteration time per step, communication per step, and
    the projection: (name, caption) each."""
    runs = [g[0] for g in groups]
    figures = []
    for key, name, ylabel, what, text in (
            ("step_time_median_s", "iteration_time.png", "iteration time, median", "Iteration time",
             lambda v: time_text(v * 1e6)),
            (StepKey.SAMPLES_PER_S, "samples_per_s.png", "samples/s", "Throughput", None)):
        stats = [s["spread"][key] for s in sums]
        compare_figures.bars(plt, out, name, labels, stats, ylabel,
                             f"{what} per fabric, % difference from {labels[0]}"
                             + (" (mean; bars: one standard deviation)" if repeats else ""), text)
        figures.append((name, f"{what} per fabric with the % difference from the first"))
    curves = [[(r[StepKey.STEP], r[StepKey.LOSS]) for r in run.metrics if r.get(StepKey.LOSS) is not None]
              for run in runs]
    compare_figures.loss_curves(plt, out, labels, curves, f"loss parity: {parity['verdict']}")
    figures.append(("loss.png", "Loss curves overlaid (one line style and marker per fabric, so identical curves "
                                "stay visible" + ("; the first run of each fabric" if repeats else "") + ")"))
    figures.append((compare_figures.step_times(plt, out, labels, [[run.metrics for run in g] for g in groups]),
                    "Iteration time per step" + (" (every run; thin lines: repeats)" if repeats else "")))
    figures.append((compare_figures.comm_stack(plt, out, labels, comm_ops, sums, repeats),
                    "Communication time per step by collective, against the iteration time"))
    if proj:
        figures.append((compare_figures.projection(plt, out, proj),
                        "Projected (with its interval) versus measured median iteration time; a measured bar "
                        "outside the interval is red and marked"))
    return figures


def compare_training(groups, labels, out, plt, rates: list[tuple] | None = None) -> tuple[list, list, dict]:
    """groups: the runs of each fabric (repeats), baseline first; labels: one per fabric; rates: per fabric
    (line rate in bits per second or None, where it comes from)."""
    all_runs = [r for g in groups for r in g]
    run_sums = [[{**summarize(r), **step_time_stats(r)} for r in g] for g in groups]
    sums = [group_summary(ss) for ss in run_sums]
    repeats = any(len(g) > 1 for g in groups)
    ttt = [[time_to_train(r) for r in g] for g in groups]
    rows = headline_rows(sums, run_sums, ttt)
    parity = loss_parity(all_runs, [label for g, label in zip(groups, labels) for _ in g])
    title = "Training: iteration time, throughput, communication, energy (relative to the first fabric)"
    if repeats:
        title += "; repeats: mean ± standard deviation (n runs)"
    tables = [(title, ["", *labels], rows),
              ("Loss-curve parity", ["", ""], [["verdict", parity["verdict"]],
                                               ["steps compared", str(parity["steps_compared"])]])]
    comm_ops = sorted({op for s in sums for op in s["comm"]})
    rates = rates or [LineRate(None, 1, "unknown")] * len(labels)
    tables.append(comm_table(labels, sums, comm_ops, rates))
    tables += group_tables(run_sums, labels)
    proj_tables, proj, warnings = projection_section(groups, labels, sums, run_sums)
    tables += proj_tables
    figures = training_figures(plt, out, groups, labels, sums, comm_ops, parity, proj, repeats)
    stats = [{k: v for k, v in s["spread"].items() if v} for s in sums]
    return tables, figures, {"summaries": sums, "parity": parity, "projection": proj, "stats": stats,
                             "time_to_train": ttt, "warnings": warnings}
