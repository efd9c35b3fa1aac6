"""Full-parameter Llama training (workload llm_full): every layout against one process on the same batch.

The same model code, TP plan and pipeline split as the LoRA workload, with every weight trainable: FSDP2
shards the whole model, TP splits every projection and the vocabulary layers, PP splits the decoder
layers. Each layout's losses and gradient norms are compared with a single process running the unsplit
model (DDP at world 1), as tests/trainer/test_training.py and test_pipeline.py do for LoRA.
"""
from __future__ import annotations

import pytest

from trainer.cli import main
from trainer.config import load_recipe

from ..conftest import REPO

FULL = str(REPO / "recipes" / "tiny_llama_full.yaml")
LLAMA3_70B = str(REPO / "recipes" / "llama3_70b_pretrain.yaml")
# four steps, warm-up of one step so that every step after the first moves the weights
STEPS = ["max_steps=4", "data.seq_len=128", "train.log_every=1", "train.eval_every_samples=null",
         "train.warmup_steps=1", "distributed.timeout_s=60"]


def run_full(out, *overrides, nproc=1, timeout=300, env=None):
    from ..conftest import run_cli

    return run_cli(out, *STEPS, *overrides, nproc=nproc, recipe=FULL, timeout=timeout, env=env)


def model_weights(run_dir) -> dict:
    """Every weight of a run's final DCP checkpoint, keyed from `layers.N.` (or the top-level name) on."""
    import re

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ckpt = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    dcp_to_torch_save(str(ckpt), str(run_dir / "flat.pt"))
    state = torch.load(run_dir / "flat.pt", weights_only=False)["model"]
    out = {}
    for k, v in state.items():
        m = re.search(r"(layers\.\d+\..*|embed_tokens\.weight|norm\.weight|lm_head\.weight)$", k)
        out[m.group(1) if m else k] = v
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    res = run_full(tmp_path_factory.mktemp("single"), "parallel.data_parallel=ddp")
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
@pytest.mark.parametrize("nproc,overrides", [
    (2, ["parallel.data_parallel=fsdp"]),  # FSDP2 shards the whole model over dp 2
    (2, ["parallel.tp=2"]),  # tensor parallel alone: every projection and the vocabulary layers split
    (2, ["parallel.pp=2", "parallel.pp_schedule=gpipe"]),  # one decoder layer per stage
    (4, ["parallel.tp=2", "parallel.data_parallel=fsdp"]),  # dp 2 x tp 2: FSDP2 over TP shards
    (4, ["parallel.pp=2", "parallel.data_parallel=fsdp"]),  # dp 2 x pp 2 (1F1B): FSDP2 on each stage
    # tp 2 x pp 2: the last stage's (trainable) lm_head split over the vocabulary, loss_parallel
    (4, ["parallel.pp=2", "parallel.tp=2", "parallel.pp_schedule=gpipe"]),
], ids=["fsdp2", "tp2", "pp2-gpipe", "dp2xtp2-fsdp", "dp2xpp2-fsdp", "tp2xpp2"])
def test_each_layout_matches_the_single_process_run(nproc, overrides, single, tmp_path):
    res = run_full(tmp_path / "run", *overrides, nproc=nproc, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    info, ref = res.run_json(), single.run_json()
    # every parameter is trained, and the layout trains the same model
    assert info["model"]["trainable_parameters"] == info["model"]["parameters"] == ref["model"]["parameters"] > 0
    assert res.losses()[0] == pytest.approx(single.losses()[0], rel=1e-5)
    # and the curve and the gradient norms clipping sees stay close (summation order differs by layout)
    assert res.losses() == pytest.approx(single.losses(), rel=1e-5)
    assert [r["grad_norm"] for r in res.metrics()] == pytest.approx([r["grad_norm"] for r in single.metrics()],
                                                                     rel=1e-5)
    assert single.losses()[-1] < single.losses()[0]  # it learns
    ranks = res.rank_files()
    assert len(ranks) == nproc
    if "parallel.pp=2" not in overrides:  # every rank sees the whole model (stages hold different layers)
        assert len({r["trainable"]["sha256"] for r in ranks}) == 1
    assert info["model"]["vocab_parallel_loss"] == ("parallel.tp=2" in overrides)
    if "parallel.pp=2" in overrides and "parallel.data_parallel=fsdp" in overrides:
        # FSDP2 on a stage gathers each weight once per step, not once per micro-batch: after the first
        # step (shape inference) as many bytes are gathered as gradients are reduce-scattered
        for rec in res.metrics()[1:]:
            assert rec["comm"]["all_gather"]["bytes"] == rec["comm"]["reduce_scatter"]["bytes"] > 0
    # the checkpoint holds the whole model (all trainable), and its weights equal the unsplit run's
    want, got = model_weights(single.out), model_weights(res.out)
    assert want.keys() == got.keys() and "lm_head.weight" in want and "embed_tokens.weight" in want
    worst = max(float((want[k].float() - got[k].float()).abs().max()) for k in want)
    assert worst < 1e-5, f"weights differ from the single-process run by {worst}"


@pytest.mark.integration
def test_full_checkpoint_resumes_to_the_uninterrupted_run(single, tmp_path):
    out = tmp_path / "resumed"
    # killed after step 3 with a checkpoint at step 2 (the same schedule as the uninterrupted run)
    killed = run_full(out, "parallel.data_parallel=fsdp", "train.save_every=2", nproc=2,
                      env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "3"})
    assert killed.returncode != 0 and len(killed.losses()) == 3
    resumed = run_full(out, "parallel.data_parallel=fsdp", "train.save_every=2", nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "at step 2" in resumed.stdout
    assert resumed.losses() == pytest.approx(single.losses(), rel=1e-5)
    # the checkpoint held every weight and the optimizer state: the resumed run ends where one run does
    want, got = model_weights(single.out), model_weights(out)
    assert max(float((want[k] - got[k]).abs().max()) for k in want) < 1e-5


def test_every_parameter_is_trainable_in_the_built_model():
    import torch

    from trainer.compat import ensure_torchvision_importable
    from trainer.workloads import get_workload

    ensure_torchvision_importable()
    recipe = load_recipe(FULL)
    model = get_workload("llm_full")(recipe, torch.device("cpu"), torch.float32).build_model()  # meta device
    params = list(model.parameters())
    assert params and all(p.requires_grad for p in params)
    assert not any("lora_" in name for name, _ in model.named_parameters())
    lora = get_workload("llm_lora")(load_recipe(str(REPO / "recipes" / "tiny_llama_lora.yaml")),
                                    torch.device("cpu"), torch.float32).build_model()
    base = sum(p.numel() for n, p in lora.named_parameters() if "lora_" not in n)
    assert sum(p.numel() for p in params) == base  # the same model, without the adapters


def test_llama3_70b_recipe_dry_runs_at_64_ranks(capsys):
    assert main([LLAMA3_70B, "--dry-run", "--world-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "world 64 = dp 2 x tp 8 x pp 4 (fsdp)" in out
    assert "global batch 256 = micro-batch 1 x grad-accum 128 x dp 2" in out
    r = load_recipe(LLAMA3_70B)
    assert r.workload == "llm_full" and r.model.config["num_hidden_layers"] == 80
    assert r.model.config["hidden_size"] == 8192 and r.data.seq_len == 8192


@pytest.mark.parametrize("override,expected", [
    ("lora.r=4", "error: lora: the llm_full workload trains every parameter and has no adapters"),
    ("parallel.sequence_parallel=true", "error: parallel.sequence_parallel: not with the llm_full workload"),
    ("train.target_eval_accuracy=0.5", "error: train.target_eval_accuracy: the llm_full workload reports no accuracy"),
])
def test_full_recipe_refuses_what_it_cannot_do(override, expected, capsys):
    assert main([FULL, "parallel.tp=2", override, "--dry-run"]) == 2
    assert expected in capsys.readouterr().err
