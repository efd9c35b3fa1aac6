"""The harness's step against a minimal hand loop on the same recipe and data, interleaved step by step
(bench/support/step_parity.py), at world sizes 1 and 2 (gloo on CPU): the ratio of median step times and
a torch.profiler breakdown of where the difference goes (self host time per op name, per step).

    python -m bench.loop_parity [--nproc 1 2] [--steps 40] [--warmup 5] [--profile 3] [--repeat R]
                                [--callgrind N] [--out FILE] [key=value ...]

Each step is measured on three clocks (bench/support/cpu_clocks.py): wall time, the CPU time of the loop's
thread (what a CPU-bound step costs; much less disturbed by other processes on a shared machine than wall
time), and the whole process's CPU time (with the background threads). The profiled steps also count aten
ops (torch.profiler) and Python function calls (cProfile) per step. --repeat runs each world R times (fresh
processes) and reports the median and range of the ratios. --callgrind N runs world 1 once more under
valgrind's callgrind and counts the instructions of N hand steps and N harness iterations: counts that
repeat whatever the machine's load (needs valgrind; ~50x slower while counting).

Goal (issue 30): harness / hand loop <= 1.02 on the tiny Llama recipe on CPU.
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

from bench.support.cpu_clocks import CLOCKS, read_dumps, valgrind_command
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


def measure_callgrind(recipe: str, steps: int, warmup: int, overrides: list[str], workdir: str,
                      timeout: int = 3600) -> dict:
    """World 1 under callgrind, one process (no torchrun: valgrind follows no launcher): instructions per
    hand step and per harness iteration for `steps` timed steps after `warmup`."""
    out = os.path.join(workdir, "run-callgrind")
    result = os.path.join(workdir, "result-callgrind.json")
    prefix = os.path.join(workdir, "callgrind.out")
    max_steps = warmup + steps + 2  # + one profiled step (never counted) + the last, which nothing closes
    cmd = [*valgrind_command(prefix), sys.executable, "-m", "bench.loop_parity", "--worker", "--recipe", recipe,
           "--warmup", str(warmup), "--profile", "1", "--result", result, f"output_dir={out}",
           f"max_steps={max_steps}", *QUIET, *overrides]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", LOOP_PARITY_CALLGRIND="1",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"error: the run under callgrind failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    with open(result, encoding="utf-8") as f:
        res = json.load(f)
    return instruction_summary(res["callgrind_segments"], read_dumps(prefix))


def instruction_summary(labels: list[str], dumps: list[dict]) -> dict:
    """Instructions per segment (the loop's thread; other threads apart), paired hand step / harness iteration."""
    if len(labels) != len(dumps):
        raise SystemExit(f"error: callgrind wrote {len(dumps)} dumps for {len(labels)} segments")
    by = {"hand": {}, "harness": {}}
    for label, d in zip(labels, dumps):
        what, step = label.split()
        by[what][int(step)] = d
    both = sorted(set(by["hand"]) & set(by["harness"]))
    hand = [by["hand"][s]["main"] for s in both]
    harness = [by["harness"][s]["main"] for s in both]
    pairs = sorted(a / b for a, b in zip(harness, hand))
    return {"steps": both, "harness_instructions": harness, "hand_instructions": hand,
            "harness_other_threads": [by["harness"][s]["other"] for s in both],
            "hand_other_threads": [by["hand"][s]["other"] for s in both],
            "ratio": statistics.median(harness) / statistics.median(hand),
            "ratio_paired_median": statistics.median(pairs), "pairs_min": pairs[0], "pairs_max": pairs[-1]}


def repeat_summary(runs: list[dict]) -> dict:
    """Across repeated runs of one world: each clock's paired-median ratio, its median and range."""
    out = {}
    for clock in CLOCKS:
        vals = [r["clocks"][clock]["ratio_paired_median"] for r in runs if r.get("clocks", {}).get(clock)]
        meds = [r["clocks"][clock]["ratio"] for r in runs if r.get("clocks", {}).get(clock)]
        if vals:
            out[clock] = {"paired_median_ratios": vals, "median": statistics.median(vals), "min": min(vals),
                          "max": max(vals), "ratio_of_medians": meds}
    return out


def print_clocks(n: int, res: dict) -> None:
    for clock, c in res.get("clocks", {}).items():
        if c:
            print(f"  {clock:<12} harness {c['harness_ms']:8.2f} ms, hand {c['hand_ms']:8.2f} ms; harness / hand "
                  f"{c['ratio']:.4f} (medians), {c['ratio_paired_median']:.4f} (adjacent pairs, 10-90%: "
                  f"{c['pairs_p10']:.3f}-{c['pairs_p90']:.3f})", flush=True)
    bg = res.get("threads_cpu_ms_per_step") or {}
    if bg:
        print("  CPU ms per step by thread (both loops): " +
              ", ".join(f"{k} {v:.2f}" for k, v in sorted(bg.items(), key=lambda kv: -kv[1])), flush=True)
    py = res.get("python_calls") or {}
    if py:
        print(f"  Python calls per step: harness {py['harness_per_step']:.0f}, hand {py['hand_per_step']:.0f}; "
              "most different:", flush=True)
        for r in py["differ"][:10]:
            print(f"    {r['harness_calls']:7.0f} / {r['hand_calls']:<7.0f} {r['function']}", flush=True)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="recipes/tiny_llama_lora.yaml")
    p.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile", type=int, default=3, help="steps of each loop run under torch.profiler (untimed)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each world (fresh processes)")
    p.add_argument("--callgrind", type=int, default=0, metavar="N",
                   help="also count instructions of N steps of each loop at world 1 under valgrind (0: no)")
    p.add_argument("--note", default="", help="a note stored with the result (what was compared)")
    p.add_argument("--out", default=RESULTS, help="append the result as a JSON line here ('' for none)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--trace-dir", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    if args.worker:
        run_worker(args.recipe, args.overrides, args.warmup, args.profile, args.result, args.trace_dir)
        return
    # bad input: one error: line and exit status 2, as every entry point (was exit 1 through SystemExit(str))
    if args.steps < args.warmup + args.profile + 5:
        p.exit(2, f"error: --steps {args.steps} leaves fewer than 5 timed steps after --warmup "
                  f"{args.warmup} and --profile {args.profile}; allowed: >= {args.warmup + args.profile + 5}\n")
    if args.repeat < 1 or args.callgrind < 0:
        p.exit(2, f"error: --repeat {args.repeat} / --callgrind {args.callgrind}; allowed: --repeat >= 1, "
                  "--callgrind >= 0\n")
    load_before = load_average()
    runs, repeats, counted = {}, {}, None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.nproc:
            for r in range(args.repeat):
                res = measure(args.recipe, n, args.steps, args.warmup, args.profile, args.overrides, tmp)
                runs[str(n)] = res
                repeats.setdefault(str(n), []).append(res)
                print(f"world {n}{f' (run {r + 1}/{args.repeat})' if args.repeat > 1 else ''}: harness "
                      f"{res['harness_step_s'] * 1e3:.2f} ms/step, hand loop "
                      f"{res['hand_step_s'] * 1e3:.2f} ms/step (medians of {res['harness_steps_timed']}/"
                      f"{res['hand_steps_timed']} steps); harness / hand: {res['ratio']:.4f} (medians), "
                      f"{res['ratio_paired_median']:.4f} (median of adjacent pairs), {res['ratio_p10']:.4f} "
                      "(10th percentiles)", flush=True)
                print_clocks(n, res)
            differ = [r for r in res["ops"] if r["calls_differ"]]
            print(f"where the difference goes (self host time per step, {res['profiled_steps']['harness']} "
                  f"profiled steps each): {len(differ)} ops with other call counts, then the largest "
                  "time differences of the same ops:")
            print(op_table(differ + [r for r in res["ops"] if not r["calls_differ"]][:8]), flush=True)
            if args.repeat > 1:
                for clock, c in repeat_summary(repeats[str(n)]).items():
                    print(f"world {n}, {clock}: adjacent-pair ratio over {args.repeat} runs: median "
                          f"{c['median']:.4f}, range {c['min']:.4f}-{c['max']:.4f}", flush=True)
        if args.callgrind:
            counted = measure_callgrind(args.recipe, args.callgrind, args.warmup, args.overrides, tmp)
            print(f"world 1 under callgrind, instructions of the loop's thread per step ({len(counted['steps'])} "
                  f"pairs): harness {statistics.median(counted['harness_instructions']) / 1e6:.1f} M, hand "
                  f"{statistics.median(counted['hand_instructions']) / 1e6:.1f} M; harness / hand "
                  f"{counted['ratio']:.4f} (medians), {counted['ratio_paired_median']:.4f} (adjacent pairs, "
                  f"range {counted['pairs_min']:.4f}-{counted['pairs_max']:.4f})", flush=True)
    result = {"benchmark": "loop_parity", "date": datetime.date.today().isoformat(),
              "command": " ".join(["python -m bench.loop_parity", *(argv if argv is not None else sys.argv[1:])]),
              "machine": f"2-core CPU dev VM ({platform.machine()}, {os.cpu_count()} cores)",
              "load_average_1_5_15": {"before": load_before, "after": load_average()},
              "recipe": args.recipe, "steps_per_run": args.steps, "warmup": args.warmup,
              "overrides": args.overrides, **({"note": args.note} if args.note else {}),
              "worlds": {n: {**{k: v for k, v in r.items() if not k.endswith("_samples_s") and k != "ops"},
                             "ops_calls_differ": [o for o in r["ops"] if o["calls_differ"]],
                             "ops_top_time_diff": [o for o in r["ops"] if not o["calls_differ"]][:10]}
                         for n, r in runs.items()}}
    if args.repeat > 1:
        result["repeats"] = {n: repeat_summary(rs) for n, rs in repeats.items()}
    if counted is not None:
        result["instructions_world_1"] = counted
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
        print(f"appended to {os.path.relpath(args.out, REPO)}")


if __name__ == "__main__":
    main()
