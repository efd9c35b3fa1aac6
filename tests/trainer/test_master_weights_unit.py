"""Full-parameter training keeps fp32 master weights and fp32 AdamW state with bf16 compute
(trainer.optim.keep_fp32_master, applied by trainer.run.build): a small learning rate's update is not
lost to bf16 rounding, as it is when the weights themselves are bf16."""
from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist

from tests.conftest import REPO
from trainer.config import load_recipe
from trainer.optim import build_optimizer, keep_fp32_master
from trainer.workloads import get_workload

FULL = str(REPO / "recipes" / "tiny_llama_full.yaml")
SMALL = ["data.seq_len=64", "train.eval_every_samples=null", "train.lr=1e-5", "train.min_lr=0", "train.warmup_steps=0",
         "train.schedule=constant", "train.weight_decay=0.0"]


def _step(model, recipe, wl, batch, autocast: bool):
    opt, _ = build_optimizer(model, recipe.train, recipe.max_steps)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        loss = wl.loss_sums(model, batch)["loss"]
    loss.backward()
    opt.step()
    # the share of the weights with a gradient that the step changed
    moved = total = 0
    for n, p in model.named_parameters():
        live = p.grad != 0
        moved += int((before[n] != p.detach())[live].sum())
        total += int(live.sum())
    return opt, moved / total


def test_a_small_update_survives_in_fp32_master_weights_and_vanishes_in_bf16():
    recipe = load_recipe(FULL, SMALL)
    wl = get_workload("llm_full")(recipe, torch.device("cpu"), torch.bfloat16)  # model.dtype=bf16
    batch = wl.build_data(need_eval=False)[0].batch([0, 1, 2, 3])

    pure = wl._materialize(wl.build_model())  # what the harness trained before: bf16 weights, bf16 AdamW
    assert {p.dtype for p in pure.parameters()} == {torch.bfloat16}
    opt, moved_bf16 = _step(pure, recipe, wl, batch, autocast=False)
    assert {s["exp_avg"].dtype for s in opt.state.values()} == {torch.bfloat16}

    meta = wl.build_model()
    # every trainable weight, on the meta device before sharding
    assert keep_fp32_master(meta) == sum(1 for _ in meta.parameters())
    master = wl._materialize(meta)
    assert {p.dtype for p in master.parameters()} == {torch.float32}
    opt, moved_fp32 = _step(master, recipe, wl, batch, autocast=True)  # bf16 compute
    assert {s["exp_avg"].dtype for s in opt.state.values()} == {torch.float32}
    assert {s["exp_avg_sq"].dtype for s in opt.state.values()} == {torch.float32}
    # Adam's first step moves every weight by ~lr = 1e-5: far below half a bf16 ulp of most weights
    assert moved_fp32 > 0.99
    assert moved_bf16 < 0.5, moved_bf16


def test_frozen_weights_keep_their_dtype_and_tied_weights_are_cast_once():
    lin = torch.nn.Linear(4, 4).to(torch.bfloat16)
    frozen = torch.nn.Linear(4, 4).to(torch.bfloat16).requires_grad_(False)
    norm = torch.nn.BatchNorm1d(4).to(torch.bfloat16)
    model = torch.nn.ModuleDict({"a": lin, "b": frozen, "c": norm})
    model.tied = lin  # the same module (and parameters) reached twice
    assert keep_fp32_master(model) == 4  # a's weight and bias, the norm's weight and bias
    assert lin.weight.dtype == torch.float32 and frozen.weight.dtype == torch.bfloat16
    assert norm.running_mean.dtype == torch.float32  # statistics beside the weights they meet
    assert keep_fp32_master(model) == 0


def test_the_run_trains_full_parameters_in_fp32_with_bf16_compute(tmp_path):
    from trainer.cli import main

    out = tmp_path / "run"
    saved = dict(os.environ)
    try:
        assert not dist.is_initialized()
        code = main([FULL, f"output_dir={out}", "max_steps=2", "model.dtype=bf16", "train.precision=bf16",
                     "train.global_batch_size=4", "train.micro_batch_size=2", "data.seq_len=64",
                     "train.eval_every_samples=null", "train.save_final=false", "distributed.timeout_s=60"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert code == 0
    info = json.loads((out / "run.json").read_text())
    assert info["model"]["weight_dtype"] == "torch.float32"  # the master copy the optimizer updates
    assert info["model"]["compute_dtype"] == "torch.bfloat16"
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(losses) == 2 and all(l == pytest.approx(l) for l in losses)
