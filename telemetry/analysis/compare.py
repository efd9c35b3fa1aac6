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
import statistics
from dataclasses import replace

from telemetry import coverage
from telemetry.analysis import (compare_figures, congestion_summary, fabric_config, nccl_algorithms, normalised,
                                power_table)
from telemetry.analysis.compare_figures import rate_text, size_text, time_text
from telemetry.analysis.fabric_summary import fabric_rows, workload_line, workload_rows
from telemetry.analysis.line_rate import LineRate, job_line_rate, of_line_text
from telemetry.analysis.line_rate import describe as describe_line_rate
from telemetry.analysis.line_rate import parse_given as parse_given_line_rate
from telemetry.analysis.projection import ProjectionError, combine_profiles, measured_profile, project
from telemetry.analysis.repeats import merge_sweeps, spread
from telemetry.analysis.report import fmt, fmt_bytes, partial_note, scope_label, summarize, write_documents
from telemetry.analysis.runs import Run, RunError, given_twice, load_run, upgrade_sweep
from telemetry.analysis.transport_claims import TRANSPORTS, check_transport, claim_problem, group_verdict
from telemetry.errors import InputError
from telemetry.analysis.inventory_summary import hardware_warnings, inventory_rows

# Recipe parts that legitimately differ between runs of one fabric comparison.
IGNORED_KEYS = {"output_dir", "name", "recipe_path", "telemetry", "fabric", "distributed"}


class CompareError(InputError):
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
        from telemetry.analysis.nccl_tests import NcclTestsError, as_run
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


def _blocks(row):
    return [b for b in (row.get("out_of_place"), row.get("in_place")) if b]


def common_sizes(sweeps: list[dict], op: str) -> list[int]:
    """The sizes every sweep measured `op` at (a block with a time): the range averages may cover."""
    sets = [{r["size"] for r in s["ops"][op]["rows"] if _best_block(r)} for s in sweeps]
    return sorted(set.intersection(*sets)) if sets else []


def avg_busbw(sweep: dict, op: str, sizes) -> float | None:
    """nccl-tests' "Avg bus bandwidth" (the mean busbw over every measured block), over `sizes` only."""
    sizes = set(sizes)
    vals = [b["busbw_GBps"] for r in sweep["ops"][op]["rows"] if r["size"] in sizes for b in _blocks(r)
            if b.get("busbw_GBps") is not None]
    return sum(vals) / len(vals) if vals else None


def _ratio(value, base) -> str:
    if value is None or not base:
        return ""
    r = value / base
    return f"{r:.3g}x" if r < 100 else f"{r:,.0f}x"


def _vs(value, base) -> str:
    """' (+12.3%, 1.12x)': the % difference and the ratio against the baseline's value."""
    p = _pct(value, base)
    return "" if p is None else f" ({p * 100:+.1f}%, {_ratio(value, base)})"


def _of_line(gbps, rate: LineRate | None) -> str:
    return of_line_text(gbps, rate)


def _sd_text(sd, text) -> str:
    return f" ± {text(sd)}" if sd else ""


def _range_text(sizes) -> str:
    if len(sizes) == 1:
        return f"{size_text(sizes[0])} (1 size)"
    return f"{size_text(sizes[0])} - {size_text(sizes[-1])} ({len(sizes)} sizes)" if sizes else "none"


def line_rates(groups: list, labels: list[str], given: dict[str, LineRate] | None = None) -> list[LineRate]:
    """Per fabric, the NICs its job used per host x their rates (telemetry/analysis/line_rate.py):
    --line-rate first, else what its runs recorded (all its runs agreeing)."""
    out = []
    for lab, group in zip(labels, groups):
        found = [job_line_rate(r) for r in group]
        rate = found[0] if len({f.total_bps for f in found}) == 1 else LineRate(None, 1, "its runs differ in link rate")
        if given and lab in given:
            rate = given[lab]
        per_host = _ranks_per_host(group[0])
        if rate.total_bps and per_host and per_host > rate.nics:
            # busbw counts every hop of the algorithm, the intra-host ones (NVLink, PCIe) too
            rate = replace(rate, why=rate.why + f"; {per_host} ranks per host: busbw counts intra-host hops too, so "
                                                f"it can exceed {'one link' if rate.nics == 1 else 'the NICs'}")
        out.append(rate)
    return out


def _ranks_per_host(run: Run) -> int | None:
    hosts = [h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")]
    return round(len(hosts) / len(set(hosts))) if hosts else None


def compare_sweeps(labels, groups, out, plt, busbw_axis: str = "log", rates: list[tuple] | None = None
                   ) -> tuple[list, list, list]:
    """groups: per fabric its sweeps (repeats: their mean and spread). Tables, figures, warnings."""
    merged = [merge_sweeps(g) for g in groups]
    rates = rates or [LineRate(None, 1, "unknown")] * len(labels)
    tables, figures, warnings = [], [], []
    ops = [op for op in merged[0]["ops"] if all(op in s["ops"] for s in merged)]
    if not ops:
        raise CompareError("no collective in common: " + "; ".join(
            f"{lab} has {', '.join(s['ops']) or 'none'}" for lab, s in zip(labels, merged)))
    repeats = any(s.get("merged_sweeps") for s in merged)
    base_lab = labels[0]
    for op in ops:
        base_rows = {r["size"]: r for r in merged[0]["ops"][op]["rows"]}
        others = [{r["size"]: r for r in s["ops"][op]["rows"]} for s in merged[1:]]
        # every size the baseline and at least one other fabric have
        sizes = sorted(sz for sz in base_rows if _best_block(base_rows[sz])
                       and any(o.get(sz) and _best_block(o[sz]) for o in others))
        rows = []
        for size in sizes:
            blocks = [_best_block(base_rows[size])] + [_best_block(o[size]) if o.get(size) else None for o in others]
            b0 = blocks[0]
            t_cells, w_cells = [], []
            for j, b in enumerate(blocks):
                if b is None:
                    t_cells.append("n/a (size not measured)")
                    w_cells.append("n/a (size not measured)")
                    continue
                t = time_text(b["time_us"]) + _sd_text(b.get("time_us_sd"), time_text)
                w = rate_text(b["busbw_GBps"]) + _sd_text(b.get("busbw_GBps_sd"), rate_text)
                if j:
                    t += _vs(b["time_us"], b0["time_us"])
                    w += _vs(b["busbw_GBps"], b0["busbw_GBps"])
                t_cells.append(t)
                w_cells.append(w)
            rows.append([size_text(size)] + t_cells + w_cells)
        header = (["size"] + [f"{lab} time" for lab in labels] + [f"{lab} busbw" for lab in labels])
        tables.append((f"{op}: time and bus bandwidth at every size both runs have (% difference and ratio "
                       f"against {base_lab}; ratio 2x: twice the baseline's value)"
                       + ("; repeats: mean ± standard deviation" if repeats else ""), header, rows))

    # averages over the sizes every sweep (every repeat of every fabric) has, so ranges never differ
    all_sweeps = [s for g in groups for s in g]
    avg_rows, range_notes = [], []
    for op in ops:
        common = common_sizes(all_sweeps, op)
        own = [sorted({r["size"] for s in g for r in s["ops"][op]["rows"] if _best_block(r)}) for g in groups]
        extra = [(lab, [z for z in o if z not in common]) for lab, o in zip(labels, own)]
        extra = [(lab, z) for lab, z in extra if z]
        cells = []
        base = None
        for j, (g, rate) in enumerate(zip(groups, rates)):
            st = spread(avg_busbw(s, op, common) for s in g)
            if st is None:
                cells.append("n/a (no busbw at the common sizes)")
                continue
            if j == 0:
                base = st["mean"]
            text = rate_text(st["mean"]) + (f" ± {rate_text(st['sd'])} (n={st['n']})" if st["sd"] else "")
            if j:
                text += _vs(st["mean"], base)
            text += _of_line(st["mean"], rate)
            cells.append(text)
        avg_rows.append([op, _range_text(common)] + cells)
        if extra:
            note = (f"{op}: the sweeps cover different sizes; averages use the common range "
                    f"{_range_text(common)} only (" + "; ".join(
                        f"{lab} also has {_range_text(z)}" for lab, z in extra)
                    + ", left out of the average)")
            range_notes.append(note)
            warnings.append(note)
    title = "Average bus bandwidth over the common size range (sizes every fabric measured)"
    if range_notes:
        title += "; the ranges differ: see the note above"
    tables.append((title, ["collective", "common sizes", *labels], avg_rows))

    # against the line rate: peak and average busbw as a share of one link's rate
    rate_rows = [["line rate"] + [describe_line_rate(rate) for rate in rates]]
    for op in ops:
        cells = []
        for s, rate in zip(merged, rates):
            peak = max(((r["size"], b["busbw_GBps"]) for r in s["ops"][op]["rows"]
                        if (b := _best_block(r)) and b.get("busbw_GBps") is not None), key=lambda p: p[1],
                       default=None)
            if peak is None:
                cells.append("n/a")
                continue
            cells.append(f"{rate_text(peak[1])} at {size_text(peak[0])}"
                         + (_of_line(peak[1], rate).replace("; ", ": ", 1) if rate.total_bps
                            else ": % of line rate unknown"))
        rate_rows.append([f"{op}: peak busbw"] + cells)
    tables.append(("Bus bandwidth against the line rate (busbw x 8 / the rate of the links the traffic used on a "
                   "host: its NICs x their rates)",
                   ["", *labels], rate_rows))

    lat_keys = [k for k in merged[0].get("latency_us", {}) if all(k in s.get("latency_us", {}) for s in merged)]
    lat_rows = []
    for k in lat_keys:
        base = merged[0]["latency_us"][k]
        vals = [s["latency_us"][k] for s in merged]
        sds = [(s.get("latency_sd_us") or {}).get(k) for s in merged]
        lat_rows.append([k.removesuffix("_us")] + [fmt(v) + (f" ± {fmt(sd)} (n={s['merged_sweeps']})" if sd else "")
                                                    + (f" ({_pct(v, base) * 100:+.0f}%)" if j and base else "")
                                                    for j, (v, sd, s) in enumerate(zip(vals, sds, merged))])
    tables.append(("Small-message latency (us), change relative to the first run", ["test"] + labels, lat_rows))
    gbps = [r.total_bps / 8e9 if r.total_bps else None for r in rates]
    for op in ops:
        name = compare_figures.sweep_figure(plt, out, op, labels, merged, _best_block, busbw_axis, gbps)
        zeros = busbw_axis == "log" and any((b := _best_block(r)) and b.get("busbw_GBps") == 0
                                            for s in merged for r in s["ops"][op]["rows"])
        figures.append((name, f"{op}: time and bus bandwidth ({busbw_axis} axis) versus message size"
                        + (" (mean of repeats, bars: one standard deviation)" if repeats else "")
                        + ("; dotted: line rate" if any(gbps) else "")
                        + ("; sizes whose busbw reads 0.00 (under 5 MB/s as nccl-tests prints it) are not drawn "
                           "on the log axis" if zeros else "")))
    return tables, figures, warnings


# ---------------------------------------------------------------- training

# figures that get a mean and a spread over repeats: (summary key or path, )
_NUMERIC = ("step_time_median_s", "step_time_mean_s", "step_time_sd_s", "step_time_p95_s", "samples_per_s",
            "tokens_per_s", "comm_share", "straggler_s", "comm_time_per_step_s", "harness_per_step_s",
            "padded_tokens_per_step")


def step_time_stats(run: Run) -> dict:
    """Mean and sample standard deviation of the timed steps' times (the median is summarize()'s)."""
    times = [r["step_time_s"] for r in run.timed_steps() if r.get("step_time_s") is not None]
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


def _coverage_text(h: dict | None) -> str:
    if not h:
        return "not recorded"
    if not h.get("calls"):
        return "no collectives traced"
    shares = " / ".join("n/a" if v is None else f"{v:g}%" for v in (h.get("calls_pct"), h.get("bytes_pct")))
    return shares + ("" if h.get("verdict") == coverage.FULL else f" ({h.get('verdict')})")


def compare_training(groups, labels, out, plt, rates: list[tuple] | None = None) -> tuple[list, list, dict]:
    """groups: the runs of each fabric (repeats), baseline first; labels: one per fabric; rates: per fabric
    (line rate in bits per second or None, where it comes from)."""
    runs = [g[0] for g in groups]  # one run stands for its fabric where a single run is needed
    all_runs = [r for g in groups for r in g]
    run_sums = [[{**summarize(r), **step_time_stats(r)} for r in g] for g in groups]
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
        row("iteration time, median", "step_time_median_s", "s"), row("iteration time, mean", "step_time_mean_s", "s"),
        ["iteration time, sd over steps"] + [_cell(s["spread"]["step_time_sd_s"], "s", None, False,
                                                   "n/a (fewer than 2 timed steps)")
                                             + (f" ({same(str(r['timed_steps']) for r in rs)} timed steps)"
                                                if s["spread"]["step_time_sd_s"] else "")
                                             for s, rs in zip(sums, run_sums)],
        row("iteration time, p95", "step_time_p95_s", "s"),
        row("samples/s", "samples_per_s"), row("tokens/s", "tokens_per_s"),
        ["communication share"] + [_cell(s["spread"]["comm_share"], "%", None, False) + partial_note(s) for s in sums],
        row("exposed communication share", "exposed_comm.share", "%", pct=False),
        row("straggler spread", "straggler_s", "s", pct=False),
        row("computed tokens per step (padding included)", "padded_tokens_per_step", pct=False,
            missing="n/a (not recorded)"),
        row("harness work per step, outside the iteration time", "harness_per_step_s", "s", pct=False,
            missing="n/a (not recorded)"),
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
        ["collective timing coverage (calls / bytes timed)"] + [same(_coverage_text(s.get("comm_health")) for s in ss)
                                                                 for ss in run_sums],
    ]
    parity = loss_parity(all_runs)
    title = "Training: iteration time, throughput, communication, energy (relative to the first fabric)"
    if repeats:
        title += "; repeats: mean ± standard deviation (n runs)"
    tables = [(title, ["", *labels], rows),
              ("Loss-curve parity", ["", ""], [["verdict", parity["verdict"]],
                                               ["steps compared", str(parity["steps_compared"])]])]
    comm_ops = sorted({op for s in sums for op in s["comm"]})
    rates = rates or [LineRate(None, 1, "unknown")] * len(labels)

    def comm_cell(c: dict, rate) -> str:
        busbw = c.get("busbw_GBps")
        return (fmt(c.get("time_per_step_s"), "s") + " / " + (rate_text(busbw) if busbw is not None else "n/a")
                + _of_line(busbw, rate).replace("; ", ", ", 1) + (" (partial)" if c.get("partial") else ""))
    comm_rows = [[op] + [comm_cell(s["comm"].get(op) or {}, rate) for s, rate in zip(sums, rates)]
                 for op in comm_ops]
    tables.append(("Communication per step: time / busbw (median), with the % of line rate where it is known",
                   ["collective", *labels], comm_rows))
    tables += group_tables(run_sums, labels)

    # projection from the baseline to every other run's link rate, against what was measured
    # from the baseline's runs: several are repeats, projected from together (their medians and spread)
    profiles = [measured_profile(r, rs) for r, rs in zip(groups[0], run_sums[0])]
    try:
        prof = combine_profiles([p for p in profiles if p["step_time_s"] is not None] or profiles[:1])
    except ProjectionError:  # repeats of another layout or link: the first run alone, as before
        prof = profiles[0]
    proj_rows, proj, warnings = [], [], []
    # each fabric by its least-covered run: a comparison of times is like for like only at equal coverage
    worst = {lab: min((s.get("comm_health") or {} for s in ss), key=lambda h: (h.get("calls_pct") is None,
                                                                                h.get("calls_pct") or 0.0))
             for lab, ss in zip(labels, run_sums)}
    note = coverage.differs(worst)
    if note:
        warnings.append(note)
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
                          fmt(s["step_time_median_s"], "s"), f"{err * 100:+.1f}%",
                          "yes" if inside else "NO: measured " + ("above" if s["step_time_median_s"] > hi else "below")
                          + " the interval"])
        if not inside:
            warnings.append(f"PROJECTION MISSED {lab}: predicted {fmt(p['step_time_s'], 's')} against "
                            f"{fmt(s['step_time_median_s'], 's')} measured ({err * 100:+.1f}%), outside its interval "
                            f"{fmt(lo, 's')} - {fmt(hi, 's')}: the model leaves out something this fabric does "
                            "(see docs/projection.md); do not quote the projection for it")
    if proj_rows:
        # the projection rescales measured collective times: untimed calls are missing from them
        caveat = (f"; partial: the baseline has {fmt_bytes(prof['untimed_bytes'])} per step untimed"
                  if prof.get("partial") else "")
        tables.append((f"Projection from {labels[0]} (compute + bytes x bus factor / rate): predicted vs measured "
                       "median iteration time" + caveat,
                       ["fabric", "predicted iteration", "interval", "measured iteration", "error", "in interval"],
                       proj_rows))

    figures = []
    for key, name, ylabel, what, text in (
            ("step_time_median_s", "iteration_time.png", "iteration time, median", "Iteration time",
             lambda v: time_text(v * 1e6)),
            ("samples_per_s", "samples_per_s.png", "samples/s", "Throughput", None)):
        stats = [s["spread"][key] for s in sums]
        compare_figures.bars(plt, out, name, labels, stats, ylabel,
                             f"{what} per fabric, % difference from {labels[0]}"
                             + (" (mean; bars: one standard deviation)" if repeats else ""), text)
        figures.append((name, f"{what} per fabric with the % difference from the first"))
    curves = [[(r["step"], r["loss"]) for r in run.metrics if r.get("loss") is not None] for run in runs]
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
    stats = [{k: v for k, v in s["spread"].items() if v} for s in sums]
    return tables, figures, {"summaries": sums, "parity": parity, "projection": proj, "stats": stats,
                             "time_to_train": ttt, "warnings": warnings}


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


def compare(paths: list[str], out: str, allow_mismatch: bool = False, sweeps: list[str] | None = None,
            busbw_axis: str = "log", line_rate: list[str] | None = None,
            expect_transport: list[str] | None = None) -> dict:
    """Write DIR/compare.html (self-contained: figures embedded), compare.md, figures as PNG and SVG, and
    compare.json. busbw_axis: "log" or "linear"; line_rate: LABEL=RATE for fabrics whose runs do not
    record their link rate (nccl-tests text files); expect_transport: LABEL=TRANSPORT claims held against
    each fabric's runs (a mismatch is a red line at the top and MISMATCH in the Fabrics table)."""
    if busbw_axis not in compare_figures.BUSBW_AXES:
        raise CompareError(f"--busbw-axis: got {busbw_axis!r}; allowed: {', '.join(compare_figures.BUSBW_AXES)}")
    if len(paths) < 2:
        raise CompareError("compare needs at least two run directories")
    given, paths = zip(*(split_label(p) for p in paths))
    paths = list(paths)
    if twice := given_twice(paths):
        raise CompareError(f"{twice} is given twice; allowed: each run directory once (repeats are separate runs "
                           "with one label)")
    runs = [_load(p) for p in paths]
    kinds = ["sweep" if is_sweep(r) else "training" for r in runs]
    if len(set(kinds)) > 1:
        s_path, t_path = paths[kinds.index("sweep")], paths[kinds.index("training")]
        raise CompareError(f"cannot compare a collective sweep with a training run: {s_path} is a sweep, {t_path} "
                           f"a training run; compare sweeps with sweeps and training runs with training runs, or "
                           f"add the sweep to its fabric's training runs with --sweep LABEL={s_path}")
    if sweeps and kinds[0] == "sweep":
        raise CompareError("--sweep adds a fabric's sweep to a training comparison; these runs are sweeps already")
    for run in runs if kinds[0] == "sweep" else []:
        if _sweep(run) is None:  # a sweep still running, failed or killed before it wrote its tables
            raise CompareError(f"{run.path}: a collective sweep run without collectives.json (run.json status "
                               f"{run.info.get('status') or 'unknown'}): only a finished sweep can be compared")
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
    rates = line_rates(groups, labels, _parse_line_rates(line_rate or [], labels))
    claims = _parse_claims(expect_transport or [], labels)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    attached = None
    sweep_warnings: list[str] = []
    with compare_figures.figure_style():
        if kinds[0] == "sweep":
            tables, figures, sweep_warnings = compare_sweeps(labels, [[_sweep(r) for r in g] for g in groups], out,
                                                             plt, busbw_axis, rates)
            data = {"kind": "sweep"}
            work = workload_rows(groups, [_sweep(g[0]) for g in groups])
        else:
            tables, figures, data = compare_training(groups, labels, out, plt, rates)
            data["kind"] = "training"
            work = workload_rows(groups)
            found, where = _attach_sweeps(labels, groups, sweeps)
            if all(found):
                sweep_tables, sweep_figures, sweep_warnings = compare_sweeps(labels, found, out, plt, busbw_axis,
                                                                             rates)
                tables += [(f"Sweeps of these fabrics - {t}", h, r) for t, h, r in sweep_tables]
                figures += sweep_figures
                attached = dict(zip(labels, where))
            elif any(found):
                notes.append("collective sweeps left out: " + ", ".join(f"{lab} has none" for lab, f in
                                                                        zip(labels, found) if not f)
                             + " (give one with --sweep LABEL=DIR)")
    # NCCL's algorithm and protocol per collective and size, from the TUNING lines of each fabric's logs
    sources = [[r.path for r in g] + [p if os.path.isdir(p) else os.path.dirname(p)
                                      for p in (attached or {}).get(lab, [])] for lab, g in zip(labels, groups)]
    if algo := nccl_algorithms.compare_section(labels, sources):
        tables.append(algo)
    tables += congestion_tables(labels, groups, sources, kinds[0])
    power_dirs = [next((d for d in src if os.path.isfile(os.path.join(d, "collectives.json"))), "") for src in sources]
    if any(power_dirs) and (power := power_table.table(labels, power_dirs)):
        tables.append(power)
    sums = data.get("summaries") or [None] * len(labels)
    normal = normalised.table(labels, [normalised.figures([d for d in src if os.path.isdir(d)], sm, g[0].metrics)
                                       for src, sm, g in zip(sources, sums, groups)])
    if normal:
        tables.append(normal)
    inventory = inventory_rows(groups)
    facts = fabric_rows(groups) + fabric_config.compare_rows([[r.info for r in g] for g in groups]) + inventory
    facts.append(["status"] + [" / ".join(dict.fromkeys(str(r.info.get("status")) for r in g)) for g in groups])
    claim_row, claim_warnings, verdicts = transport_claim_rows(labels, groups, claims)
    facts += claim_row
    tables.insert(0, ("Fabrics", ["", *labels], facts))
    tables.insert(1, ("Workload", ["", *labels], work))
    warnings = claim_warnings + [w for r in runs
                                 if (w := ((r.info.get("fabric") or {}).get("expectation") or {}).get("warning"))]
    warnings += hardware_warnings(labels, inventory)
    warnings += data.pop("warnings", [])
    warnings += sweep_warnings
    if problems:
        warnings.append("compared despite different recipes: " + " | ".join(problems))
    warnings += notes
    title = "fabric-harness comparison: " + " vs ".join(labels)
    subtitle = (f"Workload: {workload_line(work)}. Baseline: {labels[0]} (every % difference and ratio is "
                "against it).")
    write_documents(out, "compare", title, subtitle, warnings, tables, figures, embed=True)
    result = {"labels": labels, "runs": paths, "groups": {lab: [r.path for r in g] for lab, g in zip(labels, groups)},
              **{k: v for k, v in data.items() if k != "summaries"}, "sweeps": attached,
              "figures": [n for n, _ in figures], "warnings": warnings,
              "line_rates_bps": {lab: r.total_bps for lab, r in zip(labels, rates)},
              "line_rate_nics": {lab: r.nics for lab, r in zip(labels, rates)}, "busbw_axis": busbw_axis,
              "transport_checks": verdicts,
              "workload": {row[0]: dict(zip(labels, row[1:])) for row in work}}
    with open(os.path.join(out, "compare.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o))
    return result


def congestion_tables(labels: list[str], groups: list[list[Run]], sources: list[list[str]], kind: str) -> list:
    """Congestion and loss per fabric (hosts' counters, the switch's), and per sweep size where recorded."""
    rows = congestion_summary.compare_rows([[(r.path, r.info, r.metrics) for r in g] for g in groups])
    out = [("Congestion and loss: summed over the hosts and the run (repeats: their mean); the switch's counter "
            "deltas between the run's start and end", ["", *labels], rows)]
    sweep_dirs = [next((d for d in src if os.path.isfile(os.path.join(d, "sweep.jsonl"))), "") for src in sources]
    if any(sweep_dirs):
        ops = sorted({o for d in sweep_dirs if d for (o, _) in congestion_summary.sweep_totals(d)})
        for op in ops:
            size_rows = congestion_summary.sweep_rows(labels, sweep_dirs, op)
            if size_rows:
                size_rows = [[size_text(int(r[0]))] + r[1:] for r in size_rows]
                out.append((f"{op}: congestion and loss per size, summed over hosts (PFC pause frames received / "
                            "ECN-marked packets / CNPs sent / drops, discards, retransmissions)",
                            ["size", *labels], size_rows))
    return out


def _parse_claims(args: list[str], labels: list[str]) -> dict[str, str]:
    """--expect-transport LABEL=TRANSPORT -> {label: claim}; the claim is a transport word or an interface."""
    out = {}
    for arg in args:
        lab, sep, claim = arg.rpartition("=")
        if not sep or lab not in labels or not claim:
            raise CompareError(f"--expect-transport {arg}: expected LABEL=TRANSPORT with LABEL one of "
                               f"{', '.join(map(repr, labels))} and TRANSPORT one of {', '.join(TRANSPORTS)} or an "
                               "interface name such as eth0")
        if problem := claim_problem(claim, f"--expect-transport {lab}=TRANSPORT"):
            raise CompareError(problem)
        out[lab] = claim
    return out


def transport_claim_rows(labels: list[str], groups: list[list[Run]], claims: dict[str, str]
                         ) -> tuple[list[list[str]], list[str], dict[str, dict]]:
    """The Fabrics table's "transport claimed" row, the red lines for mismatches, and the verdicts per label."""
    if not claims:
        return [], [], {}
    row, warnings, verdicts = ["transport claimed"], [], {}
    for lab, runs in zip(labels, groups):
        if lab not in claims:
            row.append("-")
            continue
        checks = [check_transport(claims[lab], (r.info or {}).get("fabric")) for r in runs]
        verdict = group_verdict(checks)
        reasons = list(dict.fromkeys(c["reason"] for c in checks if c.get("reason")))
        verdicts[lab] = {"expected": claims[lab], "verdict": verdict, "reasons": reasons}
        word = {"ok": "ok", "mismatch": "MISMATCH", "unknown": "not verified"}[verdict]
        row.append(f"{claims[lab]}: {word}" + (f" ({'; '.join(reasons)})" if reasons else ""))
        if verdict == "mismatch":
            warnings.append(f"TRANSPORT MISMATCH {lab}: " + "; ".join(reasons)
                            + " - its numbers are not that fabric's")
    return [row], warnings, verdicts


def _parse_line_rates(args: list[str], labels: list[str]) -> dict[str, LineRate]:
    """--line-rate LABEL=RATE or LABEL=NxRATE (tc units: 100gbit, 8x400gbit: N NICs per host) -> {label: rate}."""
    from telemetry.analysis.rates import RateError
    out = {}
    for arg in args:
        lab, _, rate = arg.rpartition("=")
        if lab not in labels:
            raise CompareError(f"--line-rate {arg}: expected LABEL=RATE with LABEL one of "
                               f"{', '.join(map(repr, labels))}")
        try:
            given = parse_given_line_rate(rate, "--rate")
        except RateError as exc:
            raise CompareError(str(exc).replace("--rate", f"--line-rate {lab}=")) from None
        if given.total_bps is None:
            raise CompareError(f"--line-rate {arg}: 'none' has no line rate; give a rate such as 100gbit")
        out[lab] = given
    return out


__all__ = ["compare", "CompareError", "RunError", "recipe_differences", "loss_parity", "time_to_train"]
