"""Which RNG streams each rank trains with.

Building the model needs every rank to draw the same numbers (the seeded init is the same for every
layout), so the run first seeds every rank with the recipe's seed. Training needs the opposite across
data-parallel replicas: each replica sees different data, and dropout masks drawn from one shared stream
would be the same pattern on every replica, so the replicas' gradient noise would be correlated. Within a
tensor-parallel group the ranks run one model copy together on the same batch: a replicated LoRA input
must be dropped identically on each of them, or the replicated `lora_A` gradients diverge. So after the
model is built each rank reseeds from (seed, pp rank, dp rank) - never the tp rank.

Known difference from Megatron: its tensor-parallel RNG tracker gives each tp rank its own stream inside
row-parallel regions. Here a row-parallel LoRA input (each tp rank's slice of the features) is dropped
with the same pattern on every slice; the masks stay valid dropout, only correlated between slices.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def training_seed(seed: int, dp_rank: int, pp_rank: int = 0) -> int:
    """A 63-bit seed for (seed, pp rank, dp rank): distinct per replica and stage, equal across tp."""
    words = np.random.SeedSequence([seed, pp_rank, dp_rank]).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31) ^ int(words[1])


def seed_training_streams(seed: int, dp_rank: int, pp_rank: int = 0) -> int:
    """Reseed python, numpy and torch (CPU and CUDA) for training; returns the torch seed used."""
    value = training_seed(seed, dp_rank, pp_rank)
    random.seed(value)
    np.random.seed(value % 2 ** 32)
    torch.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)
    return value
