"""trainer.pipeline in-process: the stages of a Llama chained on one device compute what the whole model
does, and a one-stage pipeline (a gloo group of one) runs torch's schedule to the same summed loss."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.conftest import TINY
from trainer.config import load_recipe
from trainer.data.sft import IGNORE
from trainer.distributed import ParallelDims
from trainer.error_report import InputError
from trainer.layout import Layout
from trainer.pipeline import LlamaStage, Pipeline, split_layers, summed_ce
from trainer.workloads import get_workload

OVERRIDES = ["data.seq_len=32", "train.eval_every_samples=null", "lora.dropout=0.0", "parallel.pp_schedule=gpipe"]


@pytest.fixture(scope="module")
def parts():
    recipe = load_recipe(TINY, OVERRIDES)
    workload = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)
    train, _ = workload.build_data(False)
    return recipe, workload, train.batch([0, 1, 2, 3])


def whole(workload):
    return workload._materialize(workload.build_model())


def test_two_stages_chained_equal_the_whole_model(parts):
    _, workload, batch = parts
    model = whole(workload)
    ids = batch["input_ids"]
    with torch.no_grad():
        expected = model(input_ids=ids, position_ids=torch.arange(ids.shape[1]).unsqueeze(0)).logits
        causal_lm = model.get_base_model()
        first, second = split_layers(causal_lm.config.num_hidden_layers, 2)
        s0 = LlamaStage(causal_lm, first, has_embed=True, has_head=False)
        s1 = LlamaStage(causal_lm, second, has_embed=False, has_head=True)
        assert list(s0.layers) == ["0"] and list(s1.layers) == ["1"]  # keys keep the global layer index
        assert s0.lm_head is None and s1.embed_tokens is None
        logits = s1(s0(ids))
    assert torch.allclose(logits, expected, atol=1e-5)
    assert summed_ce(logits, batch["labels"]).item() == pytest.approx(
        workload.loss_sums(model, batch)["loss"].item(), rel=1e-5)


def test_more_stages_than_layers_is_one_line():
    with pytest.raises(InputError, match=r"^parallel.pp: 3 pipeline stages \(pp x pp_stages_per_rank\) need at least "
                                         r"as many decoder layers; the model has 2; allowed: pp x "
                                         r"pp_stages_per_rank <= 2$"):
        split_layers(2, 3)


def test_a_model_without_layers_is_refused_not_given_empty_stages():
    # pp_layers_problem leaves 0 layers to the config's range check; the built model's split refuses it still
    with pytest.raises(InputError, match=r"^parallel.pp: 2 pipeline stages need decoder layers; the model has 0"):
        split_layers(0, 2)


def test_one_stage_schedule_gives_the_summed_loss(parts):
    recipe, workload, batch = parts
    expected = workload.loss_sums(whole(workload), batch)["loss"].item()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        layout = Layout(world_size=1, dp=1, tp=1, pp=1, data_parallel="ddp", global_batch_size=4,
                        micro_batch_size=2, grad_accum_steps=2, per_rank_batch=4, pp_schedule="gpipe")
        pipe = Pipeline(whole(workload), ParallelDims(layout, "cpu"), recipe, torch.device("cpu"))
        assert (pipe.first, pipe.last, pipe.num_stages, pipe.ids) == (True, True, 1, [0])
        pipe.build_schedule(pipe.stage_modules)
        micro = [{k: v[i:i + 2] for k, v in batch.items()} for i in (0, 2)]
        loss = pipe.train(micro, scale=1.0)
        assert loss.item() == pytest.approx(expected, rel=1e-5)
        grads = [p.grad for p in pipe.stage_modules[0].parameters() if p.requires_grad and p.grad is not None]
        assert grads and any(g.abs().sum() > 0 for g in grads)
        total, tokens = pipe.evaluate(batch)
        assert total.item() == pytest.approx(expected, rel=1e-5)
        assert int(tokens) == int((batch["labels"][:, 1:] != IGNORE).sum())
    finally:
        dist.destroy_process_group()
