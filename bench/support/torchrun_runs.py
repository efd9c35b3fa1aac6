"""The runs of the interleaved on/off benches (telemetry_overhead, export_cost, live_exporter): the recipe under
torchrun --standalone without evaluation, final save or resume, the wall time between consecutive steps'
stamps (`time` in metrics.jsonl, so everything a setting costs the ranks is in it), and their options."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_run_options(p: argparse.ArgumentParser, steps: int, skip: int) -> None:
    """--recipe, --nproc, --steps, --rounds and --skip (the warm-up steps each run leaves out)."""
    p.add_argument("--recipe", default="recipes/tiny_llama_lora.yaml")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip", type=int, default=skip, help="warm-up steps left out")


def train(recipe: str, nproc: int, steps: int, out: str, overrides: list[str], timeout: int = 900) -> None:
    """One run into `out` (overrides added to the fixed ones); fails loudly on a non-zero exit."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m",
           "trainer", recipe, f"output_dir={out}", f"max_steps={steps}", "train.eval_every_samples=null",
           "train.save_final=false", "train.resume=never", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, timeout=timeout)


def step_gaps(out: str) -> list[float]:
    """Seconds between consecutive steps' stamps in the run's metrics.jsonl."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        stamps = [json.loads(line)["time"] for line in f]
    return [b - a for a, b in zip(stamps, stamps[1:])]
