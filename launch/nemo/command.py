"""`python -m launch.nemo RECIPE [key=value ...] --engine ENGINE [--print | --run]`.

--print (the default) writes the engine's configuration to stdout: a Python job for nemo2 and
megatron-bridge, a YAML file for automodel. --run writes that job into the run directory and runs
it with our telemetry attached: under torchrun (WORLD_SIZE set) in this process, otherwise under
`torchrun --standalone` on this node. Training needs CUDA GPUs; without them --run refuses.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys

from telemetry.errors import OneLineParser
from trainer.config import RecipeError, load_recipe
from trainer.error_report import report
from trainer.layout import resolve_layout

from . import automodel, bridge, nemo2
from .common import ENGINES, World

TRANSLATORS = {"nemo2": nemo2.translate, "megatron-bridge": bridge.translate, "automodel": automodel.translate}
JOB_FILES = {"nemo2": "nemo2_job.py", "megatron-bridge": "bridge_job.py", "automodel": "automodel.yaml"}


class _Parser(OneLineParser):  # its own error line; no abbreviated options (OneLineParser)
    def error(self, message):
        sys.exit(_fail([f"{self.explained(message)}; see python -m launch.nemo --help"]))


def _fail(problems: list[str]) -> int:
    report(*problems)  # under torchrun every rank finds the same problem: one of them says it
    return 2


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m launch.nemo",
                description="Translate a recipe into a NeMo engine's configuration; print it or run it with "
                            "the harness's telemetry attached.",
                epilog="example: python -m launch.nemo recipes/llama70b_lora.yaml --engine nemo2 --nodes 8 --print")
    p.add_argument("recipe", help="path to a recipe YAML file")
    p.add_argument("overrides", nargs="*", default=[], help="dotted key=value overrides, as python -m trainer takes them")
    p.add_argument("--engine", required=True, choices=ENGINES)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print", dest="mode", action="store_const", const="print",
                      help="print the engine's configuration (default)")
    mode.add_argument("--run", dest="mode", action="store_const", const="run",
                      help="run it with our telemetry (needs CUDA GPUs)")
    mode.add_argument("--json", dest="mode", action="store_const", const="json",
                      help="print the translation's field assignments as JSON (what the tests compare)")
    p.add_argument("--nodes", type=int, default=None,
                   help="nodes of the job (default: the launcher's world - torchrun's WORLD_SIZE / "
                        "LOCAL_WORLD_SIZE, else SLURM_NNODES - else what the recipe's degrees need)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs per node (default: LOCAL_WORLD_SIZE, else SLURM_NTASKS_PER_NODE, else "
                        "SLURM_GPUS_ON_NODE, else 8)")
    return p


def _env_int(name: str) -> int | None:
    """A launcher's count from the environment; Slurm writes repeated counts as "8(x2)"."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    head = raw.split("(")[0].split(",")[0]
    if not (head.isascii() and head.isdigit()) or int(head) < 1:
        raise RecipeError([f"{name}: got {raw!r}; expected a positive integer (as the launcher sets it)"])
    return int(head)


def launcher_world() -> tuple[int | None, int | None, str | None]:
    """(nodes, devices per node, who said so) from the launcher that started this process: torchrun's
    WORLD_SIZE / LOCAL_WORLD_SIZE first (under sbatch + torchrun Slurm's task counts describe the agents, not
    the ranks), then Slurm's SLURM_NNODES / SLURM_NTASKS_PER_NODE (srun starting one task per GPU)."""
    world, local = _env_int("WORLD_SIZE"), _env_int("LOCAL_WORLD_SIZE")
    if world and local:
        if world % local:
            raise RecipeError([f"WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE {local}: the nodes run "
                               "different numbers of ranks, which the NeMo engines cannot express; allowed: the same "
                               "number of ranks on every node (torchrun --nproc-per-node N on each)"])
        return world // local, local, f"torchrun (WORLD_SIZE={world}, LOCAL_WORLD_SIZE={local})"
    nodes = _env_int("SLURM_NNODES") or _env_int("NNODES")
    per_node = _env_int("SLURM_NTASKS_PER_NODE") if "SLURM_NNODES" in os.environ else None
    if per_node == 1:  # one task per node (an agent, or this launcher starting torchrun): not the GPU count
        per_node = None
    if nodes:
        return nodes, per_node, ("Slurm" if "SLURM_NNODES" in os.environ else "NNODES")
    return None, None, None


def _world(args, recipe) -> World:
    env_nodes, env_gpus, source = launcher_world()
    gpus = args.gpus_per_node or env_gpus or _env_int("SLURM_GPUS_ON_NODE") or 8
    nodes = args.nodes or env_nodes
    if not nodes:
        par = recipe.parallel
        need = (par.dp if par.dp > 0 else 1) * par.tp * par.pp
        nodes = max(1, -(-need // gpus))
    if env_nodes and env_gpus and (nodes, gpus) != (env_nodes, env_gpus):
        raise RecipeError([f"--nodes {nodes} x --gpus-per-node {gpus} = {nodes * gpus} ranks, but {source} "
                           f"started {env_nodes} x {env_gpus} = {env_nodes * env_gpus}; drop the flags to take "
                           "the launcher's world"])
    return World(nodes, gpus)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    mode = args.mode or "print"
    for flag in ("nodes", "gpus_per_node"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            return _fail([f"--{flag.replace('_', '-')}: got {value}; expected an integer >= 1"])
    if mode == "run":  # first: nothing below can make a CPU machine train a NeMo job
        import torch
        if not torch.cuda.is_available():
            return _fail([f"--run: {args.engine} trains on CUDA GPUs with NCCL and this machine has none; "
                          "use --print to see the configuration"])
    try:
        recipe = load_recipe(args.recipe, args.overrides)
        world = _world(args, recipe)
        layout, problems = resolve_layout(recipe, world.size)
        if problems:
            raise RecipeError(problems)
        run_dir = os.path.abspath(recipe.output_dir)
        translation = TRANSLATORS[args.engine](recipe, layout, world, run_dir)
    except RecipeError as exc:
        return _fail(exc.problems)
    if mode == "json":
        print(json.dumps({"engine": args.engine, "base": translation.base, "values": translation.values(),
                          "world": {"nodes": world.nodes, "gpus_per_node": world.gpus_per_node},
                          "layout": layout.to_dict(), "notes": translation.notes}, indent=2))
        return 0
    if mode == "print":
        sys.stdout.write(translation.text)
        return 0
    return _run(args.engine, translation, run_dir)


def publish_job(path: str, text: str) -> str | None:
    """Put the job at `path` so that every rank runs the same complete file; None, or the problem.

    Every rank translates the same recipe for the same world, so each holds the file's exact text. Under
    srun no RANK is set and every task arrives here: a rank whose file is missing or differs (a stale job of
    an earlier run) writes a private temporary file and renames it over the path (atomic on POSIX), so a
    reader sees the old file or the whole new one, never a truncated one, and a node-local run directory
    gets its own copy without anyone waiting for rank 0. Reading it back proves this rank runs its own text.
    """
    data = text.encode("utf-8")
    if _read(path) != data:
        tmp = f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            return f"--run: cannot write the job file {path}: {exc.strerror or exc}"
    if _read(path) != data:  # another rank renamed a different translation over ours
        return (f"--run: {path} differs from this rank's translation: the ranks were given different recipes, "
                "overrides or launcher variables; start every rank with the same command")
    return None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _run(engine: str, translation, run_dir: str) -> int:
    world = translation.world
    # torchrun, or srun with one task per GPU, already started one process per GPU (NeMo's Lightning reads
    # Slurm's variables itself); otherwise this starts one node's processes only
    launched = "WORLD_SIZE" in os.environ or bool(launcher_world()[2] == "Slurm" and launcher_world()[1])
    if not launched and world.nodes > 1:
        return _fail([f"--nodes: {world.nodes} nodes x {world.gpus_per_node} GPUs, but --run outside a launcher "
                      f"starts one node's {world.gpus_per_node} processes (torchrun --standalone); allowed: "
                      f"--nodes 1, or --run on every node under torchrun --nnodes {world.nodes} or srun"])
    os.makedirs(os.path.join(run_dir, "engine"), exist_ok=True)
    job = os.path.join(run_dir, "engine", JOB_FILES[engine])
    problem = publish_job(job, translation.text)
    if problem:
        return _fail([problem])
    from telemetry.integrations.attach import attach_environment, run_job
    env = attach_environment(run_dir, translation.recipe.fabric.expect)
    env["FABRIC_HARNESS_RECIPE_JSON"] = json.dumps(translation.harness())
    if engine == "automodel":
        command = ["automodel", job, "--nproc-per-node", str(world.gpus_per_node)]
    elif launched:
        command = [sys.executable, job]
    else:
        command = ["torchrun", "--standalone", "--nproc-per-node", str(world.gpus_per_node), job]
    try:  # waits for the job to record its end whatever signal comes, SIGTERM passed on (as attach does)
        return run_job(command, env)
    except FileNotFoundError:
        return _fail([f"--run: {command[0]!r} not found; install the {engine} engine where the job runs"])
