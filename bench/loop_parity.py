"""The harness's step against a minimal hand loop on the same recipe and data, interleaved step by step
(bench/support/step_parity.py), at world sizes 1 and 2 (gloo on CPU): the ratio of median step times and
a torch.profiler breakdown of where the difference goes (self host time per op name, per step).

    python -m bench.loop_parity [--nproc 1 2] [--steps 40] [--warmup 5] [--profile 3] [--out FILE] [key=value ...]

Goal (issue 30): harness / hand loop <= 1.02 on the tiny Llama recipe on CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

from bench.support.results import append_line, line_start
from bench.support.step_parity import op_table, run_worker

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results", "loop_parity.jsonl")
QUIET = ["train.eval_every_samples=null", "train.save_final=false", "train.resume=never", "train.log_every=1000"]


def measure(recipe: str, nproc: int, steps: int, warmup: int, profile: int, overrides: list[str],
            workdir: str, trace_dir: str | None = None, timeout: int = 1800) -> dict:
    out = os.path.join(workdir, f"run-{nproc}")
    result = os.path.join(workdir, f"result-{nproc}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "bench.loop_parity", "--worker", "--recipe", recipe, "--warmup", str(warmup),
           "--profile", str(profile), "--result", result, *(["--trace-dir", trace_dir] if trace_dir else []),
           f"output_dir={out}", f"max_steps={steps}", *QUIET, *overrides]
    # one thread per rank: the ranks share the machine's cores, as the telemetry overhead bench runs them
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"error: the run at {nproc} rank(s) failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(result, encoding="utf-8") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="recipes/tiny_llama_lora.yaml")
    p.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile", type=int, default=3, help="steps of each loop run under torch.profiler (untimed)")
    p.add_argument("--out", default=RESULTS, help="append the result as a JSON line here ('' for none)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--trace-dir", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    if args.worker:
        run_worker(args.recipe, args.overrides, args.warmup, args.profile, args.result, args.trace_dir)
        return
    if args.steps < args.warmup + args.profile + 5:
        raise SystemExit(f"error: --steps {args.steps} leaves fewer than 5 timed steps after --warmup "
                         f"{args.warmup} and --profile {args.profile}; allowed: >= {args.warmup + args.profile + 5}")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.nproc:
            res = measure(args.recipe, n, args.steps, args.warmup, args.profile, args.overrides, tmp)
            runs[str(n)] = res
            print(f"world {n}: harness {res['harness_step_s'] * 1e3:.2f} ms/step, hand loop "
                  f"{res['hand_step_s'] * 1e3:.2f} ms/step (medians of {res['harness_steps_timed']}/"
                  f"{res['hand_steps_timed']} steps); harness / hand: {res['ratio']:.4f} (medians), "
                  f"{res['ratio_paired_median']:.4f} (median of adjacent pairs), {res['ratio_p10']:.4f} "
                  "(10th percentiles)", flush=True)
            differ = [r for r in res["ops"] if r["calls_differ"]]
            print(f"where the difference goes (self host time per step, {res['profiled_steps']['harness']} "
                  f"profiled steps each): {len(differ)} ops with other call counts, then the largest "
                  "time differences of the same ops:")
            print(op_table(differ + [r for r in res["ops"] if not r["calls_differ"]][:8]), flush=True)
    machine = f"2-core CPU dev VM ({platform.machine()}, {os.cpu_count()} cores)"
    result = {**line_start("bench.loop_parity", argv, machine), "recipe": args.recipe, "steps_per_run": args.steps, "warmup": args.warmup,
              "overrides": args.overrides,
              "worlds": {n: {**{k: v for k, v in r.items() if not k.endswith("_samples_s") and k != "ops"},
                             "ops_calls_differ": [o for o in r["ops"] if o["calls_differ"]],
                             "ops_top_time_diff": [o for o in r["ops"] if not o["calls_differ"]][:10]}
                         for n, r in runs.items()}}
    append_line(args.out, result)


if __name__ == "__main__":
    main()
