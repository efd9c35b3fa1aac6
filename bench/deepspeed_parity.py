"""DeepSpeed ZeRO 1/2/3 against DDP on the same global batch: how far losses and gradient norms are from
DDP's (largest relative difference over the steps), median step time, and what each mode sends per step
(the tracer's count and bytes per collective), on tiny_llama_lora (fp32, dropout off, 2 CPU ranks, gloo).
The modes run one after another in one session; quote their ratios, not absolute times.

    python -m bench.deepspeed_parity [--steps 8] [--nproc 2]
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
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {"ddp": ["parallel.data_parallel=ddp"],
         **{f"zero{s}": ["parallel.data_parallel=deepspeed", f"parallel.zero_stage={s}"] for s in (1, 2, 3)}}


def run(mode: str, out: str, steps: int, nproc: int) -> tuple[list[dict], float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m",
           "trainer", os.path.join(REPO, "recipes", "tiny_llama_lora.yaml"), f"output_dir={out}",
           f"max_steps={steps}", "data.seq_len=128", "lora.dropout=0.0", "train.eval_every_samples=null",
           "train.save_final=false", "train.resume=never", *MODES[mode]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": REPO}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()], wall


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            records, wall = run(mode, os.path.join(tmp, mode), args.steps, args.nproc)
            results[mode] = {"records": records, "wall_s": wall}
    ref = results["ddp"]["records"]
    rows = {}
    for mode, res in results.items():
        recs = res["records"]
        rows[mode] = {
            "max_rel_loss_vs_ddp": max(rel(a["loss"], b["loss"]) for a, b in zip(recs, ref)),
            "max_rel_grad_norm_vs_ddp": max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(recs, ref)),
            "bitwise_equal_to_ddp": all((a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"])
                                        for a, b in zip(recs, ref)),
            "median_step_s": statistics.median(r["step_time_s"] for r in recs[1:]),
            "wall_s": round(res["wall_s"], 1),
            # a step after the first (the first also carries DeepSpeed's set-up broadcasts)
            "comm_per_step": {op: {"count": v["count"], "bytes": v["bytes"]} for op, v in recs[-1]["comm"].items()},
        }
    line = {"bench": "deepspeed_parity", "command": " ".join(["python", "bench/deepspeed_parity.py", *sys.argv[1:]]),
            "machine": platform.node(), "cpus": os.cpu_count(), "date": datetime.date.today().isoformat(),
            "steps": args.steps, "nproc": args.nproc, "modes": rows}
    for mode, row in rows.items():
        print(f"{mode:6s} loss rel {row['max_rel_loss_vs_ddp']:.2e}  norm rel {row['max_rel_grad_norm_vs_ddp']:.2e}  "
              f"bitwise {row['bitwise_equal_to_ddp']}  {row['median_step_s'] * 1e3:.0f} ms/step  wall {row['wall_s']} s  "
              + ", ".join(f"{op} {v['count']}x {v['bytes']} B" for op, v in sorted(row["comm_per_step"].items())))
    os.makedirs(os.path.join(REPO, "bench", "results"), exist_ok=True)
    with open(os.path.join(REPO, "bench", "results", "deepspeed_parity.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
