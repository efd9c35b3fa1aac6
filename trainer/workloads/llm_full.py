"""Full-parameter causal-LM training (pretraining or a full fine-tune) of the Llama family.

The same model code as the LoRA workload (workloads/llm_lora.py) without the adapters: every weight is
trainable, so FSDP2 shards (and the optimizer updates) the whole model, the Llama tensor-parallel plan
splits every projection and the vocabulary layers (trainer/parallelize.py), and the pipeline split
(trainer/pipeline.py) cuts the same decoder layers into stages. Checkpoints then hold the whole model:
they keep only trainable tensors, and here that is all of them.
"""
from __future__ import annotations

import torch

from .llm_lora import LlmLoraWorkload


class LlmFullWorkload(LlmLoraWorkload):
    def _adapt(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # no adapters: every parameter keeps requires_grad

    def describe(self, train_set) -> str:
        what = "pretraining" if self.recipe.data.format == "pretokenized" else "fine-tune"
        return (f"full-parameter {what}; {len(train_set):,} training sequences of "
                f"{self.recipe.data.seq_len} tokens")
