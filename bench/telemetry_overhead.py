"""Telemetry overhead: the same recipe with telemetry on and off, interleaved, in one session.

Per-step cost is measured between consecutive steps' wall-clock stamps (`time` in metrics.jsonl), so
it includes everything telemetry adds: the traced collectives, the DDP comm hook, the end-of-step
bookkeeping and the cross-rank gather. The first `--skip` steps of each run are warm-up.

    python -m bench.telemetry_overhead --nproc 2 --steps 40 --rounds 3 [key=value ...]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile

from bench.support.torchrun_runs import add_run_options, step_gaps, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(recipe: str, nproc: int, steps: int, enabled: bool, extra: list[str], workdir: str) -> list[float]:
    out = os.path.join(workdir, f"run-{'on' if enabled else 'off'}-{len(os.listdir(workdir))}")
    train(recipe, nproc, steps, out, [f"telemetry.enabled={str(enabled).lower()}", *extra])
    return step_gaps(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(p, steps=40, skip=5)
    p.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    samples: dict[bool, list[float]] = {True: [], False: []}
    per_round = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)  # interleave against drift
            medians = {}
            for enabled in order:
                gaps = run_once(args.recipe, args.nproc, args.steps, enabled, args.overrides, tmp)[args.skip:]
                samples[enabled] += gaps
                medians[enabled] = statistics.median(gaps)
            per_round.append({"off_s": medians[False], "on_s": medians[True], "ratio": medians[True] / medians[False]})
            print(f"round {r + 1}: off {medians[False] * 1e3:.1f} ms/step, on {medians[True] * 1e3:.1f} ms/step, "
                  f"ratio {medians[True] / medians[False]:.4f}", flush=True)
    off, on = statistics.median(samples[False]), statistics.median(samples[True])
    result = {
        "benchmark": "telemetry_overhead", "date": datetime.date.today().isoformat(),
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "device": "cpu (gloo)",
        "recipe": args.recipe, "nproc": args.nproc, "steps_per_run": args.steps, "rounds": args.rounds,
        "median_step_s_off": off, "median_step_s_on": on, "overhead_ratio": on / off,
        "per_round": per_round, "overrides": args.overrides,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
