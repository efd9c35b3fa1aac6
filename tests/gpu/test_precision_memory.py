"""bf16 autocast and activation checkpointing on the GPU, FSDP2's memory with the collective tracer on
and off, DeepSpeed ZeRO-3 on one GPU. Memory is CUDA's own peak (torch.cuda.max_memory_allocated),
recorded per rank by the harness; no timing is asserted."""
from __future__ import annotations

import math

import pytest

from .common import FAST, GPU, WIDE, rank_file, run_on_gpu

pytestmark = GPU


def _peak(out) -> int:
    peak = rank_file(out, "final")["peak_memory_bytes"]
    assert isinstance(peak, int) and peak > 0
    return peak


def test_bf16_autocast_over_fp32_weights(tmp_path):
    res = run_on_gpu(tmp_path / "bf16", *FAST, "model.dtype=fp32", "train.precision=bf16")
    model = res.run_json()["model"]
    assert model["weight_dtype"] == "torch.float32" and model["compute_dtype"] == "torch.bfloat16"
    fp32 = run_on_gpu(tmp_path / "fp32", *FAST, "model.dtype=fp32", "train.precision=fp32")
    a, b = [r["loss"] for r in res.metrics()], [r["loss"] for r in fp32.metrics()]
    assert all(math.isfinite(x) for x in a) and a != b
    assert a == pytest.approx(b, rel=0.02)


def test_activation_checkpointing_same_losses_less_memory(tmp_path):
    common = [*FAST, *WIDE, "train.warmup_steps=0", "lora.dropout=0"]
    plain = run_on_gpu(tmp_path / "plain", *common)
    ac = run_on_gpu(tmp_path / "ac", *common, "model.activation_checkpointing=true")
    assert [r["loss"] for r in ac.metrics()] == pytest.approx([r["loss"] for r in plain.metrics()], rel=2e-3)
    assert _peak(tmp_path / "ac") < _peak(tmp_path / "plain")


def test_fsdp2_memory_with_the_tracer_on_and_off(tmp_path):
    common = [*FAST, *WIDE, "parallel.data_parallel=fsdp"]
    on = run_on_gpu(tmp_path / "on", *common, "telemetry.enabled=true")
    off = run_on_gpu(tmp_path / "off", *common, "telemetry.enabled=false")
    assert on.run_json()["telemetry"]["enabled"] and not off.run_json()["telemetry"].get("enabled")
    peak_on, peak_off = _peak(tmp_path / "on"), _peak(tmp_path / "off")
    print(f"FSDP2 peak memory: tracer on {peak_on / 2**20:.1f} MiB, off {peak_off / 2**20:.1f} MiB")
    # the tracer keeps CUDA events and small records, no tensors: within 2% + 64 MiB of the untraced run
    assert peak_on <= peak_off * 1.02 + (64 << 20)
    assert [r["loss"] for r in on.metrics()] == pytest.approx([r["loss"] for r in off.metrics()], rel=1e-3)


def test_deepspeed_zero3_on_one_gpu(tmp_path):
    pytest.importorskip("deepspeed", reason="deepspeed is not installed")
    res = run_on_gpu(tmp_path / "zero3", *FAST, "parallel.data_parallel=deepspeed", "parallel.zero_stage=3",
                     timeout=540)
    info = res.run_json()
    assert info["status"] == "completed" and info["backend"] == "nccl"
    assert info["layout"]["data_parallel"] == "deepspeed"
    rows = res.metrics()
    assert len(rows) == 6 and all(math.isfinite(r["loss"]) for r in rows)
