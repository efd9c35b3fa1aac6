"""The evaluation file: read, check every key, and bind it to plain dataclasses.

Every problem is collected (one line each, naming the key path and what is allowed) so that a user fixes
the file in one pass; the recipes and overrides of the workloads are checked by the trainer's own recipe
loader (no torch is imported).
"""
from __future__ import annotations

import dataclasses

import difflib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from launch.lab_options import seconds_hint
from launch.lab import DEFAULT_MTU, MAX_MTU, MAX_NODES, MIN_MTU, MIN_NODES, MIN_RATE_BPS
from telemetry.analysis.transport_claims import claim_problem as check_transport
from telemetry.errors import InputProblems

LAUNCHERS = ("local", "lab", "slurm")
# Transport words a variant may claim; anything else with a digit in it is taken as an interface name
# (eth0, ens1f0, fab0, mlx5_0), held against the interface gloo or NCCL's socket/HCA devices used.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# what torchrun, srun and the lab set for each rank: a variant's value would be overwritten or break the launch
LAUNCHER_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                "FABRIC_HARNESS_LAB", "FABRIC_HARNESS_NODE")

MAX_PER_NODE = 1024  # ranks or GPUs on one node (the largest nodes have 8 to 72 GPUs)
MAX_REPEATS = 1000  # rounds; each is a run per variant x workload (a typo's 10**30 hung the dry run building the plan)
TOP_KEYS = ("name", "launcher", "repeats", "out", "variants", "workloads", "local", "lab", "slurm")
VARIANT_KEYS = ("name", "expect_transport", "env", "lab", "hosts", "fabric_config")
VARIANT_LAB_KEYS = ("rate", "mtu", "nodes", "nproc_per_node", "slow_node", "slow_rate", "burst", "limit")
# tc netem's impairments, which the lab does not add: named as such, not as unknown keys (the lab's CLI does the same)
NETEM_KEYS = ("delay", "latency", "jitter", "loss", "reorder", "duplicate", "corrupt", "netem")
WORKLOAD_KEYS = ("name", "recipe", "overrides")
LAUNCHER_KEYS = {"local": ("nproc_per_node", "timeout"),
                 "lab": ("nodes", "nproc_per_node", "timeout"),
                 "slurm": ("nodes", "nproc_per_node", "gpus_per_node", "partition", "srun_args", "timeout")}


class SpecError(InputProblems):
    """Problems in an evaluation file; each is one complete line (without the `error: ` prefix)."""


@dataclass
class Variant:
    name: str
    expect_transport: str
    env: dict[str, str] = field(default_factory=dict)
    lab: dict[str, Any] = field(default_factory=dict)  # rate, mtu, nodes, nproc_per_node (launcher lab)
    hosts: list[str] = field(default_factory=list)  # launcher slurm: the allocation's nodes to run on
    # what this variant's fabric was (the recipe's fabric.config keys): given to its runs as overrides
    fabric_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Workload:
    name: str
    recipe: str  # absolute path
    overrides: list[str] = field(default_factory=list)
    sweep: bool = False  # the collectives workload (a nccl-tests-style sweep)


@dataclass
class Evaluation:
    name: str
    launcher: str
    repeats: int
    out: str  # absolute path
    variants: list[Variant]
    workloads: list[Workload]
    options: dict[str, Any]  # the chosen launcher's section, defaults filled in
    path: str = ""


DEFAULTS = {"local": {"nproc_per_node": 2, "timeout": 1800},
            "lab": {"nodes": 2, "nproc_per_node": 1, "timeout": 1800},
            "slurm": {"nodes": 1, "nproc_per_node": None, "gpus_per_node": None, "partition": None,
                      "srun_args": [], "timeout": 3600}}


def _unknown(path: str, key: Any, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    where = f"{path}.{key}" if path else str(key)
    return f"{where}: unknown key; {hint}allowed: {', '.join(allowed)}"


def _keys(d: dict, path: str, allowed: tuple[str, ...], problems: list[str]) -> None:
    problems += [_unknown(path, k, allowed) for k in d if k not in allowed]


def _int(d: dict, key: str, path: str, low: int, problems: list[str], default: Any = None, high: int | None = None):
    value = d.get(key, default)
    if value is None and default is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        problems.append(f"{path}.{key}: got {value!r}; expected {allowed}" if path else
                        f"{key}: got {value!r}; expected {allowed}")
        return default
    return value


def _name(value: Any, path: str, problems: list[str]) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        problems.append(f"{path}: got {value!r}; expected a name of letters, digits, '_', '.' or '-' (up to 64, "
                        "starting with a letter or digit): it names run directories and report labels")
        return str(value)
    return value




def _entry(raw: Any, path: str, keys, required: tuple[str, ...], why: str, problems: list[str]) -> bool:
    """One entry of a list (a variant, a workload): a mapping of known keys with the required ones. False when
    it is no mapping at all (nothing more can be read from it)."""
    if not isinstance(raw, dict):
        problems.append(f"{path}: got {raw!r}; expected a mapping with keys {', '.join(keys)}")
        return False
    _keys(raw, path, keys, problems)
    for key in required:
        if key not in raw:
            problems.append(f"{path}.{key}: missing; {why}")
    return True


def _variant_lab(raw_lab: dict, path: str, problems: list[str]) -> dict[str, Any]:
    """A lab variant's `lab:` mapping, each key by the lab's own limits; netem's impairments named as such."""
    lab: dict[str, Any] = {}
    from launch.lab_options import LATENCY_REFUSAL, NETEM_REFUSAL
    problems += [f"{path}.lab.latency: {LATENCY_REFUSAL}; allowed: limit (the queue of each shaped link, in bytes)"
                 if k == "latency" else f"{path}.lab.{k}: {NETEM_REFUSAL}; allowed: {', '.join(VARIANT_LAB_KEYS)}"
                 for k in raw_lab if k in NETEM_KEYS]
    _keys({k: v for k, v in raw_lab.items() if k not in NETEM_KEYS}, f"{path}.lab", VARIANT_LAB_KEYS, problems)
    rate = raw_lab.get("rate", "none")
    from telemetry.analysis import rates
    try:
        if not isinstance(rate, str):  # YAML's 1000000000 or 1.0e+9: a number, which tc reads as bit/s
            hint = rates.suggestion(str(rate)) if isinstance(rate, (int, float)) and not isinstance(
                rate, bool) else None
            raise rates.RateError(f"--rate: got {rate!r}; expected a tc rate such as 1gbit"
                                  + (f"; {hint}" if hint else ""))
        bps = rates.parse_rate(rate, min_bps=MIN_RATE_BPS)
        if bps is not None and bps < MIN_RATE_BPS:
            raise rates.RateError(f"--rate: got {rate!r}; tc shapes in whole bytes per second: expected at "
                                  "least 8bit (e.g. 100mbit, 1gbit), or 'none' for unshaped links")
        lab["rate"] = rate
        if warning := rates.bytes_unit_warning(rate, f"{path}.lab.rate"):  # 100Gbps: 800 Gbit/s to tc
            import sys
            print(warning, file=sys.stderr)
    except rates.RateError as exc:
        problems.append(f"{path}.lab.rate: " + str(exc).removeprefix("--rate: "))
    if "mtu" in raw_lab:
        lab["mtu"] = _int(raw_lab, "mtu", f"{path}.lab", MIN_MTU, problems, DEFAULT_MTU, high=MAX_MTU)
    if "nodes" in raw_lab:
        lab["nodes"] = _int(raw_lab, "nodes", f"{path}.lab", 2, problems, 2, high=200)
    if "nproc_per_node" in raw_lab:
        lab["nproc_per_node"] = _int(raw_lab, "nproc_per_node", f"{path}.lab", 1, problems, 1,
                                     high=MAX_PER_NODE)
    # one slow link among healthy ones (the lab's --slow-node/--slow-rate): checked with the lab's own
    # rules once the node count is known (_slow_link_problems)
    if "slow_node" in raw_lab:
        lab["slow_node"] = _int(raw_lab, "slow_node", f"{path}.lab", 0, problems, 0)
    if "slow_rate" in raw_lab:
        lab["slow_rate"] = raw_lab["slow_rate"] if isinstance(raw_lab["slow_rate"], str) else repr(raw_lab["slow_rate"])
    for key in ("burst", "limit"):  # the lab's --burst/--limit, checked by its rules with the rate and MTU
        if key in raw_lab:
            lab[key] = str(raw_lab[key])
    return lab


def _variant(raw: Any, i: int, launcher: str, problems: list[str]) -> Variant | None:
    path = f"variants[{i}]"
    if not _entry(raw, path, VARIANT_KEYS, ("name", "expect_transport"),
                  "every variant needs a name and the transport it expects", problems):
        return None
    name = _name(raw.get("name"), f"{path}.name", problems) if "name" in raw else f"variant{i}"
    expect = raw.get("expect_transport")
    if "expect_transport" in raw and (problem := check_transport(expect, f"{path}.expect_transport")):
        problems.append(problem)
    env: dict[str, str] = {}
    raw_env = raw.get("env") or {}
    if not isinstance(raw_env, dict):
        problems.append(f"{path}.env: got {raw_env!r}; expected a mapping of environment variables to values")
        raw_env = {}
    for k, v in raw_env.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            problems.append(f"{path}.env: {k!r} is not an environment variable name (letters, digits, '_')")
        elif k in LAUNCHER_ENV:
            problems.append(f"{path}.env.{k}: set by the launcher for each rank (torchrun, srun, the lab); "
                            "allowed: variables the runs read as they are (NCCL_*, GLOO_*, UCX_*, ...)")
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)) or (isinstance(v, float) and
                                                                            not math.isfinite(v)):
            problems.append(f"{path}.env.{k}: got {v!r}; expected a string or finite number (quote it: \"1\", "
                            "\"yes\")")
        elif isinstance(v, str) and any(ord(c) < 32 or ord(c) == 127 for c in v):
            problems.append(f"{path}.env.{k}: got {v!r}, with a control character (a newline or NUL); allowed: "
                            "one line of printable text")
        else:
            env[k] = str(v)
    lab: dict[str, Any] = {}
    if "lab" in raw:
        raw_lab = raw["lab"]
        if launcher not in ("lab", None):
            problems.append(f"{path}.lab: only with launcher lab (got launcher {launcher}); a variant on real "
                            "hosts differs by env or hosts")
        elif not isinstance(raw_lab, dict):
            problems.append(f"{path}.lab: got {raw_lab!r}; expected a mapping with keys {', '.join(VARIANT_LAB_KEYS)}")
        else:
            lab = _variant_lab(raw_lab, path, problems)
    hosts: list[str] = []
    if "hosts" in raw:
        raw_hosts = raw["hosts"]
        if launcher not in ("slurm", None):
            problems.append(f"{path}.hosts: only with launcher slurm (a host list picks the allocation's nodes; "
                            f"got launcher {launcher})")
        elif not isinstance(raw_hosts, list) or not raw_hosts or not all(
                isinstance(h, str) and h and not any(c.isspace() or c == "," for c in h) for h in raw_hosts):
            problems.append(f"{path}.hosts: got {raw_hosts!r}; expected a non-empty list of Slurm node names")
        elif len(set(raw_hosts)) < len(raw_hosts):
            twice = sorted({h for h in raw_hosts if raw_hosts.count(h) > 1})
            problems.append(f"{path}.hosts: {', '.join(twice)} named twice; allowed: each node once (a node runs "
                            "its ranks once, with slurm.nproc_per_node of them)")
        else:
            hosts = list(raw_hosts)
    fabric_config: dict[str, Any] = {}
    if "fabric_config" in raw:
        from trainer.config import FabricSetup
        allowed = [f.name for f in dataclasses.fields(FabricSetup)]
        raw_cfg = raw["fabric_config"]
        if not isinstance(raw_cfg, dict):
            problems.append(f"{path}.fabric_config: got {raw_cfg!r}; expected a mapping with keys {', '.join(allowed)}")
        else:
            _keys(raw_cfg, f"{path}.fabric_config", tuple(allowed), problems)
            for k, v in raw_cfg.items():
                if k in allowed and not isinstance(v, (str, int, float, bool)):
                    problems.append(f"{path}.fabric_config.{k}: got {v!r}; expected a string, number or true/false")
                elif k in allowed:
                    fabric_config[k] = v
    return Variant(name, expect if isinstance(expect, str) else "", env, lab, hosts, fabric_config)


def _resolve(path: str, base: str) -> str | None:
    path = os.path.expanduser(path)  # `~/recipes/x.yaml` as the shell reads it
    for candidate in (path, os.path.join(base, path)):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def _workload(raw: Any, i: int, base: str, problems: list[str]) -> Workload | None:
    path = f"workloads[{i}]"
    if not _entry(raw, path, WORKLOAD_KEYS, ("name", "recipe"), "every workload needs a name and a recipe", problems):
        return None
    name = _name(raw.get("name"), f"{path}.name", problems) if "name" in raw else f"workload{i}"
    overrides = raw.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        problems.append(f"{path}.overrides: got {overrides!r}; expected a list of key=value strings")
        overrides = []
    seen: dict[str, str] = {}
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key == "output_dir":
            problems.append(f"{path}.overrides: {o!r}: the runner sets output_dir (under `out`); leave it out")
        elif key == "fabric.config" or key.startswith("fabric.config."):
            # the runner appends each variant's fabric_config: the same key twice, the workload's silently lost
            problems.append(f"{path}.overrides: {o!r}: a fabric's configuration belongs to the variants "
                            "(variants[].fabric_config), which the runner gives every run; leave it out")
        elif key in seen:
            problems.append(f"{path}.overrides: {key} is given twice ({seen[key]!r} and {o!r}); allowed: each key once")
        seen.setdefault(key, o)
    recipe = raw.get("recipe")
    if "recipe" not in raw:
        return None
    if not isinstance(recipe, str) or (found := _resolve(recipe, base)) is None:
        problems.append(f"{path}.recipe: {recipe!r} is not a file (a path relative to the current directory or "
                        "to the evaluation file)")
        return None
    from trainer.config import RecipeError, load_recipe
    overrides = [o for o in overrides if o.split("=", 1)[0].strip() != "output_dir"]
    try:
        loaded = load_recipe(found, overrides)
    except RecipeError as exc:
        problems += [f"{path} ({os.path.basename(found)} with overrides): {p}" for p in exc.problems]
        return None
    return Workload(name, found, overrides, sweep=loaded.workload == "collectives")


def _launcher_options(raw: dict, launcher: str, problems: list[str]) -> dict:
    out = {}
    for which in LAUNCHERS:
        section = raw.get(which)
        opts = dict(DEFAULTS[which])
        if section is None:
            if which == launcher:
                out = opts
            continue
        if not isinstance(section, dict):
            problems.append(f"{which}: got {section!r}; expected a mapping with keys {', '.join(LAUNCHER_KEYS[which])}")
            continue
        _keys(section, which, LAUNCHER_KEYS[which], problems)
        low_nodes, high_nodes = (MIN_NODES, MAX_NODES) if which == "lab" else (1, None)  # the lab's own limits
        if "nodes" in section:
            opts["nodes"] = _int(section, "nodes", which, low_nodes, problems, opts["nodes"], high=high_nodes)
        # ranks or GPUs on one node: a typo's 100000 was refused only as the workloads' batch not dividing
        if "nproc_per_node" in section:
            opts["nproc_per_node"] = _int(section, "nproc_per_node", which, 1, problems, opts["nproc_per_node"],
                                          high=MAX_PER_NODE)
        if "gpus_per_node" in section:
            opts["gpus_per_node"] = _int(section, "gpus_per_node", which, 0, problems, opts["gpus_per_node"],
                                         high=MAX_PER_NODE)
        if "timeout" in section:
            t = section["timeout"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                problems.append(f"{which}.timeout: got {t!r}; expected seconds > 0 per run{seconds_hint(t)}")
            else:
                opts["timeout"] = float(t)
        if "partition" in section:
            p = section["partition"]
            if not isinstance(p, str) or not p or any(c.isspace() for c in p):
                problems.append(f"{which}.partition: got {p!r}; expected a Slurm partition name")
            else:
                opts["partition"] = p
        if "srun_args" in section:
            a = section["srun_args"]
            if not isinstance(a, list) or not all(isinstance(x, str) and x.startswith("-") for x in a):
                problems.append(f"{which}.srun_args: got {a!r}; expected a list of srun options such as "
                                "['--mpi=none', '--container-image=IMAGE']")
            else:
                opts["srun_args"] = list(a)
        if which == launcher:
            out = opts
    return out


def load_evaluation(path: str) -> Evaluation:
    """Read and check an evaluation file; SpecError lists every problem."""
    from trainer.recipe_yaml import RecipeError, read_recipe

    try:  # the recipe reader's limits: duplicate keys, encoding, size, nesting, alias bombs
        raw = read_recipe(path, "evaluation")
    except RecipeError as exc:
        raise SpecError(exc.problems) from None
    if not isinstance(raw, dict):
        raise SpecError([f"evaluation: {path} must hold a mapping with keys {', '.join(TOP_KEYS)}"])
    if "workload" in raw and not set(raw) & {"variants", "workloads", "launcher"}:  # one line, not one per key
        raise SpecError([f"evaluation: {path} is a training recipe (it has 'workload'), not an evaluation; allowed: "
                         "an evaluation file with name, launcher, variants and workloads, whose workloads name "
                         "recipes (docs/evaluate.md)"])
    return bind(raw, os.path.dirname(os.path.abspath(path)), path)


def bind(raw: dict, base: str = ".", path: str = "") -> Evaluation:
    problems: list[str] = []
    _keys(raw, "", TOP_KEYS, problems)
    for key in ("name", "launcher", "variants", "workloads"):
        if key not in raw:
            problems.append(f"{key}: missing; an evaluation needs name, launcher, variants and workloads")
    name = _name(raw.get("name"), "name", problems) if "name" in raw else "evaluation"
    launcher = raw.get("launcher", "local")
    if launcher not in LAUNCHERS:
        close = difflib.get_close_matches(str(launcher).lower(), LAUNCHERS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        problems.append(f"launcher: got {launcher!r}; {hint}allowed: {', '.join(LAUNCHERS)}")
        launcher = None  # no launcher: the checks that depend on it are not made (they would name another)
    repeats = _int(raw, "repeats", "", 1, problems, 1, high=MAX_REPEATS)
    out = raw.get("out", os.path.join("runs", f"eval-{name}"))
    if not isinstance(out, str) or not out:
        problems.append(f"out: got {out!r}; expected a directory path")
        out = "."
    elif any(ord(c) < 32 or ord(c) == 127 for c in out):  # each run's output_dir is under it (the trainer refuses)
        problems.append(f"out: got {out!r}, with a control character (a newline or tab); allowed: a path of "
                        "printable characters (the runs' output_dir is under it)")
        out = "."
    variants, at = [], []  # at: (index in the file, variant), for lines naming variants[i]
    raw_variants = raw.get("variants")
    if "variants" in raw:
        if not isinstance(raw_variants, list) or len(raw_variants) < 2:
            problems.append(f"variants: got {_count(raw_variants)}; expected a list of at least 2 fabric variants "
                            "(a comparison needs two)")
        else:
            at = [(i, v) for i, r in enumerate(raw_variants) if (v := _variant(r, i, launcher, problems))]
            variants = [v for _, v in at]
    workloads, at_w = [], []
    raw_workloads = raw.get("workloads")
    if "workloads" in raw:
        if not isinstance(raw_workloads, list) or not raw_workloads:
            problems.append(f"workloads: got {_count(raw_workloads)}; expected a list of at least 1 workload")
        else:
            at_w = [(i, w) for i, r in enumerate(raw_workloads) if (w := _workload(r, i, base, problems))]
            workloads = [w for _, w in at_w]
    # the index in the file, not in the list of the valid ones (an invalid entry before shifted it)
    for what, items in (("variants", at), ("workloads", at_w)):
        seen: dict[str, int] = {}
        for i, item in items:
            if item.name in seen:
                problems.append(f"{what}[{i}].name: {item.name!r} is used twice (also {what}[{seen[item.name]}]); "
                                "names must be unique")
            seen.setdefault(item.name, i)
    options = _launcher_options(raw, launcher, problems)
    if launcher == "lab":
        problems += _slow_link_problems(options, at, problems)
    if not problems and launcher:
        problems += _layout_problems(launcher, options, variants, workloads)
    if problems:
        raise SpecError(problems)
    return Evaluation(name, launcher, repeats, os.path.abspath(os.path.expanduser(out)), variants, workloads, options,
                      path)


def world_size(launcher: str, options: dict, variant: Variant) -> int:
    """The ranks a run of `variant` has: what each workload's layout must fit (a lab variant may set its own
    node count and ranks per node; a Slurm one its own hosts)."""
    if launcher == "local":
        return options["nproc_per_node"]
    if launcher == "lab":
        return (variant.lab.get("nodes") or options["nodes"]) * (variant.lab.get("nproc_per_node")
                                                                 or options["nproc_per_node"])
    per_node = options["nproc_per_node"] or options["gpus_per_node"] or 1
    return (len(variant.hosts) or options["nodes"]) * per_node


def _slow_link_problems(options: dict, variants: list[tuple[int, Variant]], found: list[str]) -> list[str]:
    """A variant's lab by the lab's own rules (launch.lab.Lab checks its arguments without making anything): slow
    node and rate both or neither, a node of the variant's lab, a rate below the others'; burst and limit; a bucket
    tc can hold at the rate."""
    from launch.lab import Lab, LabError
    problems = []
    for i, v in variants:  # i: the variant's place in the file (one that is no mapping is not in the list)
        lab = v.lab
        if not lab or any(p.startswith(f"variants[{i}].lab") for p in found):  # said once, by the key's own check
            continue
        try:
            Lab(lab.get("nodes") or options.get("nodes") or 2, lab.get("rate", "none"), slow_node=lab.get("slow_node"),
                slow_rate=lab.get("slow_rate"), mtu=lab.get("mtu", DEFAULT_MTU), burst=lab.get("burst"),
                limit=lab.get("limit"))
        except LabError as exc:
            said = str(exc)
            for option, key in (("--slow-node and --slow-rate", "slow_node and slow_rate"), ("--slow-node", "slow_node"),
                                ("--slow-rate", "slow_rate"), ("--rate", "lab.rate"), ("--burst", "burst"),
                                ("--limit", "limit"), ("--mtu", "mtu")):
                said = said.replace(option, key)
            said = said.removeprefix("lab.")  # `lab.rate: ...` leads its own line as `variants[i].lab.rate`
            problems.append(f"variants[{i}].lab.{said}" if said.startswith(("slow_", "burst", "limit", "rate", "mtu"))
                            and ":" in said.split()[0]
                            else f"variants[{i}].lab: {said}")
    return problems


def _layout_problems(launcher: str, options: dict, variants: list[Variant], workloads: list[Workload]) -> list[str]:
    """Each workload's layout on each variant's world size, as the trainer checks it on every rank: a recipe
    that does not fit one variant is named now, not after the other variants' runs."""
    from trainer.config import load_recipe
    from trainer.layout import resolve_layout

    problems = []
    for i, w in enumerate(workloads):
        recipe = load_recipe(w.recipe, w.overrides)  # loaded once already: it loads
        by_world: dict[int, list[str]] = {}
        for v in variants:
            by_world.setdefault(world_size(launcher, options, v), []).append(v.name)
        for world, names in by_world.items():
            for problem in resolve_layout(recipe, world)[1]:
                problems.append(f"workloads[{i}] ({w.name}) on variant(s) {', '.join(names)} ({world} ranks): "
                                f"{problem}")
    return problems


def _count(value: Any) -> str:
    return f"{len(value)} item(s)" if isinstance(value, list) else repr(value)
