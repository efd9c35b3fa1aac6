"""python -m telemetry report RUN | compare RUN_A RUN_B [...] --out DIR | project RUN --rate RATE
   | nccl-tests FILE_OR_RUN [...] [--json OUT] [--csv OUT] | export RUN --to tensorboard,wandb,parquet,trace"""
from __future__ import annotations

import argparse
import sys

from .runs import RunError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m telemetry", description="Reports from run directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="write report.md, report.html and PNG figures for one run")
    rep.add_argument("run", help="a run directory (the recipe's output_dir)")
    rep.add_argument("--out", default=None, help="where to write (default: RUN/report)")
    cmp_ = sub.add_parser("compare", help="compare runs on different fabrics (the first is the baseline)")
    cmp_.add_argument("runs", nargs="+", help="two or more run directories; for sweeps, nccl-tests output files "
                      "(a text file of tables) are runs too")
    cmp_.add_argument("--out", required=True, help="directory for compare.html, compare.md and figures")
    cmp_.add_argument("--allow-mismatch", action="store_true", help="compare runs of different recipes anyway")
    proj = sub.add_parser("project", help="predict a run's iteration time on another link rate")
    proj.add_argument("run")
    proj.add_argument("--rate", required=True, action="append",
                      help="link rate per direction in tc units (100gbit, 1gbit, ...); repeatable")
    proj.add_argument("--latency-us", type=float, default=0.0, help="extra latency per collective call")
    proj.add_argument("--efficiency", type=float, default=None,
                      help="fraction of the line rate collectives achieve (default: measured on gloo/tbf)")
    nt = sub.add_parser("nccl-tests", help="read nccl-tests output (or a sweep's collectives.txt) into the "
                        "sweep's JSON and CSV")
    nt.add_argument("inputs", nargs="+", help="nccl-tests output files, or sweep run directories")
    nt.add_argument("--json", default=None, help="write the JSON here (one object; a list for several inputs)")
    nt.add_argument("--csv", default=None, help="write one CSV row per table row here")
    exp = sub.add_parser("export", help="write TensorBoard, W&B (offline), Parquet or trace files from a run directory")
    exp.add_argument("run")
    exp.add_argument("--to", required=True, help="comma-separated: tensorboard, wandb, parquet, trace")
    exp.add_argument("--out", default=None, help="where to write (default: RUN/exports)")
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            from .report import write_report
            result = write_report(args.run, args.out)
            print(f"wrote {result['out']}/report.html and report.md with {len(result['figures'])} figures")
        elif args.command == "compare":
            from .compare import CompareError, compare
            try:
                result = compare(args.runs, args.out, args.allow_mismatch)
            except CompareError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(f"wrote {args.out}/compare.html and compare.md ({result['kind']}: {' vs '.join(result['labels'])})")
            for p in result.get("projection") or []:
                print(f"  projection {p['label']}: predicted {p['predicted_s']:.3f} s, measured {p['measured_s']:.3f} s "
                      f"({p['error'] * 100:+.1f}%)")
        elif args.command == "nccl-tests":
            return _nccl_tests(args)
        elif args.command == "export":
            return _export(args)
        else:
            from .projection import DEFAULT_EFFICIENCY, measured_profile, project
            from .rates import RateError, bytes_unit_warning, parse_rate
            from .runs import load_run
            profile = measured_profile(load_run(args.run))
            eff = args.efficiency or DEFAULT_EFFICIENCY
            print(f"measured {profile['label']}: {profile['step_time_s']:.4f} s/step, communication "
                  f"{profile['comm_time_s']:.4f} s, exposed {profile['exposed_s']:.4f} s")
            for rate in args.rate:
                try:
                    bps = parse_rate(rate)
                except RateError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                if warning := bytes_unit_warning(rate):
                    print(warning, file=sys.stderr)
                p = project(profile, bps, args.latency_us * 1e-6, eff)
                print(f"  {rate}: predicted {p['step_time_s']:.4f} s/step (communication {p['comm_time_s']:.4f} s, "
                      f"efficiency {eff})")
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _export(args) -> int:
    from .exports import check_kinds, export_run
    try:
        kinds = check_kinds([k.strip() for k in args.to.split(",") if k.strip()])
    except ValueError as exc:
        print(f"error: {str(exc).replace('telemetry.export', '--to')}", file=sys.stderr)
        return 2
    failed = 0
    for kind, result in export_run(args.run, kinds, args.out).items():
        if result.get("error"):
            failed += 1
            print(f"{kind}: not written: {result['error']}", file=sys.stderr)
        else:
            print(f"{kind}: {result['path']}")
    return 1 if failed else 0


def _nccl_tests(args) -> int:
    import json
    import os

    from .nccl_tests import NcclTestsError, read, to_csv
    results = []
    for path in args.inputs:
        if os.path.isdir(path):  # a sweep's run directory: its table
            path = os.path.join(path, "collectives.txt")
        try:
            result = read(path)
        except (OSError, NcclTestsError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        results.append(result)
        print(f"{path}: {result['rows_read']} rows in {len(result['ops'])} table(s) "
              f"({', '.join(result['ops'])}), {result['rows_skipped']} lines not read")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results[0] if len(results) == 1 else results, f, indent=1)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as f:
            for i, result in enumerate(results):
                text = to_csv(result)
                f.write(text if i == 0 else text.split("\n", 1)[1])  # one header line
    return 0


if __name__ == "__main__":
    sys.exit(main())
