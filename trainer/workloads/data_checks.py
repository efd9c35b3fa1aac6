"""Recipe checks shared by several workloads (data splits, synthetic data or a path)."""
from __future__ import annotations

from ..config import DataConfig, Recipe


def check_split(d: DataConfig) -> list[str]:
    if len(d.split) != 3 or any(x < 0 for x in d.split) or abs(sum(d.split) - 1.0) > 1e-6:
        return [f"data.split: got {d.split}; expected three non-negative fractions (train, validation, test) "
                "summing to 1"]
    return []


def check_synthetic_or_path(r: Recipe, what: str) -> list[str]:
    d = r.data
    if d.synthetic:
        return [] if d.synthetic_samples >= 1 else [
            f"data.synthetic_samples: got {d.synthetic_samples}; expected an integer >= 1"]
    if d.dataset == DataConfig.dataset:  # the Dolly default means nothing to this workload
        return [f"data.dataset: {r.workload} needs {what}, or data.synthetic=true for random inputs "
                "of the real shapes"]
    return []
