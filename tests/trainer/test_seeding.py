"""Training RNG streams: one per data-parallel replica (and pipeline stage), shared within a tp group."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from trainer.seeding import seed_training_streams, training_seed

from ..conftest import REPO


def test_seed_differs_per_dp_and_pp_rank_and_is_stable():
    seeds = {(dp, pp): training_seed(1234, dp, pp) for dp in range(8) for pp in range(4)}
    assert len(set(seeds.values())) == len(seeds)
    assert training_seed(1234, 3, 1) == seeds[(3, 1)]  # a pure function: a resumed run reseeds the same
    assert training_seed(1235, 0, 0) != seeds[(0, 0)]
    assert all(0 <= s < 2 ** 63 for s in seeds.values())


def test_same_dp_rank_draws_the_same_dropout_mask_in_process():
    masks = []
    for dp_rank in (0, 0, 1):
        seed_training_streams(1234, dp_rank)
        masks.append(torch.nn.functional.dropout(torch.ones(4096), 0.5) == 0)
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])


@pytest.mark.integration
def test_dp_replicas_drop_differently_and_tp_ranks_alike(tmp_path):
    """4 gloo ranks, dp 2 x tp 2: the tiny LoRA Llama built and parallelized as the trainer does. Every
    LoRA dropout (column- and row-parallel layers) drops the same positions on the two tp ranks of a
    replica and different positions on the two replicas."""
    out = tmp_path / "masks.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
           str(REPO / "tests" / "trainer" / "scripts" / "dropout_masks.py"), str(out),
           "parallel.dp=2", "parallel.tp=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = {(r["dp_rank"], r["tp_rank"]): r["masks"] for r in json.loads(out.read_text())}
    assert sorted(ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    names = [n for n in ranks[(0, 0)] if not n.endswith(".share")]
    # 2 layers x 7 target modules, each with one dropout that really dropped about half its inputs
    assert len(names) == 14 and any(".o_proj." in n for n in names) and any(".q_proj." in n for n in names)
    assert all(0.3 < ranks[(0, 0)][n + ".share"] < 0.7 for n in names)
    for name in names:
        assert ranks[(0, 0)][name] == ranks[(0, 1)][name], name  # tp peers: one model copy, one mask
        assert ranks[(1, 0)][name] == ranks[(1, 1)][name], name
        assert ranks[(0, 0)][name] != ranks[(1, 0)][name], name  # dp replicas: their own masks
        assert ranks[(0, 1)][name] != ranks[(1, 1)][name], name
