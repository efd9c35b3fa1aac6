"""Recipes: the typed config tree (the schema), `load_recipe` and the checks every recipe shares.

Reading the file safely is trainer/recipe_yaml.py, binding and overrides trainer/binding.py, and each
workload's own checks sit beside it in trainer/workloads/*_checks.py. Binding collects every problem
instead of stopping at the first, so a user fixes a recipe in one pass. No torch: `--dry-run` of a 70B
recipe must be instant on a laptop.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from .binding import apply_override, bind_dataclass, parse_override, spaced_override, value_at
from .checks import at_least, within
from .engines import deepspeed_config
from .sweep.plan import SWEEP_WORKLOAD, SweepConfig, parse_size  # noqa: F401 (parse_size: API)
from .recipe_yaml import RecipeError, read_recipe  # noqa: F401 (RecipeError: part of this module's API)
from telemetry.capture.live_export import settings_problems
from telemetry.settings import EXPORT_KINDS, TelemetrySettings


@dataclass
class ModelConfig:
    family: Literal["llama"] = "llama"  # llm_lora and llm_full only: the decoder family whose TP/PP plan applies
    path: Optional[str] = None  # local Hugging Face checkpoint directory (real use)
    # random init: HF config fields, or a path to a config.json; image_classification: torchvision
    # ResNet constructor arguments (block, layers, width_per_group) for a custom depth/width
    config: Union[dict, str, None] = None
    arch: Optional[str] = None  # image_classification: a torchvision model builder, e.g. resnet50
    tokenizer: Optional[str] = None  # default: the checkpoint's own tokenizer
    # frozen weights; trainable ones are kept fp32 (trainer/optim.keep_fp32_master); auto = bf16 on GPU, fp32 on CPU
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    attn_implementation: str = "sdpa"
    activation_checkpointing: bool = False
    # fused GPU kernels (trainer/kernels.py, docs/kernels.md): liger = liger-kernel's RoPE, RMSNorm, SwiGLU and
    # fused linear cross-entropy (the full-vocabulary logits never exist); none = transformers' eager modules;
    # auto = liger on a CUDA GPU where liger-kernel is installed, none elsewhere
    kernels: Literal["auto", "liger", "none"] = "auto"


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
    eval_dataset: Optional[str] = None  # an eval set of its own (any format); without it the validation split
    seq_len: int = 2048
    packing: bool = False
    # llm_lora, unpacked: pad each micro-batch to its longest sequence (as NeMo's fine-tuning data does)
    # or every sequence to seq_len. Packed rows are seq_len long either way.
    padding: Literal["longest", "max_length"] = "max_length"
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
    # off, or blocks: each decoder block's forward compiled with torch.compile (trainer/compile.py,
    # docs/compile.md); the hooks on a block (FSDP2's all-gather, DDP's buckets) stay outside the graph
    compile: Literal["off", "blocks"] = "off"


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


TelemetryConfig = TelemetrySettings  # the recipe's telemetry: section is the library's settings (telemetry/settings.py)
TELEMETRY_EXPORTS = EXPORT_KINDS


@dataclass
class FabricSetup:
    """What the fabric was, as the user states it (what no host can read); null = not stated. The hosts' own
    readings (PFC/ECN per priority, NIC firmware, port speed, FEC) fill what is null, with their source, and
    are shown beside a stated value that disagrees (telemetry/analysis/fabric_config.py)."""
    topology: Optional[Literal["single-switch", "leaf-spine", "rail-optimized", "fat-tree", "dragonfly",
                               "back-to-back", "other"]] = None
    oversubscription: Optional[str] = None  # "1:1", "2:1" (uplink:downlink)
    routing: Optional[Literal["ecmp", "dynamic-load-balancing", "adaptive-routing", "packet-spraying", "scheduled",
                              "static"]] = None
    pfc_priority: Optional[int] = None  # the lossless priority (0-7)
    ecn: Optional[str] = None  # the switch's ECN marking thresholds, as configured ("kmin 150KB kmax 1500KB p 5%")
    dcqcn: Optional[bool] = None
    switch_model: Optional[str] = None
    switch_os: Optional[str] = None
    nic_firmware: Optional[str] = None


@dataclass
class FabricConfig:
    expect: Literal["any", "roce", "infiniband", "efa", "tcp", "tcpx", "intra-node"] = "any"
    # NCCL only: NVLink/P2P, shared memory and NVLS off before the process group starts, so that every byte
    # crosses the network; the NCCL log is then checked for channels that still went via P2P/SHM
    force_network: bool = False
    config: FabricSetup = field(default_factory=FabricSetup)  # what the fabric was (docs/compare.md)


@dataclass
class DebugConfig:
    """Fault injection: one rank made slow on purpose, to check that the straggler report finds it."""
    delay_rank: Optional[int] = None  # global rank that sleeps delay_s inside each step's compute; null = none
    delay_s: float = 0.0
    delay_from_step: int = 1  # first delayed step (earlier steps run at full speed)


@dataclass
class Recipe:
    name: str = "unnamed"
    workload: Literal["llm_lora", "llm_full", "bert_pretraining", "image_classification", "collectives"] = "llm_lora"
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

    @property
    def job(self) -> str:
        """The kind of job the recipe asks for: "sweep" (workload: collectives, trainer/sweep/) or "train"."""
        return "sweep" if self.workload == SWEEP_WORKLOAD else "train"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# decoder LLM workloads: one model code (Llama via transformers), the only ones with a TP plan and pipeline split
LLM_WORKLOADS = ("llm_lora", "llm_full")


# Input paths in a recipe file are relative to that file, so recipes ship with their assets;
# paths given as overrides are relative to the current directory, as on any command line.
RECIPE_RELATIVE_PATHS = ("model.path", "model.tokenizer", "data.dataset", "data.eval_dataset")


# ---------------------------------------------------------------- limits

SEED_MAX = (1 << 32) - 1  # numpy's legacy seeding and most samplers take 32 bits
TIMEOUT_MAX_S = 7 * 86400  # process-group timeouts become int64 milliseconds and C++ chrono types
# One micro-batch's input elements: beyond 2**31 no device holds even the inputs (and int32 indexing fails).
MICRO_BATCH_ELEMENTS_MAX = 1 << 31
GLOBAL_BATCH_MAX = 1 << 24
SEQ_LEN_MAX = 1 << 20


# ---------------------------------------------------------------- binding


# ---------------------------------------------------------------- loading


def _problem_key(problem: str) -> str:
    """The dotted key a problem line names first ('model.config: got 3 ...' -> 'model.config')."""
    return problem.split(":", 1)[0].split(" ", 1)[0]


def _related(a: str, b: str) -> bool:
    """One key is the other or inside it: model, model.config, model.config.hidden_size."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _mentions(problem: str, key: str) -> bool:
    """A later check's line that names a refused key (train.min_lr against train.lr=...) judged that key's
    default, not what was written: it is noise beside the key's own line."""
    import re

    return re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", problem.split(":", 1)[-1]) is not None


HOME_PATHS = (*RECIPE_RELATIVE_PATHS, "model.config", "train.resume", "output_dir")


def _expand_home(tree: dict) -> None:
    """`~/x` and `~user/x` in a path key (from the recipe or an override) read as the shell reads them: the dry
    run checked the expanded path, the run opened the literal one and said it did not exist."""
    for dotted in HOME_PATHS:
        value = value_at(tree, dotted)
        if isinstance(value, str) and value.startswith("~"):
            parent = value_at(tree, dotted.rsplit(".", 1)[0]) if "." in dotted else tree
            if isinstance(parent, dict):
                parent[dotted.rsplit(".", 1)[-1]] = os.path.expanduser(value)


def load_recipe(path: str, overrides: list[str] = ()) -> Recipe:
    """Read a recipe file, apply overrides, bind and check it (world-size checks come later)."""
    tree = read_recipe(path)
    if tree is None and not overrides:  # else the first complaint would be a default (no model), not the file
        raise RecipeError([f"recipe: {path} is empty (no keys, only comments or nothing); allowed: a YAML mapping "
                           "of recipe keys such as recipes/tiny_llama_lora.yaml"])
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise RecipeError([f"recipe: {path} must hold a mapping at the top level, got {type(tree).__name__}"])

    recipe_dir = os.path.dirname(os.path.abspath(path))
    for dotted in RECIPE_RELATIVE_PATHS:
        value = value_at(tree, dotted)
        if isinstance(value, str) and not os.path.isabs(value):
            candidate = os.path.join(recipe_dir, value)
            if os.path.exists(candidate):
                parent = value_at(tree, dotted.rsplit(".", 1)[0])
                parent[dotted.rsplit(".", 1)[1]] = candidate
    problems: list[str] = []
    if problem := spaced_override(overrides):
        raise RecipeError([problem])
    for text in overrides:
        parts, value = parse_override(text)
        problem = apply_override(tree, parts, value)
        if problem:
            problems.append(problem)
    _expand_home(tree)
    recipe = bind_dataclass(tree, Recipe, "", problems)
    said = {_problem_key(x) for x in problems}  # a key already refused is not judged again from its default
    problems += [x for x in check_recipe(recipe) if not any(_related(_problem_key(x), k) or _mentions(x, k)
                                                            for k in said)]
    said = {_problem_key(x) for x in problems}
    overridden = {text.split("=", 1)[0].strip() for text in overrides}
    unread = [x for x in unread_keys(tree, recipe, overridden) if _problem_key(x) not in said]
    # typed on the command line for this run: refused; carried in a recipe file (a template shared by optimizers or
    # workloads): said once at start (trainer/cli.py), not refused - the file may be right for the next run
    problems += [x for x in unread if _problem_key(x) in overridden]
    if problems:
        raise RecipeError(problems)
    recipe.recipe_path = os.path.abspath(path)
    recipe.ignored_keys = [x for x in unread if _problem_key(x) not in overridden]
    return recipe


# keys one workload or optimizer reads and the others ignore: (key, who reads it, the key that decides, does this
# recipe's run read it)
_READ_BY = (
    ("train.momentum", "train.optimizer lars or sgd", "train.optimizer", lambda r: r.train.optimizer in ("lars", "sgd")),
    ("train.lars_eta", "train.optimizer lars", "train.optimizer", lambda r: r.train.optimizer == "lars"),
    ("train.poly_power", "train.schedule poly", "train.schedule", lambda r: r.train.schedule == "poly"),
    ("train.label_smoothing", "the image_classification workload", "workload",
     lambda r: r.workload == "image_classification"),
    ("data.image_size", "the image_classification workload", "workload", lambda r: r.workload == "image_classification"),
    ("data.num_classes", "the image_classification workload", "workload", lambda r: r.workload == "image_classification"),
)


def unread_keys(tree: dict, r: Recipe, overridden: set[str] = frozenset()) -> list[str]:
    """A key written in the recipe (or an override) that this run never reads: another workload's or another
    optimizer's (train.momentum beside AdamW, data.image_size on an LLM). Said, not ignored: typed as an override
    it is refused (the user meant it to change the run), carried in a recipe file it is a warning. A recipe file's key left unread by an override of what decides (the ResNet recipe's
    lars_eta under train.optimizer=sgd) is not the user's mistake, and whole sections of another workload
    (sweep: on a training recipe) are left alone."""
    out = []
    for dotted, reader, decider, reads in _READ_BY:
        if decider in overridden and dotted not in overridden:
            continue
        if value_at(tree, dotted) is not None and not reads(r):
            now = {"train.optimizer": r.train.optimizer, "train.schedule": r.train.schedule}
            this = next((f"{k} is {v}" for k, v in now.items() if k in reader), f"the workload is {r.workload}")
            out.append(f"{dotted}: set, but only {reader} reads it ({this}), so this run ignores it; allowed: "
                       f"remove it, or {reader}")
    return out


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


def _special_files(r: Recipe) -> list[str]:
    """A recipe path that exists but is a FIFO, a device or a socket: never a checkpoint, tokenizer or data set
    (a run opening a FIFO with no writer waits forever; staging copied it with a traceback)."""
    from telemetry.input_files import not_a_file

    out = []
    for dotted in RECIPE_RELATIVE_PATHS:
        section, name = dotted.split(".")
        value = getattr(getattr(r, section), name, None)
        if isinstance(value, str) and not value.strip():  # an unset $VAR: '' opens nothing (or the working dir)
            out.append(f"{dotted}: got {value!r}; allowed: the path of a file or directory (an unset $VAR gives "
                       "''), or null where the key may be left unset")
            continue
        if isinstance(value, str) and not os.path.isdir(value) and (kind := not_a_file(os.path.expanduser(value))):
            out.append(f"{dotted}: {value!r} {kind}; allowed: a regular file or a directory, as the key names")
    return out


def _check_resume(value) -> list[str]:
    """auto, never, or a path: a bare word that is neither (nor a directory here) is a typo, not a path (a path
    of the cluster's, absent on a laptop's dry run, is judged when the run loads it)."""
    v = str(value)
    if v not in ("auto", "never") and os.path.exists(v) and not os.path.isdir(v):  # a file of the checkpoint's
        return [f"train.resume: {v!r} is a file, not a checkpoint directory; allowed: auto (the latest checkpoint "
                "in output_dir), never, or a checkpoint directory's path"]
    if v in ("auto", "never") or os.sep in v or os.path.isdir(v):
        return []
    hint = f" (did you mean {v.strip().lower()!r}?)" if v.strip().lower() in ("auto", "never") else ""
    return [f"train.resume: got {v!r}{hint}; allowed: auto (the latest checkpoint in output_dir), never, or a "
            "checkpoint directory's path"]


def _output_dir_anywhere(path: str) -> list[str]:
    """What no host could make of output_dir, said by the dry run too (which otherwise leaves the path to the
    host that runs it): a file there already, or a name over the filesystem's limit (NAME_MAX, PATH_MAX)."""
    from telemetry.errors import name_length_problem

    if not path.strip():
        return []
    if os.path.exists(path) and not os.path.isdir(path):
        return [f"output_dir: {path!r} is a file, not a directory; allowed: a new or existing directory"]
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    problem = os.path.isdir(existing) and name_length_problem(path, existing, "output_dir")
    return [problem] if problem else []


def _output_dir_text(path: str) -> list[str]:
    """output_dir names the run in log lines, run.json and the live series' labels: no control character; and
    no `$VAR`, which nothing expands here (the recipe is read by no shell: a literal '$VAR' directory was made)."""
    import re

    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return [f"output_dir: got {path!r}, with a control character (a newline, tab or escape); allowed: a path of "
                "printable characters (it names the run in log lines, run.json and the live series' labels)"]
    if m := re.search(r"\$(\{[^}]*\}|[A-Za-z_]\w*)", path):
        how = (" (an OmegaConf/Hydra interpolation: recipes are plain YAML, no ${...} is resolved)"
               if not re.fullmatch(r"\$\{?[A-Za-z_]\w*\}?", m.group(0)) else "")
        return [f"output_dir: got {path!r}; {m.group(0)} is not expanded{how} (no shell reads a recipe or a quoted "
                "override); allowed: the path written out, or the variable left unquoted on the command line "
                "for the shell to expand"]
    return []


def check_recipe(r: Recipe) -> list[str]:
    """Checks that need no world size. Each problem names the key, the value and what is allowed."""
    p = []
    p += at_least("", r, ("max_steps",), 1)
    p += within("", r, ("seed",), 0, SEED_MAX)
    if not r.output_dir.strip():
        p.append("output_dir: empty; allowed: a directory path")
    p += _output_dir_text(r.output_dir) + _output_dir_anywhere(r.output_dir)
    p += _special_files(r)
    if isinstance(r.name, str) and not r.name.strip():  # it labels the run in run.json, reports and comparisons
        p.append(f"name: got {r.name!r}; allowed: a non-empty name (it labels the run in run.json and reports)")
    p += within("distributed", r.distributed, ("timeout_s",), 1, TIMEOUT_MAX_S, " (7 days)")
    if r.fabric.config.pfc_priority is not None:
        p += within("fabric.config", r.fabric.config, ("pfc_priority",), 0, 7, " (an 802.1p priority)")
    if r.job == "sweep":
        from .sweep.recipe_checks import check_sweep
        return p + check_sweep(r.sweep) + _check_telemetry(r)
    from .workloads import recipe_checks
    p += recipe_checks(r.workload)(r)  # the workload's own checks, beside it in trainer/workloads/
    t = r.train
    p += at_least("train", t, ("global_batch_size", "micro_batch_size", "log_every"), 1)
    if t.global_batch_size >= 1:  # below 1 is said once, above
        p += within("train", t, ("global_batch_size",), 1, GLOBAL_BATCH_MAX)
    p += _check_batch_memory(r)
    p += _check_resume(t.resume)
    if t.weight_decay < 0:
        p.append(f"train.weight_decay: got {t.weight_decay}; expected a number >= 0")
    if t.eps <= 0:
        p.append(f"train.eps: got {t.eps}; expected a number > 0")
    if t.target_eval_loss is not None and t.target_eval_loss < 0:
        p.append(f"train.target_eval_loss: got {t.target_eval_loss}; expected a number >= 0 or null")
    if t.lr <= 0:
        p.append(f"train.lr: got {t.lr}; expected a number > 0")
    if not 0 <= t.min_lr <= t.lr and t.lr > 0:  # a bad lr is its own line; min_lr is judged against a good one
        p.append(f"train.min_lr: got {t.min_lr}; expected a number in [0, train.lr={t.lr}]")
    p += at_least("train", t, ("warmup_steps",), 0)
    if len(t.betas) != 2 or any(not 0 <= b < 1 for b in t.betas):
        p.append(f"train.betas: got {t.betas}; expected two numbers in [0, 1)")
    if t.grad_clip is not None and t.grad_clip <= 0:
        p.append(f"train.grad_clip: got {t.grad_clip}; expected a number > 0, or null to disable")
    p += at_least("train", t, ("save_every",), 0, " (0 = only at the end)")
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
    if t.target_eval_accuracy is not None and r.workload in LLM_WORKLOADS:
        p.append(f"train.target_eval_accuracy: the {r.workload} workload reports no accuracy; "
                 "use train.target_eval_loss")
    if not 0.0 <= t.momentum < 1.0:
        p.append(f"train.momentum: got {t.momentum}; expected a number in [0, 1)")
    if t.lars_eta <= 0:
        p.append(f"train.lars_eta: got {t.lars_eta}; expected a number > 0")
    d = r.data
    p += within("data", d, ("split_seed",), 0, SEED_MAX)
    for key in ("max_train_samples", "max_eval_samples"):
        if getattr(d, key) is not None and getattr(d, key) < 1:
            p.append(f"data.{key}: got {getattr(d, key)}; expected an integer >= 1, or null for all rows")
    if (r.workload in LLM_WORKLOADS and d.format == "pretokenized" and t.eval_every_samples is not None
            and d.eval_dataset is None):
        p.append("data.eval_dataset: required when train.eval_every_samples is set with data.format=pretokenized")
    par = r.parallel
    p += at_least("parallel", par, ("tp", "pp"), 1)
    if par.pp_stages_per_rank < 1:
        p.append(f"parallel.pp_stages_per_rank: got {par.pp_stages_per_rank}; expected an integer >= 1")
    elif par.pp_schedule == "interleaved_1f1b" and par.pp_stages_per_rank < 2:
        p.append("parallel.pp_stages_per_rank: interleaved_1f1b needs at least 2 stages per rank; got "
                 f"{par.pp_stages_per_rank} (use 1f1b or gpipe for one stage per rank)")
    elif par.pp_schedule != "interleaved_1f1b" and par.pp_stages_per_rank > 1:
        p.append(f"parallel.pp_stages_per_rank: {par.pp_stages_per_rank} stages per rank need "
                 "parallel.pp_schedule=interleaved_1f1b")
    if r.workload not in LLM_WORKLOADS:
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
    p += _check_kernels_and_compile(r)
    if par.dp == 0 or par.dp < -1:
        p.append(f"parallel.dp: got {par.dp}; expected an integer >= 1, or -1 for what the world size leaves")
    return p + deepspeed_config.check(r) + _check_telemetry(r)


def _check_kernels_and_compile(r: Recipe) -> list[str]:
    """What the recipe alone decides; the hardware (CUDA, Triton, liger-kernel) is checked at start on the
    machine that runs it, so a dry run on a laptop accepts a cluster recipe (trainer/kernels.py)."""
    p = []
    if r.model.kernels == "liger" and r.workload not in LLM_WORKLOADS:
        p.append(f"model.kernels: liger has kernels for the Llama family (workloads {', '.join(LLM_WORKLOADS)}); "
                 f"the {r.workload} workload has none in this build; allowed: none or auto")
    if r.train.compile == "blocks":
        if r.workload not in LLM_WORKLOADS:
            p.append(f"train.compile: blocks compiles the decoder blocks of {' and '.join(LLM_WORKLOADS)}; the "
                     f"{r.workload} workload has none in this build; allowed: off")
        if r.parallel.tp > 1:
            p.append(f"train.compile: blocks is not combined with parallel.tp {r.parallel.tp} in this build: the "
                     "tensor-parallel collectives run inside each block and would leave the telemetry's view once "
                     "compiled; allowed with tp > 1: off")
        if r.parallel.data_parallel == "deepspeed":
            p.append("train.compile: blocks is not combined with parallel.data_parallel deepspeed: ZeRO fetches "
                     "parameters in hooks inside each block; allowed: off")
    return p


def _check_telemetry(r: Recipe) -> list[str]:
    p = []
    tel = r.telemetry
    p += at_least("telemetry", tel, ("cross_rank_every", "profile_every"), 0, " (0 = never)")
    p += at_least("telemetry", tel, ("profile_steps",), 1)
    p += at_least("telemetry", tel, ("link_probe_every",), 0, " (0 = never)")
    p += within("telemetry", tel, ("link_probe_bytes",), 4, 1 << 30)
    if tel.cross_rank_median_every is not None:
        p += at_least("telemetry", tel, ("cross_rank_median_every",), 0, " (0 = never), or null for the default")
    if tel.power_sample_interval_s <= 0:
        p.append(f"telemetry.power_sample_interval_s: got {tel.power_sample_interval_s}; expected a number > 0")
    if not 0 < tel.counter_sample_interval_s <= 60:
        p.append(f"telemetry.counter_sample_interval_s: got {tel.counter_sample_interval_s}; expected seconds > 0, "
                 "up to 60")
    if tel.bmc_sample_interval_s <= 0:
        p.append(f"telemetry.bmc_sample_interval_s: got {tel.bmc_sample_interval_s}; expected a number > 0 (seconds)")
    bmcs = tel.bmc.items() if isinstance(tel.bmc, dict) else [(None, tel.bmc)] if tel.bmc is not None else []
    for host, spec in bmcs:
        key = "telemetry.bmc" + (f".{host}" if host is not None else "")
        if not isinstance(spec, str) or (spec != "ipmitool" and not spec.startswith(("http://", "https://"))):
            p.append(f"{key}: got {spec!r}; allowed: ipmitool, an http:// or https:// Redfish address (with {{host}} "
                     "for each host's own), a map of host names to addresses, or null")
        elif "@" in spec.split("://", 1)[-1].split("/", 1)[0]:
            p.append(f"{key}: credentials in the address would be recorded; set FABRIC_HARNESS_BMC_USER and "
                     "FABRIC_HARNESS_BMC_PASSWORD instead")
    if tel.switch_metrics_url is not None and not str(tel.switch_metrics_url).startswith(("http://", "https://")):
        p.append(f"telemetry.switch_metrics_url: got {tel.switch_metrics_url!r}; expected an http:// or https:// "
                 "Prometheus metrics address, or null")
    elif tel.switch_metrics_url is not None and "@" in str(tel.switch_metrics_url).split("://", 1)[-1].split("/")[0]:
        p.append("telemetry.switch_metrics_url: credentials in the address would be recorded; allowed: an address "
                 "without user:password@ (an exporter behind a proxy that adds them)")
    if isinstance(tel.sysfs, str) and not tel.sysfs.strip():
        p.append(f"telemetry.sysfs: got {tel.sysfs!r}; allowed: the directory this host's /sys is mounted at "
                 "(default /sys)")
    if not isinstance(tel.hold_reports_s, (int, float)) or isinstance(tel.hold_reports_s, bool) \
            or not 0 <= tel.hold_reports_s <= 60:
        p.append(f"telemetry.hold_reports_s: got {tel.hold_reports_s!r}; expected seconds from 0 to 60 (0 = never hold)")
    unknown = [k for k in tel.export if k not in TELEMETRY_EXPORTS]
    if unknown:
        p.append(f"telemetry.export: got {', '.join(map(str, unknown))}; allowed: {', '.join(TELEMETRY_EXPORTS)}")
    p += settings_problems(tel)  # the live exporter's settings (telemetry/capture/live_export.py)
    return p + _check_debug(r.debug)


def _check_debug(dbg: DebugConfig) -> list[str]:
    p = []
    if dbg.delay_rank is not None and dbg.delay_rank < 0:
        p.append(f"debug.delay_rank: got {dbg.delay_rank}; expected a rank >= 0, or null for none")
    if not 0.0 <= dbg.delay_s <= 60.0:
        p.append(f"debug.delay_s: got {dbg.delay_s}; expected seconds in [0, 60]")
    return p + at_least("debug", dbg, ("delay_from_step",), 1)
