"""Workloads: one module per family; each builds a single-device model, its data and its loss."""
from __future__ import annotations


def get_workload(name: str):
    if name == "llm_lora":
        from .llm_lora import LlmLoraWorkload
        return LlmLoraWorkload
    raise ValueError(f"workload: got {name!r}; allowed: llm_lora")
