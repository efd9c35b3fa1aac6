"""Pipeline parallelism (trainer/pipeline.py): every schedule and the 2 x 2 combinations on gloo, each
checked against one process running the unsplit model on the same global batch."""
from __future__ import annotations

import re

import pytest

from trainer.error_report import InputError
from trainer.pipeline import split_layers, stage_ids

from ..conftest import FAST, run_cli
from .test_training import lora_weights

# Four decoder layers so interleaved 1F1B can hold two stages per rank; global batch 16 in micro-batches
# of 4 gives 4 pipeline micro-batches at dp 1 (2 at dp 2); eval every 2 steps runs the eval schedule.
PP = [*FAST, "max_steps=4", "lora.dropout=0.0", "model.config.num_hidden_layers=4", "train.eval_every_samples=32"]


def by_layer(weights: dict) -> dict:
    """Adapter tensors keyed from `layers.N.` on: the same names whatever wraps the layers."""
    return {re.search(r"layers\.\d+\..*", k).group(0): v for k, v in weights.items()}


@pytest.fixture(scope="module")
def unsplit(tmp_path_factory):
    res = run_cli(tmp_path_factory.mktemp("unsplit"), *PP)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def check_against(res, ref, nproc: int) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.losses()[0] == pytest.approx(ref.losses()[0], abs=1e-5)
    assert res.losses() == pytest.approx(ref.losses(), rel=1e-5)
    evals = [r["eval_loss"] for r in res.metrics() if "eval_loss" in r]
    assert len(evals) == 2 and evals == pytest.approx([r["eval_loss"] for r in ref.metrics() if "eval_loss" in r],
                                                      rel=1e-5)
    assert [r["grad_norm"] for r in res.metrics()] == pytest.approx([r["grad_norm"] for r in ref.metrics()], rel=1e-5)
    assert len(res.rank_files()) == nproc
    want, got = by_layer(lora_weights(ref.out)), by_layer(lora_weights(res.out))
    assert want.keys() == got.keys() and len(want) == 4 * 7 * 2  # layers x target modules x (A, B)
    worst = max(float((want[k] - got[k]).abs().max()) for k in want)
    assert worst < 1e-5, f"LoRA weights differ from the unsplit run by {worst}"


@pytest.mark.integration
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b"])
def test_each_schedule_matches_the_unsplit_model(schedule, unsplit, tmp_path):
    extra = ["parallel.pp_stages_per_rank=2"] if schedule == "interleaved_1f1b" else []
    res = run_cli(tmp_path / schedule, *PP, "parallel.pp=2", f"parallel.pp_schedule={schedule}", *extra, nproc=2,
                  timeout=600)
    check_against(res, unsplit, 2)
    info = res.run_json()
    assert info["layout"]["pp"] == 2 and info["layout"]["pp_schedule"] == schedule
    assert res.metrics()[0]["comm"]["send"]["count"] > 0  # activations and gradients between stages


@pytest.mark.integration
@pytest.mark.parametrize("overrides", [
    ["parallel.pp=2", "parallel.tp=2"],  # tp x pp
    ["parallel.pp=2", "parallel.data_parallel=fsdp"],  # dp x pp, FSDP2 on each stage
    ["parallel.pp=2", "parallel.data_parallel=replicate"],  # dp x pp, LoRA gradients all-reduced per stage
], ids=["tp2xpp2", "dp2xpp2-fsdp", "dp2xpp2-replicate"])
def test_two_by_two_layouts_with_a_pipeline_on_four_ranks(overrides, unsplit, tmp_path):
    res = run_cli(tmp_path / "run", *PP, *overrides, nproc=4, timeout=600)
    check_against(res, unsplit, 4)
    # tp x pp: the last stage's lm_head is split over the vocabulary (loss_parallel) and its final norm runs
    # on sequence slices; the losses, gradients and weights above match the unsplit model all the same
    assert res.run_json()["model"]["vocab_parallel_loss"] == ("parallel.tp=2" in overrides)


def test_layer_split_and_stage_placement():
    assert split_layers(80, 8)[0] == list(range(10))
    assert [len(s) for s in split_layers(10, 4)] == [3, 3, 2, 2]
    assert stage_ids(1, 4, 2) == [1, 5]  # interleaved: every pp-th stage
    with pytest.raises(InputError, match=r"parallel.pp: 4 pipeline stages \(pp x pp_stages_per_rank\) need at least as many decoder layers"):
        split_layers(2, 4)


@pytest.mark.integration
def test_too_few_layers_is_one_clear_line(tmp_path):
    res = run_cli(tmp_path / "run", *FAST, "parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b",
                  "parallel.pp_stages_per_rank=2", nproc=2)
    # refused by the recipe check on every rank, before a run directory is made (the run failed at its build)
    assert res.returncode != 0 and not (tmp_path / "run" / "run.json").exists()
    assert ("error: parallel.pp: 4 pipeline stages (pp x pp_stages_per_rank) need at least as many decoder layers; "
            "the model has 2; allowed: pp x pp_stages_per_rank <= 2") in res.stderr


@pytest.mark.integration
def test_a_pipeline_checkpoint_resumes_to_the_uninterrupted_run(tmp_path):
    """Each pipeline rank's optimizer holds other parameters: its param groups (the lr the schedule drives, the
    FQNs they hold) were saved under index-keyed names every rank shared, one rank's kept, and the other rank's
    resume failed at its first step (KeyError: 'lr'). They are keyed by parameter now."""
    run = [*PP, "max_steps=4", "train.eval_every_samples=null", "parallel.pp=2", "parallel.pp_schedule=gpipe"]
    whole = run_cli(tmp_path / "whole", *run, "train.save_every=2", nproc=2, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]
    step2 = tmp_path / "whole" / "checkpoints" / "step-0000002"
    resumed = run_cli(tmp_path / "resumed", *run, f"train.resume={step2}", nproc=2, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    keys = ("step", "loss", "lr", "grad_norm")
    assert ([{k: r[k] for k in keys} for r in resumed.metrics()]
            == [{k: r[k] for k in keys} for r in whole.metrics()[2:]])  # bit for bit
