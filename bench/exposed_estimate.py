"""The per-step exposed-communication estimate (`exposed_comm_s`) against the profiler's exposed time on
the same steps (every step profiled), on CPU with gloo: tests/telemetry/capture/exposed_worker.py, DDP over an MLP
with small buckets (early buckets overlap the backward pass) and a blocking all-reduce per step.

    python -m bench.exposed_estimate --steps 20 --runs 2
    python -m bench.exposed_estimate --steps 20 --runs 2 --recipe recipes/tiny_llama_lora.yaml   # the demo
    sudo python -m bench.exposed_estimate --steps 30 --runs 2 --lab-rate 1gbit   # 2 lab nodes, shaped link

On one loopback the two ranks' gloo threads reduce and copy 32 MB per step on the same 2 cores as the
backward pass, so each rank's main thread is descheduled for milliseconds at a time while buckets are in
flight: stalls the profiler counts as exposed and nothing the estimate sees marks. `--lab-rate` runs the
same worker on two fabric-lab nodes joined by a link shaped at RATE (MTU 9000), where the transfer is the
wire's time as on a GPU cluster's fabric, and the gloo threads mostly wait on their sockets.

Prints, per rank and step, both figures and their difference as a share of the step time, then the
median and largest |difference| and each rank's run-level shares (median exposed / median step time, as
reports compute them); appends one JSON line to bench/results/exposed_estimate.jsonl.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "tests", "telemetry", "capture", "exposed_worker.py")


def _worker_rows(out: str) -> list[dict]:
    """Both ranks' records as the MLP worker wrote them (OUT/rank<r>.json)."""
    return [{"rank": r, **x} for r in (0, 1) for x in json.load(open(os.path.join(out, f"rank{r}.json")))]


def run(steps: int, width: int, layers: int, bucket_mb: float) -> list[dict]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", WORKER, out,
               str(steps), str(width), str(layers), str(bucket_mb)]
        subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}, check=True,
                       capture_output=True, timeout=900)
        return _worker_rows(out)


def run_lab(rate: str, steps: int, width: int, layers: int, bucket_mb: float) -> list[dict]:
    """The MLP worker on two fabric-lab nodes (one rank each) joined by a link shaped at `rate`."""
    from launch.lab import Lab, run_in_lab

    os.environ["PYTHONPATH"] = REPO  # the worker imports telemetry from the checkout
    with tempfile.TemporaryDirectory() as out, Lab(2, rate, mtu=9000) as lab:
        code = run_in_lab(lab, 1, [], out, 900, 29419,
                          program=[WORKER, out, str(steps), str(width), str(layers), str(bucket_mb)])
        if code != 0:
            raise SystemExit(f"lab run failed with exit code {code}; node logs were in {out}/logs")
        return _worker_rows(out)


def run_recipe(recipe: str, steps: int) -> list[dict]:
    """The trainer on 2 ranks with every step profiled; both figures from each rank's own records."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "trainer",
               recipe, f"output_dir={out}", f"max_steps={steps}", "telemetry.profile_every=1",
               "train.eval_every_samples=null", "train.save_final=false", "train.resume=never"]
        subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}, check=True,
                       capture_output=True, timeout=900)
        rows = []
        for r in (0, 1):
            with open(os.path.join(out, "ranks", f"rank{r:05d}.telemetry.jsonl"), encoding="utf-8") as f:
                for line in f:
                    x = json.loads(line)
                    rows.append({"rank": r, "step": x["step"], "step_time_s": x["step_time_s"],
                                 "comm_time_s": x["comm_time_s"], "exposed_comm_s": x["exposed_comm_s"],
                                 "profiled": x["exposed"]})
        return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--recipe", help="a trainer recipe instead of the MLP worker")
    ap.add_argument("--lab-rate", help="run the MLP worker on 2 fabric-lab nodes with links shaped at this rate")
    args = ap.parse_args()
    diffs, shares = [], []
    for i in range(args.runs):
        if args.recipe:
            rows = run_recipe(args.recipe, args.steps)
        elif args.lab_rate:
            rows = run_lab(args.lab_rate, args.steps, args.width, args.layers, args.bucket_mb)
        else:
            rows = run(args.steps, args.width, args.layers, args.bucket_mb)
        rows = [x for x in rows if x["step"] > 1]  # warm-up
        for x in rows:
            d = (x["exposed_comm_s"] - x["profiled"]["exposed_s"]) / x["step_time_s"]
            diffs.append(d)
            print(f"run {i} rank {x['rank']} step {x['step']:>3}: step {x['step_time_s'] * 1e3:7.1f} ms  comm "
                  f"{x['comm_time_s'] * 1e3:6.1f}  estimate {x['exposed_comm_s'] * 1e3:6.1f}  profiled "
                  f"{x['profiled']['exposed_s'] * 1e3:6.1f}  difference {d * 100:+.2f}% of the step")
        for r in (0, 1):
            mine = [x for x in rows if x["rank"] == r]
            st = statistics.median(x["step_time_s"] for x in mine)
            share = {"run": i, "rank": r,
                     "comm_share": statistics.median(x["comm_time_s"] for x in mine) / st,
                     "estimate_share": statistics.median(x["exposed_comm_s"] for x in mine) / st,
                     "profiled_share": statistics.median(x["profiled"]["exposed_s"] for x in mine) / st}
            shares.append(share)
            print(f"run {i} rank {r}: communication {share['comm_share'] * 100:.1f}% of the step, exposed: "
                  f"estimate {share['estimate_share'] * 100:.1f}%, profiled {share['profiled_share'] * 100:.1f}%")
    absd = sorted(abs(d) for d in diffs)
    within = sum(1 for d in absd if d <= 0.02) / len(absd)
    print(f"per step |estimate - profiled| / step time: median {statistics.median(absd) * 100:.2f}%, "
          f"largest {absd[-1] * 100:.2f}%, within 2%: {within * 100:.0f}% of {len(absd)} steps")
    load = os.getloadavg()
    line = {"date": datetime.date.today().isoformat(), "machine": platform.node(), "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in load], "command": "python -m bench.exposed_estimate " +
            " ".join(sys.argv[1:]), "steps_compared": len(absd), "median_abs_diff": statistics.median(absd),
            "max_abs_diff": absd[-1], "within_2pct": within, "shares": shares}
    with open(os.path.join(REPO, "bench", "results", "exposed_estimate.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
