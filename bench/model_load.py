"""Sharded checkpoint loading: per rank, seconds, bytes read and host-memory growth during the load, at
world sizes 1, 2 and 4 (tensor parallel, FSDP2, pipeline, DeepSpeed ZeRO-3, FSDP2 over tensor
parallel), from a ~233 MB fp32 Llama checkpoint in
safetensors shards (bench/support/llama_checkpoint.py). Ratios to the whole model's bytes are what carry
over to other machines.

    python -m bench.model_load [--layouts deepspeed3 fsdp2_tp2] [--out bench/results/model_load.jsonl]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LAYOUTS = [(1, "single", []), (2, "tp2", ["parallel.tp=2"]), (2, "fsdp2", ["parallel.data_parallel=fsdp"]),
           (2, "pp2", ["parallel.pp=2", "parallel.pp_schedule=gpipe"]), (4, "tp4", ["parallel.tp=4"]),
           (4, "fsdp4", ["parallel.data_parallel=fsdp", "train.global_batch_size=16"]),
           (4, "pp4", ["parallel.pp=4", "parallel.pp_schedule=gpipe"]),
           (2, "deepspeed3", ["parallel.data_parallel=deepspeed", "parallel.zero_stage=3"]),
           (4, "fsdp2_tp2", ["parallel.data_parallel=fsdp", "parallel.tp=2"])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "model_load.jsonl"))
    ap.add_argument("--layouts", nargs="*", default=None, choices=[name for _, name, _ in LAYOUTS],
                    help="only these layouts (default: all)")
    args = ap.parse_args()
    from bench.support.llama_checkpoint import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        total = make_checkpoint(ckpt)
        rows = []
        for nproc, name, overrides in LAYOUTS:
            if args.layouts and name not in args.layouts:
                continue
            out = Path(tmp) / name
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "-m", "trainer", str(REPO / "recipes" / "tiny_llama_lora.yaml"), f"output_dir={out}",
                   f"model.path={ckpt}", "model.config=null", "model.tokenizer=null", "max_steps=1",
                   "data.seq_len=64", "train.eval_every_samples=null", "train.save_final=false", *overrides]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}
            res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
            assert res.returncode == 0, res.stderr[-3000:]
            loads = [json.loads(p.read_text())["load"] for p in sorted((out / "ranks").glob("*.final.json"))]
            row = {"layout": name, "world_size": nproc,
                   "seconds": [x["seconds"] for x in loads],
                   "bytes_read_over_model": [round(x["bytes_read"] / total, 3) for x in loads],
                   "rss_growth_over_model": [round((x["rss_peak_bytes"] - x["rss_before_bytes"]) / total, 3)
                                             for x in loads]}
            if any("rss_peak_engine_bytes" in x for x in loads):  # DeepSpeed: up to the built engine too
                row["rss_growth_to_engine_over_model"] = [
                    round((x["rss_peak_engine_bytes"] - x["rss_before_bytes"]) / total, 3) for x in loads]
            rows.append(row)
            print(json.dumps(row))
    command = "python -m bench.model_load" + (" --layouts " + " ".join(args.layouts) if args.layouts else "")
    record = {"command": command, "machine": f"{platform.node()} {platform.machine()} "
              f"{os.cpu_count()} cores, no GPU", "date": datetime.date.today().isoformat(),
              "model_bytes": total, "rows": rows}
    with open(args.out, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
