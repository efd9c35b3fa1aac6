"""`python -m telemetry compare [LABEL=]RUN ... [--sweep LABEL=DIR ...] --out DIR`: a fabric evaluation.

Runs are grouped by fabric label (given as LABEL=RUN, else derived from the fabric each run used: the lab's
rate, or the transport and link rate); runs with one label are repeats, shown as mean and spread. The first
fabric is the baseline: percentages are relative to it. Runs of different recipes are refused (a fabric
comparison must change the fabric only) unless --allow-mismatch is given. A training comparison includes
each fabric's collective sweep when one belongs to its runs (in the run directory, or --sweep).

This module is the entry: it checks and groups the runs, then puts together the sections of
sweep_comparison.py or training_comparison.py (inputs: compare_inputs.py) with the evidence every comparison
shows (NCCL's algorithms, congestion, power, the Fabrics table) and writes the documents.
"""
from __future__ import annotations

import json
import math
import os

from telemetry.analysis import compare_figures, congestion_summary, fabric_config, nccl_algorithms, normalised, power_table
from telemetry.analysis.compare_figures import size_text
from telemetry.analysis.compare_inputs import (CompareError, cut_short_words, is_sweep, label, line_rates, load_input, recipe_differences,
                                               sweep_cut_short, sweep_of, sweep_of_training_run)
from telemetry.analysis.fabric_summary import fabric_rows, workload_line, workload_rows
from telemetry.analysis.inventory_summary import hardware_warnings, inventory_rows
from telemetry.analysis.line_rate import LineRate
from telemetry.errors import InputError
from telemetry.analysis.line_rate import parse_given as parse_given_line_rate
from telemetry.analysis.report import write_documents
from telemetry.analysis.runs import Run, RunError, given_twice
from telemetry.analysis.sweep_comparison import compare_sweeps
from telemetry.analysis.training_comparison import compare_training, group_tables, loss_parity, time_to_train
from telemetry.analysis.transport_claims import TRANSPORTS, check_transport, claim_problem, group_verdict
from telemetry.rundir import SWEEP_SIZES, SWEEP_TABLE


def split_label(arg: str) -> tuple[str | None, str]:
    """'LABEL=PATH' -> (LABEL, PATH); a path that exists as written (even with '=' in it) has no label."""
    if os.path.exists(arg) or "=" not in arg:
        return None, arg
    lab, path = arg.split("=", 1)
    if not path.strip():  # `fast=$DIR` with DIR unset; said as such, not as "'': not a directory"
        raise CompareError(f"{arg}: no run directory after '='; allowed: LABEL=RUN or RUN")
    if not lab.strip():  # `$LABEL=DIR` with LABEL unset: was taken as unlabelled, its fabric's name in its place
        raise CompareError(f"{arg}: no label before '='; allowed: LABEL=RUN or RUN")
    if not lab.strip().isprintable():  # a newline would split compare.md's table rows and the figures' legends
        raise CompareError(f"{arg!r}: the label {lab.strip()!r} holds a line break or control character, which "
                           "would split compare.md's table rows; allowed: a label of printable text")
    return lab.strip(), path


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
    groups = [[r for r, d in zip(runs, derived) if d == lab] for lab in labels]
    # one label given to runs on different fabrics (a label reused by mistake) makes their mean mix fabrics
    mixed = [f"the runs labelled {lab!r} are on different fabrics ("
             + "; ".join(f"{fab}: {', '.join(r.path for r in g if label(r) == fab)}"
                         for fab in dict.fromkeys(label(r) for r in g)) + "): their figures mix them"
             for lab, g in zip(labels, groups) if len({label(r) for r in g}) > 1]
    if mixed:
        note = " | ".join(([note] if note else []) + mixed)
    return labels, groups, note


COMPLETE = ("completed", "target_reached")  # run.json statuses of a run that ran to its end


def _leave_out_incomplete(labels: list[str], groups: list[list[Run]]
                          ) -> tuple[list[list[Run]], dict[str, list[str]], list[str]]:
    """A run that did not complete (run.json status failed, running, ...) is left out of its fabric's figures
    where the fabric has a completed run, and named; a fabric with none keeps its runs, with a warning. Runs
    read from nccl-tests text, or without a status, are kept. Returns the groups, {label: paths left out}
    and the warnings."""
    kept, left_out, notes = [], {}, []
    for lab, g in zip(labels, groups):
        bad = [r for r in g if "nccl_tests" not in r.info and isinstance(r.info.get("status"), str)
               and r.info["status"] not in COMPLETE]
        if not bad:
            kept.append(g)
            continue
        what = ", ".join(f"{r.path} ({r.info['status']})" for r in bad)
        if len(bad) == len(g):
            kept.append(g)
            notes.append(f"{lab}: no run of a completed status ({what}): its figures are from runs that did not "
                         "complete")
            continue
        kept.append([r for r in g if r not in bad])
        left_out[lab] = [r.path for r in bad]
        notes.append(f"{lab}: {len(bad)} of {len(g)} runs did not complete and are left out of its figures: {what}")
    return kept, left_out, notes


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
        sweep_run = load_input(path)
        if not is_sweep(sweep_run) or sweep_of(sweep_run) is None:
            raise CompareError(f"--sweep {arg}: {path} holds no collective sweep (collectives.json or an "
                               "nccl-tests text file)")
        found[idx].append(sweep_of(sweep_run))
        where[idx].append(path)
    for i, g in enumerate(groups):
        for run in g if not found[i] else []:
            if own := sweep_of_training_run(run):
                found[i].append(own[0])
                where[i].append(own[1])
    return found, where


def _check_kinds(runs: list[Run], paths: list[str], sweeps: list[str] | None) -> str:
    """"sweep" or "training": every run must be of one kind, and only finished sweeps compare."""
    kinds = ["sweep" if is_sweep(r) else "training" for r in runs]
    if len(set(kinds)) > 1:
        s_path, t_path = paths[kinds.index("sweep")], paths[kinds.index("training")]
        raise CompareError(f"cannot compare a collective sweep with a training run: {s_path} is a sweep, {t_path} "
                           f"a training run; compare sweeps with sweeps and training runs with training runs, or "
                           f"add the sweep to its fabric's training runs with --sweep LABEL={s_path}")
    if sweeps and kinds[0] == "sweep":
        raise CompareError("--sweep adds a fabric's sweep to a training comparison; these runs are sweeps already")
    for run in runs if kinds[0] == "sweep" else []:
        if sweep_of(run) is None:  # a sweep still running, failed or killed before it wrote its tables
            kept = os.path.join(run.path, SWEEP_TABLE)
            hint = (f"; the sizes it measured {cut_short_words(run)[1]} are in {kept}, which compare takes as "
                    "nccl-tests output" if sweep_cut_short(run) is not None else "")
            raise CompareError(f"{run.path}: a collective sweep run without collectives.json (run.json status "
                               f"{run.info.get('status') or 'unknown'}): only a finished sweep can be compared{hint}")
    return kinds[0]


def _recipe_problems(runs: list[Run], allow_mismatch: bool) -> tuple[list[str], list[str]]:
    """How each run's recipe differs from the first's (refused unless allow_mismatch), and notes on text tables."""
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
    return problems, notes


def _training_section(labels, groups, out, plt, busbw_axis, rates, sweeps, notes: list[str]) -> tuple:
    """The training comparison with each fabric's sweeps where every fabric has one (a note where only some do):
    tables, figures, data, workload rows, the sweeps' warnings, and where the sweeps came from."""
    tables, figures, data = compare_training(groups, labels, out, plt, rates)
    data["kind"] = "training"
    work = workload_rows(groups)
    found, where = _attach_sweeps(labels, groups, sweeps)
    sweep_warnings: list[str] = []
    attached = None
    if all(found):
        sweep_tables, sweep_figures, sweep_warnings = compare_sweeps(labels, found, out, plt, busbw_axis, rates)
        tables += [(f"Sweeps of these fabrics - {t}", h, r) for t, h, r in sweep_tables]
        figures += sweep_figures
        attached = dict(zip(labels, where))
    elif any(found):
        notes.append("collective sweeps left out: " + ", ".join(f"{lab} has none" for lab, f in
                                                                zip(labels, found) if not f)
                     + " (give one with --sweep LABEL=DIR)")
    return tables, figures, data, work, sweep_warnings, attached


def _evidence_tables(labels: list[str], groups: list[list[Run]], sources: list[list[str]], kind: str,
                     data: dict) -> list:
    """NCCL's algorithm and protocol per collective and size (the TUNING lines of each fabric's logs),
    congestion and loss, power, and the normalised figures."""
    tables = []
    if algo := nccl_algorithms.compare_section(labels, sources):
        tables.append(algo)
    tables += congestion_tables(labels, groups, sources, kind)
    power_dirs = [next((d for d in src if os.path.isfile(os.path.join(d, "collectives.json"))), "") for src in sources]
    if any(power_dirs) and (power := power_table.table(labels, power_dirs)):
        tables.append(power)
    sums = data.get("summaries") or [None] * len(labels)
    normal = normalised.table(labels, [normalised.figures([d for d in src if os.path.isdir(d)], sm,
                                                         [r.metrics for r in g])
                                       for src, sm, g in zip(sources, sums, groups)])
    if normal:
        tables.append(normal)
    return tables


def _fabrics_table(labels: list[str], groups: list[list[Run]], claims: dict[str, str]) -> tuple:
    """The Fabrics table (what each fabric was, its hardware, status and transport claim), the claims' red
    lines, their verdicts, and the inventory rows."""
    inventory = inventory_rows(groups)
    facts = fabric_rows(groups) + fabric_config.compare_rows([[r.info for r in g] for g in groups]) + inventory
    facts.append(["status"] + [" / ".join(dict.fromkeys(str(r.info.get("status")) for r in g)) for g in groups])
    claim_row, claim_warnings, verdicts = transport_claim_rows(labels, groups, claims)
    facts += claim_row
    return ("Fabrics", ["", *labels], facts), claim_warnings, verdicts, inventory


def _write_json(out: str, result: dict) -> None:
    with open(os.path.join(out, "compare.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, default=lambda o: None if isinstance(o, float) and math.isnan(o) else str(o))


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
    runs, unreadable = [], []
    for p in paths:  # every input that cannot be read is named, not only the first
        try:
            runs.append(load_input(p))
        except InputError as exc:
            unreadable.append(" ".join(str(exc).split()))
    if unreadable:
        raise CompareError("\n".join(unreadable))
    kind = _check_kinds(runs, paths, sweeps)
    problems, notes = _recipe_problems(runs, allow_mismatch)
    labels, groups, group_note = _group(runs, list(given))
    if group_note:
        notes.append(group_note)
    groups, left_out, incomplete = _leave_out_incomplete(labels, groups)
    notes[:0] = incomplete
    rates = line_rates(groups, labels, _parse_line_rates(line_rate or [], labels))
    claims = _parse_claims(expect_transport or [], labels)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out, exist_ok=True)
    attached = None
    sweep_warnings: list[str] = []
    with compare_figures.figure_style():
        if kind == "sweep":
            tables, figures, sweep_warnings = compare_sweeps(labels, [[sweep_of(r) for r in g] for g in groups], out,
                                                             plt, busbw_axis, rates)
            data = {"kind": "sweep"}
            work = workload_rows(groups, [sweep_of(g[0]) for g in groups])
        else:
            tables, figures, data, work, sweep_warnings, attached = _training_section(
                labels, groups, out, plt, busbw_axis, rates, sweeps, notes)
    sources = [[r.path for r in g] + [p if os.path.isdir(p) else os.path.dirname(p)
                                      for p in (attached or {}).get(lab, [])] for lab, g in zip(labels, groups)]
    tables += _evidence_tables(labels, groups, sources, kind, data)
    fabrics, claim_warnings, verdicts, inventory = _fabrics_table(labels, groups, claims)
    tables.insert(0, fabrics)
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
              "transport_checks": verdicts, "left_out": left_out,
              "workload": {row[0]: dict(zip(labels, row[1:])) for row in work}}
    _write_json(out, result)
    return result


def congestion_tables(labels: list[str], groups: list[list[Run]], sources: list[list[str]], kind: str) -> list:
    """Congestion and loss per fabric (hosts' counters, the switch's), and per sweep size where recorded."""
    rows = congestion_summary.compare_rows([[(r.path, r.info, r.metrics) for r in g] for g in groups])
    out = [("Congestion and loss: summed over the hosts and the run (repeats: their mean); the switch's counter "
            "deltas between the run's start and end", ["", *labels], rows)]
    sweep_dirs = [next((d for d in src if os.path.isfile(os.path.join(d, SWEEP_SIZES))), "") for src in sources]
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
    from telemetry.analysis.rates import RateError, bytes_unit_warning
    out = {}
    for arg in args:
        lab, _, rate = arg.rpartition("=")
        if lab not in labels:
            raise CompareError(f"--line-rate {arg}: expected LABEL=RATE with LABEL one of "
                               f"{', '.join(map(repr, labels))}")
        if lab in out:  # the last one silently won
            raise CompareError(f"--line-rate {arg}: label {lab!r} is given a line rate twice; allowed: one "
                               "--line-rate per label")
        try:
            given = parse_given_line_rate(rate, f"--line-rate {lab}")
        except RateError as exc:
            raise CompareError(str(exc).replace(", or 'none' for unshaped links", "")) from None
        if given.total_bps is None:
            raise CompareError(f"--line-rate {arg}: 'none' has no line rate; give a rate such as 100gbit")
        per_nic = rate.split("x", 1)[-1] if "x" in rate.lower() and rate[:1].isdigit() else rate
        if warning := bytes_unit_warning(per_nic, f"--line-rate {lab}"):  # 100Gbps is 800 Gbit/s to tc
            import sys
            print(warning, file=sys.stderr)
        out[lab] = given
    return out


__all__ = ["compare", "CompareError", "RunError", "recipe_differences", "loss_parity", "time_to_train", "split_label",
           "group_tables", "compare_sweeps", "compare_training", "label", "is_sweep", "line_rates"]
