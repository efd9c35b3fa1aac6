"""Binding a recipe tree to the typed dataclasses of trainer/config.py, and `key=value` overrides.
Every problem is collected (with did-you-mean for unknown keys), so a user fixes a recipe in one pass."""
from __future__ import annotations

import contextvars
import dataclasses
import datetime
import difflib
import math
import types
import typing
from typing import Any, Literal, Optional, Union

import yaml

from .recipe_yaml import RecipeError, Refused, parse_yaml

INT64_MAX = (1 << 63) - 1


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if tp is dict:
        return "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        (inner,) = typing.get_args(tp)
        return f"a list of {_type_name(inner).removeprefix('an ').removeprefix('a ')}s"
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    return getattr(tp, "__name__", str(tp))


def _bind_value(value: Any, tp: Any, path: str, problems: list[str]) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{path}: got {_short(value)}; expected a mapping of {', '.join(_field_names(tp))}")
            return tp()
        return bind_dataclass(value, tp, path, problems)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        real = [a for a in args if a is not type(None)]
        if len(real) == 1 and (isinstance(value, (int, float)) or real[0] is not float):
            # Optional[X]: X's own message (a NaN is named as such, not as "expected a number or null")
            before = len(problems)
            bound = _bind_value(value, real[0], path, problems)
            if len(problems) > before and type(None) in args:
                problems[-1] += " (or null)"
            return bound
        for arg in real:
            trial: list[str] = []
            bound = _bind_value(value, arg, path, trial)
            if not trial:
                return bound
            if len(trial) == 1 and "finite number" in trial[0]:
                problems.extend(trial)
                return value
    elif origin is Literal:
        if value in typing.get_args(tp) and type(value) in {type(a) for a in typing.get_args(tp)}:
            return value
        words = [str(a) for a in typing.get_args(tp)]  # a near-miss spelling (cosin, BF16) is named, like a key
        close = difflib.get_close_matches(str(value).strip().lower(), words, n=1, cutoff=0.6)
        if isinstance(value, str) and close:
            problems.append(f"{path}: got {_short(value)}; did you mean '{close[0]}'? allowed: {', '.join(words)}")
            return value
    elif origin is list:
        (inner,) = typing.get_args(tp)
        if isinstance(value, list):
            before = len(problems)
            items = [_bind_value(v, inner, f"{path}[{i}]", problems) for i, v in enumerate(value)]
            if len(problems) == before:
                return items
            return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > INT64_MAX:
                problems.append(f"{path}: got {_short(value)}; out of range (allowed: a 64-bit integer)")
            return value
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        # YAML 1.1 reads "1e-4" (no dot) as a string; accept what is plainly a number.
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            try:
                number = float(number)
            except OverflowError:  # an integer literal beyond float range
                number = math.inf
            if not math.isfinite(number):
                problems.append(f"{path}: got {_short(value)}; expected a finite number (NaN and infinity are refused)")
            return number
    elif tp is str:
        if isinstance(value, str):
            if "\x00" in value:
                problems.append(f"{path}: got a string with a NUL character; allowed: text without NUL")
            return value
        if isinstance(value, (int, float, datetime.date)) and not isinstance(value, bool):  # YAML read a bare date
            text = value.isoformat() if isinstance(value, datetime.date) else str(value)  # or number as one
            problems.append(f"{path}: got {_short(value)} ({type(value).__name__}); expected a string; YAML reads "
                            f"an unquoted {type(value).__name__} as one: quote it to keep the text ('{text}')")
            return value
    elif tp is dict:
        if isinstance(value, dict):
            return value
    problems.append(f"{path}: got {_short(value)} ({type(value).__name__}); expected {_type_name(tp)}"
                    f"{_text_hint(value, path)}")
    return value


def _text_hint(value: Any, path: str) -> str:
    """Why text where a number goes was not read as one, for what a Hydra/NeMo/torchtitan user writes: an
    interpolation, a percentage, a unit, an expression."""
    import re

    if not isinstance(value, str):
        return ""
    if "${" in value:
        return " (no ${...} interpolation is resolved: recipes are plain YAML; write the value itself)"
    if re.fullmatch(r"\s*[-+]?[0-9.]+\s*%\s*", value):
        return " (a percentage is not read: write the number itself)"
    if re.fullmatch(r"\s*[-+]?[0-9.]+(e[-+]?[0-9]+)?\s*[A-Za-z]+\s*", value):
        unit = " in seconds" if path.endswith("_s") else ""
        return f" (units are not read: write the number alone{unit})"
    if re.fullmatch(r"[0-9.\s*+/()-]+", value) and re.search(r"[*+/]", value):
        return " (an expression is not evaluated: write its value)"
    return ""


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "recipe_path"]


def _odd_letters(key: str) -> str:
    """A key's characters outside printable ASCII, named: a look-alike letter (Cyrillic е for e) or one that shows
    as nothing (a zero-width space) makes a key that reads as a known one unknown."""
    import unicodedata

    odd = [c for c in dict.fromkeys(key) if not (c.isascii() and c.isprintable())]
    if not odd:
        return ""
    return " (it holds " + ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in odd[:4]) + \
        ": not the ASCII letters it may look like)"


def _section_type(tp: Any) -> type | None:
    """The dataclass a field holds (Optional[X] too), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return inner[0] if len(inner) == 1 else None
    return None


def key_paths(cls: type, key: str, prefix: str = "") -> list[str]:
    """Where in the tree of `cls` a key named `key` is allowed: ['max_steps'] or ['data.seq_len']."""
    found, hints = [], typing.get_type_hints(cls)
    for name in _field_names(cls):
        tp = hints[name]
        path = f"{prefix}.{name}" if prefix else name
        if name == key:
            found.append(path)
        if (section := _section_type(tp)) is not None:
            found += key_paths(section, key, path)
    return found


_ROOT: contextvars.ContextVar[type | None] = contextvars.ContextVar("binding_root", default=None)
# Keys as torchtitan, NeMo/Megatron, PEFT or Hugging Face name them, and the recipe's name for each (suggested
# where the name is one of the section's: difflib finds 'data_parallel' for 'tensor_parallel', not 'tp')
SYNONYMS = {
    "learning_rate": "lr", "lr_min": "min_lr", "min_learning_rate": "min_lr", "tensor_parallel": "tp",
    "tensor_parallel_size": "tp", "tensor_model_parallel_size": "tp", "tensor_parallel_degree": "tp", "tp_size": "tp",
    "pipeline_parallel": "pp", "pipeline_parallel_size": "pp", "pipeline_model_parallel_size": "pp",
    "pipeline_parallel_degree": "pp", "pp_size": "pp", "data_parallel_size": "dp", "data_parallel_shard_degree": "dp",
    "dp_size": "dp", "lora_alpha": "alpha", "lora_dropout": "dropout", "lora_r": "r", "rank": "r",
    "seq_length": "seq_len", "max_seq_len": "seq_len", "max_seq_length": "seq_len", "encoder_seq_length": "seq_len",
    "batch_size": "global_batch_size", "global_batch": "global_batch_size", "local_batch_size": "micro_batch_size",
    "micro_batch": "micro_batch_size", "gradient_clipping": "grad_clip", "max_norm": "grad_clip",
    "clip_grad": "grad_clip", "warmup": "warmup_steps", "lr_warmup_steps": "warmup_steps",
    "lr_scheduler": "schedule", "scheduler": "schedule", "optim": "optimizer", "steps": "max_steps",
    "train_steps": "max_steps", "training_steps": "max_steps", "random_seed": "seed", "dump_folder": "output_dir",
    "save_dir": "output_dir", "output_path": "output_dir",
}


def _unknown_key(key: Any, path: str, names: list[str], value: Any = None) -> str:
    """One line for a key the section does not have, with the best guess at what was meant."""
    if not isinstance(key, str):  # YAML 1.1 read an unquoted on/off/yes/no as a boolean, ~ as null, 1 as a number
        why = ("YAML 1.1 reads an unquoted on, off, yes, no, y or n as a boolean: quote a key meant as text, 'on':"
               if isinstance(key, bool) else "YAML reads an unquoted ~ or null as null: quote a key meant as text"
               if key is None else "YAML reads it as a number, not a name")
        return f"{path}: unknown key ({why}); allowed: {', '.join(names)}"
    wanted = SYNONYMS.get(key.strip().lower(), SYNONYMS.get(key.strip().lower().replace("-", "_")))
    folded = [n for n in names if n.lower() == key.strip().lower().replace("-", "_")]
    if folded:
        hint = f"did you mean '{folded[0]}'? (keys are lower case) "
    elif wanted in names:
        hint = f"did you mean '{wanted}'? ({key} is another tool's name for it) "
    elif elsewhere := _elsewhere(wanted or key, path, value):  # train.max_steps, train.seq_len: named where it belongs
        hint = elsewhere
    else:
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{path}: unknown key{_odd_letters(key)}; {hint}allowed: {', '.join(names)}"


def bind_dataclass(data: dict, cls: type, prefix: str, problems: list[str]) -> Any:
    if not prefix:  # the whole tree: an unknown key that belongs elsewhere in it is named there
        token = _ROOT.set(cls)
        try:
            return _bind_fields(data, cls, prefix, problems)
        finally:
            _ROOT.reset(token)
    return _bind_fields(data, cls, prefix, problems)


def _accepts(root: type, place: str, value: Any) -> bool:
    """Whether the field at `place` (a dotted path in `root`'s tree) takes `value` as written."""
    cls, *parents, name = [root, *place.split(".")]
    for part in parents:
        cls = _section_type(typing.get_type_hints(cls)[part])
    probe: list[str] = []
    _bind_value(value, typing.get_type_hints(cls)[name], place, probe)
    return not probe


def _elsewhere(key: str, path: str, value: Any) -> str:
    """'max_steps is a top-level key (write max_steps); ' for train.max_steps, or '' when the key is nowhere else
    that takes the value written (train.data=1 is no `data` section)."""
    root = _ROOT.get()
    places = [p for p in key_paths(root, key) if p != path and _accepts(root, p, value)] \
        if root is not None and isinstance(key, str) else []
    if not places:
        return ""
    where = ["a top-level key" if "." not in p else f"a key of {p.rsplit('.', 1)[0]}" for p in places[:3]]
    return f"'{key}' is {' and '.join(where)} (write {' or '.join(places[:3])}); "


def _bind_fields(data: dict, cls: type, prefix: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    names = _field_names(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            problems.append(_unknown_key(key, path, names, value))
            continue
        before = len(problems)
        bound = _bind_value(value, hints[key], path, problems)
        allowed = getattr(cls, "ALLOWED", {}).get(key)  # the field's own words over its type's
        if allowed and len(problems) == before + 1 and "; expected " in problems[-1]:
            problems[-1] = problems[-1].split("; expected ", 1)[0] + f"; allowed: {allowed}"
        # a bad value is reported once; its default keeps later checks sane. A section (a nested dataclass)
        # keeps its good keys: its defaults in their place would be judged by later checks as if written
        if len(problems) == before or (dataclasses.is_dataclass(bound) and not isinstance(bound, type)):
            kwargs[key] = bound
    try:
        return cls(**kwargs)
    except TypeError:  # only reachable after a reported problem
        return cls()


def spaced_override(overrides: list[str]) -> str | None:
    """The line for `key = value` or `key= value` typed with spaces (the shell makes two or three words of it):
    each word alone was refused as 'must look like key.path=value', the first of them without the fix."""
    words = list(overrides)
    for i, word in enumerate(words[:-1]):
        nxt = words[i + 1]
        if "=" not in word and nxt.startswith("="):
            value = nxt[1:] or (words[i + 2] if i + 2 < len(words) and "=" not in words[i + 2] else "")
        elif word.endswith("=") and word.count("=") == 1 and "=" not in nxt and not nxt.startswith("-"):
            value = nxt
        else:
            continue
        key = word.rstrip("=").strip()
        return (f"{key}: an override is one word, key.path=value, without spaces around '=' (the shell split "
                f"it); allowed: {key}={value}")
    return None


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise RecipeError([f"{text}: an override must look like key.path=value"])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise RecipeError([f"{text}: an override must look like key.path=value"])
    parts = key.split(".")
    if index := next((i for i, part in enumerate(parts) if part.lstrip("-").isdigit()), None):
        whole = ".".join(parts[:index])  # train.betas.0=0.8: Hydra/OmegaConf's item of a list
        raise RecipeError([f"{key}: '{parts[index]}' reads as a list index, and an override sets a list whole; "
                           f"allowed: {whole}=[A,B,...] with every item"])
    try:
        value = parse_yaml(raw) if raw.strip() else None
    except Refused as exc:
        raise RecipeError([f"{key}: the override's value is refused: {exc.message}"]) from None
    except (yaml.YAMLError, RecursionError):
        value = raw
    return key.split("."), value


def repeated_overrides(overrides) -> list[str]:
    """One line per key given more than once with different values: the last is used (as a shell script that
    appends to a command expects), but a typo'd value may be the one that was meant."""
    seen: dict[str, list[str]] = {}
    for text in overrides:
        if "=" in text:
            key, raw = text.split("=", 1)
            seen.setdefault(key.strip(), []).append(raw)
    return [f"{key} given {len(values)} times on the command line ({', then '.join(map(repr, values))}); "
            f"the last, {values[-1]!r}, is used" for key, values in seen.items() if len(set(values)) > 1]


def apply_override(tree: dict, parts: list[str], value: Any) -> Optional[str]:
    existing = tree.get(parts[0]) if len(parts) == 1 else None
    if isinstance(existing, dict) and isinstance(value, dict) and (dropped := [k for k in existing if k not in value]):
        # train={lr: 0.1} replaced the whole section: global_batch_size and the rest fell back to their defaults
        some = ", ".join(map(str, dropped[:5])) + (", ..." if len(dropped) > 5 else "")
        first = next(iter(value), "KEY")
        return (f"{parts[0]}: the override replaces the whole section, dropping the recipe's {some} (they would "
                f"fall back to defaults); allowed: {parts[0]}.{first}=VALUE, one override per key to change")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            return f"{'.'.join(parts[:i + 1])}: is {child!r}, not a mapping; cannot set {'.'.join(parts)}"
        node = child
    node[parts[-1]] = value
    return None


def value_at(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node
