"""The image_classification workload's recipe checks (no torch: the dry run uses them)."""
from __future__ import annotations

from ..checks import within
from ..config import Recipe
from .data_checks import check_synthetic_or_path

def check(r: Recipe) -> list[str]:
    p = []
    m, d, t = r.model, r.data, r.train
    if m.arch is None:
        p.append("model.arch: required for image_classification; allowed: a torchvision model builder "
                 "name such as resnet50 or resnet18")
    if m.config is not None and not isinstance(m.config, dict):
        p.append("model.config: for image_classification a mapping of ResNet arguments "
                 "(block, layers, width_per_group), or null")
    p += within("data", d, ("image_size",), 32, 8192) + within("data", d, ("num_classes",), 2, 1 << 20)
    p += within("data", d, ("workers",), 0, 256)
    if not 0.0 <= t.label_smoothing < 1.0:
        p.append(f"train.label_smoothing: got {t.label_smoothing}; expected a number in [0, 1)")
    return p + check_synthetic_or_path(r, "an ImageFolder directory (with train/ and val/)")
