"""Peak memory per rank of the collective sweep at 2, 4 and 8 CPU ranks (issue 25 part 1): flat in the rank
count when each rank holds only its send and receive buffers.

    python -m bench.sweep_memory [--max-bytes 8M] [--ranks 2 4 8] [--baseline /path/to/older/checkout]

Each rank runs the real sweep (`python -m trainer recipes/collectives.yaml`, gloo on CPU) through a small
wrapper that records the resident set size when run_sweep starts and the process's high-water mark
(ru_maxrss) when it returns: the growth is what the sweep itself allocated at its peak. `--baseline` runs
the same measurement against another checkout (e.g. the code before the change) for comparison; the
wrapper patches only the module attribute, so it works on either.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = "[all_reduce,reduce_scatter,all_gather,all_to_all,sendrecv,broadcast]"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(out_dir: str, argv: list[str]) -> int:
    """One rank: the trainer's CLI with run_sweep wrapped to record this rank's memory growth."""
    import trainer.sweep.measure as coll
    from trainer.cli import main

    inner = coll.run_sweep

    def measured(*args, **kwargs):
        start = _rss()
        result = inner(*args, **kwargs)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        with open(os.path.join(out_dir, f"rank{os.environ.get('RANK', '0')}.json"), "w") as f:
            json.dump({"rss_start": start, "maxrss_end": peak, "growth": max(0, peak - start)}, f)
        return result
    coll.run_sweep = measured
    return main(argv)


def measure(code: str, nranks: int, max_bytes: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="sweep-mem-") as tmp:
        # the recipe of the code measured (its keys), then the same overrides for either checkout
        args = [os.path.join(code, "recipes", "collectives.yaml"), f"output_dir={tmp}/run", f"sweep.ops={OPS}",
                f"sweep.max_bytes={max_bytes}", "sweep.min_bytes=8", "sweep.iters=1", "sweep.warmup=0",
                "sweep.latency_table=false", "sweep.pairs=false", "distributed.timeout_s=300"]
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1",
               "CUDA_VISIBLE_DEVICES": ""}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nranks}",
               os.path.abspath(__file__), "--worker", tmp, "--", *args]  # a path: another checkout has no bench/
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"error: sweep at {nranks} ranks failed:\n{proc.stderr[-2000:]}")
        ranks = [json.load(open(os.path.join(tmp, f"rank{r}.json"))) for r in range(nranks)]
    growth = [r["growth"] for r in ranks]
    return {"ranks": nranks, "max_growth": max(growth), "mean_growth": sum(growth) / len(growth),
            "seconds": round(time.time() - t0, 1)}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        rest = sys.argv[3:]
        return worker(sys.argv[2], rest[1:] if rest[:1] == ["--"] else rest)
    p = argparse.ArgumentParser(prog="python -m bench.sweep_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--max-bytes", default="8M")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--baseline", help="another checkout to measure the same way (e.g. the code before the change)")
    p.add_argument("--baseline-only", action="store_true", help="measure only the --baseline checkout")
    args = p.parse_args()
    from trainer.sweep.plan import parse_size
    from trainer.sweep.plan import largest_need

    hi = parse_size(args.max_bytes, "--max-bytes", [])
    codes = ([] if args.baseline_only else [("this tree", REPO)]) + (
        [("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    print(f"# sweep to {args.max_bytes} ({hi} B), float32, ops {OPS}, iters 1, warm-up 0; growth of the resident "
          "set over run_sweep per rank (MiB)")
    print("| code | ranks | planned need per rank | max growth per rank | mean growth per rank | wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, code in codes:
        for n in args.ranks:
            r = measure(code, n, args.max_bytes)
            need, _ = largest_need(OPS.strip("[]").split(","), hi, n, "float32", "both")
            print(f"| {label} | {n} | {need / 2**20:.1f} | {r['max_growth'] / 2**20:.1f} | "
                  f"{r['mean_growth'] / 2**20:.1f} | {r['seconds']} |", flush=True)
            _append({"command": " ".join(["python -m bench.sweep_memory", *sys.argv[1:]]), "code": label,
                     "code_path": code, "max_bytes": hi, "planned_need_bytes": need, **r})
    return 0


def _append(record: dict) -> None:
    import platform
    import torch
    record = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.node()}, {os.cpu_count()} cores, "
              f"torch {torch.__version__}", **record}
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "sweep_memory.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main())
