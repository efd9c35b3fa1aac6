"""`telemetry compare` over collective sweeps: busbw per size and collective, side by side and against the
line rate (the training comparison and the entry point are telemetry/analysis/compare.py)."""
from __future__ import annotations

import json
import os
from telemetry.analysis.fabric_summary import line_rate_bps
from telemetry.analysis.repeats import merge_sweeps, spread
from telemetry.analysis.report import fmt
from telemetry.analysis.runs import Run, load_run, upgrade_sweep
from telemetry.analysis import compare_figures
from telemetry.analysis.compare_figures import rate_text, size_text, time_text
from telemetry.errors import InputError

class CompareError(InputError):
    """Runs that cannot be compared; the message says why and what to do."""


def relative_change(value, base):
    if value is None or base in (None, 0):
        return None
    return (value - base) / base


def load_run_or_sweep(path: str) -> Run:
    """A run directory, or an nccl-tests text file (the user's own nccl-tests run, a vendor's published table)."""
    if os.path.isfile(path):
        from telemetry.analysis.nccl_tests import NcclTestsError, as_run
        try:
            return as_run(path)
        except NcclTestsError as exc:
            raise CompareError(str(exc)) from None
    return load_run(path)


def sweep_in(run: Run) -> dict | None:
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
    return "nccl_tests" in run.info or workload == "collectives" or (workload is None and sweep_in(run) is not None)


def sweep_of_training_run(run: Run) -> tuple[dict, str] | None:
    """A sweep that belongs to a training run: collectives.json in its directory, or a sweep run directory
    inside it (e.g. output_dir=RUN/sweep). (sweep, where) or None."""
    if os.path.isfile(os.path.join(run.path, "collectives.json")):
        return sweep_in(run), os.path.join(run.path, "collectives.json")
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
    p = relative_change(value, base)
    return "" if p is None else f" ({p * 100:+.1f}%, {_ratio(value, base)})"


def of_line(gbps, rate_bps) -> str:
    if gbps is None or not rate_bps:
        return ""
    share = gbps * 8e9 / rate_bps
    # above 100%: the rate is not the link the traffic crossed, or busbw counts intra-host hops too
    return f"; {share * 100:.1f}% of line rate" + (" (ABOVE the line rate: check the rate)" if share > 1.05 else "")


def _sd_text(sd, text) -> str:
    return f" ± {text(sd)}" if sd else ""


def _range_text(sizes) -> str:
    if len(sizes) == 1:
        return f"{size_text(sizes[0])} (1 size)"
    return f"{size_text(sizes[0])} - {size_text(sizes[-1])} ({len(sizes)} sizes)" if sizes else "none"


def line_rates(groups: list, labels: list[str], given: dict[str, float] | None = None) -> list[tuple]:
    """Per fabric (bits per second or None, where it comes from): --line-rate first, else what its runs
    recorded (all its runs agreeing)."""
    out = []
    for lab, group in zip(labels, groups):
        found = [line_rate_bps(r) for r in group]
        rates = {bps for bps, _ in found}
        bps, why = found[0] if len(rates) == 1 else (None, "its runs differ in link rate")
        if given and lab in given:
            bps, why = given[lab], "--line-rate"
        per_host = _ranks_per_host(group[0])
        if bps and per_host and per_host > 1:
            # busbw counts every hop of the algorithm, the intra-host ones (NVLink, PCIe) too
            why += f"; {per_host} ranks per host: busbw counts intra-host hops too, so it can exceed one link"
        out.append((bps, why))
    return out


def _ranks_per_host(run: Run) -> int | None:
    hosts = [h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")]
    return round(len(hosts) / len(set(hosts))) if hosts else None


def compare_sweeps(labels, groups, out, plt, busbw_axis: str = "log", rates: list[tuple] | None = None
                   ) -> tuple[list, list, list]:
    """groups: per fabric its sweeps (repeats: their mean and spread). Tables, figures, warnings."""
    merged = [merge_sweeps(g) for g in groups]
    rates = rates or [(None, "unknown")] * len(labels)
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
        for j, (g, (bps, _why)) in enumerate(zip(groups, rates)):
            st = spread(avg_busbw(s, op, common) for s in g)
            if st is None:
                cells.append("n/a (no busbw at the common sizes)")
                continue
            if j == 0:
                base = st["mean"]
            text = rate_text(st["mean"]) + (f" ± {rate_text(st['sd'])} (n={st['n']})" if st["sd"] else "")
            if j:
                text += _vs(st["mean"], base)
            text += of_line(st["mean"], bps)
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
    rate_rows = [["line rate"] + [f"{_fmt_bits(bps)} ({rate_text(bps / 8e9)}; {why})" if bps else f"unknown: {why}"
                                  for bps, why in rates]]
    for op in ops:
        cells = []
        for s, (bps, _why) in zip(merged, rates):
            peak = max(((r["size"], b["busbw_GBps"]) for r in s["ops"][op]["rows"]
                        if (b := _best_block(r)) and b.get("busbw_GBps") is not None), key=lambda p: p[1],
                       default=None)
            if peak is None:
                cells.append("n/a")
                continue
            cells.append(f"{rate_text(peak[1])} at {size_text(peak[0])}"
                         + (of_line(peak[1], bps).replace("; ", ": ") if bps else ": % of line rate unknown"))
        rate_rows.append([f"{op}: peak busbw"] + cells)
    tables.append(("Bus bandwidth against the line rate (busbw x 8 / the rate of one link the traffic used)",
                   ["", *labels], rate_rows))

    lat_keys = [k for k in merged[0].get("latency_us", {}) if all(k in s.get("latency_us", {}) for s in merged)]
    lat_rows = []
    for k in lat_keys:
        base = merged[0]["latency_us"][k]
        vals = [s["latency_us"][k] for s in merged]
        sds = [(s.get("latency_sd_us") or {}).get(k) for s in merged]
        lat_rows.append([k.removesuffix("_us")] + [fmt(v) + (f" ± {fmt(sd)} (n={s['merged_sweeps']})" if sd else "")
                                                    + (f" ({relative_change(v, base) * 100:+.0f}%)" if j and base else "")
                                                    for j, (v, sd, s) in enumerate(zip(vals, sds, merged))])
    tables.append(("Small-message latency (us), change relative to the first run", ["test"] + labels, lat_rows))
    gbps = [bps / 8e9 if bps else None for bps, _ in rates]
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


def _fmt_bits(bps: float) -> str:
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"
