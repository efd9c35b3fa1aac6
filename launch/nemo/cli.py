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
import subprocess
import sys

from trainer.config import RecipeError, load_recipe
from trainer.layout import resolve_layout

from . import automodel, bridge, nemo2
from .common import ENGINES, World

TRANSLATORS = {"nemo2": nemo2.translate, "megatron-bridge": bridge.translate, "automodel": automodel.translate}
JOB_FILES = {"nemo2": "nemo2_job.py", "megatron-bridge": "bridge_job.py", "automodel": "automodel.yaml"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.exit(_fail([f"{message}; see python -m launch.nemo --help"]))


def _fail(problems: list[str]) -> int:
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank finds the same problem
        for line in problems:
            print(f"error: {' '.join(str(line).split())}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m launch.nemo",
                description="Translate a recipe into a NeMo engine's configuration; print it or run it with "
                            "the harness's telemetry attached.",
                epilog="example: python -m launch.nemo recipes/llama70b_lora.yaml --engine nemo2 --nodes 8 --print")
    p.add_argument("recipe", help="path to a recipe YAML file")
    p.add_argument("overrides", nargs="*", help="dotted key=value overrides, as python -m trainer takes them")
    p.add_argument("--engine", required=True, choices=ENGINES)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print", dest="mode", action="store_const", const="print",
                      help="print the engine's configuration (default)")
    mode.add_argument("--run", dest="mode", action="store_const", const="run",
                      help="run it with our telemetry (needs CUDA GPUs)")
    mode.add_argument("--json", dest="mode", action="store_const", const="json",
                      help="print the translation's field assignments as JSON (what the tests compare)")
    p.add_argument("--nodes", type=int, default=None,
                   help="nodes of the job (default: SLURM_NNODES / torchrun's NNODES, else what the recipe's "
                        "degrees need at --gpus-per-node)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs per node (default: LOCAL_WORLD_SIZE, else 8)")
    return p


def _world(args, recipe) -> World:
    gpus = args.gpus_per_node or int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0) or 8
    nodes = args.nodes or int(os.environ.get("SLURM_NNODES", os.environ.get("NNODES", "0")) or 0)
    if not nodes:
        par = recipe.parallel
        need = (par.dp if par.dp > 0 else 1) * par.tp * par.pp
        nodes = max(1, -(-need // gpus))
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


def _run(engine: str, translation, run_dir: str) -> int:
    os.makedirs(os.path.join(run_dir, "engine"), exist_ok=True)
    job = os.path.join(run_dir, "engine", JOB_FILES[engine])
    if os.environ.get("RANK", "0") == "0":
        with open(job, "w", encoding="utf-8") as f:
            f.write(translation.text)
    from telemetry.integrations.attach import attach_environment
    env = attach_environment(run_dir, translation.recipe.fabric.expect)
    env["FABRIC_HARNESS_RECIPE_JSON"] = json.dumps(translation.harness())
    world = translation.world
    if engine == "automodel":
        command = ["automodel", job, "--nproc-per-node", str(world.gpus_per_node)]
    elif "WORLD_SIZE" in os.environ:  # torchrun (or srun) already started one process per GPU
        command = [sys.executable, job]
    else:
        command = ["torchrun", "--standalone", "--nproc-per-node", str(world.gpus_per_node), job]
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError:
        return _fail([f"--run: {command[0]!r} not found; install the {engine} engine where the job runs"])
