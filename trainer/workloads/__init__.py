"""Workloads: one module per family; each builds a single-device model, its data and its loss.

Adding a workload is one module here plus one recipe. The module's class is built as
`Workload(recipe, device, weight_dtype)` and gives the loop:

    loss_terms: tuple of (loss name, count name)   e.g. (("loss", "label_tokens"),)
    has_tokens: bool                               tokens/s applies (language models)
    accuracy: str | None                           what eval_accuracy means ("top-1"), or None
    build_data(need_eval) -> (train_set, eval_set)  sets with len() and batch(indices) -> dict of tensors
    build_model() -> nn.Module                     single-device, same on every rank for the same seed
    parallelize(model, dims, device, compute_dtype) -> nn.Module   the family's one parallelize function
    loss_counts(batch) -> {count name: int}         items each loss term averages over (known before forward)
    input_tokens(batch) -> int                     only when has_tokens: real tokens (tokens/s)
    padded_tokens(batch) -> int                    only when has_tokens: positions computed, padding
                                                   included (the work MFU counts)
    loss_sums(model, batch) -> {loss name: tensor}  summed (not averaged) loss per term
    eval_sums(model, batch) -> {metric: (sum, count)}   "loss", and "accuracy" where it applies
    flops(model) -> (model FLOPs per unit, unit, formula)   unit "token" or "sample"; before sharding
    describe(train_set) -> str                     one line for the log: model and data in words
    loss_context() -> context manager              optional: entered around forward and backward

Each term's summed loss is divided by its count over the whole global batch, so any dp x grad-accum
split takes the same optimizer step as one process (trainer/loop.py).
"""
from __future__ import annotations

WORKLOADS = {
    "llm_lora": ("llm_lora", "LlmLoraWorkload"),
    "bert_pretraining": ("bert", "BertPretrainingWorkload"),
    "image_classification": ("image", "ImageClassificationWorkload"),
    "llm_full": ("llm_full", "LlmFullWorkload"),  # llm_lora's model code, every parameter trained
}


# each workload's recipe checks, in a torch-free module beside it (the dry run runs them without torch)
RECIPE_CHECKS = {"llm_lora": "llm_lora_checks", "llm_full": "llm_full_checks", "bert_pretraining": "bert_checks",
                 "image_classification": "image_checks"}


def recipe_checks(name: str):
    """The workload's `check(recipe) -> list of problems`."""
    import importlib

    return importlib.import_module(f"{__name__}.{RECIPE_CHECKS[name]}").check


def get_workload(name: str):
    import importlib

    if name not in WORKLOADS:
        raise ValueError(f"workload: got {name!r}; allowed: {', '.join(WORKLOADS)}")
    module, cls = WORKLOADS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
