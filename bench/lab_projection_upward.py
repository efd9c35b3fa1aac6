"""Projection between shaped lab rates, upward (a link-bound source onto a faster link) as well as downward.

Runs tiny_llama_lora on 2 lab nodes at every rate in RATES, `--repeats` rounds (round k: each rate once, so a
slow stretch of a shared host falls on sources and targets alike), then projects from each source's repeats
together onto each target rate (with the lab's token bucket there) and compares with the median of the
target's repeats; each row also gives every source run against the target run of its own round.

    sudo python -m bench.lab_projection_upward --runs-dir /tmp/upward --repeats 3          # run, then evaluate
    python -m bench.lab_projection_upward --runs-dir /tmp/upward --reuse                   # evaluate runs there

Results: bench/results/lab_configs.md (fourth round).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from launch.lab import burst_bytes
from telemetry.analysis.projection import combine_profiles, measured_profile, project
from telemetry.analysis.runs import load_run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RATES = {"2mbit": 2e6, "100mbit": 100e6, "5mbit": 5e6, "50mbit": 50e6, "10mbit": 10e6, "none": None}
PAIRS = [("2mbit", "100mbit"), ("2mbit", "50mbit"), ("2mbit", "10mbit"), ("5mbit", "50mbit"), ("5mbit", "100mbit"),
         ("10mbit", "100mbit"), ("100mbit", "2mbit"), ("none", "10mbit"), ("50mbit", "5mbit"), ("none", "2mbit")]
OVERRIDES = ["max_steps=10", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
             "train.save_final=false"]


def run_all(runs_dir: str, repeats: int) -> None:
    for k in range(1, repeats + 1):
        for rate in RATES:
            out = os.path.join(runs_dir, f"{rate}-{k}")
            cmd = ["nice", "-n", "19", sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", rate, "--",
                   "recipes/tiny_llama_lora.yaml", f"output_dir={out}", *OVERRIDES]
            done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"{rate}-{k}: exit {done.returncode}", flush=True)


def evaluate(runs_dir: str) -> list[dict]:
    profiles: dict[str, list[dict]] = {}
    for name in sorted(os.listdir(runs_dir)):
        rate = name.rsplit("-", 1)[0]
        if rate in RATES and os.path.isfile(os.path.join(runs_dir, name, "run.json")):
            profiles.setdefault(rate, []).append(measured_profile(load_run(os.path.join(runs_dir, name))))
    rows = []
    for src, tgt in PAIRS:
        if src not in profiles or tgt not in profiles or RATES[tgt] is None:
            continue
        bps = RATES[tgt]
        measured = [p["step_time_s"] for p in profiles[tgt]]
        mid = statistics.median(measured)
        got = project(combine_profiles(profiles[src]), bps, burst_bytes=burst_bytes(bps))
        lo, hi = got["interval_s"]
        singles = [project(p, bps, burst_bytes=burst_bytes(bps))["step_time_s"] for p in profiles[src]]
        rows.append({"pair": f"{src}->{tgt}", "measured_s": round(mid, 4), "measured_runs_s": [round(x, 4) for x in measured],
                     "predicted_s": round(got["step_time_s"], 4), "error_pct": round(100 * (got["step_time_s"] / mid - 1), 1),
                     "interval_s": [round(lo, 4), round(hi, 4)], "holds": lo <= mid <= hi,
                     "runs_inside": sum(lo <= x <= hi for x in measured),
                     "single_error_pct": [round(100 * (s / t - 1), 1) for s, t in zip(singles, measured)]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reuse", action="store_true", help="evaluate the runs already in --runs-dir")
    args = ap.parse_args()
    if not args.reuse:
        run_all(args.runs_dir, args.repeats)
    for row in evaluate(args.runs_dir):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
