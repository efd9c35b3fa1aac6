"""One steady step of the harness against one of a plain hand loop, under torch.profiler (CPU and, on a
GPU, CUDA activity), interleaved in one process on one device (bench/support/step_parity.py): the
profiler's key_averages table of each, the ops whose call counts differ, and a Chrome trace of each
profiled step under --out.

    python -m bench.gpu.profile_step --out DIR [--layers N] [--steps N] [--recipe FILE] [key=value ...]

On CUDA the default recipe is bench/gpu/llama3_8b_shapes.yaml (Llama-3-8B shapes, bf16, seq 2048; random
token rows written to DIR/tokens.jsonl; --layers cuts the 32 layers to fit the time); without CUDA it is
recipes/tiny_llama_lora.yaml, so the script runs (and is tested) anywhere.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import tempfile

from bench.loop_parity import REPO, measure
from bench.support.step_parity import op_table

GPU_RECIPE = os.path.join(REPO, "bench", "gpu", "llama3_8b_shapes.yaml")
CPU_RECIPE = os.path.join(REPO, "recipes", "tiny_llama_lora.yaml")


def token_rows(path: str, rows: int, seq: int, vocab: int, seed: int = 0) -> None:
    """Random token rows in the pretokenized format the GPU recipe reads."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(rows):
            f.write(json.dumps({"input_ids": [rng.randrange(3, vocab) for _ in range(seq)]}) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the traces, tables and profile_step.json")
    p.add_argument("--recipe", default=None, help="default: the 8B-shaped recipe on CUDA, the tiny one on CPU")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: 4 on CUDA, the recipe's on CPU)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile", type=int, default=2)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    if args.steps < args.warmup + args.profile + 3:
        print(f"error: --steps {args.steps} leaves fewer than 3 timed steps after --warmup {args.warmup} and "
              f"--profile {args.profile}; allowed: >= {args.warmup + args.profile + 3}", file=sys.stderr)
        return 2
    import torch

    cuda = torch.cuda.is_available()
    out = os.path.abspath(args.out)
    traces = os.path.join(out, "traces")
    os.makedirs(traces, exist_ok=True)
    recipe = args.recipe or (GPU_RECIPE if cuda else CPU_RECIPE)
    overrides = list(args.overrides)
    layers = args.layers if args.layers is not None else (4 if cuda else None)
    if layers is not None:
        overrides.append(f"model.config.num_hidden_layers={layers}")
    if recipe == GPU_RECIPE:
        tokens = os.path.join(out, "tokens.jsonl")
        token_rows(tokens, rows=max(64, args.steps + 4), seq=2048, vocab=128256)
        overrides.append(f"data.dataset={tokens}")
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(recipe, 1, args.steps, args.warmup, args.profile, overrides, tmp, trace_dir=traces)
    for name in ("harness", "hand"):
        table = os.path.join(traces, f"{name}_table.txt")
        if os.path.exists(table):
            with open(table, encoding="utf-8") as f:
                print(f.read())
    differ = [r for r in res["ops"] if r["calls_differ"]]
    print(f"harness {res['harness_step_s'] * 1e3:.2f} ms/step, hand loop {res['hand_step_s'] * 1e3:.2f} ms/step, "
          f"harness / hand {res['ratio']:.4f} (medians), {res['ratio_paired_median']:.4f} (adjacent pairs); "
          f"device: {res['device_name'] or res['device']}")
    print(f"ops with other call counts ({len(differ)}), then the largest time differences of the same ops "
          "(self time per step):")
    print(op_table(differ + [r for r in res["ops"] if not r["calls_differ"]][:10], device=cuda))
    result = {"benchmark": "profile_step", "date": datetime.date.today().isoformat(),
              "command": " ".join(["python -m bench.gpu.profile_step", *(argv if argv is not None else sys.argv[1:])]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
              "recipe": os.path.relpath(recipe, REPO), "overrides": overrides,
              **{k: v for k, v in res.items() if not k.endswith("_samples_s")}}
    with open(os.path.join(out, "profile_step.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(f"traces and tables in {traces}; numbers in {os.path.join(out, 'profile_step.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
