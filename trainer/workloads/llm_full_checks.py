"""The llm_full workload's recipe checks (no torch: the dry run uses them)."""
from __future__ import annotations

from ..config import LoraConfig, Recipe
from .llm_lora_checks import check as check_llm


def check(r: Recipe) -> list[str]:
    # the model and data rules are the LoRA workload's (same model code, same data); its lora rules
    # do not apply, and a lora section that is not the default would be silently ignored
    p = [x for x in check_llm(r) if not x.startswith("lora")]
    if r.lora != LoraConfig():
        p.append("lora: the llm_full workload trains every parameter and has no adapters; remove the lora "
                 "section, or use workload: llm_lora")
    if r.parallel.sequence_parallel:
        # the norms see a slice of the sequence each; their (trainable) weight gradients would need a sum
        # over tp that this build does not do (under LoRA they are frozen)
        p.append("parallel.sequence_parallel: not with the llm_full workload in this build (trainable norm "
                 "weights); allowed: false")
    return p
