"""Shared by the workloads: one error type for models, and where a Hugging Face model comes from
(a local checkpoint directory, or config fields for random init)."""
from __future__ import annotations

import difflib
import json
import math
import os

from telemetry.input_files import InputFileError, not_a_file, read_limited

from ..error_report import InputError

# identity keys of a saved config.json; the workload picks the config class itself
_IDENTITY_KEYS = ("architectures", "model_type", "torch_dtype", "dtype")


class ModelError(InputError):
    """A model, config or tokenizer that cannot be used; one line naming the key and the reason."""


def check_dir(path: str, key: str, needs: str) -> None:
    if not os.path.isdir(path):
        raise ModelError(f"{key}: {path!r} is not a directory (expected a local Hugging Face {needs} directory)")


# weight files transformers loads from a checkpoint directory
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def weight_files(path: str) -> list[str]:
    """The WEIGHT_FILES present in checkpoint directory `path`."""
    return [f for f in WEIGHT_FILES if os.path.isfile(os.path.join(path, f))]


def check_checkpoint(path: str, needs: str, holds: str) -> None:
    """model.path must be a directory with a config.json and weights (`needs` names it, `holds` lists its files)."""
    check_dir(path, "model.path", needs)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelError(f"model.path: {path!r} has no config.json; expected a Hugging Face checkpoint "
                         f"directory ({holds})")
    if not weight_files(path):
        raise ModelError(f"model.path: {path!r} has a config.json but no weights; expected one of "
                         f"{', '.join(WEIGHT_FILES)} (or model.config instead of model.path for random init)")


# sizes a model config may set; each must be a positive integer (a zero or negative one fails deep
# inside the model's constructor, or silently builds a model without layers)
_SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "max_position_embeddings", "head_dim", "type_vocab_size")
_SIZE_MAX = 1 << 24
CONFIG_MAX_BYTES = 16 << 20  # a config.json is a few KiB; /dev/zero is not read until memory runs out


def recipe_config_fields(recipe) -> dict | None:
    """The model's config as a dict without torch (the recipe's own fields, or the checkpoint's config.json);
    None where it is not readable here. For the dry run's memory estimate and the fused-kernel checks."""
    spec = recipe.model.config
    if isinstance(spec, dict):
        return spec
    path = spec if isinstance(spec, str) else os.path.join(recipe.model.path or "", "config.json")
    try:  # a regular file of bounded size (model.config=/dev/zero read until memory ran out)
        return json.loads(read_limited(path, CONFIG_MAX_BYTES))
    except (OSError, ValueError):
        return None


def known_config_keys(cls) -> set[str]:
    """Every key the config class reads: its saved fields, their aliases and its constructor's arguments."""
    import inspect

    keys = set(cls().to_dict()) | set(getattr(cls, "attribute_map", {}))
    keys |= {name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "kwargs")}
    return keys


def _non_finite(value, path: str):
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := _non_finite(v, f"{path}.{k}"))), None)
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _non_finite(v, f"{path}[{i}]"))), None)
    return None


def config_problems(spec, cls_name: str | None = None, tp: int | None = None) -> list[str]:
    """model.config checked without building anything: its fields as config_fields checks them, and tp against
    the heads and MLP width it splits. With `cls_name` (the dry run) also its keys against the family's config
    class, which imports transformers (and torch: seconds); the run checks those keys when it builds the model.
    A config.json path that is not on this machine is left to the run (a cluster's path is fine for a dry run)."""
    if isinstance(spec, str) and (kind := not_a_file(spec)):  # a directory given for its config.json
        return [f"model.config: {spec!r} {kind}; allowed: a config.json file (a checkpoint directory is model.path)"]
    if spec is None or (isinstance(spec, str) and not os.path.isfile(spec)):
        return []
    cls = None
    if cls_name is not None:
        from ..compat import prepare_torchvision

        prepare_torchvision(False)  # language models need no torchvision; a broken one breaks transformers' import
        try:
            import transformers

            cls = getattr(transformers, cls_name)
        except Exception:  # transformers missing or broken here: the sizes and divisibility are still checked
            cls = None
    try:
        fields = config_fields(spec, cls)
    except ModelError as exc:
        return [str(exc)]
    if not (isinstance(tp, int) and tp > 1):
        return []
    return [line] if (line := tp_problem(fields, tp)) else []


TP_SPLIT_SIZES = ("num_attention_heads", "num_key_value_heads", "intermediate_size")


def pp_layers_problem(num_layers, num_stages) -> str | None:
    """The line for more pipeline stages (pp x pp_stages_per_rank) than decoder layers to give them, or None:
    one wording for the recipe check (model.config) and the built model (a checkpoint's config too)."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (num_layers, num_stages))
    if not ints or num_layers < 1 or num_layers >= num_stages:
        return None
    return (f"parallel.pp: {num_stages} pipeline stages (pp x pp_stages_per_rank) need at least as many decoder "
            f"layers; the model has {num_layers}; allowed: pp x pp_stages_per_rank <= {num_layers}")


def tp_problem(fields, tp: int) -> str | None:
    """The line for a tp that does not divide what it splits (heads, key/value heads, MLP width), or None:
    one rule, one wording, for the recipe check (a config's fields) and the built model (its config object,
    a checkpoint's too). `fields`: a mapping or an object with those attributes; no key/value heads means as
    many as attention heads."""
    sizes = {key: fields.get(key) if isinstance(fields, dict) else getattr(fields, key, None)
             for key in TP_SPLIT_SIZES}
    if sizes["num_key_value_heads"] is None:
        sizes["num_key_value_heads"] = sizes["num_attention_heads"]
    sizes = {k: v for k, v in sizes.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    bad = [f"{key} ({value})" for key, value in sizes.items() if value % tp]
    if not bad:
        return None
    # one mistake, one line (it was a line per size, each naming parallel.tp)
    common = math.gcd(*sizes.values())
    divisors = [d for d in range(1, common + 1) if common % d == 0]
    return (f"parallel.tp: {tp} does not divide the model's {', '.join(bad)}; allowed: "
            f"{', '.join(map(str, divisors))} (what divides {', '.join(sizes)})")


def config_fields(spec, cls=None) -> dict:
    """model.config as a mapping of config fields: given inline, or read from a config.json path.
    With `cls` (the family's config class) unknown keys are refused: transformers keeps any unknown
    key as an attribute, so a misspelt layer count would silently build the default depth."""
    fields = spec
    where = "model.config"
    if isinstance(spec, str):
        if not os.path.isfile(spec):
            raise ModelError(f"model.config: {spec!r} is not a file (expected a config.json)")
        where = f"model.config ({spec})"
        try:
            fields = json.loads(read_limited(spec, CONFIG_MAX_BYTES))
        except InputFileError as exc:
            raise ModelError(f"model.config: {spec!r} {exc}; allowed: a config.json file") from None
        except ValueError as exc:  # also UnicodeDecodeError
            raise ModelError(f"model.config: {spec!r} is not JSON: {' '.join(str(exc).split())}") from None
        except OSError as exc:
            raise ModelError(f"model.config: cannot read {spec!r}: {exc.strerror or exc}") from None
    if not isinstance(fields, dict):
        raise ModelError(f"{where}: got {type(fields).__name__}; expected a mapping of config fields")
    fields = {k: v for k, v in fields.items() if k not in _IDENTITY_KEYS}
    if not fields:  # transformers would build the family's defaults: a 7B Llama or BERT-base, from random init
        raise ModelError(f"{where}: no fields (an empty mapping builds the family's default model, such as a 7B "
                         "Llama, from random init); allowed: the model's sizes (vocab_size, hidden_size, "
                         "num_hidden_layers, ...), a config.json path, or model.path for a checkpoint")
    bad = _non_finite(fields, "model.config")
    if bad:
        raise ModelError(f"{bad}: NaN or infinity; expected a finite number")
    for key in _SIZE_KEYS:
        if key in fields and fields[key] is not None:
            value = fields[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _SIZE_MAX:
                raise ModelError(f"model.config.{key}: got {value!r}; expected an integer from 1 to {_SIZE_MAX}")
    heads, kv = fields.get("num_attention_heads"), fields.get("num_key_value_heads")
    if isinstance(heads, int) and "hidden_size" in fields and "head_dim" not in fields and fields["hidden_size"] % heads:
        raise ModelError(f"model.config.hidden_size: {fields['hidden_size']} is not divisible by "
                         f"num_attention_heads {heads}")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise ModelError(f"model.config.num_key_value_heads: {kv} does not divide num_attention_heads {heads}")
    if cls is not None:
        known = known_config_keys(cls)
        unknown = sorted(str(k) for k in fields if k not in known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ModelError(f"model.config.{unknown[0]}: unknown key for {cls.__name__}{hint}; allowed: the "
                             f"fields of {cls.__name__}" + (f"; also unknown: {', '.join(unknown[1:])}"
                                                            if unknown[1:] else ""))
    return fields
