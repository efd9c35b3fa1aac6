from __future__ import annotations

import pytest

from trainer.config import load_recipe
from trainer.layout import resolve_layout

from ..conftest import TINY


def layout(world, *overrides):
    # 8 decoder layers: the tiny model's 2 would refuse the pipelines of 4 stages these tests plan
    return resolve_layout(load_recipe(TINY, ["model.config.num_hidden_layers=8", *overrides]), world)


def test_dp_is_derived_and_grad_accum_fills_the_global_batch():
    lay, problems = layout(2)  # GBS 16, MBS 4
    assert not problems
    assert (lay.dp, lay.grad_accum_steps, lay.per_rank_batch) == (2, 2, 8)
    lay, _ = layout(8, "train.global_batch_size=64", "parallel.tp=2", "parallel.data_parallel=fsdp")
    assert (lay.dp, lay.tp, lay.grad_accum_steps) == (4, 2, 4)


@pytest.mark.parametrize("world,overrides,expected", [
    (3, ["parallel.tp=2"], "world size 3 is not divisible by tp x pp = 2 x 1"),
    (4, ["parallel.dp=2"], "dp x tp x pp = 2 x 1 x 1 = 2 does not equal the world size 4"),
    (3, [], "train.global_batch_size: 16 is not divisible by micro_batch_size x dp = 4 x 3 = 12"),
    (0, [], "world size: got 0"),
])
def test_layout_problems_name_the_key(world, overrides, expected):
    lay, problems = layout(world, *overrides)
    assert lay is None and expected in problems[0]


def test_pipeline_micro_batches_are_the_grad_accum_micro_batches():
    lay, problems = layout(4, "parallel.pp=2", "train.global_batch_size=16", "train.micro_batch_size=2",
                           "parallel.data_parallel=fsdp")
    assert not problems and (lay.dp, lay.grad_accum_steps) == (2, 4)
    assert "pipeline 1f1b over 2 stages, 4 micro-batches per step" in lay.describe()
    _, problems = layout(4, "parallel.pp=2", "train.global_batch_size=16", "train.micro_batch_size=2")
    assert problems and "'ddp' cannot be combined with pp 2 at dp 2" in problems[0] and "allowed: replicate, fsdp" in problems[0]
    _, problems = layout(4, "parallel.pp=4", "train.global_batch_size=4", "train.micro_batch_size=2")
    assert problems and "1f1b over 4 stages needs at least 4 micro-batches per step, got 2" in problems[0]
    lay, problems = layout(4, "parallel.pp=4", "parallel.pp_schedule=gpipe", "train.global_batch_size=4",
                           "train.micro_batch_size=2")
    assert not problems  # GPipe runs any micro-batch count
    _, problems = layout(2, "parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b", "parallel.pp_stages_per_rank=2",
                         "train.global_batch_size=20", "train.micro_batch_size=4")
    assert problems and "interleaved_1f1b needs the micro-batch count (5) to be a multiple of its rounds (2" in problems[0]


def test_tensor_parallel_must_divide_heads_and_mlp():
    from types import SimpleNamespace

    from trainer.error_report import InputError
    from trainer.parallelize import _check_divisible

    cfg = SimpleNamespace(num_attention_heads=64, num_key_value_heads=8, intermediate_size=28672)  # Llama-2-70B
    _check_divisible(cfg, 8)
    with pytest.raises(InputError, match=r"parallel.tp: 16 does not divide the model's num_key_value_heads \(8\)"):
        _check_divisible(cfg, 16)
