"""Step-addressed sampling shared by every workload."""
from __future__ import annotations

import numpy as np


class StepSampler:
    """Which samples each dp rank sees at each optimizer step, derived from the step number alone.

    Samples are drawn in a seeded permutation per epoch; optimizer step s uses global sample positions
    [s*GBS, (s+1)*GBS), and dp rank r takes its contiguous slice of that global batch. Because the data
    position is a function of the step, a resumed run sees exactly the samples an uninterrupted one does,
    and a single process with the same global batch sees the same samples as the whole dp group.
    """

    def __init__(self, size: int, seed: int, global_batch: int, dp: int, dp_rank: int, micro_batch: int):
        self.size, self.seed = size, seed
        self.global_batch, self.dp, self.dp_rank, self.micro_batch = global_batch, dp, dp_rank, micro_batch
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 2:  # a step spans at most two epochs
                self._perms.clear()
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.size)
        return self._perms[epoch]

    def positions(self, step: int) -> list[int]:
        per_rank = self.global_batch // self.dp
        start = step * self.global_batch + self.dp_rank * per_rank
        return [self._perm(pos // self.size)[pos % self.size] for pos in range(start, start + per_rank)]

    def micro_batches(self, step: int) -> list[list[int]]:
        idx = self.positions(step)
        return [idx[i:i + self.micro_batch] for i in range(0, len(idx), self.micro_batch)]

    def epoch_of(self, step: int) -> float:
        return step * self.global_batch / self.size
