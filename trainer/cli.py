"""`python -m trainer RECIPE [key=value ...] [--dry-run [--world-size N]]`: parse, check, run."""
from __future__ import annotations

import argparse
import os
import sys

import yaml

from .binding import repeated_overrides
from .config import RECIPE_RELATIVE_PATHS, RecipeError, load_recipe
from .binding import value_at
from .error_report import report
from telemetry.errors import OneLineParser, dangling_link_problem, print_errors
from .launcher_env import env_world_size, launcher_env_problems
from .layout import resolve_layout


# the config class each workload builds its model.config into (the dry run checks the keys against it)
CONFIG_CLASSES = {"llm_lora": "LlamaConfig", "llm_full": "LlamaConfig", "bert_pretraining": "BertConfig"}


class _Parser(OneLineParser):  # its own error line; no abbreviated options (OneLineParser)
    def error(self, message):  # one `error:` line (argparse adds the usage block), one rank only
        sys.exit(_fail([f"{self.explained(message)}; see python -m trainer --help"]))


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m trainer",
        description="Run a training recipe (alone, or under torchrun for several ranks).",
        epilog="example: torchrun --standalone --nproc-per-node 2 -m trainer recipes/tiny_llama_lora.yaml "
               "max_steps=10 output_dir=runs/demo")
    p.add_argument("recipe", help="path to a recipe YAML file")
    p.add_argument("overrides", nargs="*", default=[], help="dotted key=value overrides, e.g. train.lr=2e-4 parallel.dp=2")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved recipe and the layout, load no data or model")
    p.add_argument("--world-size", type=int, default=None,
                   help="with --dry-run: the world size to check the layout against "
                        "(default: torchrun's WORLD_SIZE, else dp x tp x pp with dp=-1 counted as 1)")
    return p


def _absent_paths(recipe) -> list[tuple[str, str]]:
    """(key, value) of each local path the recipe names that is not on this machine. A dry run names them as
    warnings (a recipe for a cluster is still accepted: its paths may exist only there); a real run refuses
    each at start, before any step, with one line recorded in run.json (tests/trainer/test_training.py)."""
    tree, out = recipe.to_dict(), []
    unread = recipe.job == "sweep" or recipe.data.synthetic  # the data keys are not read by such a run
    for dotted in (*RECIPE_RELATIVE_PATHS, "model.config", "train.resume", "telemetry.sysfs"):
        if unread and dotted.startswith("data."):
            continue
        value = value_at(tree, dotted)
        if not isinstance(value, str) or value in ("auto", "never") or os.path.exists(os.path.expanduser(value)):
            continue
        # a hub name (org/name) is looked up in the local cache at start; only what is surely a path is named
        pathlike = (os.path.isabs(value) or value.startswith((".", "~")) or value.count("/") > 1
                    or value.endswith((".jsonl", ".json", ".parquet", ".csv", ".txt", ".arrow")))
        if pathlike:
            out.append((dotted, value))
    return out


def _fail(problems: list[str]) -> int:
    # Under torchrun every rank finds the same problem; the first to get here says it (trainer/error_report.py)
    report(*problems)
    return 2


def other_recipes_run(path: str, recipe) -> str | None:
    """The line for an output_dir that holds another recipe's run (run.json names another recipe or workload):
    this run would set that record aside and resume from, or mix its metrics with, another model's."""
    import json

    from telemetry.redaction import REDACTED, redact_text
    from telemetry.rundir import RUN_JSON
    try:
        with open(os.path.join(path, RUN_JSON), encoding="utf-8") as f:
            earlier = json.load(f).get("recipe")
    except (OSError, ValueError, AttributeError):  # none, or damaged: the run sets a damaged one aside
        return None
    if not isinstance(earlier, dict):
        return None
    theirs = (earlier.get("name"), earlier.get("workload"))
    # run.json holds the recipe redacted (redact_tree): a name shaped like a credential is recorded redacted
    ours = {(recipe.name, recipe.workload), (redact_text(str(recipe.name)), recipe.workload)}
    if theirs in ours or theirs == (None, None):
        return None
    if theirs == (REDACTED, recipe.workload):  # a name redacted by an earlier, wider rule: unknown, not another
        return None
    return (f"output_dir: {path!r} holds a run of another recipe ({theirs[0]!r}, workload {theirs[1]}; this one is "
            f"{recipe.name!r}, workload {recipe.workload}); allowed: a new directory, or this recipe's own to "
            "resume or rerun it")


def record_kind_problem(path: str) -> str | None:
    """The line for an output_dir whose record files or folders are of another kind than a run writes (run.json
    a directory, metrics.jsonl or run.lock a FIFO, logs/ a file): each would block or fail the run's first write."""
    from telemetry.input_files import not_a_file, what_is_there
    from telemetry.rundir import CHECKPOINTS, LOGS, METRICS, RANKS, RUN_JSON

    from .runlock import LOCK

    for name in (RUN_JSON, METRICS, LOCK):
        if why := not_a_file(os.path.join(path, name)):
            return (f"output_dir: {os.path.join(path, name)!r} {why}; allowed: {name} as a run writes it (a regular "
                    "file: move this one away), or another output_dir")
    for name in (LOGS, CHECKPOINTS, RANKS):
        inner = os.path.join(path, name)
        if os.path.lexists(inner) and not os.path.isdir(inner):
            return (f"output_dir: {inner!r} is {what_is_there(inner)}, not a directory; allowed: the {name}/ folder a "
                    "run writes there (move this away), or another output_dir")
    return None


def _check_output_dir(path: str, recipe) -> list[str]:
    """output_dir must be a directory this process can create and write, before any rank starts a run."""
    if os.path.exists(path) and not os.path.isdir(path):
        return [f"output_dir: {path!r} is a file, not a directory; allowed: a new or existing directory"]
    if problem := record_kind_problem(path):
        return [problem]
    if problem := other_recipes_run(path, recipe):
        return [problem]
    if problem := dangling_link_problem(path, "output_dir"):
        return [problem]
    probe = os.path.join(path, f".write-test.{os.getpid()}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        return [f"output_dir: cannot write to {path!r}: {exc.strerror or exc}; allowed: a writable directory"]
    return []


def _world_size(args, recipe) -> int:
    if args.world_size is not None:
        return args.world_size
    if "WORLD_SIZE" in os.environ or not args.dry_run:  # a real run is as wide as torchrun made it
        return env_world_size()
    par = recipe.parallel  # dry run: the smallest world the recipe's degrees fit
    return (par.dp if par.dp > 0 else 1) * par.tp * par.pp


def _flag_problems(args) -> list[str]:
    if args.world_size is not None and not args.dry_run:
        return ["--world-size: only with --dry-run; a real run takes its world size from torchrun"]
    if args.world_size is not None and args.world_size < 1:  # the flag, not the layout, is what is wrong
        return [f"--world-size: got {args.world_size}; expected an integer >= 1 (the number of ranks)"]
    return []


def recipe_problems(argv: list[str]) -> list[str]:
    """The problems `python -m trainer ARGV` would find in its arguments and recipe before anything else, for a
    launcher to ask before it starts any worker (each worker would say them, behind the launcher's failure box).
    A bad flag or a missing recipe argument is its own line and exit 2, as the trainer says it."""
    args = _parser().parse_intermixed_args(list(argv))
    if problems := _flag_problems(args):
        return problems
    try:
        load_recipe(args.recipe, args.overrides)
    except RecipeError as exc:
        return exc.problems
    return []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_intermixed_args(argv)
    if problems := _flag_problems(args):
        return _fail(problems)
    # every process says it: who is rank 0 is what is in doubt
    if problems := launcher_env_problems(dry_run=args.dry_run):
        return print_errors(*problems)
    try:
        recipe = load_recipe(args.recipe, args.overrides)
    except RecipeError as exc:
        return _fail(exc.problems)
    if os.environ.get("RANK", "0") == "0":  # said once, by rank 0
        for line in repeated_overrides(args.overrides) + getattr(recipe, "ignored_keys", []):
            print(f"warning: {line}", file=sys.stderr)
    world = _world_size(args, recipe)
    layout, problems = resolve_layout(recipe, world)
    if problems:
        return _fail(problems)
    line = None
    if args.dry_run and recipe.model.path is None and recipe.workload in CONFIG_CLASSES:
        from .workloads.hf import config_problems  # the model.config keys as the run will check them

        problems = config_problems(recipe.model.config, CONFIG_CLASSES[recipe.workload])
        if problems:
            return _fail(problems)
    if args.dry_run and recipe.job == "sweep":
        from .sweep.plan import dry_run_memory

        line, problem = dry_run_memory(recipe.sweep, world)
        if problem:
            return _fail([problem])
    if args.dry_run:
        resolved = recipe.to_dict()
        resolved.pop("recipe_path")
        print(f"# recipe {recipe.recipe_path}" + (f" with {' '.join(args.overrides)}" if args.overrides else ""))
        print(yaml.safe_dump(resolved, sort_keys=False).rstrip())
        print("# layout")
        print(yaml.safe_dump({"layout": layout.to_dict()}, sort_keys=False).rstrip())
        if layout.data_parallel == "deepspeed" and layout.global_batch_size:
            from .engines.deepspeed_config import build

            bf16 = recipe.train.precision in ("bf16", "auto")  # auto: bf16 on GPUs, fp32 on CPU
            note = " (train.precision auto: as on a GPU)" if recipe.train.precision == "auto" else ""
            print(f"# the DeepSpeed configuration deepspeed.initialize gets{note}")
            print(yaml.safe_dump({"deepspeed_config": build(recipe, layout, bf16)}, sort_keys=False).rstrip())
        if line is not None:
            print(line)
        from .memory_plan import plan  # no torch: a laptop checks the cluster's recipe
        memory = plan(recipe, layout)
        if memory is not None:
            if recipe.model.kernels == "auto":
                print("# model.kernels auto: liger where the run finds a CUDA GPU and liger-kernel, as planned "
                      "below; eager otherwise")
            print("\n".join(memory.lines()))
        elif recipe.workload in ("llm_lora", "llm_full"):
            where = recipe.model.config if isinstance(recipe.model.config, str) else recipe.model.path
            print(f"# memory per rank: no estimate, the model's config.json is not readable here ({where})")
        print(f"# {layout.describe()}")
        for key, value in _absent_paths(recipe):
            print(f"warning: {key}: {value!r} does not exist on this machine; a run refuses it at start unless it "
                  "exists where the run starts (a cluster's path is fine here)", file=sys.stderr)
        return 0
    if recipe.telemetry.enabled and not os.path.isdir(os.path.expanduser(recipe.telemetry.sysfs)):
        # every NIC counter would be unknown, without a word on why
        return _fail([f"telemetry.sysfs: {recipe.telemetry.sysfs!r} is not a directory on this host; allowed: "
                      "where this host's /sys is mounted (default /sys; its class/net holds the NIC counters)"])
    problems = _check_output_dir(recipe.output_dir, recipe)
    if problems:
        return _fail(problems)
    # Nothing is fetched at run time unless the user asks: hub names must already be in the local cache.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .compat import prepare_torchvision
    prepare_torchvision(recipe.workload == "image_classification")  # before transformers is imported
    from .torch_floor import check  # the APIs the run calls, before they are first called
    problem = check()
    if problem:
        return _fail([problem])
    from .run import run  # heavy imports (torch, transformers) only for real runs
    return run(recipe, layout, [sys.executable, "-m", "trainer", *argv], list(args.overrides))
