"""`telemetry report` of one collective sweep: per collective its time, algbw and busbw at every size against
the line rate, the averages, the small-message latency and the time and busbw versus size figures.

A sweep has no steps: the training report rendered for it was all n/a (step time, losses, "a run from before
the tracer health"), with empty figures, and left out every figure the sweep measured.
"""
from __future__ import annotations

import os

from telemetry.analysis.compare_figures import rate_text, size_text, time_text
from telemetry.analysis.compare_inputs import cut_short_words, label, sweep_cut_short, sweep_of
from telemetry.analysis.fabric_summary import lab_row
from telemetry.analysis.line_rate import backend_note, job_line_rate, of_line_text
from telemetry.analysis.report import fmt, write_report
from telemetry.analysis.runs import Run
from telemetry.analysis.sweep_comparison import average_table, latency_table, line_rate_table, sweep_figures
from telemetry.input_files import what_is_there
from telemetry.rundir import SWEEP_TABLE


def _best(row: dict) -> tuple[str, dict] | None:
    """The out-of-place block, else the in-place one (a collective measured only in place), with its name."""
    for kind in ("out_of_place", "in_place"):
        if row.get(kind):
            return kind.replace("_", "-"), row[kind]
    return None


def _overview(run: Run, sweep: dict) -> tuple:
    fab = run.info.get("fabric") or {}
    lab = fab.get("lab") or {}
    hosts = list(dict.fromkeys(h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")))
    exp = fab.get("expectation") or {}
    verdict = "matches" if exp.get("match") else "MISMATCH" if exp.get("match") is False else "not checked"
    rows = [["status", fmt(run.info.get("status"))],
            ["ranks", f"{sweep.get('world_size')} on {len(hosts)} host(s)" + (f": {', '.join(hosts)}" if hosts else "")],
            ["backend / transport", f"{fab.get('backend') or sweep.get('backend')} / {fab.get('transport') or 'unknown'}"],
            ["expected fabric", f"{exp.get('expected', 'any')} ({verdict})"],
            ["sizes", f"{size_text(sweep.get('min_bytes'))} to {size_text(sweep.get('max_bytes'))}, "
                      f"{sweep.get('iters')} timed iterations each after {sweep.get('warmup')} warm-up"]]
    if lab:
        rows.append(lab_row(run))
    return ("Sweep", ["", ""], rows)


def ceiling_note(op: str, world: int | None, hosts: int) -> str:
    """all_to_all with several ranks a node on the lab's one link a node (hosts 0: not a lab run): each node sends ppn x (n - ppn) / n x S
    where nccl-tests' busbw counts (n-1)/n x S, so its share of the line rate is at most (n-1) / (ppn (n-ppn))
    (lab round 7, 3 nodes x 2 ranks: 62.5%; 128 KB read 65.2%, beside all_gather's 99.9%; 64 KB 92.4%)."""
    if op != "all_to_all" or not world or not hosts or world % hosts or world == hosts:
        return ""
    ppn = world // hosts
    most = (world - 1) / (ppn * (world - ppn))
    return (f" ({ppn} ranks a node: each node's link carries {ppn} x {world - ppn}/{world} of the size where busbw "
            f"counts {world - 1}/{world}, so a link at its rate reads {most * 100:.1f}% here; more only from the lab's "
            "tc burst or ranks that finish early in the time's average)")


def _op_table(op: str, sweep: dict, rate, hosts: int = 0) -> tuple:
    rows = []
    for r in sweep["ops"][op]["rows"]:
        found = _best(r)
        if found is None:
            continue
        kind, b = found
        rows.append([size_text(r["size"]), kind, time_text(b.get("time_us")), rate_text(b.get("algbw_GBps")),
                     rate_text(b.get("busbw_GBps")), of_line_text(b.get("busbw_GBps"), rate, r["size"]).removeprefix("; ")
                     or "unknown", fmt(b.get("wrong"))])
    return (f"{op}: time and bandwidth at every size" + backend_note(op, sweep.get("backend"), sweep.get("world_size"))
            + (ceiling_note(op, sweep.get("world_size"), hosts) if rate is not None and rate.total_bps else ""), ["size", "block", "time", "algbw", "busbw",
                                                         "busbw of line rate", "#wrong"], rows)


def sweep_sections(run: Run, out: str, plt) -> tuple[list, list]:
    """The report's tables and figures for a sweep run."""
    sweep, cut = sweep_of(run), None
    if sweep and not sweep.get("ops") and sweep.get("p2p_matrix"):  # sweep.ops=[p2p_matrix]: finished, no test
        overview = _overview(run, sweep)
        overview[2].insert(0, ["result", "collectives.json holds no collective test: this sweep measured the GPU "
                                         "pairs' p2p matrix only (python -m telemetry p2p RUN shows it)"])
        return [overview], []
    if not sweep or not sweep.get("ops"):
        sweep = sweep_cut_short(run)
        if sweep is None:
            there = what_is_there(os.path.join(run.path, SWEEP_TABLE))  # a FIFO is not opened: it was said empty
            table = (f"its {SWEEP_TABLE} is {there}, not a regular file (not read)"
                     if there not in ("a regular file", "no such file or directory") else
                     f"its {SWEEP_TABLE} holds no measured size")
            return [("Sweep", ["", ""], [["result", f"no collectives.json: the sweep did not finish, and {table}"]])], []
        verb, when = cut_short_words(run)
        status = fmt(run.info.get("status")) + (": still running, or killed before it could say so"
                                                if verb == "has not finished" else "")
        cut = (f"the sweep {verb} (run.json status {status}): {sweep['rows_read']} sizes in {len(sweep['ops'])} "
               f"tests measured {when}, read from {SWEEP_TABLE} (no collectives.json)")
    rate = job_line_rate(run)
    ops = list(sweep["ops"])
    name = label(run)
    overview = _overview(run, sweep)
    if cut:
        overview[2].insert(0, ["result", cut])
    # the lab's one link a node (a host with several NICs shares S over them: not this arithmetic)
    hosts = (len({h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")})
             if (run.info.get("fabric") or {}).get("lab") else 0)
    tables = [overview] + [_op_table(op, sweep, rate, hosts) for op in ops]
    average, _ = average_table(ops, [name], [[sweep]], [rate])
    tables += [average, line_rate_table(ops, [name], [sweep], [rate]), latency_table([name], [sweep])]
    return tables, sweep_figures(plt, out, ops, [name], [sweep], "log", [rate], False)


def write_run_report(run_path: str, out: str | None = None) -> dict:
    """`python -m telemetry report RUN`: a training run's report, or a collective sweep's."""
    return write_report(run_path, out, sweep_sections=sweep_sections)
