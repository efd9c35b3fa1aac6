"""`python -m telemetry report RUN`: one run's story in tables and plots (Markdown, HTML, PNG).

The numbers come from `summarize()`, which the compare command reuses, so a figure means the same
thing in both. Timing statistics leave out the first (warm-up) step, the first step
of each resumed attempt (it warms up again), and profiled steps.
"""
from __future__ import annotations

import html
import os
import re
import statistics
from urllib.parse import quote

from telemetry import coverage
from telemetry.formulas import RECORDED_OPS
from telemetry.analysis.compare_figures import rate_text
from telemetry.analysis.runs import Run, damage_warning, load_run, median, percentile
from telemetry.stragglers import report_section as straggler_section
from telemetry.rundir import REPORT, RunKey, StepKey



def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def _untimed_bytes(stats: dict) -> int | None:
    """A step's untimed bytes for one collective type; None where a record without the field had untimed calls."""
    if "untimed_bytes" in stats:
        return stats["untimed_bytes"]
    return 0 if not stats.get("untimed") else None


def group_summary(steps: list[dict], step_time_s: float | None = None) -> dict:
    """Communication per process group, medians over `steps` (their `comm_groups`): {name: {dim, size,
    scope, count_per_step, bytes_per_step, time_per_step_s, busbw_GBps, share_of_step, partial, by_op}}.
    Empty for runs recorded before groups were (their communication reads per collective type only)."""
    names = sorted({g for r in steps for g in (r.get(StepKey.COMM_GROUPS) or {})})
    out = {}
    for name in names:
        rows = [r[StepKey.COMM_GROUPS][name] for r in steps if name in (r.get(StepKey.COMM_GROUPS) or {})]
        last = rows[-1]  # identity as last recorded
        t = median([x.get("time_s") for x in rows])
        ops = sorted({op for x in rows for op in (x.get("by_op") or {})})
        out[name] = {"dim": last.get("dim"), "size": last.get("size"), "scope": last.get("scope"),
                     "scope_reason": last.get("scope_reason"),
                     "count_per_step": median([x.get("count") for x in rows]),
                     "bytes_per_step": median([x.get("bytes") for x in rows]), "time_per_step_s": t,
                     "busbw_GBps": median([x.get("busbw_GBps") for x in rows]),
                     "share_of_step": t / step_time_s if t is not None and step_time_s else None,
                     "partial": any(x.get("untimed") for x in rows),
                     "by_op": {op: {"count_per_step": median([((x.get("by_op") or {}).get(op) or {}).get("count")
                                                              for x in rows]),
                                    "bytes_per_step": median([((x.get("by_op") or {}).get(op) or {}).get("bytes")
                                                              for x in rows]),
                                    "time_per_step_s": median([((x.get("by_op") or {}).get(op) or {}).get("time_s")
                                                               for x in rows])} for op in ops}}
    return out


def fabric_share(groups: dict) -> dict | None:
    """The inter-node groups' part of the step's communication (what crosses the fabric), or None without groups."""
    if not groups:
        return None
    total = sum(g["bytes_per_step"] or 0 for g in groups.values())
    inter = [n for n, g in groups.items() if g["scope"] == "inter"]
    unknown = [n for n, g in groups.items() if g["scope"] is None]
    inter_bytes = sum(groups[n]["bytes_per_step"] or 0 for n in inter)
    times = [groups[n]["time_per_step_s"] for n in inter]
    return {"groups": inter, "bytes_per_step": inter_bytes, "bytes_share": inter_bytes / total if total else None,
            "time_per_step_s": sum(times) if times and None not in times else None,
            "unknown_scope": unknown}


def run_health(run: Run) -> dict | None:
    """The run's tracer health (telemetry/coverage.py): run.json's, else the recorded steps' added up; None
    for runs recorded before it."""
    recorded = ((run.info.get("telemetry") or {}).get(StepKey.COMM_HEALTH))
    if recorded:
        return recorded
    steps = [r[StepKey.COMM_HEALTH] for r in run.metrics if isinstance(r.get(StepKey.COMM_HEALTH), dict)]
    if not steps:
        return None
    total = coverage.empty()
    for h in steps:
        coverage.add(total, h)
    return coverage.finish(total)


def health_rows(h: dict | None) -> tuple[str, list[str], list[list[str]]]:
    """The report's tracer-health section: the verdict, then the counts per process group."""
    title = "Collective timing coverage (tracer health)"
    if not h:
        return title, ["", ""], [["verdict", "not recorded (a run from before the tracer health)"]]
    keys = ("calls", "timed", "bytes", "timed_bytes", *coverage.UNTIMED, *coverage.BETWEEN)
    rows = [["run", "", *(fmt_bytes(h.get(k)) if k.endswith("bytes") and k != "unclaimed_reports" else fmt(h.get(k))
                          for k in keys)]]
    for name, g in sorted((h.get("by_group") or {}).items()):
        rows.append([name, fmt(g.get("timing")),
                     *(fmt_bytes(g.get(k)) if k.endswith("bytes") and k != "unclaimed_reports" else fmt(g.get(k))
                       for k in keys)])
    rows.append(["verdict", h.get("verdict") or "", *[""] * len(keys)])
    return title, ["group", "timing", *(k.replace("_", " ") for k in keys)], rows


def outside_rows(outside: dict) -> tuple[str, list[str], list[list[str]]]:
    """Rank 0's collectives outside every step (run.json telemetry.comm_outside_steps): counted, not timed."""
    rows = [[op, fmt(v.get("count")), fmt_bytes(v.get("bytes"))] for op, v in outside.items()]
    return ("Collectives outside the steps (rank 0: setup, checkpoints; counted, not timed)",
            ["collective", "calls", "bytes"], rows)


def summarize(run: Run) -> dict:
    steps = run.timed_steps()
    layout = run.info.get("layout") or {}
    gbs = layout.get("global_batch_size")
    step_times = [r.get(StepKey.STEP_TIME_S) for r in steps]
    med = median(step_times)
    comm: dict[str, dict] = {}
    reasons: set[str] = set()
    for op in RECORDED_OPS:
        rows = [r[StepKey.COMM][op] for r in steps if op in (r.get(StepKey.COMM) or {})]
        if not rows:
            continue
        t = median([x["time_s"] for x in rows])
        # calls without a time (functional collectives on gloo, late NCCL reports) leave the time partial
        partial = any(x.get("untimed") for x in rows)
        reasons.update(x["untimed_reason"] for x in rows if x.get("untimed") and x.get("untimed_reason"))
        comm[op] = {"count_per_step": median([x["count"] for x in rows]),
                    "bytes_per_step": median([x["bytes"] for x in rows]),
                    "time_per_step_s": t, "busbw_GBps": median([x.get("busbw_GBps") for x in rows]),
                    "share_of_step": t / med if t is not None and med else None,
                    "partial": partial, "untimed_bytes_per_step": median([_untimed_bytes(x) for x in rows])}
    comm_time = median([r.get(StepKey.COMM_TIME_S) for r in steps])
    per_step_untimed = []
    for r in steps:
        stats = (r.get(StepKey.COMM) or {}).values()
        known = [_untimed_bytes(x) for x in stats]
        per_step_untimed.append(None if None in known else sum(known))
    comm_partial = any(c["partial"] for c in comm.values())
    # exposed <= communication <= step time on every step, and the three medians are over the same steps,
    # so the shares keep that order (a median is monotone)
    exposed_steps = [r.get(StepKey.EXPOSED_COMM_S) for r in steps]
    exposed_comm = {"per_step_s": None if None in exposed_steps else median(exposed_steps),
                    "reason": next((r[StepKey.EXPOSED_COMM_REASON] for r in steps
                                    if r.get(StepKey.EXPOSED_COMM_REASON)),
                                   None if steps and StepKey.EXPOSED_COMM_S in steps[0] else
                                   "not recorded (a run from before the per-step estimate)")}
    if exposed_comm["per_step_s"] is not None:
        exposed_comm["reason"] = None
    exposed_comm["share"] = (exposed_comm["per_step_s"] / med if exposed_comm["per_step_s"] is not None and med
                             else None)
    windows = [r[StepKey.EXPOSED] for r in run.metrics if r.get(StepKey.EXPOSED)]
    exposed = None
    if windows:
        ops = sorted({op for w in windows for op in w["by_op"]})
        exposed = {"windows": len(windows), "share": _mean([w["exposed_share"] for w in windows]),
                   "comm_share": _mean([w["comm_share"] for w in windows]),
                   "by_op": {op: _mean([w["by_op"].get(op, {}).get("exposed_share") for w in windows]) for op in ops}}
    spreads = [r[StepKey.RANKS][StepKey.STEP_TIME_S] for r in steps
               if (r.get(StepKey.RANKS) or {}).get(StepKey.STEP_TIME_S)]
    energy_rows = [r.get(StepKey.JOB_GPU_ENERGY_J) for r in steps]
    energy_step = median(energy_rows)
    tel = run.info.get("telemetry") or {}
    energy = ({"per_step_j": energy_step, "per_sample_j": energy_step / gbs if energy_step and gbs else None,
               # a step without a reading is unknown, not 0 J: no total then, with the count
               "total_j": None if None in (all_j := [r.get(StepKey.JOB_GPU_ENERGY_J) for r in run.metrics])
               else sum(all_j), "steps_without_energy": sum(1 for v in all_j if v is None),
               "power_w": median([r.get(StepKey.JOB_GPU_POWER_W) for r in steps])}
              if energy_step is not None else
              {"reason": next((r.get(StepKey.JOB_GPU_ENERGY_REASON) or r.get(StepKey.GPU_ENERGY_REASON)
                               for r in run.metrics
                               if r.get(StepKey.JOB_GPU_ENERGY_REASON) or r.get(StepKey.GPU_ENERGY_REASON)),
                              tel.get(StepKey.GPU_ENERGY_REASON) or "no energy readings in this run")})
    losses = [r[StepKey.LOSS] for r in run.metrics if r.get(StepKey.LOSS) is not None]
    evals = [r[StepKey.EVAL_LOSS] for r in run.metrics if r.get(StepKey.EVAL_LOSS) is not None]
    fab = run.info.get("fabric") or {}
    return {
        RunKey.NAME: run.name, RunKey.STATUS: run.info.get("status"), "steps": len(run.metrics),
        "recipe_name": (run.info.get("recipe") or {}).get("name"), RunKey.LAYOUT: layout,
        RunKey.BACKEND: fab.get("backend") or run.info.get("backend"), "transport": fab.get("transport"),
        "expectation": fab.get("expectation"), RunKey.HOSTS: len(run.info.get("hosts") or []) or None,
        "step_time_median_s": med, "step_time_p95_s": percentile(step_times, 0.95),
        StepKey.SAMPLES_PER_S: gbs / med if gbs and med else None,
        StepKey.TOKENS_PER_S: median([r.get(StepKey.TOKENS_PER_S) for r in steps]),
        "padded_tokens_per_step": median([r.get(StepKey.PADDED_TOKENS) for r in steps]),
        "tokens_per_step": median([r.get(StepKey.TOKENS) for r in steps]),
        # the harness's own per-step work outside step_time_s (None for runs recorded before the field)
        "harness_per_step_s": (harness := median([r.get(StepKey.HARNESS_S) for r in steps])),
        "harness_share": harness / med if harness is not None and med else None,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "eval_loss_last": evals[-1] if evals else None,
        StepKey.COMM: comm, "comm_time_per_step_s": comm_time, StepKey.COMM_HEALTH: run_health(run),
        "comm_outside_steps": (run.info.get("telemetry") or {}).get("comm_outside_steps"),
        "comm_share": comm_time / med if comm_time is not None and med else None,
        # the share counts timed calls only: partial when some calls had no time
        "comm_partial": comm_partial, "comm_untimed_bytes_per_step": median(per_step_untimed),
        "comm_untimed_reasons": sorted(reasons),
        # per process group (mesh dimension) and its scope; {} / None for runs recorded before groups
        StepKey.COMM_GROUPS: (groups := group_summary(steps, med)), "fabric_share": fabric_share(groups),
        "exposed_comm": exposed_comm,  # every step's estimate from the traced calls (same steps as comm_share)
        StepKey.EXPOSED: exposed,  # profiled windows: shares of the profiled window, with the profiler's overhead
        "straggler_s": median([s["max"] - s["min"] for s in spreads]),
        "energy": energy, "counters": tel.get("counters") or {"verdict": None, "reason": "no counter summary"},
        "stragglers": straggler_section(run.info, run.metrics),
        "server_power": tel.get("server_power"), RunKey.SWITCH_METRICS: run.info.get(RunKey.SWITCH_METRICS),
    }


# ---------------------------------------------------------------- formatting

def fmt(value, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if unit == "%":
            return f"{value * 100:.1f}%"
        if abs(float(f"{value:.{digits}g}")) >= 1000:  # 999.7 as 3 digits is 1e+03: written 1,000
            return f"{value:,.0f}{unit and ' ' + unit}"
        return f"{value:.{digits}g}{unit and ' ' + unit}"
    return f"{value}{unit and ' ' + unit}"


def fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if float(f"{n:.3g}") >= size:  # the unit of the value as written: 999.7 kB is 1 MB, not 1e+03 kB
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def overlap_note(c: dict) -> str:
    """' (N calls a step in flight together: ...)' where one collective's summed call times pass the step: DDP's
    buckets on gloo's threads wait on one another, each timed from its start, so its time counts the link once per
    call and the busbw over it understates what the link carried (comm_time_s, their union, is the wall time)."""
    share = c.get("share_of_step")
    if not isinstance(share, (int, float)) or share <= 1.0:
        return ""
    calls = c.get("count_per_step")
    return (f" ({calls:g} calls a step, in flight together: their times add up to {share * 100:.0f}% of the step, so "
            "this busbw understates the link)" if isinstance(calls, (int, float)) and calls > 1 else "")


def partial_note(s: dict) -> str:
    """' (partial: N untimed per step: why)' when the communication time leaves calls out, else ''."""
    if not s.get("comm_partial"):
        return ""
    untimed = s.get("comm_untimed_bytes_per_step")
    amount = f"{fmt_bytes(untimed)} per step untimed" if untimed else "some calls untimed"
    why = "; ".join(s.get("comm_untimed_reasons") or [])
    return f" (partial: {amount}{': ' + why if why else ''})"


def accumulation_text(lay: dict) -> str:
    """'; micro batch 2 x 4 accumulation steps per rank, one gradient sync a step' where a step accumulates: the
    communication tables are per step, not per micro-batch (DDP's no_sync holds the all_reduce to the last one)."""
    accum = lay.get("grad_accum_steps")
    if not isinstance(accum, int) or accum <= 1:
        return ""
    text = f"; micro batch {lay.get('micro_batch_size')} x {accum} accumulation steps per rank"
    if lay.get("data_parallel") == "ddp" and lay.get("pp") in (1, None):
        text += ", the gradients synchronised once a step"
    return text + " (the communication below is per step, not per micro-batch)"


def tables(s: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    lay = s["layout"]
    exp = s["expectation"] or {}
    verdict = ("matches" if exp.get("match") else "MISMATCH" if exp.get("match") is False else "not checked")
    overview = [
        ["status", fmt(s["status"])], ["steps", fmt(s["steps"])],
        ["layout", f"dp {lay.get('dp')} x tp {lay.get('tp')} x pp {lay.get('pp')} ({lay.get('data_parallel')}), "
                   f"global batch {lay.get('global_batch_size')}" + accumulation_text(lay)],
        ["backend / transport", f"{s['backend']} / {s['transport'] or 'unknown'}"],
        ["expected fabric", f"{exp.get('expected', 'any')} ({verdict})"],
        ["loss first -> last", f"{fmt(s['loss_first'], digits=4)} -> {fmt(s['loss_last'], digits=4)}"],
        ["eval loss (last)", fmt(s["eval_loss_last"], digits=4)],
    ]
    throughput = [
        ["step time median / p95", f"{fmt(s['step_time_median_s'], 's')} / {fmt(s['step_time_p95_s'], 's')}"],
        ["samples/s", fmt(s[StepKey.SAMPLES_PER_S])], ["tokens/s", fmt(s[StepKey.TOKENS_PER_S])],
        ["tokens per step: real / computed (padding included)",
         f"{fmt(s.get('tokens_per_step'))} / {fmt(s.get('padded_tokens_per_step'))}"],
        ["harness work per step, outside step time (telemetry, stop vote, metrics write)",
         f"{fmt(s.get('harness_per_step_s'), 's')} ({fmt(s.get('harness_share'), '%')} of the step time)"
         if s.get("harness_per_step_s") is not None else "n/a (not recorded in this run)"],
        ["straggler spread (median max-min step time)", fmt(s["straggler_s"], "s")],
        ["communication share of step", fmt(s["comm_share"], "%") + partial_note(s)],
        ["exposed communication share", fmt(s["exposed_comm"]["share"], "%") +
         (f" (unknown: {s['exposed_comm']['reason']})" if s["exposed_comm"]["reason"] else "")],
        ["exposed share in profiled windows (of the window, profiler on)",
         fmt((s["exposed"] or {}).get("share"), "%") +
         (f" ({s['exposed']['windows']} windows)" if s["exposed"] else " (no profiled windows: set "
                                                                        "telemetry.profile_every)")],
    ]
    comm_rows = []
    for op, c in s["comm"].items():
        exp_op = (s["exposed"] or {}).get("by_op", {}).get(op)
        comm_rows.append([op, fmt(c["count_per_step"]), fmt_bytes(c["bytes_per_step"]), fmt(c["time_per_step_s"], "s"),
                          rate_text(c["busbw_GBps"]) + (" (partial)" if c["partial"] and c["busbw_GBps"] is not None
                                                        else ""),
                          fmt(c["share_of_step"], "%") + (" (partial)" if c["partial"] else "") + overlap_note(c),
                          fmt(exp_op, "%"), fmt_bytes(c["untimed_bytes_per_step"]) if c["partial"] else ""])
    group_table = group_rows(s)
    e = s["energy"]
    energy = ([["energy per step", fmt(e["per_step_j"], "J")], ["energy per sample", fmt(e["per_sample_j"], "J")],
               ["total energy", fmt(e["total_j"], "J") if e.get("total_j") is not None or not e.get("steps_without_energy")
                else f"n/a ({e['steps_without_energy']} of {s['steps']} steps without a reading)"], ["GPU power (sampled)", fmt(e["power_w"], "W")]]
              if "reason" not in e else [["energy", f"not available: {e['reason']}"]])
    c = s["counters"]
    counters = [["verdict", fmt(c.get("verdict"))], ["reason", fmt(c.get("reason"))]]
    counters += evidence_rows(s.get("server_power"), s.get(RunKey.SWITCH_METRICS))
    return [("Run", ["", ""], overview), ("Throughput", ["", ""], throughput),
            ("Communication per step (median)", ["collective", "count", "bytes", "time", "busbw", "share of step",
                                                 "exposed share (profiled)", "untimed bytes"], comm_rows),
            *([group_table] if group_table else []), health_rows(s.get(StepKey.COMM_HEALTH)),
            *([outside_rows(s["comm_outside_steps"])] if s.get("comm_outside_steps") else []),
            ("Energy", ["", ""], energy), ("Fabric counters", ["", ""], counters), s["stragglers"]]


def evidence_rows(server: dict | None, switch: dict | None, top: int = 10) -> list[list[str]]:
    """Whole-server power (the BMC's) and the switch counters that moved, for the counters table."""
    rows = []
    # a training run's summary is one host's; a sweep's is keyed by host
    per_host = {"": server} if server and ("source" in server or "reason" in server) else (server or {})
    for host, sp in per_host.items():
        where = f" {host}" if host else ""
        rows.append([f"server power (BMC, mean){where}", fmt(sp.get("mean_w"), "W") if sp.get("mean_w") is not None
                     else f"not available: {sp.get('reason') or sp.get('last_error') or 'no sample'}"])
        if sp.get("energy_j") is not None:
            rows.append([f"server energy (BMC){where}", fmt(sp["energy_j"], "J")])
    if switch:
        d = switch.get("deltas")
        if d is None:
            rows.append(["switch counters", f"not available: {switch.get('reason')}"])
        else:
            notable = sorted((d.get("notable") or {}).items(), key=lambda kv: -kv[1])[:top]
            rows.append(["switch counters", f"{len(d.get('counters') or {})} counters moved over {d['seconds']:.3g} s"
                         + (f"; reset during the run: {', '.join(d['resets'][:5])}" if d.get("resets") else "")])
            rows += [[f"switch: {k}", fmt(v)] for k, v in notable]
    return rows


def scope_label(g: dict) -> str:
    return {"inter": "inter-node (fabric)", "intra": "intra-node"}.get(g.get("scope"), "unknown scope")


def group_rows(s: dict) -> tuple[str, list[str], list[list[str]]] | None:
    """The table of communication per process group, ending with the fabric's share; None for old runs."""
    groups = s.get(StepKey.COMM_GROUPS) or {}
    if not groups:
        return None
    rows = [[name, fmt(g["dim"]), fmt(g["size"]), scope_label(g), ", ".join(sorted(g["by_op"])),
             fmt(g["count_per_step"]), fmt_bytes(g["bytes_per_step"]), fmt(g["time_per_step_s"], "s"),
             ("n/a (one rank: its calls move no bytes between ranks)" if g["size"] == 1 else
              rate_text(g["busbw_GBps"]) + (" (partial)" if g["partial"] else ""))]
            for name, g in groups.items()]
    f = s.get("fabric_share") or {}
    rows.append(["fabric share (inter-node groups)", ", ".join(f.get("groups") or []) or "none", "", "", "", "",
                 fmt_bytes(f.get("bytes_per_step")) + (f" ({fmt(f['bytes_share'], '%')})" if f.get("bytes_share")
                                                       is not None else ""), fmt(f.get("time_per_step_s"), "s"), ""])
    return ("Communication per process group (median per step)",
            ["group", "mesh dim", "ranks", "scope", "collectives", "count", "bytes", "time", "busbw"], rows)


# Markdown's inline syntax (and raw HTML, which Markdown passes through): run names, paths, host names and
# other recorded text are shown as text, as html.escape does for the HTML report, and the .md file stays
# plain text for a reader of the file: "->" is written as it is, not as "-&gt;". A backslash before ASCII
# punctuation is CommonMark's escape (spec 2.4); only what would start markup is escaped: a "<" that opens a
# tag or autolink, an "&" that spells an entity. Underscores are left as they are (inside words they are not
# emphasis, and collective names are full of them); $ stops math renderers; line breaks would end a table
# row or start a heading (so # and ! need no escape mid-line, and > only quotes at the start of a line).
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*[]|$~"} | {"\n": " ", "\r": " "})
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")


def md_escape(text) -> str:
    out = str(text).translate(_MD_SPECIAL)
    return _MD_ENTITY.sub(r"\\&", _MD_TAG.sub(r"\\<", out))


def _md_table(header, rows) -> str:
    if not rows:
        return "_none recorded_\n"
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _html_table(header, rows) -> str:
    if not rows:
        return "<p><em>none recorded</em></p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header) if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{'<tr>' + head + '</tr>' if head else ''}{body}</table>"


# ---------------------------------------------------------------- plots

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False  # run names are text: "$" in one is no formula
    import matplotlib.pyplot as plt
    return plt


def plots(run: Run, out: str) -> list[tuple[str, str]]:
    plt = _pyplot()

    m = run.metrics
    steps = [r[StepKey.STEP] for r in m]
    made = []

    from matplotlib.ticker import MaxNLocator

    def save(fig, name, title):
        for ax in fig.axes:
            if ax.get_xlabel() == "step":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        made.append((name, title))

    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(steps, [r.get(StepKey.LOSS) for r in m], label="train loss")
    ev = [(r[StepKey.STEP], r[StepKey.EVAL_LOSS]) for r in m if r.get(StepKey.EVAL_LOSS) is not None]
    if ev:
        ax.plot(*zip(*ev), "o-", label="eval loss")
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(), ax.grid(alpha=0.3)
    save(fig, "loss.png", "Loss")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(steps, [r.get(StepKey.STEP_TIME_S) for r in m], label="rank 0")
    band = [(r[StepKey.STEP], r[StepKey.RANKS][StepKey.STEP_TIME_S]) for r in m
            if (r.get(StepKey.RANKS) or {}).get(StepKey.STEP_TIME_S)]
    if band:
        ax.fill_between([b[0] for b in band], [b[1]["min"] for b in band], [b[1]["max"] for b in band],
                        alpha=0.3, label="min-max across ranks")
    prof = [r[StepKey.STEP] for r in m if r.get(StepKey.PROFILED)]
    if prof:
        ax.plot(prof, [next(x[StepKey.STEP_TIME_S] for x in m if x[StepKey.STEP] == p) for p in prof], "x",
                label="profiled step")
    ax.set_xlabel("step"), ax.set_ylabel("step time (s)"), ax.legend(), ax.grid(alpha=0.3)
    save(fig, "step_time.png", "Step time")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [2, 1]})
    ops = [op for op in RECORDED_OPS if any(op in (r.get(StepKey.COMM) or {}) for r in m)]
    bottom = [0.0] * len(m)
    for op in ops:
        vals = [((r.get(StepKey.COMM) or {}).get(op) or {}).get("time_s") or 0.0 for r in m]
        ax1.bar(steps, vals, bottom=bottom, label=op)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax1.set_xlabel("step"), ax1.set_ylabel("communication time (s)")
    if ops:
        ax1.legend(fontsize=8)
    windows = [r[StepKey.EXPOSED] for r in m if r.get(StepKey.EXPOSED)]
    if windows:
        names = sorted({op for w in windows for op in w["by_op"]})
        ax2.bar(["all"] + names, [_mean([w["exposed_share"] for w in windows]) * 100] +
                [_mean([w["by_op"].get(op, {}).get("exposed_share") for w in windows]) * 100 for op in names])
        ax2.set_ylabel("exposed share of step (%)")
    else:
        ax2.text(0.5, 0.5, "no profiled windows\n(telemetry.profile_every)", ha="center", va="center")
        ax2.set_axis_off()
    save(fig, "comm.png", "Communication by collective, and exposed share")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    energy = [r.get(StepKey.JOB_GPU_ENERGY_J) for r in m]
    if any(e is not None for e in energy):
        ax.plot(steps, energy, label="energy per step (J)")
        ax2 = ax.twinx()
        ax2.plot(steps, [r.get(StepKey.JOB_GPU_POWER_W) for r in m], color="tab:red", label="power (W)")
        ax2.set_ylabel("power (W)")
        ax.set_ylabel("energy (J)"), ax.set_xlabel("step")
    else:
        reason = next((r.get(StepKey.GPU_ENERGY_REASON) for r in m if r.get(StepKey.GPU_ENERGY_REASON)), "no readings")
        ax.text(0.5, 0.5, f"energy not available:\n{reason}", ha="center", va="center", wrap=True)
        ax.set_axis_off()
    save(fig, "energy.png", "Energy and power")

    fig, ax = plt.subplots(figsize=(7, 3.6))
    plotted = False
    for key, label in ((StepKey.JOB_NET_TX_BYTES, "NIC tx"), (StepKey.JOB_NET_RX_BYTES, "NIC rx"),
                       (StepKey.JOB_RDMA_TX_BYTES, "RDMA tx"), (StepKey.JOB_RDMA_RX_BYTES, "RDMA rx")):
        vals = [r.get(key) for r in m]
        if any(v is not None for v in vals):
            ax.plot(steps, [(v or 0) / 1e6 for v in vals], label=label)
            plotted = True
    losses = [(r[StepKey.STEP], r[StepKey.JOB_LOSS_EVENTS]) for r in m if r.get(StepKey.JOB_LOSS_EVENTS)]
    if losses:
        ax.plot(*zip(*losses), "rv", label="loss events")
    if plotted:
        ax.set_xlabel("step"), ax.set_ylabel("MB per step (all hosts)"), ax.legend(), ax.grid(alpha=0.3)
    else:
        ax.text(0.5, 0.5, "no NIC counters recorded", ha="center", va="center")
        ax.set_axis_off()
    save(fig, "counters.png", "Host NIC and RDMA counters")
    return made


# ---------------------------------------------------------------- write

CSS = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}"
       "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 10px;"
       "text-align:left}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee;margin:.5em 0}"
       ".warn{background:#fee;border:1px solid #c00;padding:.5em 1em}")


def _embedded(out: str, name: str) -> str:
    """A figure as a data: URI, its SVG twin where there is one (text stays text), else the file itself."""
    import base64
    svg = os.path.splitext(name)[0] + ".svg"
    path, kind = (svg, "image/svg+xml") if os.path.isfile(os.path.join(out, svg)) else (name, "image/png")
    with open(os.path.join(out, path), "rb") as f:
        return f"data:{kind};base64," + base64.b64encode(f.read()).decode("ascii")


def write_documents(out: str, basename: str, title: str, subtitle: str | None, warnings: list[str],
                    sections: list[tuple[str, list[str], list[list[str]]]], figures: list[tuple[str, str]],
                    embed: bool = False) -> None:
    """BASENAME.md and BASENAME.html with the same warnings, tables and figures (report and compare).
    embed: the HTML carries its figures as data: URIs, one file that can be mailed or moved alone."""
    md = [f"# {md_escape(title)}\n"] + ([f"{md_escape(subtitle)}\n"] if subtitle else []) \
        + [f"> **{md_escape(w)}**\n" for w in warnings]
    body = [f"<h1>{html.escape(title)}</h1>"] + ([f"<p>{html.escape(subtitle)}</p>"] if subtitle else [])
    body += [f"<p class='warn'><strong>{html.escape(w)}</strong></p>" for w in warnings]
    for heading, header, rows in sections:
        md += [f"## {md_escape(heading)}\n", _md_table(header, rows)]
        body += [f"<h2>{html.escape(heading)}</h2>", _html_table(header, rows)]
    md.append("## Figures\n")
    body.append("<h2>Figures</h2>")
    for name, caption in figures:
        md.append(f"![{md_escape(caption)}](<{quote(name)}>)\n")
        src = _embedded(out, name) if embed else quote(name)
        body.append(f"<figure><img src='{html.escape(src)}' data-file='{html.escape(name)}' "
                    f"alt='{html.escape(caption)}'><figcaption>{html.escape(caption)}</figcaption></figure>")
    with open(os.path.join(out, f"{basename}.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, f"{basename}.html"), "w", encoding="utf-8") as f:
        f.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def write_report(run_path: str, out: str | None = None, sweep_sections=None) -> dict:
    """report.md, report.html and figures of one run. `sweep_sections(run, out, plt)` gives a collective
    sweep's own tables and figures (telemetry/analysis/sweep_report.py write_run_report passes it)."""
    run = load_run(run_path)
    out = out or os.path.join(run_path, REPORT)
    os.makedirs(out, exist_ok=True)
    s = summarize(run)
    from telemetry.analysis.compare_inputs import is_sweep
    sweep = sweep_sections is not None and is_sweep(run)  # no steps: its sizes and bandwidths, not rows of n/a
    if sweep:
        sections, figures = sweep_sections(run, out, _pyplot())
    else:
        figures = plots(run, out)
        from telemetry.analysis.fabric_summary import lab_row  # the links a lab run had, and their queue drops
        sections = tables(s)
        if (row := lab_row(run)) is not None:
            sections[0][2].append(row)
    title = f"fabric-harness report: {s['name']}"
    warning = (s["expectation"] or {}).get("warning")
    health = s.get(StepKey.COMM_HEALTH) or {}
    partial = (f"collective {health['verdict']}" if health.get("calls") and health.get("verdict") != coverage.FULL
               else None)
    from telemetry.analysis.flight_recorder import section as flight_recorder  # a hung or timed-out run's dumps
    hang = flight_recorder(run_path)
    from telemetry.analysis.nccl_algorithms import report_sections  # NCCL's choices, and what it could pick
    algo = report_sections(run_path)
    from telemetry.analysis.fabric_config import report_section as fabric_config  # what the fabric was
    config = fabric_config(run.info) if "nccl_tests" not in run.info else None
    write_documents(out, "report", title, f"Run directory: {os.path.abspath(run_path)}",
                    [w for w in (warning, partial, damage_warning(run)) if w],
                    sections + ([config] if config else []) + algo + ([hang] if hang else []),
                    figures)
    return {"out": out, "summary": s, "figures": [n for n, _ in figures]}
