"""NCCL on one GPU with telemetry: the harness picks cuda and nccl, trains tiny_llama_lora, and times
its collectives; the collective sweep runs and checks its results on NCCL."""
from __future__ import annotations

import json
import math
import os
import sys

from ..conftest import REPO, run_bounded
from .common import FAST, GPU, gpu_env, run_on_gpu

pytestmark = GPU


def test_world_of_one_on_nccl_with_telemetry(tmp_path):
    out = tmp_path / "run"
    res = run_on_gpu(out, *FAST)
    info = res.run_json()
    assert info["status"] == "completed" and info["backend"] == "nccl", info.get("error")
    assert info["device"]["type"] == "cuda" and info["device"]["name"]
    assert info["model"]["compute_dtype"] == "torch.bfloat16"  # precision auto: bf16 on a GPU
    assert info["telemetry"]["enabled"] and info["software"].get("nccl")
    rows = res.metrics()
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert all(math.isfinite(r["loss"]) for r in rows)
    timed = [op for r in rows[1:] for op in (r.get("comm") or {}).values()]
    # DDP's gradient buckets go through NCCL each step, and each call is timed (CUDA events)
    assert timed and all(op["count"] > 0 and op["time_s"] is not None for op in timed), rows[-1]
    assert sum(op["time_s"] for op in timed) > 0 and sum(op["bytes"] for op in timed) > 0
    # every step, the first too and those shorter than the power sampler's period (energy over duration); a
    # step shorter than the energy counter's own refresh reads a 0 J delta: its power is null with the reason,
    # never 0 W (a 0 W step passed here before)
    assert all(r["gpu_energy_j"] is not None for r in rows), rows
    for r in rows:
        assert (r["gpu_power_w"] is not None and r["gpu_power_w"] > 0) or (
            r["gpu_energy_j"] == 0 and "did not advance" in r.get("gpu_energy_reason", "")), r
    assert sum(r["gpu_power_w"] is not None for r in rows) >= len(rows) // 2, rows


def test_collective_sweep_on_nccl(tmp_path):
    out = tmp_path / "sweep"
    res = run_on_gpu(out, "sweep.max_bytes=16M", "sweep.latency_iters=20", "sweep.iters=5",
                     recipe=str(REPO / "recipes" / "collectives.yaml"))
    info = res.run_json()
    assert info["status"] == "completed" and info["backend"] == "nccl"
    assert info["final"]["wrong"] == 0
    assert set(info["final"]["avg_busbw_GBps"]) >= {"all_reduce", "all_gather", "reduce_scatter"}
    assert (out / "collectives.txt").read_text().count("\n") > 10


def test_tracer_times_gather_scatter_and_object_collectives_on_nccl(tmp_path):
    """ProcessGroupNCCL's completion reports (op types GATHER, SCATTER, ALLGATHER, BROADCAST) time each call;
    the object collectives count as the c10d collectives they make. (The same file runs on gloo on a CPU.)"""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           str(REPO / "tests" / "gpu" / "nccl_tracer_worker.py"), str(tmp_path)]
    res = run_bounded(cmd, {**os.environ, "PYTHONPATH": str(REPO), **gpu_env()}, 240, tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    summary = json.loads((tmp_path / "rank0.json").read_text())["summary"]
    assert set(summary) == {"gather", "scatter", "all_gather", "broadcast"}, summary
    assert (summary["gather"]["bytes"], summary["scatter"]["bytes"]) == (1024, 1024)  # 1 KiB x 1 rank
    assert summary["all_gather"]["count"] == 2 and summary["broadcast"]["count"] == 2  # sizes, then payload
    for op, stats in summary.items():
        assert stats["untimed"] == 0 and stats["time_s"] is not None and stats["time_s"] >= 0, (op, stats)
