"""Make an installed torchvision importable where its C++ operators cannot load.

torchvision's PyPI wheels are built against CUDA torch. Next to a CPU-only torch (the development
machines, CI) its `_C` library fails to load, and torchvision 0.28 then fails at import while
registering fake kernels for two detection ops that do not exist (nms, qnms). Because transformers
imports torchvision whenever it is installed, that failure breaks peft and transformers too. Declaring
the two schemas lets the pure-Python parts (models, datasets, transforms) import; the detection ops
stay without kernels and raise if anyone calls them. Where `_C` loads (GPU machines, NGC) this does
nothing. Call it before the first transformers or torchvision import.

Workloads that need no images (language models, sweeps) do not import torchvision at all:
`prepare_torchvision(False)` hides it before transformers looks, so transformers treats it as absent
(its availability check is `importlib.util.find_spec`, which returns None for a name mapped to None in
sys.modules) and a run saves its import time (seconds on the development machine).
"""
from __future__ import annotations

import importlib.util
import sys

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_library = None  # the fragment must outlive this call, or its definitions are dropped


def ensure_torchvision_importable() -> bool:
    """True when torchvision imports (after the fix if it was needed), False when it is not installed."""
    global _library
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
        return True
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _SCHEMAS:
        _library.define(schema)
    import torchvision  # noqa: F401,F811
    return True


def prepare_torchvision(needed: bool) -> bool:
    """Before the first transformers import of a run: make torchvision importable when the workload needs
    it, hide it otherwise (an import of it then raises ImportError). Returns whether it is importable."""
    if needed:
        return ensure_torchvision_importable()
    if "torchvision" not in sys.modules:
        sys.modules["torchvision"] = None  # type: ignore[assignment]
    return sys.modules["torchvision"] is not None


def enable_activation_checkpointing(model) -> None:
    """Non-reentrant activation checkpointing of a transformers model under the name its version uses
    (activation_checkpointing_enable from transformers 5.x, gradient_checkpointing_enable before)."""
    new = getattr(model, "activation_checkpointing_enable", None)
    if new is not None:
        new(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
