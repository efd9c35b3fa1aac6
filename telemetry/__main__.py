"""`python -m telemetry report RUN [--out DIR]`: tables and plots for one run directory."""
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
    args = parser.parse_args(argv)
    try:
        if args.command == "report":
            from .report import write_report
            result = write_report(args.run, args.out)
            print(f"wrote {result['out']}/report.html and report.md with {len(result['figures'])} figures")
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
