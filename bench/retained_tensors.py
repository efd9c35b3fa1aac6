"""Retained tensors: FSDP2 all-gather outputs still alive when the step ends, tracer off / on, old / new code.

A NCCL Work keeps its output tensors; under FSDP2 each all-gather output is a whole unsharded block, so a
tracer that keeps works until the step ends keeps every block of the step. Measured on CPU: 2 gloo ranks,
FSDP2 over 8 Linear layers (16 all-gathers a step: forward, and again in backward), the tracer taking its
NCCL path on gloo groups (the old code: its group lookup answering "nccl"; the new code: the backend
name answering "nccl" and a fake completion-hook registry, as in tests/telemetry/capture/collective_worker.py).
The old code is read from git (`--old-rev`), into a temporary package.

    python -m bench.retained_tensors [--old-rev REV] [--steps 2] [--out bench/results/retained_tensors.jsonl]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("off", "old-gloo", "old-nccl", "new-gloo", "new-nccl")


def worker(variant: str, package_dir: str, steps: int, out: str) -> None:
    """Runs under torchrun: one variant, alive all-gather outputs at each step's end."""
    import gc
    import importlib
    import weakref

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, package_dir)
    dist.init_process_group("gloo")
    refs: list = []
    orig = dist.all_gather_single

    def spy(output_tensor, input_tensor, group=None, async_op=False):
        refs.append(weakref.ref(output_tensor))
        return orig(output_tensor, input_tensor, group=group, async_op=async_op)

    dist.all_gather_single = spy  # under the tracer's wrapper: it sees what FSDP2 passes
    tracer = None
    if variant != "off":
        code, path = variant.split("-")
        mod = importlib.import_module("oldtel.collectives" if code == "old" else "telemetry.capture.collectives")
        if path == "nccl" and code == "old":
            mod.CollectiveTracer._group_info = staticmethod(lambda g: (dist.get_world_size(g), "nccl"))
        elif path == "nccl":  # the backend seams live in the tracer's completion-hook module
            hooks = importlib.import_module("telemetry.capture.completion_hooks")
            hooks.backend_name = lambda pg: "nccl"
            hooks._register_completion_hook = lambda pg, hook: None  # accepted; no reports are needed here
        tracer = mod.CollectiveTracer().install()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    rows = []
    for step in range(1, steps + 1):
        refs.clear()
        if tracer:
            tracer.begin_step()
        model(torch.randn(4, 1024)).sum().backward()
        gc.collect()
        alive = [r() for r in refs if r() is not None]
        rows.append({"step": step, "all_gathers": len(refs), "alive": len(alive),
                     "alive_bytes": sum(t.numel() * t.element_size() for t in alive)})
        del alive
        if tracer:
            tracer.end_step()
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def old_package(rev: str, where: str) -> None:
    pkg = os.path.join(where, "oldtel")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for name in ("collectives.py", "formulas.py"):
        src = subprocess.run(["git", "show", f"{rev}:telemetry/{name}"], cwd=REPO, check=True, capture_output=True,
                             text=True).stdout
        with open(os.path.join(pkg, name), "w") as f:
            f.write(src)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old-rev", default="73382d4^", help="a commit whose telemetry/capture/collectives.py keeps NCCL works")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    p.add_argument("--worker", nargs=3, metavar=("VARIANT", "PACKAGE_DIR", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.steps, args.worker[2])
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        old_package(args.old_rev, tmp)
        for variant in VARIANTS:
            out = os.path.join(tmp, f"{variant}.json")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                   os.path.abspath(__file__), "--steps", str(args.steps), "--worker", variant, tmp, out]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}
            subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
            with open(out) as f:
                results[variant] = json.load(f)
            last = results[variant][-1]
            print(f"{variant:9s} alive at step end: {last['alive']} of {last['all_gathers']} all-gather outputs "
                  f"({last['alive_bytes'] / 1e6:.2f} MB on rank 0)", flush=True)
    result = {"benchmark": "retained_tensors", "date": datetime.date.today().isoformat(),
              "command": "python " + " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "device": "cpu (gloo)",
              "old_rev": args.old_rev, "old_commit": subprocess.run(["git", "rev-parse", args.old_rev], cwd=REPO,
                                                                    capture_output=True, text=True).stdout.strip(),
              "model": "FSDP2, 8 x Linear(1024, 1024) fp32, 2 ranks", "steps": args.steps,
              "per_variant": results}
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
