"""Shared by the workloads: one error type for models, and where a Hugging Face model comes from
(a local checkpoint directory, or config fields for random init)."""
from __future__ import annotations

import json
import os

from ..errors import InputError

# identity keys of a saved config.json; the workload picks the config class itself
_IDENTITY_KEYS = ("architectures", "model_type", "torch_dtype", "dtype")


class ModelError(InputError):
    """A model, config or tokenizer that cannot be used; one line naming the key and the reason."""


def check_dir(path: str, key: str, needs: str) -> None:
    if not os.path.isdir(path):
        raise ModelError(f"{key}: {path!r} is not a directory (expected a local Hugging Face {needs} directory)")


def check_checkpoint(path: str, needs: str, holds: str) -> None:
    """model.path must be a directory with a config.json (`needs` names it, `holds` lists its files)."""
    check_dir(path, "model.path", needs)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelError(f"model.path: {path!r} has no config.json; expected a Hugging Face checkpoint "
                         f"directory ({holds})")


def config_fields(spec) -> dict:
    """model.config as a mapping of config fields: given inline, or read from a config.json path."""
    fields = spec
    if isinstance(spec, str):
        if not os.path.isfile(spec):
            raise ModelError(f"model.config: {spec!r} is not a file (expected a config.json)")
        try:
            with open(spec, encoding="utf-8") as f:
                fields = json.load(f)
        except ValueError as exc:
            raise ModelError(f"model.config: {spec!r} is not JSON: {exc}") from None
    return {k: v for k, v in fields.items() if k not in _IDENTITY_KEYS}
