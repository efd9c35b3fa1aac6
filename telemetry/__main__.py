"""python -m telemetry report RUN | compare [LABEL=]RUN ... --out DIR [--sweep LABEL=DIR] [--busbw-axis log|linear]
   [--line-rate LABEL=RATE] [--expect-transport LABEL=TRANSPORT] | project RUN [RUN ...] --rate RATE
   | nccl-tests FILE_OR_RUN [...] [--json OUT] [--csv OUT] | nccl-log LOG [...] [--expect T] [--json OUT] | export RUN --to tensorboard,wandb,parquet,trace
   | mllog RUN [--out FILE] [--org ORG] [--platform TEXT] [--no-check] | p2p RUN [--reference FILE]
   | watch RUN [--once] [--interval S]"""
from __future__ import annotations

import contextlib
import sys

from telemetry.errors import (OneLineParser, exit_quietly_on_closed_pipe, output_dir_problem, output_file_problem,
                              print_errors)
from telemetry.analysis.transport_claims import TRANSPORTS
from telemetry.analysis.runs import RunError
from telemetry.rundir import EXPORTS, REPORT, SWEEP_TABLE, StepKey, recorded_by_run


def _parser() -> OneLineParser:
    """The command line: one subcommand per report."""
    parser = OneLineParser(prog="python -m telemetry", description="Reports from run directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="write report.md, report.html and PNG figures for one run")
    rep.add_argument("run", help="a run directory (the recipe's output_dir)")
    rep.add_argument("--out", default=None, help="where to write (default: RUN/report)")
    cmp_ = sub.add_parser("compare", help="compare runs on different fabrics (the first is the baseline)")
    cmp_.add_argument("runs", nargs="+", metavar="[LABEL=]RUN",
                      help="two or more run directories, each optionally labelled with its fabric (runs with one "
                      "label are repeats: mean and spread); for sweeps, nccl-tests output files are runs too")
    cmp_.add_argument("--out", required=True, help="directory for compare.html, compare.md and figures")
    cmp_.add_argument("--sweep", action="append", metavar="LABEL=DIR", default=[],
                      help="a collective sweep (run directory or nccl-tests output) of the fabric LABEL (or of the "
                      "run directory LABEL), added to a training comparison; repeatable")
    cmp_.add_argument("--allow-mismatch", action="store_true", help="compare runs of different recipes anyway")
    cmp_.add_argument("--busbw-axis", default="log", metavar="log|linear",
                      help="scale of the sweep figures' bus bandwidth axis (default log: a slow fabric is not a "
                      "flat line at 0 next to a fast one)")
    cmp_.add_argument("--line-rate", action="append", default=[], metavar="LABEL=RATE",
                      help="a fabric's link rate in tc units (100gbit, 400gbit) where its runs do not record one "
                      "(nccl-tests text files): busbw is then also given as %% of line rate; repeatable")
    cmp_.add_argument("--expect-transport", action="append", default=[], metavar="LABEL=TRANSPORT",
                      help="the transport fabric LABEL claims (ib, roce, efa, socket, intra-node, or an interface "
                      "such as eth0): held against what its runs recorded; a mismatch is marked in the report; "
                      "repeatable")
    proj = sub.add_parser("project", help="predict a run's iteration time on another fabric or node count")
    proj.add_argument("run", nargs="+", help="a run directory; several are repeats of one configuration (the "
                      "same recipe, layout and fabric): projected from their medians, the interval widened to "
                      "hold their spread")
    proj.add_argument("--rate", action="append", default=[],
                      help="link rate per direction in tc units (100gbit, 1gbit, ...); repeatable")
    proj.add_argument("--busbw-table", action="append", default=[], metavar="FILE",
                      help="the target fabric as nccl-tests output (busbw per size); repeatable")
    proj.add_argument("--nodes", action="append", default=[], metavar="N",
                      help="node count to project onto (same ranks per node); repeatable; default: as measured")
    proj.add_argument("--ranks-per-node", default=None, metavar="G",
                      help="ranks on each target node (default: as measured); another count only from a run "
                           "measured on one node (its 2 ranks onto --nodes 2 --ranks-per-node 1)")
    proj.add_argument("--latency-us", type=float, default=0.0, help="extra latency per collective call")
    proj.add_argument("--efficiency", type=float, default=None,
                      help="fraction of the line rate collectives achieve (default: measured on gloo/tbf)")
    proj.add_argument("--intra-rate", default=None,
                      help="rate of the links inside a node (tc units) for the intra-node groups' traffic; "
                           "default: their time stays as measured")
    proj.add_argument("--json", default=None, help="write the projections here as JSON")
    proj.add_argument("--allow-mismatch", action="store_true",
                      help="project from runs whose recipes differ (beyond max_steps, seed, checkpoint and "
                           "evaluation settings) together anyway")
    nt = sub.add_parser("nccl-tests", help="read nccl-tests output (or a sweep's collectives.txt) into the "
                        "sweep's JSON and CSV")
    nt.add_argument("inputs", nargs="+", help="nccl-tests output files, or sweep run directories")
    nt.add_argument("--json", default=None, help="write the JSON here (one object; a list for several inputs)")
    nt.add_argument("--csv", default=None, help="write one CSV row per table row here")
    nl = sub.add_parser("nccl-log", help="what a job's NCCL_DEBUG=INFO log says of the fabric it used: transport, "
                        "network and plugin, devices, GPUDirect RDMA, nodes and ranks, connections, NCCL's "
                        "algorithm choices, warnings")
    nl.add_argument("inputs", nargs="+", metavar="LOG",
                    help="one job's logs: files (every rank's, or one console log), a folder of them, a run "
                    "directory (its logs/), or - for standard input")
    nl.add_argument("--expect", default=None, metavar="TRANSPORT",
                    help="the transport the fabric should have used (" + ", ".join(TRANSPORTS) + ", or an HCA or "
                    "interface such as mlx5_0): exit status 3 when the log shows another, or does not show which")
    nl.add_argument("--json", default=None, help="write the reading here as JSON (run.json's fabric.nccl fields)")
    mll = sub.add_parser("mllog", help="write a run's :::MLLOG lines (MLPerf Training's log format) and check them "
                         "with MLCommons' compliance checker")
    mll.add_argument("run", help="a bert_pretraining, image_classification or llm_lora run directory")
    mll.add_argument("--out", default=None, help="the file to write (default: RUN/mllog.txt)")
    mll.add_argument("--org", default="fabric-harness", help="submission_org (default fabric-harness)")
    mll.add_argument("--platform", default=None, help="submission_platform (default: hosts x devices from run.json)")
    mll.add_argument("--no-check", dest="check", action="store_false", help="do not run the compliance checker")
    p2p = sub.add_parser("p2p", help="GPU pair matrices (a sweep's NCCL p2p_matrix, launch.p2p_bandwidth's) in "
                         "p2pBandwidthLatencyTest's layout, with ratios against that sample's output from a reference "
                         "system")
    p2p.add_argument("run", help="a sweep run directory with sweep.ops including p2p_matrix, or the --out "
                     "directory of python -m launch.p2p_bandwidth")
    p2p.add_argument("--reference", default=None, help="p2pBandwidthLatencyTest's output (a text file)")
    exp = sub.add_parser("export", help="write TensorBoard, W&B (offline), Parquet or trace files from a run directory")
    exp.add_argument("run")
    exp.add_argument("--to", required=True, help="comma-separated: tensorboard, wandb, parquet, trace")
    exp.add_argument("--out", default=None, help="where to write (default: RUN/exports)")
    wat = sub.add_parser("watch", help="follow a running (or finished) run directory: progress, ETA, per-rank step "
                         "and communication times, stragglers, power, counters")
    wat.add_argument("run", help="a run directory (the recipe's output_dir), on this host or a shared filesystem")
    wat.add_argument("--once", action="store_true", help="print the view once and exit (scripts, tests)")
    wat.add_argument("--interval", type=float, default=2.0, help="seconds between reads (default 2)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "watch":
        return _watch(args)
    problem = _output_problem(args)
    if problem:
        return print_errors(problem)
    try:
        if args.command == "report":
            from telemetry.analysis.sweep_report import write_run_report
            result = write_run_report(args.run, args.out)
            print(f"wrote {result['out']}/report.html and report.md with {len(result['figures'])} figures")
        elif args.command == "compare":
            return _compare(args)
        elif args.command == "p2p":
            return _p2p(args)
        elif args.command == "mllog":
            return _mllog(args)
        elif args.command == "nccl-tests":
            return _nccl_tests(args)
        elif args.command == "nccl-log":
            return _nccl_log(args)
        elif args.command == "export":
            return _export(args)
        else:
            return _project(args)
    except RunError as exc:
        print_errors(exc)
        return 2
    except OSError as exc:  # the place passed the checks before the read, but did not take the files (a full disk)
        import errno
        if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EEXIST) and (out := _written_there(args, exc)):
            # what the command writes there is already a directory (report.md/), or a file where it makes one
            return print_errors(f"--out: {exc.filename!r} could not be written ({exc.strerror}); allowed: an output "
                                f"directory ({out!r} or another) whose entries of the names the command writes are "
                                "regular files or absent")
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        option = "--out" if getattr(args, "out", None) else "--json"
        where = exc.filename if isinstance(exc.filename, str) else getattr(args, "out", None) or args.json
        return print_errors(f"{option}: {where!r} could not be written ({exc.strerror or exc}); allowed: a place on "
                            "a filesystem with free space that this user can write")
    return 0


def _compare(args) -> int:
    from telemetry.analysis.compare import CompareError, compare
    try:
        result = compare(args.runs, args.out, args.allow_mismatch, args.sweep, args.busbw_axis,
                         args.line_rate, args.expect_transport)
    except CompareError as exc:
        print_errors(*str(exc).splitlines())  # one line per input that cannot be read
        return 2
    print(f"wrote {args.out}/compare.html and compare.md ({result['kind']}: {' vs '.join(result['labels'])})")
    for lab, check in result.get("transport_checks", {}).items():
        if check["verdict"] != "ok":
            print(f"  transport {lab}: {check['verdict']}: {'; '.join(check['reasons'])}", file=sys.stderr)
    for p in result.get("projection") or []:
        print(f"  projection {p['label']}: predicted {p['predicted_s']:.3f} s, measured {p['measured_s']:.3f} s "
              f"({p['error'] * 100:+.1f}%)")
    return 0


def _watch(args) -> int:
    import os

    from telemetry.analysis.watch import watch

    if not (0 < args.interval <= 3600):  # NaN fails too; inf would overflow time.sleep after the first view
        return print_errors(f"--interval: got {args.interval}; expected seconds > 0 and at most 3600")
    parent = os.path.dirname(os.path.abspath(args.run))
    if not os.path.lexists(args.run) and not args.once and os.path.isdir(parent):
        # a job still in the queue has not made its output_dir yet: wait for it, as for an empty one
        import time
        print(f"watch: waiting for {args.run} to be created (the job's output_dir; Ctrl-C to stop)", file=sys.stderr,
              flush=True)
        try:
            while not os.path.lexists(args.run):
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 130
    if not os.path.isdir(args.run):
        where = "" if os.path.isdir(parent) or os.path.lexists(args.run) else f" (nor is {parent})"
        return print_errors(f"watch: {args.run!r} is not a directory{where}; allowed: a run directory (the recipe's "
                            "output_dir), or one a queued job will create in an existing directory")
    from telemetry.rundir import looks_like_run_dir
    if not looks_like_run_dir(args.run):
        return print_errors(f"watch: {args.run!r} is not a run directory (no run.json, metrics.jsonl, ranks/ or "
                            "logs/ in it); allowed: a run directory (the recipe's output_dir), or an empty one "
                            "a run is about to write")
    from telemetry.analysis.runs import RunError, read_run_json, shape_problem
    from telemetry.rundir import METRICS, RUN_JSON, SWEEP_TABLE
    run_json = os.path.join(args.run, RUN_JSON)
    if os.path.isfile(run_json):  # written atomically: damage, not a run starting
        try:
            problem = shape_problem(read_run_json(run_json))
        except RunError as exc:
            return print_errors(f"watch: {exc}")
        if problem:
            return print_errors(f"watch: {run_json}: {problem}, as a run writes it")
    for name, what in ((RUN_JSON, "the JSON object a run writes"), (METRICS, "the JSON-lines file a run writes"),
                       (SWEEP_TABLE, "the text table a sweep writes")):
        path = os.path.join(args.run, name)
        if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block the view forever
            return print_errors(f"watch: {path}: not a regular file; allowed: {what}")
    return watch(args.run, once=args.once, interval_s=args.interval)


def _output_problem(args) -> str | None:
    """Where the command will write, checked before it reads anything: one line when it cannot."""
    import os

    out = getattr(args, "out", None)
    runs = getattr(args, "run", None)
    # a directory given as an input (nccl-log's run directory, nccl-tests' sweep) is a run's record too
    run_dirs = [r for r in ([runs] if isinstance(runs, str) else runs or []) + list(getattr(args, "inputs", None) or [])
                if os.path.isdir(r)]

    def recorded(path: str, option: str) -> str | None:  # a file the run wrote: writing over it loses it
        if any(recorded_by_run(path, d) for d in run_dirs):
            return (f"{option}: {path!r} is part of the input run's record (run.json, metrics.jsonl, ranks/, ...) "
                    "and would be overwritten; allowed: another file name (a new one in the run directory is fine)")
        return None
    if args.command == "mllog":  # --out is a file there (the :::MLLOG lines), not a directory
        return (recorded(out, "--out") or output_file_problem(out, "--out")) if out is not None else None
    if args.command in ("report", "export") and out is None and os.path.isdir(args.run):
        out = os.path.join(args.run, REPORT if args.command == "report" else EXPORTS)
    if out is not None and (args.command != "report" or os.path.isdir(args.run)):
        if problem := output_dir_problem(out, "--out") or _fifo_inside(out):
            return problem
    inputs = {os.path.realpath(p): p for p in [*getattr(args, "inputs", []), *(getattr(args, "busbw_table", None) or [])]}
    written: dict[str, str] = {}
    for option in ("json", "csv"):
        path = getattr(args, option, None)
        if path is None:
            continue
        if (real := os.path.realpath(path)) in inputs:  # it would be overwritten before anyone read it again
            return (f"--{option}: {path!r} is the input {inputs[real]!r}; allowed: a file that is not one of "
                    "the inputs")
        if real in written:
            return f"--{option}: {path!r} is also --{written[real]}; allowed: a file of its own for each"
        if problem := recorded(path, f"--{option}"):
            return problem
        written[real] = option
        if problem := output_file_problem(path, f"--{option}"):
            return problem
    return None


def _fifo_inside(out: str) -> str | None:
    """A FIFO no process reads where the command writes one of its files (report.md, a figure, ...) would make
    that write wait forever: one line naming it (other entries of the directory are none of the command's)."""
    import os

    from telemetry.errors import unread_fifo_problem

    try:
        names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    except OSError:
        return None
    for name in names:
        if name.endswith((".md", ".html", ".png", ".svg", ".json", ".jsonl", ".csv", ".txt", ".parquet")):
            if problem := unread_fifo_problem(os.path.join(out, name), "--out"):
                return problem
    return None


def _written_there(args, exc: OSError) -> str | None:
    """The output place (--out, its default under the run, or --json) when `exc` is about a path inside it."""
    import os

    out = getattr(args, "out", None) or getattr(args, "json", None)
    if out is None and args.command in ("report", "export"):
        out = os.path.join(args.run, REPORT if args.command == "report" else EXPORTS)
    if out is None or not isinstance(exc.filename, str):
        return None
    where, base = os.path.realpath(exc.filename), os.path.realpath(out)
    return out if where == base or where.startswith(base + os.sep) else None


def _project_targets(args) -> tuple[str | None, list[int], list[tuple], float | None]:
    """The options of `project`, checked: (problem or None, node counts, targets (label, rate in bit/s,
    busbw table), the intra-node links' rate)."""
    import math
    import os

    from telemetry.analysis.projection import ProjectionError, load_busbw_table
    from telemetry.analysis.rates import RateError, bytes_unit_warning, parse_rate, with_bits

    if not args.rate and not args.busbw_table:
        return ("project: give the target fabric: --rate RATE (tc units, e.g. 100gbit) and/or --busbw-table "
                "FILE (nccl-tests output)"), [], [], None
    eff = args.efficiency
    if eff is not None and not 0 < eff <= 1:
        return f"--efficiency: got {eff}; expected a fraction in (0, 1]", [], [], None
    if not math.isfinite(args.latency_us) or args.latency_us < 0:
        return (f"--latency-us: got {args.latency_us}; expected a finite number of microseconds >= 0"), [], [], None
    nodes = []
    for n in args.nodes:
        if not (n.isascii() and n.isdigit()) or int(n) < 1:
            return f"--nodes: got {n!r}; expected a whole number of nodes >= 1", [], [], None
        nodes.append(int(n))
    rpn = args.ranks_per_node
    if rpn is not None and (not (rpn.isascii() and rpn.isdigit()) or int(rpn) < 1):
        return f"--ranks-per-node: got {rpn!r}; expected a whole number of ranks >= 1", [], [], None
    targets = []
    try:
        for rate in args.rate:
            bps = parse_rate(rate)
            if bps is None:
                return "--rate: got 'none'; give the target's rate (tc units, e.g. 100gbit)", [], [], None
            if warning := bytes_unit_warning(rate):
                print(warning, file=sys.stderr)
            # bytes units, or 1024-based (10Mibit): each line naming the target says it in bits
            targets.append((with_bits(rate, bps), bps, None))
        for path in args.busbw_table:
            targets.append((os.path.basename(path), None, load_busbw_table(path)))
        intra_bps = None
        if args.intra_rate is not None:
            intra_bps = parse_rate(args.intra_rate, "--intra-rate")
            if intra_bps is None:
                return ("--intra-rate: got 'none'; give the intra-node links' rate (tc units, e.g. 900gbit)", [], [],
                        None)
    except (RateError, ProjectionError) as exc:
        return str(exc).removeprefix("error: "), [], [], None
    return None, nodes, targets, intra_bps


def _int_or_none(value: str | None) -> int | None:
    return None if value is None else int(value)


def _compute_text(profile: dict) -> str:
    """The time outside exposed communication as the projection reads it, step by step, with its own spread."""
    compute, spread = profile.get("compute_s"), profile.get("compute_spread")
    if compute is None or not spread:
        return ""
    known = profile["steps"] >= 3 or profile.get("repeats")
    return f"; compute {compute:.4f} s" + (f" ({spread[0] * 100 - 100:+.0f}%/{spread[1] * 100 - 100:+.0f}%)" if known else "")


def _print_measured(profile: dict) -> None:
    """What the runs measured, and what an unshaped link means for the projection."""
    if profile.get("repeats"):
        print(f"{profile['repeats']} repeats: median step times "
              + ", ".join(f"{t:.4f}" for t in profile["repeat_step_times_s"]) + " s")
    lo, hi = profile["step_spread"]
    # under 3 timed steps (and no repeats) the spread is unknown, not 0: the interval then holds only the
    # range of link efficiencies
    n = profile["steps"]
    spread = (f"10-90%: {lo * 100 - 100:+.0f}%/{hi * 100 - 100:+.0f}% over {n} steps" if n >= 3
              or profile.get("repeats") else f"{n} step{'s' if n != 1 else ''}: its 10-90% spread is unknown (needs "
              "3 timed steps), so the interval holds only the link's efficiency range")
    print(f"measured {profile['label']}: {profile['step_time_s']:.4f} s/step ({spread}) "
          f"on {profile['nodes']} node(s), "
          f"{profile['world_size']} ranks; communication {profile['comm_time_s']:.4f} s, exposed "
          f"{profile['exposed_s']:.4f} s" + (f", overlap window {profile['overlap_window_s']:.4f} s"
                                              if profile.get(StepKey.OVERLAP_WINDOW_S) else "") + _compute_text(profile))
    if profile.get("link_note"):
        print(f"  measured at {profile['link_bps'] / 1e6:g} Mbit/s: {profile['link_note']}; its collectives waited on "
              "that link, so the projection starts from its rate")
    if not profile["link_bps"]:
        print("  its links were not shaped: the communication time it measured is the transfer at the host's speed "
              "plus per-call overhead; on a target each call takes the larger of that and its bytes over the "
              "target's bandwidth")


def _print_partial(profile: dict) -> None:
    """Bytes per step that had no time: where they were, and what the projection does with them."""
    if profile.get("partial"):
        groups = profile.get("groups") or {}
        inter = sum(g.get("untimed_bytes") or 0 for g in groups.values() if g["scope"] == "inter")
        if groups and not inter:  # untimed only inside nodes: nothing the target link carries is missing
            print(f"  {profile['untimed_bytes']} bytes per step had no time, all on intra-node groups: they stay "
                  "as measured and the link's part is complete")
        else:
            print(f"  partial: {inter if groups else profile['untimed_bytes']} bytes per step"
                  + (" on inter-node groups" if groups else "") + " had no time; the projection leaves them out")


def _print_projection(p: dict, label: str, table, eff, args, intra_bps, profile: dict, n: int | None) -> None:
    """One projection: the step time with its interval, each group's part, notes, and whether it matters."""
    from telemetry.analysis.projection import negligible_above_bps

    low, high = p["interval_s"]
    where = f"{label}, {p['nodes']} node(s)" + (f" x {args.ranks_per_node} rank(s)" if args.ranks_per_node else "")
    print(f"  {where}: predicted {p['step_time_s']:.4f} s/step [{low:.4f}, {high:.4f}] (communication "
          f"{p['comm_time_s']:.4f} s: {p['wire_s']:.4f} s on the wire + {p['fixed_s']:.4f} s fixed; "
          + ("busbw from the table)" if table else f"efficiency {eff})"))
    for name, g in p["by_group"].items():
        shared = g.get("link_sharing") or 1.0
        where_g = (("on the target link" + (f", {shared:g} transfers sharing each link" if shared > 1 else ""))
                   if g["on_target_link"] else
                   "intra-node, " + (f"at {args.intra_rate}" if intra_bps else "as measured"))
        if g.get("size_new", g["size"]) == 1:  # onto 1 node x 1 rank: a group of one moves nothing, on no link
            where_g = "one rank: its calls move no bytes between ranks, on no link"
        ranks = (f"{g['size']} ranks" if g.get("size_new", g["size"]) == g["size"] else
                 f"{g['size']} ranks measured, {g['size_new']} projected")
        print(f"    group {name} ({g['scope']}-node, {ranks}): {g['bytes']:.0f} bytes, "
              f"measured {g['measured_s']:.4f} s -> {g['predicted_s']:.4f} s ({where_g})")
    for note in p["notes"]:
        print(f"    {note}")
    if p["negligible"]:
        from telemetry.analysis.rates import bits_text
        knee = None if table else negligible_above_bps(profile, efficiency=eff, nodes=n,
                                                       ranks_per_node=_int_or_none(args.ranks_per_node))
        print(f"    communication is negligible here: the link adds {p['wire_s'] * 1e3:.2f} ms, under 5% of "
              "the step; a faster fabric cannot make this step measurably faster"
              + (f" (true of any link above {bits_text(knee)})" if knee else ""))


# what repeats of one configuration may differ in: how long they ran, their seed, and what the trainer does
# outside a step's timing (trainer/loop.py: checkpoints and evaluation come after on_step_end)
_REPEAT_MAY_DIFFER = ("max_steps", "seed", "train.save_every", "train.save_final", "train.save_on_signal",
                      "train.eval_every_samples", "train.target_eval_loss", "train.target_eval_accuracy",
                      "data.eval_dataset", "data.max_eval_samples")


def _recipe_differences(first, run) -> list[str]:
    """What `run`'s recipe differs in from `first`'s beyond what repeats may (a run of seq_len 160 was projected
    from together with one of 64 as a repeat)."""
    from telemetry.analysis.compare_inputs import recipe_differences
    return [d for d in recipe_differences(first, run) if d.split(" ", 1)[0] not in _REPEAT_MAY_DIFFER]


def _not_a_repeat(first, run, diffs: list[str]) -> str:
    return (f"the runs given together are not repeats of one configuration: their recipes differ ({run.path} against "
            f"{first.path}: " + "; ".join(diffs[:6]) + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "")
            + "); allowed: runs of one recipe (max_steps, seed, checkpoint and evaluation settings may differ); "
            "project each configuration alone, or pass --allow-mismatch to project from them together anyway")


def _project(args) -> int:
    import json

    from telemetry.analysis.fabric_summary import lab_burst_bytes
    from telemetry.analysis.projection import ProjectionError, combine_profiles, efficiency_for, measured_profile, project
    from telemetry.analysis.runs import given_twice, load_run

    fail = print_errors
    problem, nodes, targets, intra_bps = _project_targets(args)
    if problem:
        return fail(problem)
    eff = args.efficiency
    if twice := given_twice(args.run):
        return fail(f"{twice} is given twice; allowed: each run directory once (its repeats are other runs)")
    profiles, runs = [], []
    for path in args.run:
        runs.append(load_run(path))
        profiles.append(measured_profile(runs[-1]))
        if profiles[-1][StepKey.STEP_TIME_S] is None:
            return fail(f"{path}: no timed steps to project from; allowed: a run whose metrics.jsonl has steps "
                        "with step_time_s")
    try:
        profile = combine_profiles(profiles)
    except ProjectionError as exc:
        return fail(str(exc))
    for run in runs[1:]:  # what combine_profiles reads may agree while the steps compute other things
        if diffs := _recipe_differences(runs[0], run):
            if not args.allow_mismatch:
                return fail(_not_a_repeat(runs[0], run, diffs))
            print(f"warning: {run.path} differs from {runs[0].path} in " + "; ".join(diffs[:6])
                  + (f" and {len(diffs) - 6} more" if len(diffs) > 6 else "") + " (--allow-mismatch)", file=sys.stderr)
    _print_measured(profile)
    if eff is None:
        eff = efficiency_for(profile)
    _print_partial(profile)
    results = []
    # a lab run projected onto a rate: the lab at that rate, its tc bucket included, as `compare` and the bench
    # take it (without it a 2mbit target put the bucket's 16 KiB of tiny LoRA's 150 kB on the wire: +11%)
    lab_target = bool(profile.get("lab") or profile.get("mtu")) and any(bps for _, bps, table in targets if table is None)
    if lab_target:
        print("  each --rate target is the fabric lab at that rate, its tc bucket included (2 ms at the rate, at "
              "least 16 KiB, passes at once after the step's compute); a NIC has none")
    try:
        for label, bps, table in targets:
            burst = lab_burst_bytes(bps, profile.get("mtu")) if lab_target and bps and table is None else 0.0
            for n in nodes or [None]:
                p = project(profile, bps, args.latency_us * 1e-6, eff, nodes=n, busbw_table=table,
                            intra_bps=intra_bps, ranks_per_node=_int_or_none(args.ranks_per_node), burst_bytes=burst)
                _print_projection(p, label, table, eff, args, intra_bps, profile, n)
                results.append({"target": label, "rate_bps": bps, **{k: v for k, v in p.items() if k != "by_op"},
                                "by_op": p["by_op"]})
    except ProjectionError as exc:
        return fail(str(exc))
    if args.json:
        doc = {"measured": {k: v for k, v in profile.items() if k != "ops"}, "ops": profile["ops"],
               "projections": results}
        return _write_output(args.json, "--json", lambda f: json.dump(doc, f, indent=1))
    return 0


def _p2p(args) -> int:
    import os

    from telemetry.analysis import p2p_matrix as pm
    if not os.path.isdir(args.run):  # was "neither p2p_matrix ... nor ...", as if the directory were there
        what = "is not a directory" if os.path.lexists(args.run) else "does not exist"
        return print_errors(f"{args.run}: {what}; allowed: a sweep run directory whose sweep.ops included p2p_matrix, "
                            "or the --out directory of python -m launch.p2p_bandwidth")
    m, own = pm.ours(args.run), pm.measured(args.run)
    if m is None and own is None:
        return print_errors(f"{args.run}: neither p2p_matrix in collectives.json nor {pm.BANDWIDTH_FILE}; allowed: a "
                            "sweep run with sweep.ops including p2p_matrix (GPUs only), or the --out directory of "
                            "python -m launch.p2p_bandwidth")
    ref = None
    if args.reference:
        from telemetry.input_files import InputFileError, read_limited
        try:  # bounded: a device or a huge log is refused, not read until memory runs out
            ref = pm.parse_reference(read_limited(args.reference, 64 << 20, streams=True).decode("utf-8", "replace"))
        except (OSError, InputFileError) as exc:
            return print_errors(f"--reference {args.reference}: {getattr(exc, 'strerror', None) or exc}; allowed: "
                                "p2pBandwidthLatencyTest's output, a text file of at most 64 MiB")
        if not any(k in ref for k in ("unidirectional", "bidirectional", "latency_gpu")):
            return print_errors(f"--reference {args.reference}: no p2pBandwidthLatencyTest matrix in it")
    if m is not None:
        print(pm.render(m))
        if ref is not None:
            print()
            print(pm.text_table(pm.HEADER, pm.ratios(m, ref)))
    if own is not None:
        for name, e in own["engines"].items():
            print(f"{chr(10) if m is not None else ''}# launch.p2p_bandwidth, engine {name}: {e['engine']}")
            print(pm.render_matrices(e["matrices"], own.get("connectivity")))
            if ref is not None:
                ratios = pm.ratio_matrices(e["matrices"], ref)
                print(f"\n# engine {name} against {args.reference}, ours / reference")
                print(pm.text_table(pm.RATIO_HEADER, pm.ratio_rows(ratios)))
    return 0


def _mllog(args) -> int:
    from telemetry.analysis.mllog_lines import MllogError, check, write
    try:
        result = write(args.run, args.out, args.org, args.platform)
    except MllogError as exc:
        return print_errors(str(exc))
    print(f"wrote {result['path']}: {result['lines']} :::MLLOG lines, benchmark {result['benchmark']}, "
          f"{result['evaluations']} evaluations")
    if not args.check:
        return 0
    ok, said = check(result["path"], result["benchmark"])
    last = [line for line in said.splitlines() if line.strip()][-3:]
    print(f"compliance checker (training {result['ruleset']}, open division): {'SUCCESS' if ok else 'FAILED'}"
          + ("" if ok else ": " + " | ".join(last)))
    return 0 if ok else 1


def _export(args) -> int:
    from telemetry.analysis.exports import check_kinds, export_run
    try:
        kinds = check_kinds([k.strip() for k in args.to.split(",") if k.strip()])
    except ValueError as exc:
        print_errors(str(exc).replace('telemetry.export', '--to'))
        return 2
    failed = bad_input = 0
    for kind, result in export_run(args.run, kinds, args.out).items():
        if result.get("input"):  # the run or the machine lacks what the kind needs: one error line
            bad_input += 1
            print_errors(f"--to {kind}: {result['error']}")
        elif result.get("error"):
            failed += 1
            print(f"{kind}: not written: {result['error']}", file=sys.stderr)
        else:
            print(f"{kind}: {result['path']}")
    return 1 if failed else 2 if bad_input else 0


def _only_a_header(result: dict) -> bool:
    """No rows and nothing else read: no footer average, no device or parameter lines, no failure."""
    return not result["rows_read"] and not result["failed"] and not any(
        op.get("avg_busbw_GBps") is not None or op.get("devices") or op.get("params") for op in result["ops"].values())


def _nccl_log(args) -> int:
    import json
    import os

    from telemetry.analysis.nccl_log_view import NcclLogError, expectation, lines_of, log_paths, read
    from telemetry.capture.nccl_log import parse_lines
    from telemetry.analysis.transport_claims import claim_problem
    if args.expect is not None and (problem := claim_problem(args.expect, "--expect")):
        return print_errors(problem)
    try:
        paths = log_paths(args.inputs)
        if args.json and os.path.realpath(args.json) in {os.path.realpath(p) for p in paths if p != "-"}:
            # a log found in a folder given: the inputs as given were checked before, not the files in them
            return print_errors(f"--json: {args.json!r} is one of the logs read; allowed: a file that is not one "
                                "of the inputs")
        reading = read(paths, parse_lines)
    except NcclLogError as exc:
        return print_errors(exc)
    except OSError as exc:  # a file that went away or a FIFO that failed between the check and the read
        return print_errors(f"{exc.filename}: {exc.strerror}; allowed: a log file this user can read")
    if not reading["nccl_lines"]:
        return print_errors(f"{', '.join(args.inputs)}: no line names NCCL or RCCL; allowed: a job's output or "
                            "NCCL_DEBUG_FILE written with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS including INIT,NET)")
    for line in lines_of(reading):
        print(line)
    if args.json and _write_output(args.json, "--json", lambda f: json.dump(reading, f, indent=1)):
        return 2
    if args.expect is None:
        return 0
    met, line = expectation(args.expect, reading)
    print(line, file=sys.stdout if met else sys.stderr)
    return 0 if met else 3


def _nccl_tests(args) -> int:
    import json
    import os

    from telemetry.analysis.nccl_tests import NcclTestsError, read, to_csv
    from telemetry.input_files import what_is_there
    results = []
    for path in args.inputs:
        if os.path.isdir(path):  # a sweep's run directory: its table
            if not os.path.isfile(os.path.join(path, SWEEP_TABLE)):  # its table a FIFO was 'without' it
                there = what_is_there(os.path.join(path, SWEEP_TABLE))
                what = (f"a directory without {SWEEP_TABLE}" if there == "no such file or directory" else
                        f"its {SWEEP_TABLE} is {there}, not a regular file")
                return print_errors(f"{path}: {what}; allowed: a sweep's run directory or an nccl-tests output file")
            path = os.path.join(path, SWEEP_TABLE)
        try:
            result = read(path)
        except (OSError, NcclTestsError) as exc:
            print_errors(exc)
            return 2
        if _only_a_header(result):  # an empty table written as if it were one (a failed or cut run is kept)
            return print_errors(f"{path}: a table header and nothing else (no rows, no footer, no devices, no "
                                "failure line); allowed: nccl-tests output with at least one of them")
        results.append(result)
        print(f"{path}: {result['rows_read']} rows in {len(result['ops'])} table(s) "
              f"({', '.join(result['ops'])}), {result['rows_skipped']} lines not read")
    def csv_rows(f) -> None:
        for i, result in enumerate(results):
            text = to_csv(result)
            f.write(text if i == 0 else text.split("\n", 1)[1])  # one header line
    if args.json and _write_output(args.json, "--json",
                                   lambda f: json.dump(results[0] if len(results) == 1 else results, f, indent=1)):
        return 2
    if args.csv:
        return _write_output(args.csv, "--csv", csv_rows)
    return 0


def _write_output(path: str, option: str, write) -> int:
    """write(f) into path; 0, or 2 with one line when the file cannot take it (a full disk, /dev/full, a quota:
    the checks before the read see a writable place, not its free space). A regular file left half-written
    is removed, so no reader takes it for a whole one."""
    import os

    try:
        with open(path, "w", encoding="utf-8", newline="") as f:
            write(f)
    except OSError as exc:
        if os.path.isfile(path):
            with contextlib.suppress(OSError):
                os.remove(path)
        return print_errors(f"{option}: {path!r} could not be written ({exc.strerror or exc}); allowed: a file "
                            "on a filesystem with free space that this user can write")
    return 0


if __name__ == "__main__":
    sys.exit(exit_quietly_on_closed_pipe(main))
