"""NCCL on one GPU with telemetry: the harness picks cuda and nccl, trains tiny_llama_lora, and times
its collectives; the collective sweep runs and checks its results on NCCL."""
from __future__ import annotations

import math

from ..conftest import REPO
from .common import FAST, GPU, run_on_gpu

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
    # every step, the first too and those shorter than the power sampler's period (energy over duration)
    assert all(r["gpu_energy_j"] is not None and r["gpu_power_w"] is not None for r in rows), rows


def test_collective_sweep_on_nccl(tmp_path):
    out = tmp_path / "sweep"
    res = run_on_gpu(out, "sweep.max_bytes=16M", "sweep.latency_iters=20", "sweep.iters=5",
                     recipe=str(REPO / "recipes" / "collectives.yaml"))
    info = res.run_json()
    assert info["status"] == "completed" and info["backend"] == "nccl"
    assert info["final"]["wrong"] == 0
    assert set(info["final"]["avg_busbw_GBps"]) >= {"all_reduce", "all_gather", "reduce_scatter"}
    assert (out / "collectives.txt").read_text().count("\n") > 10
