from __future__ import annotations

import pytest

from trainer.config import load_recipe
from trainer.layout import resolve_layout, unimplemented

from ..conftest import TINY


def layout(world, *overrides):
    return resolve_layout(load_recipe(TINY, list(overrides)), world)


def test_dp_is_derived_and_grad_accum_fills_the_global_batch():
    lay, problems = layout(2)  # GBS 16, MBS 4
    assert not problems
    assert (lay.dp, lay.grad_accum_steps, lay.per_rank_batch) == (2, 2, 8)
    lay, _ = layout(8, "train.global_batch_size=64", "parallel.tp=2")
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


def test_unimplemented_degrees_are_refused():
    lay, _ = layout(4, "parallel.tp=2", "parallel.pp=2")
    msgs = unimplemented(lay)
    assert any(m.startswith("parallel.tp: got 2; tensor") for m in msgs)
    assert any(m.startswith("parallel.pp: got 2; pipeline") for m in msgs)
