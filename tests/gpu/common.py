"""What the GPU tests share: the skip where there is no CUDA GPU, and a harness run on the GPU."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from ..conftest import TINY, Result, run_bounded

NO_GPU = "needs a CUDA GPU (torch.cuda.is_available() is False); bash bench/gpu/run.sh runs these on one"
GPU = [pytest.mark.gpu, pytest.mark.integration,
       pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)]

# few steps, no evaluation, no checkpoint: what is checked is the run itself
FAST = ["max_steps=6", "train.log_every=1", "train.eval_every_samples=null", "train.save_final=false",
        "distributed.timeout_s=120"]
# a model big enough that activations dominate the memory (checkpointing, tracer overhead)
WIDE = ["model.config.hidden_size=1024", "model.config.intermediate_size=2816", "model.config.num_hidden_layers=8",
        "model.config.num_attention_heads=16", "model.config.num_key_value_heads=4", "data.seq_len=512",
        "model.config.max_position_embeddings=1024", "train.micro_batch_size=8", "train.global_batch_size=8"]


def gpu_env() -> dict:
    """The first GPU visible to the run (run_cli hides GPUs from the CPU tests)."""
    return {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES") or "0"}


def run_on_gpu(out: Path, *overrides: str, recipe: str = TINY, timeout: int = 420) -> Result:
    """torchrun --standalone with one rank on the GPU (a world of 1, as on a cluster's node)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", "trainer",
           recipe, f"output_dir={out}", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "4", "PYTHONUNBUFFERED": "1", **gpu_env()}
    res = run_bounded(cmd, env, timeout, out)
    assert res.returncode == 0, res.stderr[-4000:]
    return res


def rank_file(out: Path, name: str, rank: int = 0) -> dict:
    return json.loads((out / "ranks" / f"rank{rank:05d}.{name}.json").read_text())
