"""Run by tests/telemetry/capture/test_exposed.py and bench/exposed_estimate.py under torchrun (gloo, CPU): DDP over
an MLP with small buckets, so the early buckets' all-reduces overlap the rest of the backward pass and the
last one is waited for; every step is profiled, so each has both the per-step estimate (`exposed_comm_s`)
and the profiled window's `exposed.exposed_s`. Writes OUT/rank<r>.json: one record per step."""
from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from telemetry.capture.session import Telemetry, TelemetrySettings


def main(out: str, steps: int, width: int, layers: int, bucket_mb: float) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    tel = Telemetry(TelemetrySettings(profile_every=1, cross_rank_every=0, nccl_debug=False), run_dir=None)
    tel.start()
    body = [m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*body), bucket_cap_mb=bucket_mb)
    tel.attach_ddp(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, width)
    records = []
    for step in range(1, steps + 1):
        tel.start_step(step)
        t0 = time.perf_counter()
        loss = model(x).square().mean()
        tel.mark("backward_begin")
        loss.backward()
        tel.mark("backward_end")
        tel.mark("optimizer_begin")
        opt.step()
        opt.zero_grad(set_to_none=True)
        tel.mark("optimizer_end")
        total = loss.detach().clone()
        dist.all_reduce(total)  # a blocking call: exposed whole
        step_time = time.perf_counter() - t0
        record = tel.end_step(step, step_time)
        records.append({"step": step, "step_time_s": step_time, **{k: record.get(k) for k in (
            "comm_time_s", "exposed_comm_s", "exposed_comm_reason")},
            "calls": sum(c["count"] for c in record["comm"].values()),
            "profiled": {k: (record.get("exposed") or {}).get(k) for k in ("exposed_s", "comm_s", "window_s")}})
    tel.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(records, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    out, steps, width, layers, bucket = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    main(out, steps, width, layers, bucket)
