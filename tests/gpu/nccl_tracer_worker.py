"""Run by tests/gpu/test_nccl.py under torchrun: the collective tracer on real NCCL (its completion hooks)
for the calls not made by a training step's DDP: gather, scatter and the object collectives. Writes what the
tracer saw to OUT/rank<r>.json. `--backend gloo` runs the same calls on the CPU (a dry run of this file)."""
from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from telemetry.capture.collectives import CollectiveTracer, enable_nccl_timing


def main(out: str, backend: str) -> None:
    enable_nccl_timing()  # before the group exists: ProcessGroupNCCL records start events
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda") if backend == "nccl" else torch.device("cpu")
    tracer = CollectiveTracer(settle_s=5.0).install()  # wait for the watchdog's reports at the step's end
    t = torch.ones(256, device=device)  # 1 KiB
    tracer.begin_step()
    dist.gather(t, [torch.empty_like(t) for _ in range(world)] if rank == 0 else None, dst=0)
    dist.scatter(torch.empty_like(t), [torch.ones_like(t) for _ in range(world)] if rank == 0 else None, src=0)
    dist.all_gather_object([None] * world, {"rank": rank})
    dist.broadcast_object_list([{"k": 1}], src=0)
    if backend == "nccl":
        torch.cuda.synchronize()
    summary = tracer.end_step().summary()
    tracer.uninstall()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"world": world, "summary": summary}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "nccl")
