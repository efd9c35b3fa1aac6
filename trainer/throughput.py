"""Derived throughput metrics in one place: model FLOPs per token, TFLOP/s per device, MFU.

Model FLOPs (not hardware FLOPs: activation-checkpointing recomputation is not counted), per token, for a
decoder-only transformer fine-tuned with LoRA (PaLM appendix B's 6N + 12LHQT, adjusted for frozen weights):

    forward            2 N        (N = parameters in matmuls: every Linear, lm_head included, embeddings not)
    backward, inputs   2 N        (activation gradients flow through frozen layers too)
    backward, weights  2 N_train  (only trainable weights get gradients: LoRA's)
    attention          12 L d T   (QK^T and AV: 4 L d T forward, twice that backward; T = sequence length)

For full fine-tuning (N_train = N) this is the familiar 6N + 12LdT.
"""
from __future__ import annotations

import math

import torch

# Dense peak TFLOP/s by device name fragment (vendor data sheets; SXM parts unless named), for bf16/fp16
# tensor cores and for fp32 (TF32 tensor cores where the loop's fp32 matmuls may use them).
PEAK_TFLOPS = {
    "H200": {"bf16": 989.0, "fp32": 494.5},
    "H100 PCIe": {"bf16": 756.0, "fp32": 378.0},
    "H100": {"bf16": 989.0, "fp32": 494.5},
    "H20": {"bf16": 148.0, "fp32": 74.0},
    "B200": {"bf16": 2250.0, "fp32": 1100.0},
    "A100": {"bf16": 312.0, "fp32": 156.0},
    "L40S": {"bf16": 362.0, "fp32": 183.0},
    "L40": {"bf16": 181.0, "fp32": 90.5},
    "A10": {"bf16": 125.0, "fp32": 62.5},
    "V100": {"bf16": 125.0, "fp32": 15.7},  # fp16 tensor cores; no bf16
}


def matmul_params(model: torch.nn.Module) -> tuple[int, int]:
    """(all, trainable) parameters of Linear layers - the ones that cost FLOPs per token."""
    total = trainable = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            for p in module.parameters(recurse=False):
                n = math.prod(p.shape)  # a DTensor reports its global shape: shards count whole
                total += n
                if p.requires_grad:
                    trainable += n
    return total, trainable


def flops_per_token(n_matmul: int, n_trainable: int, layers: int, hidden: int, seq_len: int) -> float:
    return 4.0 * n_matmul + 2.0 * n_trainable + 12.0 * layers * hidden * seq_len


def peak_tflops(device: torch.device, dtype: torch.dtype) -> tuple[float | None, str | None]:
    """(peak, None), or (None, the reason) - never a made-up number."""
    if device.type != "cuda":
        return None, f"no peak for {device.type}: MFU is reported for GPUs only"
    name = torch.cuda.get_device_name(device)
    key = "bf16" if dtype in (torch.bfloat16, torch.float16) else "fp32"
    for fragment, peaks in PEAK_TFLOPS.items():  # ordered: longer names before their prefixes
        if fragment in name:
            return peaks[key], None
    return None, f"no peak known for {name!r}; add it to trainer/throughput.py PEAK_TFLOPS"


def step_figures(units: int, step_time_s: float, world_size: int, per_unit: float | None,
                 peak: float | None) -> dict:
    """TFLOP/s per device and MFU for a step that processed `units` tokens (or samples) globally."""
    if per_unit is None or step_time_s <= 0:
        return {"tflops_per_device": None, "mfu": None}
    tflops = units * per_unit / step_time_s / world_size / 1e12
    return {"tflops_per_device": tflops, "mfu": tflops / peak if peak else None}
