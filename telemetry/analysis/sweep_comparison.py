"""The comparison of collective sweeps: per collective its time and bus bandwidth at every size, the
average over the common size range, busbw against the line rate, small-message latency, and the figures."""
from __future__ import annotations

from telemetry.analysis import compare_figures
from telemetry.analysis.compare_figures import pct_change, rate_text, size_text, time_text
from telemetry.analysis.compare_inputs import CompareError
from telemetry.analysis.line_rate import LineRate, backend_note, of_line_text
from telemetry.analysis.line_rate import describe as describe_line_rate
from telemetry.analysis.repeats import merge_sweeps, spread
from telemetry.analysis.report import fmt


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
    p = pct_change(value, base)
    return "" if p is None else f" ({p * 100:+.1f}%, {_ratio(value, base)})"


def _sd_text(sd, text) -> str:
    return f" ± {text(sd)}" if sd else ""


def _range_text(sizes) -> str:
    if len(sizes) == 1:
        return f"{size_text(sizes[0])} (1 size)"
    return f"{size_text(sizes[0])} - {size_text(sizes[-1])} ({len(sizes)} sizes)" if sizes else "none"



# nccl-tests (and the harness's sweep) round each size down to a whole count per rank: all_gather of 64 KiB is
# 65,532 bytes on 3 ranks and 65,536 on 4; sizes this close are one requested size
SIZE_ROUNDING = 0.005


def align_sizes(groups: list[list[dict]]) -> tuple[list[list[dict]], list[str]]:
    """The sweeps with each size some sweep lacks renamed to another sweep's slightly larger one (within
    SIZE_ROUNDING, not a size of its own sweep), and a note per collective where that happened: sweeps on other world sizes
    measured the same requested sizes, and without it they had no size in common (round 9: all_gather on 3 and 4
    ranks, 'common sizes: none')."""
    groups = [[{**s, "ops": dict(s["ops"])} for s in g] for g in groups]  # the callers' sweeps stay as they are
    sweeps = [s for g in groups for s in g]
    notes = []
    for op in dict.fromkeys(op for s in sweeps for op in s.get("ops", {})):
        sizes = [{r["size"] for r in s["ops"][op]["rows"]} for s in sweeps if op in s["ops"]]
        every = sorted(set.union(*sizes))
        renamed = {}
        for own in sizes:
            for size in own - set.intersection(*sizes):  # a size every sweep has is compared as it is
                near = [t for t in every if t > size and t not in own and t - size <= SIZE_ROUNDING * t]
                if near:
                    renamed[size] = max(near)
        if not renamed:
            continue
        for s in sweeps:
            if op in s["ops"]:
                own = {r["size"] for r in s["ops"][op]["rows"]}
                rows = [{**r, "size": renamed[r["size"]]} if r["size"] in renamed and renamed[r["size"]] not in own
                        else r for r in s["ops"][op]["rows"]]
                s["ops"] = {**s["ops"], op: {**s["ops"][op], "rows": rows}}
        pairs = ", ".join(f"{a} B as {b} B" for a, b in sorted(renamed.items())[:4])
        notes.append(f"{op}: sizes rounded to a whole count per rank on each world size are compared as the size "
                     f"requested ({pairs}{', ...' if len(renamed) > 4 else ''})")
    return groups, notes


def compare_sweeps(labels, groups, out, plt, busbw_axis: str = "log", rates: list[tuple] | None = None
                   ) -> tuple[list, list, list]:
    """groups: per fabric its sweeps (repeats: their mean and spread). Tables, figures, warnings."""
    groups, aligned = align_sizes(groups)
    merged = [merge_sweeps(g) for g in groups]
    rates = rates or [LineRate(None, 1, "unknown")] * len(labels)
    ops = [op for op in merged[0]["ops"] if all(op in s["ops"] for s in merged)]
    if not ops:
        raise CompareError("no collective in common: " + "; ".join(
            f"{lab} has {', '.join(s['ops']) or 'none'}" for lab, s in zip(labels, merged)))
    repeats = any(s.get("merged_sweeps") for s in merged)
    tables = [size_table(op, labels, merged, repeats) for op in ops]
    average, warnings = average_table(ops, labels, groups, rates)
    warnings = aligned + warnings
    tables += [average, line_rate_table(ops, labels, merged, rates), latency_table(labels, merged)]
    figures = sweep_figures(plt, out, ops, labels, merged, busbw_axis, rates, repeats)
    return tables, figures, warnings


def _size_cells(blocks: list, repeats: list[int | None] | None = None) -> tuple[list[str], list[str]]:
    """One size's time and busbw cells per fabric, the others against the baseline (blocks[0]); `repeats`: each
    fabric's count of merged sweeps, so that a size only some of them measured says how many it is."""
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
        total = (repeats or [None] * len(blocks))[j]
        if total and b.get("merged_sweeps") and b["merged_sweeps"] < total:
            t += f" ({b['merged_sweeps']} of {total} repeats)"
            w += f" ({b['merged_sweeps']} of {total} repeats)"
        t_cells.append(t)
        w_cells.append(w)
    return t_cells, w_cells


def size_table(op: str, labels: list[str], merged: list[dict], repeats: bool) -> tuple:
    """`op`'s time and busbw at every size the baseline and at least one other fabric have."""
    base_rows = {r["size"]: r for r in merged[0]["ops"][op]["rows"]}
    others = [{r["size"]: r for r in s["ops"][op]["rows"]} for s in merged[1:]]
    # every size the baseline and at least one other fabric have
    sizes = sorted(sz for sz in base_rows if _best_block(base_rows[sz])
                   and any(o.get(sz) and _best_block(o[sz]) for o in others))
    rows = []
    for size in sizes:
        blocks = [_best_block(base_rows[size])] + [_best_block(o[size]) if o.get(size) else None for o in others]
        t_cells, w_cells = _size_cells(blocks, [s.get("merged_sweeps") for s in merged])
        rows.append([size_text(size)] + t_cells + w_cells)
    header = (["size"] + [f"{lab} time" for lab in labels] + [f"{lab} busbw" for lab in labels])
    return (f"{op}: time and bus bandwidth at every size both runs have (% difference and ratio "
            f"against {labels[0]}; ratio 2x: twice the baseline's value)"
            + ("; repeats: mean ± standard deviation" if repeats else ""), header, rows)


def _average_cells(op: str, groups: list[list[dict]], rates: list, common: list[int]) -> list[str]:
    """Per fabric the mean (± sd over repeats) average busbw over `common`, against the baseline and line rate."""
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
        text += of_line_text(st["mean"], rate)
        if rate is not None and rate.total_bps:
            text += backend_note(op, g[0].get("backend"), g[0].get("world_size"))
        cells.append(text)
    return cells


def average_table(ops: list[str], labels: list[str], groups: list[list[dict]], rates: list
                  ) -> tuple[tuple, list[str]]:
    """Averages over the sizes every sweep (every repeat of every fabric) has, so ranges never differ; the
    table and a note per collective whose sweeps cover different sizes."""
    all_sweeps = [s for g in groups for s in g]
    avg_rows, range_notes = [], []
    for op in ops:
        common = common_sizes(all_sweeps, op)
        own = [sorted({r["size"] for s in g for r in s["ops"][op]["rows"] if _best_block(r)}) for g in groups]
        extra = [(lab, [z for z in o if z not in common]) for lab, o in zip(labels, own)]
        extra = [(lab, z) for lab, z in extra if z]
        avg_rows.append([op, _range_text(common)] + _average_cells(op, groups, rates, common))
        if extra:
            note = (f"{op}: the sweeps cover different sizes; averages use the common range "
                    f"{_range_text(common)} only (" + "; ".join(
                        f"{lab} also has {_range_text(z)}" for lab, z in extra)
                    + ", left out of the average)")
            range_notes.append(note)
    title = "Average bus bandwidth over the common size range (sizes every fabric measured)"
    if range_notes:
        title += "; the ranges differ: see the note above"
    return (title, ["collective", "common sizes", *labels], avg_rows), range_notes


def line_rate_table(ops: list[str], labels: list[str], merged: list[dict], rates: list) -> tuple:
    """Against the line rate: peak busbw as a share of the rate of the links the traffic used."""
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
                         + (of_line_text(peak[1], rate, peak[0]).replace("; ", ": ", 1)
                            + backend_note(op, s.get("backend"), s.get("world_size")) if rate.total_bps
                            else ": % of line rate unknown"))
        rate_rows.append([f"{op}: peak busbw"] + cells)
    return ("Bus bandwidth against the line rate (busbw x 8 / the rate of the links the traffic used on a "
            "host: its NICs x their rates)",
            ["", *labels], rate_rows)


def latency_table(labels: list[str], merged: list[dict]) -> tuple:
    """Small-message latency any fabric's sweep measured, change relative to the first; a fabric without the test
    (an nccl-tests table has no latency table) reads 'not measured' rather than hiding the others' (lab round 7:
    a lab sweep against an nccl-tests table read '_none recorded_' beside its own 1,695 us)."""
    lat_keys = list(dict.fromkeys(k for s in merged for k in s.get("latency_us") or {}))
    lat_rows = []
    for k in lat_keys:
        base = (merged[0].get("latency_us") or {}).get(k)
        cells = []
        for j, s in enumerate(merged):
            v = (s.get("latency_us") or {}).get(k)
            if v is None:
                cells.append("not measured")
                continue
            sd = (s.get("latency_sd_us") or {}).get(k)
            n, total = (s.get("latency_n") or {}).get(k, s.get("merged_sweeps")), s.get("merged_sweeps")
            count = f"n={n}" + (f" of {total} repeats" if n and total and n < total else "")
            cells.append(fmt(v) + (f" ± {fmt(sd)} ({count})" if sd else f" ({count})" if n and n < (total or 0) else "")
                         + (f" ({pct_change(v, base) * 100:+.0f}%)" if j and base else ""))
        lat_rows.append([k.removesuffix("_us")] + cells)
    return ("Small-message latency (us), change relative to the first run", ["test"] + labels, lat_rows)


def sweep_figures(plt, out: str, ops: list[str], labels: list[str], merged: list[dict], busbw_axis: str,
                  rates: list, repeats: bool) -> list[tuple[str, str]]:
    """One figure per collective: time and busbw versus message size, (name, caption) each."""
    figures = []
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
    return figures
