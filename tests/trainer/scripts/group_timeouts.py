"""Run by tests/telemetry/capture/test_group_timeout.py under torchrun (4 gloo ranks, job timeout 97 s: a
value no default has, and long enough for every connection on a loaded 2-core machine):
writes the timeout of every group the trainer makes after the default one."""
from __future__ import annotations

import datetime
import json
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from telemetry.capture.gloo_lazy import lazy_gloo_group
from telemetry.capture.group_timeout import carry_job_timeout_to_all, group_timeout
from trainer.distributed import ParallelDims
from trainer.layout import Layout
from trainer.sweep.measure import Sweep


def main(out: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=97))
    layout = Layout(world_size=4, dp=2, tp=2, pp=1, data_parallel="ddp", global_batch_size=4, micro_batch_size=2,
                    grad_accum_steps=1, per_rank_batch=2)
    dims = ParallelDims(layout, "cpu")
    got = {"default": group_timeout(dist.distributed_c10d._get_default_group())}
    for name in ("pp", "dp", "tp"):
        got[name] = group_timeout(dims.world_mesh.get_group(name))
    sweep = Sweep(SimpleNamespace(dtype="float32"), torch.device("cpu"), [{"hostname": "h"}] * dist.get_world_size())
    sweep.new_groups("gloo")
    got["sweep"], got["sweep_reverse"] = group_timeout(sweep.group), group_timeout(sweep.reverse)
    got["stop_vote"] = group_timeout(lazy_gloo_group(group_desc="stop_vote"))
    # DeepSpeed's data-parallel group: a world clone made without a timeout, then the trainer's carry
    import deepspeed
    from deepspeed.utils import groups

    deepspeed.init_distributed(dist_backend="gloo", dist_init_required=False)
    clone = groups._get_data_parallel_group()
    got["deepspeed_dp_made"] = group_timeout(clone)
    carry_job_timeout_to_all()
    got["deepspeed_dp"] = group_timeout(clone)
    if dist.get_rank() == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({k: v.total_seconds() for k, v in got.items()}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
