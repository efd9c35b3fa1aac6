"""trainer.workloads.llm_lora in-process on CPU: the tiny recipe's data, model, loss and FLOPs, no process group."""
from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import TINY
from trainer.config import RecipeError, load_recipe
from trainer.data.sft import IGNORE
from trainer.throughput import flops_per_token, matmul_params
from trainer.workloads import get_workload
from trainer.workloads.hf import ModelError

SMALL = ["data.seq_len=64", "train.eval_every_samples=null"]


@pytest.fixture(scope="module")
def workload():
    recipe = load_recipe(TINY, SMALL)
    return get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module")
def train_set(workload):
    train, eval_set = workload.build_data(need_eval=False)
    assert eval_set is None
    return train


@pytest.fixture(scope="module")
def model(workload):
    return workload._materialize(workload.build_model())  # what parallelize does for one rank, without dp


def test_data_is_fixed_length_with_answer_only_labels(workload, train_set):
    train = train_set
    assert len(train) > 100
    batch = train.batch([0, 1])
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 64)
    labels = batch["labels"]
    # the prompt is masked, the answer is not: every row has some of each
    assert all((row == IGNORE).any() and (row != IGNORE).any() for row in labels)
    assert workload.loss_counts(batch)["label_tokens"] == int((labels[:, 1:] != IGNORE).sum())
    assert workload.input_tokens(batch) == int(batch["attention_mask"].sum()) > 0


def test_model_is_built_on_meta_then_filled_with_lora_trainable_only(workload):
    meta = workload.build_model()
    assert all(p.is_meta for p in meta.parameters())  # no rank holds the whole model before sharding
    model = workload._materialize(meta)
    assert not any(p.is_meta for p in model.parameters())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert workload.load_stats["source"] == "seeded init" and workload.load_stats["tensors"] > 0


def test_loss_on_one_batch_is_near_uniform_and_backpropagates(workload, model, train_set):
    batch = train_set.batch([0, 1, 2, 3])
    sums = workload.loss_sums(model, batch)
    count = workload.loss_counts(batch)["label_tokens"]
    mean = sums["loss"].item() / count
    # a freshly initialised model predicts near-uniformly over the 260-token vocabulary
    assert abs(mean - math.log(260)) < 0.5
    sums["loss"].backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    total, n = workload.eval_sums(model, batch)["loss"]
    assert int(n) == count and total.item() == pytest.approx(sums["loss"].item(), rel=1e-5)


def test_flops_follow_the_formula(workload, model):
    per, unit, formula = workload.flops(model)
    n, n_train = matmul_params(model)
    assert unit == "token" and "4N + 2N_trainable" in formula
    assert per == flops_per_token(n, n_train, 2, 128, 64) == 4.0 * n + 2.0 * n_train + 12.0 * 2 * 128 * 64
    assert workload.attention_flops_per_pair == 12.0 * 2 * 128
    batch = {"input_ids": torch.zeros(3, 40, dtype=torch.long)}
    assert workload.position_pairs(batch) == 3 * 40 * 40 and workload.padded_tokens(batch) == 120
    assert "LoRA r=8" in workload.describe([0] * 5) and "5 training sequences of 64 tokens" in workload.describe([0] * 5)


def test_attention_flops_use_the_heads_width_where_a_config_sets_its_own_head_dim():
    """Attention scores and values are heads x head_dim wide; the formula read hidden_size, which a config
    with its own head_dim (Gemma-style) sets apart: 4 heads x 64 = 256 here, hidden 128."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64)
    recipe = load_recipe(TINY, SMALL)
    wl = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)
    model = LlamaForCausalLM(config)
    per, _, _ = wl.flops(model)
    n, n_train = matmul_params(model)
    assert wl.attention_flops_per_pair == 12.0 * 2 * 256
    assert per == 4.0 * n + 2.0 * n_train + 12.0 * 2 * 256 * 64


def test_no_loss_parallel_without_tensor_parallel(workload):
    assert workload.loss_parallel is False
    with workload.loss_context():  # a no-op context
        pass


def test_missing_tokenizer_is_one_line_naming_the_key(tmp_path):
    recipe = load_recipe(TINY, [*SMALL, f"model.tokenizer={tmp_path / 'nope'}"])
    with pytest.raises(ModelError) as info:
        get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)
    assert str(info.value).startswith("model.tokenizer:") and "\n" not in str(info.value)


def test_unknown_lora_target_is_one_line_naming_the_key():
    with pytest.raises(RecipeError) as refused:  # the recipe check (the dry run) names Llama's layers
        load_recipe(TINY, [*SMALL, "lora.target_modules=[q_prj]"])
    assert refused.value.problems == ["lora.target_modules: 'q_prj' is no Llama linear layer (did you mean "
                                      "'q_proj'?); allowed: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, "
                                      "lm_head"]
    assert load_recipe(TINY, [*SMALL, "lora.target_modules=[q_proj,lm_head]"]).lora.target_modules == [
        "q_proj", "lm_head"]  # the output projection is a Linear peft adapts: it trained before the check
    recipe = load_recipe(TINY, SMALL)
    recipe.lora.target_modules = ["no_such_proj"]  # past the check: peft's own refusal is one line too
    w = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)
    with pytest.raises(ModelError) as info:
        w.build_model()
    assert str(info.value).startswith("lora.target_modules: ['no_such_proj']") and "\n" not in str(info.value)


def test_unknown_workload_names_the_allowed_ones():
    with pytest.raises(ValueError, match="workload: got 'nope'; allowed: llm_lora, bert_pretraining"):
        get_workload("nope")


def _bf16_lora(dropout: str):
    """The tiny model with bf16 base weights (what model.dtype=bf16 builds) and non-zero LoRA B."""
    recipe = load_recipe(TINY, [*SMALL, f"lora.dropout={dropout}"])
    wl = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.bfloat16)
    model = wl._materialize(wl.build_model())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: the adapters would add nothing to compare
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return wl, model


def _autocast_step(model, batch):
    """Logits, adapter gradients and the number of dtype copies of one bf16-autocast forward + backward."""
    torch.manual_seed(5)  # the same dropout masks in both models
    with torch.profiler.profile() as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=batch["input_ids"]).logits
        logits.float().sum().backward()
    copies = sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return logits.detach(), grads, copies


@pytest.mark.parametrize("dropout", ["0.0", "0.05"])
def test_adapter_inputs_are_not_cast_under_autocast(dropout):
    from trainer.workloads.llm_lora import keep_adapter_inputs

    wl, cast = _bf16_lora(dropout)
    _, kept = _bf16_lora(dropout)
    # fp32 adapters over bf16 weights: the optimizer's master copy and its AdamW state are fp32
    assert {p.dtype for p in cast.parameters() if p.requires_grad} == {torch.float32}
    assert {p.dtype for p in cast.parameters() if not p.requires_grad} == {torch.bfloat16}
    assert keep_adapter_inputs(kept, torch.float32) == 0  # fp32 compute: the cast is needed, kept
    assert keep_adapter_inputs(kept, torch.bfloat16) == 14  # 2 layers x 7 targets
    assert {p.dtype for p in kept.parameters() if p.requires_grad} == {torch.float32}
    batch = wl.build_data(need_eval=False)[0].batch([0, 1, 2, 3])
    logits_a, grads_a, copies_a = _autocast_step(cast, batch)
    logits_b, grads_b, copies_b = _autocast_step(kept, batch)
    # each adapter's input (and its gradient) was copied to fp32 and back: 14 layers, forward and backward
    assert copies_a - copies_b >= 2 * 14
    if dropout == "0.0":  # the same bf16 matmuls on the same operands: bitwise the same
        assert torch.equal(logits_a, logits_b)
        assert all(torch.equal(grads_a[n], grads_b[n]) for n in grads_a)
    else:  # dropout's 1/(1-p) is rounded to bf16 instead of to fp32 first: bf16 rounding apart
        torch.testing.assert_close(logits_b, logits_a, rtol=2e-2, atol=2e-2)
        for n in grads_a:
            scale = grads_a[n].abs().max()
            assert (grads_b[n] - grads_a[n]).abs().max() <= 3e-2 * scale, n
