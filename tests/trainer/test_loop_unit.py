"""trainer.loop, trainer.engines.step, trainer.parallelize and trainer.run in-process: the tiny recipe, two
optimizer steps in a gloo group of one made in this process (trainer.distributed does that when torchrun
is absent), then the run directory it leaves."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch.distributed as dist

from tests.conftest import TINY
from trainer.cli import main

# 2 steps of 4 sequences (micro-batch 2 x grad-accum 2), short sequences, one save at the end
STEPS = ["max_steps=2", "data.seq_len=64", "train.global_batch_size=4", "train.micro_batch_size=2",
         "train.log_every=1", "train.eval_every_samples=null", "distributed.timeout_s=60"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("loop") / "run"
    saved = dict(os.environ)  # the run sets HF_HUB_OFFLINE, GLOO_SOCKET_IFNAME, flight-recorder variables
    try:
        assert not dist.is_initialized()
        code = main([TINY, f"output_dir={out}", *STEPS])
        assert not dist.is_initialized()  # the run destroys the group it made
    finally:
        os.environ.clear()
        os.environ.update(saved)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return code, out, metrics, json.loads((out / "run.json").read_text())


def test_two_steps_complete(run):
    code, _, metrics, info = run
    assert code == 0
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["error"] is None
    assert [m["step"] for m in metrics] == [1, 2]
    assert info["final"]["step"] == 2 and info["final"]["loss"] == pytest.approx(metrics[-1]["loss"])


def test_layout_is_one_rank_with_gradient_accumulation(run):
    _, _, _, info = run
    lay = info["layout"]
    assert (lay["world_size"], lay["dp"], lay["tp"], lay["pp"]) == (1, 1, 1, 1)
    assert (lay["global_batch_size"], lay["micro_batch_size"], lay["grad_accum_steps"]) == (4, 2, 2)
    assert info["backend"] == "gloo" and info["device"]["type"] == "cpu"


def test_step_records_loss_lr_and_throughput(run):
    _, _, metrics, info = run
    first, second = metrics
    assert abs(first["loss"] - math.log(260)) < 0.5  # untrained: near-uniform over the byte vocabulary
    assert first["lr"] == 0.0 and second["lr"] > 0  # linear warm-up from 0 over 3 steps
    for m in metrics:
        assert m["grad_norm"] > 0 and m["step_time_s"] > 0 and m["tokens_per_s"] > 0
        assert m["label_tokens"] > 0 and m["tokens"] >= m["label_tokens"]
        assert m["mfu"] is None  # no GPU: no peak, so no MFU (unknown, not 0)
    assert info["throughput"]["flops_per_token"] > 0 and info["throughput"]["peak_tflops_per_device"] is None
    for m in metrics:  # padded to data.seq_len: the step's FLOPs are positions x the per-token formula
        flops = m["tflops_per_device"] * 1e12 * m["step_time_s"] * info["layout"]["world_size"]
        assert flops == pytest.approx(m["padded_tokens"] * info["throughput"]["flops_per_token"], rel=1e-9)


def test_ddp_gradients_are_reduced_through_the_traced_hook(run):
    _, _, metrics, info = run
    # a group of one still runs DDP's bucket all-reduce: the telemetry sees the trainable bytes
    ar = metrics[0]["comm"]["all_reduce"]
    assert ar["count"] >= 1 and ar["bytes"] > 0
    trainable = info["model"]["trainable_parameters"]
    assert 0 < trainable < info["model"]["parameters"]


def test_rank_file_and_checkpoint_written(run):
    _, out, _, info = run
    final = json.loads((out / "ranks" / "rank00000.final.json").read_text())
    assert final["step"] == 2 and final["rank"] == 0 and final["trainable"]
    assert final["trainable"] == info["final"]["trainable"]
    assert any((out / "checkpoints").iterdir())
    assert not (out / "run.lock").exists()  # released at close


def test_a_second_run_in_the_same_directory_resumes_past_max_steps(run, capsys):
    """Resume reads the checkpoint written above; with max_steps already reached nothing is trained."""
    code, out, _, _ = run
    saved = dict(os.environ)
    try:
        code = main([TINY, f"output_dir={out}", *STEPS])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    info = json.loads((out / "run.json").read_text())
    assert code == 0 and info["attempt"] == 2 and [a["status"] for a in info["attempts"]] == ["completed", "completed"]
    assert info["final"]["step"] == 2


@pytest.mark.parametrize("mode", ["fsdp", "replicate"])
def test_other_data_parallel_modes_take_the_same_first_step(run, tmp_path, mode):
    """Same seed and data: the first step's loss (before any update) does not depend on how the data-parallel
    wrapping is done; each mode's own step path (FSDP2's sharded parameters, replicas' trainable all-reduce)
    runs to the end."""
    _, _, ddp_metrics, _ = run
    out = tmp_path / mode
    saved = dict(os.environ)
    try:
        code = main([TINY, f"output_dir={out}", *STEPS, "max_steps=1", f"parallel.data_parallel={mode}"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    info = json.loads((out / "run.json").read_text())
    assert code == 0 and info["status"] == "completed", info.get("error")
    assert info["layout"]["data_parallel"] == mode
    (first,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert first["loss"] == pytest.approx(ddp_metrics[0]["loss"], rel=1e-5)
    assert first["grad_norm"] == pytest.approx(ddp_metrics[0]["grad_norm"], rel=1e-4)


def test_eval_every_step_stops_at_the_target_eval_loss(tmp_path, capsys):
    """Periodic eval (item-weighted over the eval split) and train.target_eval_loss: a target any untrained
    model meets ends the run at the first eval, status target_reached."""
    out = tmp_path / "target"
    steps = [s for s in STEPS if not s.startswith("train.eval_every_samples")]
    saved = dict(os.environ)
    try:
        code = main([TINY, f"output_dir={out}", *steps, "max_steps=4", "train.eval_every_samples=4",
                     "train.target_eval_loss=100.0"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    info = json.loads((out / "run.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert code == 0 and info["status"] == "target_reached", info.get("error")
    assert [m["step"] for m in metrics] == [1] and info["final"]["target_reached_step"] == 1
    assert abs(metrics[0]["eval_loss"] - math.log(260)) < 0.5 and info["final"]["eval_loss"] == metrics[0]["eval_loss"]
    assert info["data"]["eval_samples"] > 0


class _Work:
    def __init__(self):
        self.waits = 0

    def wait(self):
        self.waits += 1
        return True


def test_scale_waits_for_the_count_all_reduce_once_where_first_used():
    import torch

    from trainer.loop import ScaleFromCounts

    work = _Work()
    counted = torch.tensor([10.0, 0.0, 99.0, 99.0, 99.0], dtype=torch.float64)
    scale = ScaleFromCounts(work, counted, dp=2, n_terms=2)
    assert work.waits == 0  # issued, not waited for: the first forward runs meanwhile
    first = scale()
    assert work.waits == 1 and first.dtype == torch.float32
    assert first.tolist() == pytest.approx([0.2, 2.0])  # dp / count, a count of 0 read as 1
    assert scale() is first and work.waits == 1


def test_next_steps_batches_are_prepared_ahead_with_the_same_counts():
    """Trainer._prepare gives what the step used to build at its start: the sampler's micro-batches and
    this rank's counts (terms, real tokens, padded positions, attention pairs)."""
    import types

    import torch

    from tests.conftest import TINY
    from trainer.config import load_recipe
    from trainer.data.sampler import StepSampler
    from trainer.loop import Trainer
    from trainer.workloads import get_workload

    recipe = load_recipe(TINY, ["data.seq_len=64", "train.eval_every_samples=null"])
    wl = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)
    train_set, _ = wl.build_data(need_eval=False)
    sampler = StepSampler(len(train_set), recipe.seed, 8, 1, 0, 4)
    fake = types.SimpleNamespace(workload=wl, train_set=train_set, sampler=sampler, pipeline=None,
                                 device=torch.device("cpu"))
    fake._to_device = lambda b: Trainer._to_device(fake, b)
    fake._host_to_device = lambda t: Trainer._host_to_device(fake, t)
    step, batches, local = Trainer._prepare(fake, 3)
    expected = [train_set.batch(idx) for idx in sampler.micro_batches(2)]
    assert step == 3 and len(batches) == len(expected) == 2
    for got, want in zip(batches, expected):
        assert all(torch.equal(got[k], want[k]) for k in want)
    assert local == [sum(wl.loss_counts(b)["label_tokens"] for b in expected),
                     sum(wl.input_tokens(b) for b in expected), sum(wl.padded_tokens(b) for b in expected),
                     sum(wl.position_pairs(b) for b in expected)]
