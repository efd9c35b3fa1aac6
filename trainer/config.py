"""Recipes: YAML (safe loading only) -> typed config tree, with `key=value` overrides.

Binding collects every problem instead of stopping at the first, so a user fixes a recipe in one pass.
This module imports no torch: `--dry-run` of a 70B recipe must be instant on a laptop.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import yaml

from .engines import deepspeed_config


class RecipeError(Exception):
    """One or more problems in a recipe or its overrides; each is a complete one-line message."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class ModelConfig:
    family: Literal["llama"] = "llama"  # llm_lora only: the decoder family whose TP/PP plan applies
    path: Optional[str] = None  # local Hugging Face checkpoint directory (real use)
    # random init: HF config fields, or a path to a config.json; image_classification: torchvision
    # ResNet constructor arguments (block, layers, width_per_group) for a custom depth/width
    config: Union[dict, str, None] = None
    arch: Optional[str] = None  # image_classification: a torchvision model builder, e.g. resnet50
    tokenizer: Optional[str] = None  # default: the checkpoint's own tokenizer
    dtype: Literal["auto", "bf16", "fp32"] = "auto"  # weights; auto = bf16 on GPU, fp32 on CPU
    attn_implementation: str = "sdpa"
    activation_checkpointing: bool = False


@dataclass
class LoraConfig:
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class DataConfig:
    # A local .jsonl/.json/.parquet path, or a hub name already in the local Hugging Face cache.
    dataset: str = "databricks/databricks-dolly-15k"
    format: Literal["dolly", "pretokenized"] = "dolly"
    eval_dataset: Optional[str] = None  # pretokenized/BERT eval set; without it the validation split
    seq_len: int = 2048
    packing: bool = False
    split: list[float] = field(default_factory=lambda: [0.8, 0.15, 0.05])  # train/validation/test
    split_seed: int = 1234
    max_train_samples: Optional[int] = None
    max_eval_samples: Optional[int] = None
    # bert_pretraining and image_classification: random inputs of the real shapes, for fabric-only
    # comparisons (the step's compute and communication are real; accuracy means nothing)
    synthetic: bool = False
    synthetic_samples: int = 4096  # size of the synthetic training set (its eval set is a quarter)
    max_predictions: int = 76  # bert_pretraining: masked positions per sequence (MLPerf: 76 at seq 512)
    image_size: int = 224  # image_classification: training crop side
    num_classes: int = 1000  # image_classification
    workers: int = 0  # image_classification: decoding threads per rank (0 = in the trainer's thread)


@dataclass
class TrainConfig:
    global_batch_size: int = 128
    micro_batch_size: int = 1
    optimizer: Literal["adamw", "lamb", "lars", "sgd"] = "adamw"  # lamb, lars: trainer/optim.py (MLPerf rules)
    schedule: Literal["cosine", "poly", "linear", "constant"] = "cosine"  # each after linear warm-up
    lr: float = 1e-4
    min_lr: float = 0.0  # where cosine and poly end
    poly_power: float = 2.0  # poly: (1 - progress) ** power (MLPerf ResNet-50 LARS uses 2)
    warmup_steps: int = 0
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # adamw, lamb
    eps: float = 1e-8
    momentum: float = 0.9  # lars, sgd
    lars_eta: float = 0.001  # lars trust coefficient
    label_smoothing: float = 0.0  # image_classification cross-entropy (MLPerf ResNet-50: 0.1)
    grad_clip: Optional[float] = 1.0  # max global grad norm; null disables clipping
    precision: Literal["auto", "bf16", "fp32"] = "auto"  # autocast; auto = bf16 on GPU, fp32 on CPU
    log_every: int = 1
    save_every: int = 0  # optimizer steps between checkpoints; 0 = only at the end
    save_final: bool = True
    save_on_signal: bool = True  # SIGTERM or a lost torchrun agent: checkpoint at the end of the step, then stop
    resume: str = "auto"  # auto (latest in output_dir), never, or a checkpoint directory
    eval_every_samples: Optional[int] = None
    target_eval_loss: Optional[float] = None  # stop once eval loss <= target (MLPerf-style)
    target_eval_accuracy: Optional[float] = None  # stop once eval accuracy >= target (masked-LM or top-1)


@dataclass
class ParallelConfig:
    dp: int = -1  # -1: whatever the world size leaves after tp x pp
    tp: int = 1
    pp: int = 1
    # ddp: DDP (dp only); fsdp: FSDP2 shards every weight over dp; replicate: every dp rank keeps its
    # whole (tp-sharded) model, only trainable gradients are all-reduced over dp - the LoRA layout of
    # NeMo/Megatron, where the frozen base never crosses the dp fabric; deepspeed: DeepSpeed ZeRO
    # (parallel.zero_stage, and the recipe's `deepspeed:` block for the rest of its configuration)
    data_parallel: Literal["ddp", "fsdp", "replicate", "deepspeed"] = "ddp"
    zero_stage: Optional[int] = None  # data_parallel=deepspeed: ZeRO stage 1, 2 or 3
    # pipeline: the per-rank batch is cut into grad-accum micro-batches, which are the pipeline's
    # micro-batches (count = global_batch_size / (micro_batch_size x dp))
    pp_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = "1f1b"
    pp_stages_per_rank: int = 1  # interleaved_1f1b: virtual stages per rank (>= 2)
    # with tp > 1: the residual stream and norms hold a slice of the sequence (activation memory / tp)
    sequence_parallel: bool = False


@dataclass
class DistributedConfig:
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    timeout_s: int = 600


@dataclass
class TelemetryConfig:
    enabled: bool = True
    nccl_debug: bool = True  # NCCL_DEBUG=INFO into logs/, for the transport verdict (user settings win)
    cross_rank_every: int = 1  # steps between cross-rank min/mean/max reductions; 0 = never
    # steps between exact cross-rank medians (every rank's values go to rank 0); null: every cross-rank
    # step up to 16 ranks, every 100 steps above
    cross_rank_median_every: Optional[int] = None
    profile_every: int = 0  # steps between profiled windows for exposed communication; 0 = never
    profile_steps: int = 1
    save_traces: bool = False  # keep the profiled windows' Chrome traces in logs/
    power_sample_interval_s: float = 0.1
    interfaces: Optional[list[str]] = None  # NICs whose counters to read; default: the ones in use
    # outputs written from the run directory at the end: tensorboard, wandb (offline), parquet, trace
    export: list[str] = field(default_factory=list)
    # steps between link probes between hosts, which name the host of a slow link; 0 = never
    link_probe_every: int = 5
    link_probe_bytes: int = 65536  # per probe and host; raise it on fast fabrics (a few MiB at 100 Gbit/s+)


TELEMETRY_EXPORTS = ("tensorboard", "wandb", "parquet", "trace")  # telemetry/exports KINDS


@dataclass
class FabricConfig:
    expect: Literal["any", "roce", "infiniband", "efa", "tcp", "intra-node"] = "any"
    # NCCL only: NVLink/P2P, shared memory and NVLS off before the process group starts, so that every byte
    # crosses the network; the NCCL log is then checked for channels that still went via P2P/SHM
    force_network: bool = False


@dataclass
class DebugConfig:
    """Fault injection: one rank made slow on purpose, to check that the straggler report finds it."""
    delay_rank: Optional[int] = None  # global rank that sleeps delay_s inside each step's compute; null = none
    delay_s: float = 0.0
    delay_from_step: int = 1  # first delayed step (earlier steps run at full speed)


SWEEP_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv", "broadcast", "p2p_matrix")
SWEEP_DEFAULT_OPS = SWEEP_OPS[:-1]  # p2p_matrix is GPU-only and asked for by name
SWEEP_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")


@dataclass
class SweepConfig:
    """An nccl-tests-style collective sweep (workload: collectives)."""
    ops: list[str] = field(default_factory=lambda: list(SWEEP_DEFAULT_OPS))
    min_bytes: Union[int, str] = 8  # sizes accept K/M/G suffixes (powers of 1024), like nccl-tests -b/-e
    max_bytes: Union[int, str] = "64M"
    factor: int = 2  # -f: multiply the size by this each step
    warmup: int = 5  # -w
    iters: int = 20  # -n
    # timed runs of `iters` per size (no nccl-tests flag): the row shows their median, the JSON their spread;
    # on shared or shaped links one timing can be off by 10-15%, the median of a few is stable
    repeats: int = 1
    # which repeat a row shows: the median, or the best (shortest time: what the link sustains when nothing
    # else on the host gets in the way; slower repeats are interference, not the link)
    repeat_stat: Literal["median", "best"] = "median"
    dtype: str = "float32"  # -d
    redop: Literal["sum", "prod", "min", "max", "avg"] = "sum"  # -o
    root: int = 0  # -r, for broadcast
    in_place: Literal["both", "out_of_place", "in_place"] = "both"
    check: bool = True  # -c: verify every result
    time_reduction: Literal["avg", "min", "max", "rank0"] = "avg"  # -a
    latency_table: bool = True  # 4 B all-reduce and 48 B send-receive, as fabric evaluations report
    latency_iters: int = 200
    pairs: bool = True  # send/recv between a pair inside a node and a pair across nodes
    # memory per device checked against the largest size before the sweep starts (bytes, or 80G); null: the
    # CUDA device's own total (CPU runs: host memory / local ranks; a dry run assumes an 80 GB GPU)
    device_memory: Union[int, str, None] = None
    # nccl-tests -I 1: time each iteration on its own (CUDA events between iterations on GPUs, a clock read
    # after each completion on CPU) for p50/p95/p99 and per-rank times in collectives.nccl-tests.json
    per_iter_timing: bool = False
    per_iter_skip: int = 0  # -K: leading iterations left out of the per-iteration statistics
    # hold each size this long (more iterations, untimed) so that the power sampler reads it; 0 = no hold
    min_seconds_per_size: float = 0.0
    # a size's slowest rank is named when its mean iteration time exceeds the fastest rank's by this much
    straggler_pct: float = 10.0


@dataclass
class Recipe:
    name: str = "unnamed"
    workload: Literal["llm_lora", "bert_pretraining", "image_classification", "collectives"] = "llm_lora"
    output_dir: str = "runs/unnamed"
    max_steps: int = 100
    seed: int = 1234
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    fabric: FabricConfig = field(default_factory=FabricConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    # data_parallel=deepspeed: the rest of DeepSpeed's configuration, passed through after checking
    # (trainer/engines/deepspeed_config.py); batch sizes, clipping, precision and stage come from the recipe
    deepspeed: dict = field(default_factory=dict)
    recipe_path: Optional[str] = None  # set by the loader, not by users

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Input paths in a recipe file are relative to that file, so recipes ship with their assets;
# paths given as overrides are relative to the current directory, as on any command line.
RECIPE_RELATIVE_PATHS = ("model.path", "model.tokenizer", "data.dataset", "data.eval_dataset")


# ---------------------------------------------------------------- limits

MAX_RECIPE_BYTES = 1 << 20  # real recipes are a few KiB; checked before parsing
MAX_YAML_DEPTH = 32  # nesting levels
MAX_YAML_NODES = 100_000  # values after expanding aliases: a few small aliases can stand for billions
INT64_MAX = (1 << 63) - 1
SEED_MAX = (1 << 32) - 1  # numpy's legacy seeding and most samplers take 32 bits
TIMEOUT_MAX_S = 7 * 86400  # process-group timeouts become int64 milliseconds and C++ chrono types
# One micro-batch's input elements: beyond 2**31 no device holds even the inputs (and int32 indexing fails).
MICRO_BATCH_ELEMENTS_MAX = 1 << 31
GLOBAL_BATCH_MAX = 1 << 24
SEQ_LEN_MAX = 1 << 20
SWEEP_BYTES_MAX = 1 << 36  # 64 GiB: more than any accelerator's memory per buffer


class _Refused(yaml.YAMLError):
    """A YAML construct a recipe may not use; `line` is 1-based or None."""

    def __init__(self, message: str, line: Optional[int]):
        super().__init__(message)
        self.message, self.line = message, line


class _RecipeLoader(yaml.SafeLoader):
    """Safe loading that refuses duplicate keys (PyYAML lets the last silently win), deep nesting and
    alias expansion beyond MAX_YAML_NODES (an 'alias bomb' parses in microseconds and then explodes in
    whatever walks the tree)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"nested deeper than {MAX_YAML_DEPTH} levels", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _Refused(f"duplicate key {key!r} (first at line {first}); each key may appear once", line)
                seen[key] = line
        return super().construct_mapping(node, deep)


def _expanded_nodes(node, memo: dict) -> int:
    """Values the node stands for once aliases are expanded; shared nodes are counted per use."""
    known = memo.get(id(node))
    if known is not None:
        return known
    count = 1
    if isinstance(node, yaml.SequenceNode):
        count += sum(_expanded_nodes(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        count += sum(_expanded_nodes(k, memo) + _expanded_nodes(v, memo) for k, v in node.value)
    count = min(count, MAX_YAML_NODES + 1)  # keeps the integers small for exponential graphs
    memo[id(node)] = count
    return count


def parse_yaml(text: str) -> Any:
    """YAML text -> Python values with the recipe loader's limits (raises yaml.YAMLError)."""
    loader = _RecipeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > MAX_YAML_NODES:
            raise _Refused(f"expands to more than {MAX_YAML_NODES} values through aliases (&anchor/*alias); "
                           "write the values out", None)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """' at line N: reason' in one line, whatever PyYAML error it is."""
    if isinstance(exc, _Refused):
        line, reason = exc.line, exc.message
    else:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    reason = " ".join(str(reason).split())
    return (f" at line {line}" if line else "") + f": {reason}"


# ---------------------------------------------------------------- binding

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
        return _bind_dataclass(value, tp, path, problems)
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
    elif tp is dict:
        if isinstance(value, dict):
            return value
    problems.append(f"{path}: got {_short(value)} ({type(value).__name__}); expected {_type_name(tp)}")
    return value


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "recipe_path"]


def _bind_dataclass(data: dict, cls: type, prefix: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    names = _field_names(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.append(f"{path}: unknown key; {hint}allowed: {', '.join(names)}")
            continue
        before = len(problems)
        bound = _bind_value(value, hints[key], path, problems)
        if len(problems) == before:  # a bad value is reported once; its default keeps later checks sane
            kwargs[key] = bound
    try:
        return cls(**kwargs)
    except TypeError:  # only reachable after a reported problem
        return cls()


# ---------------------------------------------------------------- loading

def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise RecipeError([f"{text}: an override must look like key.path=value"])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise RecipeError([f"{text}: an override must look like key.path=value"])
    try:
        value = parse_yaml(raw) if raw.strip() else None
    except _Refused as exc:
        raise RecipeError([f"{key}: the override's value is refused: {exc.message}"]) from None
    except (yaml.YAMLError, RecursionError):
        value = raw
    return key.split("."), value


def _apply_override(tree: dict, parts: list[str], value: Any) -> Optional[str]:
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


def _get(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _read_recipe(path: str) -> Any:
    """The parsed YAML of a recipe file, or RecipeError naming the file (and line) and what is allowed."""
    if not os.path.isfile(path):
        raise RecipeError([f"recipe: {path!r} is not a file"])
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECIPE_BYTES + 1)  # bounded even if the size changes under us
    except OSError as exc:
        raise RecipeError([f"recipe: cannot read {path}: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError([f"recipe: {path} is larger than {MAX_RECIPE_BYTES} bytes; allowed: a recipe of at "
                           f"most {MAX_RECIPE_BYTES // 1024} KiB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise RecipeError([f"recipe: {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
                           "allowed: a UTF-8 YAML file"]) from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        raise RecipeError([f"recipe: {path} is not valid YAML{_yaml_problem(exc)}"]) from None
    except RecursionError:
        raise RecipeError([f"recipe: {path} is nested too deeply"]) from None


def load_recipe(path: str, overrides: list[str] = ()) -> Recipe:
    """Read a recipe file, apply overrides, bind and check it (world-size checks come later)."""
    tree = _read_recipe(path)
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise RecipeError([f"recipe: {path} must hold a mapping at the top level, got {type(tree).__name__}"])

    recipe_dir = os.path.dirname(os.path.abspath(path))
    for dotted in RECIPE_RELATIVE_PATHS:
        value = _get(tree, dotted)
        if isinstance(value, str) and not os.path.isabs(value):
            candidate = os.path.join(recipe_dir, value)
            if os.path.exists(candidate):
                parent = _get(tree, dotted.rsplit(".", 1)[0])
                parent[dotted.rsplit(".", 1)[1]] = candidate
    problems: list[str] = []
    for text in overrides:
        parts, value = _parse_override(text)
        problem = _apply_override(tree, parts, value)
        if problem:
            problems.append(problem)
    recipe = _bind_dataclass(tree, Recipe, "", problems)
    problems += check_recipe(recipe)
    if problems:
        raise RecipeError(problems)
    recipe.recipe_path = os.path.abspath(path)
    return recipe


def _at_least(section: str, obj: Any, keys: tuple[str, ...], low: int, note: str = "") -> list[str]:
    """One problem per integer field below `low`, in the shared wording."""
    prefix = f"{section}." if section else ""
    return [f"{prefix}{key}: got {getattr(obj, key)}; expected an integer >= {low}{note}"
            for key in keys if getattr(obj, key) < low]


def _within(section: str, obj: Any, keys: tuple[str, ...], low: int, high: int, note: str = "") -> list[str]:
    """One problem per integer field outside [low, high]."""
    prefix = f"{section}." if section else ""
    return [f"{prefix}{key}: got {getattr(obj, key)}; expected an integer from {low} to {high}{note}"
            for key in keys if not low <= getattr(obj, key) <= high]


def _check_batch_memory(r: Recipe) -> list[str]:
    """Refuse a micro-batch whose inputs alone could never be allocated, before anything is."""
    d, mbs = r.data, r.train.micro_batch_size
    p = []
    if d.seq_len > SEQ_LEN_MAX:
        p.append(f"data.seq_len: got {d.seq_len}; expected an integer <= {SEQ_LEN_MAX}")
    if p or mbs < 1 or d.seq_len < 1:
        return p
    if r.workload == "image_classification":
        per_sample, what = 3 * d.image_size ** 2, f"3 x data.image_size^2 ({d.image_size})"
    else:
        per_sample, what = d.seq_len, f"data.seq_len ({d.seq_len})"
    if mbs * per_sample > MICRO_BATCH_ELEMENTS_MAX:
        p.append(f"train.micro_batch_size: got {mbs}; {mbs} x {what} = {mbs * per_sample} input values per "
                 f"micro-batch cannot fit in memory; allowed: at most {MICRO_BATCH_ELEMENTS_MAX}")
    if d.synthetic and d.synthetic_samples * per_sample > 4 * MICRO_BATCH_ELEMENTS_MAX:
        p.append(f"data.synthetic_samples: got {d.synthetic_samples}; the synthetic set would hold "
                 f"{d.synthetic_samples * per_sample} input values; allowed: at most {4 * MICRO_BATCH_ELEMENTS_MAX}")
    return p


def parse_size(value: Union[int, str], key: str, problems: list[str], limit: int = SWEEP_BYTES_MAX) -> int | None:
    """Bytes from 4096, "4K", "64M", "1G" (powers of 1024, as nccl-tests reads -b/-e)."""
    if isinstance(value, int):
        size = value
    else:
        text = str(value).strip().upper().removesuffix("B")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        try:
            size = int(float(digits) * mult)
        except (ValueError, OverflowError):  # OverflowError: "infG"
            problems.append(f"{key}: got {value!r}; expected bytes such as 8, 4K, 64M or 1G")
            return None
    if size < 1:
        problems.append(f"{key}: got {value!r}; expected at least 1 byte")
        return None
    if size > limit:
        problems.append(f"{key}: got {value!r}; expected at most {limit} bytes ({limit >> 30}G)")
        return None
    return size


def check_sweep(sw: SweepConfig) -> list[str]:
    p: list[str] = []
    bad = [op for op in sw.ops if op not in SWEEP_OPS]
    if bad or not sw.ops:
        p.append(f"sweep.ops: got {sw.ops}; allowed: {', '.join(SWEEP_OPS)}")
    if sw.dtype not in SWEEP_DTYPES:
        p.append(f"sweep.dtype: got {sw.dtype!r}; allowed: {', '.join(SWEEP_DTYPES)}")
    lo, hi = parse_size(sw.min_bytes, "sweep.min_bytes", p), parse_size(sw.max_bytes, "sweep.max_bytes", p)
    if lo and hi and lo > hi:
        p.append(f"sweep.max_bytes: {sw.max_bytes!r} is below sweep.min_bytes {sw.min_bytes!r}")
    p += _at_least("sweep", sw, ("factor",), 2) + _at_least("sweep", sw, ("iters", "latency_iters", "repeats"), 1)
    p += _at_least("sweep", sw, ("warmup",), 0)
    if sw.root < 0:
        p.append(f"sweep.root: got {sw.root}; expected a rank >= 0")
    if sw.device_memory is not None:
        parse_size(sw.device_memory, "sweep.device_memory", p, limit=1 << 40)
    p += _at_least("sweep", sw, ("per_iter_skip",), 0)
    if sw.per_iter_skip and sw.per_iter_skip >= sw.iters:
        p.append(f"sweep.per_iter_skip: got {sw.per_iter_skip}; expected fewer than sweep.iters ({sw.iters})")
    if not 0 <= sw.min_seconds_per_size <= 3600:
        p.append(f"sweep.min_seconds_per_size: got {sw.min_seconds_per_size}; expected seconds in [0, 3600]")
    if sw.straggler_pct <= 0:
        p.append(f"sweep.straggler_pct: got {sw.straggler_pct}; expected a percentage > 0")
    return p


def check_recipe(r: Recipe) -> list[str]:
    """Checks that need no world size. Each problem names the key, the value and what is allowed."""
    p = []
    p += _at_least("", r, ("max_steps",), 1)
    p += _within("", r, ("seed",), 0, SEED_MAX)
    if not r.output_dir.strip():
        p.append("output_dir: empty; allowed: a directory path")
    p += _within("distributed", r.distributed, ("timeout_s",), 1, TIMEOUT_MAX_S, " (7 days)")
    if r.workload == "collectives":
        return p + check_sweep(r.sweep) + _check_telemetry(r)
    if r.workload == "llm_lora":
        p += _check_llm(r)
    elif r.workload == "bert_pretraining":
        p += _check_bert(r)
    elif r.workload == "image_classification":
        p += _check_image(r)
    t = r.train
    p += _at_least("train", t, ("global_batch_size", "micro_batch_size", "log_every"), 1)
    p += _within("train", t, ("global_batch_size",), 1, GLOBAL_BATCH_MAX) + _check_batch_memory(r)
    if t.weight_decay < 0:
        p.append(f"train.weight_decay: got {t.weight_decay}; expected a number >= 0")
    if t.eps <= 0:
        p.append(f"train.eps: got {t.eps}; expected a number > 0")
    if t.target_eval_loss is not None and t.target_eval_loss < 0:
        p.append(f"train.target_eval_loss: got {t.target_eval_loss}; expected a number >= 0 or null")
    if t.lr <= 0:
        p.append(f"train.lr: got {t.lr}; expected a number > 0")
    if not 0 <= t.min_lr <= t.lr:
        p.append(f"train.min_lr: got {t.min_lr}; expected a number in [0, train.lr={t.lr}]")
    p += _at_least("train", t, ("warmup_steps",), 0)
    if len(t.betas) != 2 or any(not 0 <= b < 1 for b in t.betas):
        p.append(f"train.betas: got {t.betas}; expected two numbers in [0, 1)")
    if t.grad_clip is not None and t.grad_clip <= 0:
        p.append(f"train.grad_clip: got {t.grad_clip}; expected a number > 0, or null to disable")
    p += _at_least("train", t, ("save_every",), 0, " (0 = only at the end)")
    if t.eval_every_samples is not None and t.eval_every_samples < 1:
        p.append(f"train.eval_every_samples: got {t.eval_every_samples}; expected an integer >= 1 or null")
    for key in ("target_eval_loss", "target_eval_accuracy"):
        if getattr(t, key) is not None and t.eval_every_samples is None:
            p.append(f"train.{key}: needs train.eval_every_samples to say when to evaluate")
    if t.target_eval_accuracy is not None and not 0.0 < t.target_eval_accuracy <= 1.0:
        p.append(f"train.target_eval_accuracy: got {t.target_eval_accuracy}; expected a fraction in (0, 1]")
    if t.poly_power <= 0:
        p.append(f"train.poly_power: got {t.poly_power}; expected a number > 0")
    if t.schedule == "poly" and t.min_lr >= t.lr:
        p.append(f"train.min_lr: got {t.min_lr}; the poly schedule decays to it, so it must be below train.lr={t.lr}")
    if t.schedule == "poly" and t.warmup_steps == r.max_steps:  # transformers' poly decay divides by the difference
        p.append(f"train.warmup_steps: got {t.warmup_steps} = max_steps; the poly schedule needs a decay phase: "
                 f"allowed: any other value")
    if t.target_eval_accuracy is not None and r.workload == "llm_lora":
        p.append("train.target_eval_accuracy: the llm_lora workload reports no accuracy; use train.target_eval_loss")
    if not 0.0 <= t.momentum < 1.0:
        p.append(f"train.momentum: got {t.momentum}; expected a number in [0, 1)")
    if t.lars_eta <= 0:
        p.append(f"train.lars_eta: got {t.lars_eta}; expected a number > 0")
    d = r.data
    p += _within("data", d, ("split_seed",), 0, SEED_MAX)
    for key in ("max_train_samples", "max_eval_samples"):
        if getattr(d, key) is not None and getattr(d, key) < 1:
            p.append(f"data.{key}: got {getattr(d, key)}; expected an integer >= 1, or null for all rows")
    if (r.workload == "llm_lora" and d.format == "pretokenized" and t.eval_every_samples is not None
            and d.eval_dataset is None):
        p.append("data.eval_dataset: required when train.eval_every_samples is set with data.format=pretokenized")
    par = r.parallel
    p += _at_least("parallel", par, ("tp", "pp"), 1)
    if par.pp_stages_per_rank < 1:
        p.append(f"parallel.pp_stages_per_rank: got {par.pp_stages_per_rank}; expected an integer >= 1")
    elif par.pp_schedule == "interleaved_1f1b" and par.pp_stages_per_rank < 2:
        p.append("parallel.pp_stages_per_rank: interleaved_1f1b needs at least 2 stages per rank; got "
                 f"{par.pp_stages_per_rank} (use 1f1b or gpipe for one stage per rank)")
    elif par.pp_schedule != "interleaved_1f1b" and par.pp_stages_per_rank > 1:
        p.append(f"parallel.pp_stages_per_rank: {par.pp_stages_per_rank} stages per rank need "
                 "parallel.pp_schedule=interleaved_1f1b")
    if r.workload != "llm_lora":
        for key in ("tp", "pp"):
            if getattr(par, key) > 1:
                p.append(f"parallel.{key}: got {getattr(par, key)}; the {r.workload} workload runs data "
                         "parallel only (its models fit one device); allowed: 1")
    if par.sequence_parallel:
        if par.tp == 1:
            p.append("parallel.sequence_parallel: needs parallel.tp > 1 (it splits the sequence over the tp ranks)")
        elif r.data.seq_len % par.tp:
            p.append(f"parallel.sequence_parallel: data.seq_len {r.data.seq_len} is not divisible by tp {par.tp}; "
                     f"allowed: a seq_len that is a multiple of {par.tp}")
        if par.pp > 1:
            p.append("parallel.sequence_parallel: not with parallel.pp > 1 in this build; allowed: false")
        if r.model.attn_implementation not in ("sdpa", "flash_attention_2"):
            p.append(f"parallel.sequence_parallel: needs model.attn_implementation sdpa or flash_attention_2 "
                     f"(causal attention without a materialised mask), got {r.model.attn_implementation!r}")
    if par.dp == 0 or par.dp < -1:
        p.append(f"parallel.dp: got {par.dp}; expected an integer >= 1, or -1 for what the world size leaves")
    return p + deepspeed_config.check(r) + _check_telemetry(r)


def _check_llm(r: Recipe) -> list[str]:
    p = []
    m = r.model
    if (m.path is None) == (m.config is None):
        p.append("model: set exactly one of model.path (a local checkpoint directory) "
                 "or model.config (random init); got " + ("both" if m.path else "neither"))
    if m.config is not None and m.tokenizer is None:
        p.append("model.tokenizer: required with model.config (random init has no tokenizer of its own)")
    p += _at_least("lora", r.lora, ("r",), 1)
    if r.lora.alpha <= 0:
        p.append(f"lora.alpha: got {r.lora.alpha}; expected a number > 0")
    if not 0.0 <= r.lora.dropout < 1.0:
        p.append(f"lora.dropout: got {r.lora.dropout}; expected a number in [0, 1)")
    if not r.lora.target_modules:
        p.append("lora.target_modules: empty; name at least one module, e.g. [q_proj, v_proj]")
    d = r.data
    p += _at_least("data", d, ("seq_len",), 8)
    return p + _check_split(d)


def _check_split(d: DataConfig) -> list[str]:
    if len(d.split) != 3 or any(x < 0 for x in d.split) or abs(sum(d.split) - 1.0) > 1e-6:
        return [f"data.split: got {d.split}; expected three non-negative fractions (train, validation, test) "
                "summing to 1"]
    return []


def _check_synthetic_or_path(r: Recipe, what: str) -> list[str]:
    d = r.data
    if d.synthetic:
        return [] if d.synthetic_samples >= 1 else [
            f"data.synthetic_samples: got {d.synthetic_samples}; expected an integer >= 1"]
    if d.dataset == DataConfig.dataset:  # the Dolly default means nothing to this workload
        return [f"data.dataset: {r.workload} needs {what}, or data.synthetic=true for random inputs "
                "of the real shapes"]
    return []


def _check_bert(r: Recipe) -> list[str]:
    p = []
    m, d = r.model, r.data
    if (m.path is None) == (m.config is None):
        p.append("model: set exactly one of model.path (a local BERT checkpoint directory) "
                 "or model.config (BertConfig fields, random init); got " + ("both" if m.path else "neither"))
    p += _at_least("data", d, ("seq_len",), 8)
    if not 1 <= d.max_predictions <= d.seq_len:
        p.append(f"data.max_predictions: got {d.max_predictions}; expected 1..data.seq_len ({d.seq_len})")
    if not d.synthetic and d.eval_dataset is None:
        p += _check_split(d)  # the held-out eval rows come from data.split
    return p + _check_synthetic_or_path(r, "a local file or directory of tokenized sequences")


def _check_image(r: Recipe) -> list[str]:
    p = []
    m, d, t = r.model, r.data, r.train
    if m.arch is None:
        p.append("model.arch: required for image_classification; allowed: a torchvision model builder "
                 "name such as resnet50 or resnet18")
    if m.config is not None and not isinstance(m.config, dict):
        p.append("model.config: for image_classification a mapping of ResNet arguments "
                 "(block, layers, width_per_group), or null")
    p += _within("data", d, ("image_size",), 32, 8192) + _within("data", d, ("num_classes",), 2, 1 << 20)
    p += _within("data", d, ("workers",), 0, 256)
    if not 0.0 <= t.label_smoothing < 1.0:
        p.append(f"train.label_smoothing: got {t.label_smoothing}; expected a number in [0, 1)")
    return p + _check_synthetic_or_path(r, "an ImageFolder directory (with train/ and val/)")


def _check_telemetry(r: Recipe) -> list[str]:
    p = []
    tel = r.telemetry
    p += _at_least("telemetry", tel, ("cross_rank_every", "profile_every"), 0, " (0 = never)")
    p += _at_least("telemetry", tel, ("profile_steps",), 1)
    p += _at_least("telemetry", tel, ("link_probe_every",), 0, " (0 = never)")
    p += _within("telemetry", tel, ("link_probe_bytes",), 4, 1 << 30)
    if tel.cross_rank_median_every is not None:
        p += _at_least("telemetry", tel, ("cross_rank_median_every",), 0, " (0 = never), or null for the default")
    if tel.power_sample_interval_s <= 0:
        p.append(f"telemetry.power_sample_interval_s: got {tel.power_sample_interval_s}; expected a number > 0")
    unknown = [k for k in tel.export if k not in TELEMETRY_EXPORTS]
    if unknown:
        p.append(f"telemetry.export: got {', '.join(map(str, unknown))}; allowed: {', '.join(TELEMETRY_EXPORTS)}")
    p += _at_least("distributed", r.distributed, ("timeout_s",), 1)
    return p + _check_debug(r.debug)


def _check_debug(dbg: DebugConfig) -> list[str]:
    p = []
    if dbg.delay_rank is not None and dbg.delay_rank < 0:
        p.append(f"debug.delay_rank: got {dbg.delay_rank}; expected a rank >= 0, or null for none")
    if not 0.0 <= dbg.delay_s <= 60.0:
        p.append(f"debug.delay_s: got {dbg.delay_s}; expected seconds in [0, 60]")
    return p + _at_least("debug", dbg, ("delay_from_step",), 1)
