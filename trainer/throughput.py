"""Derived throughput metrics in one place: model FLOPs per token, TFLOP/s per device, MFU.

Model FLOPs (not hardware FLOPs: activation-checkpointing recomputation is not counted), per token, for a
decoder-only transformer fine-tuned with LoRA (PaLM appendix B's 6N + 12LHQT, adjusted for frozen weights):

    forward            2 N        (N = parameters in matmuls: every Linear, lm_head included, embeddings not)
    backward, inputs   2 N        (activation gradients flow through frozen layers too)
    backward, weights  2 N_train  (only trainable weights get gradients: LoRA's)
    attention          12 L d T   (QK^T and AV: 4 L d T forward, twice that backward; T = sequence length;
                                   d = heads x head_dim, the hidden size unless the config sets head_dim)

For full fine-tuning (N_train = N) this is the familiar 6N + 12LdT. The per-token figure in run.json uses
the recipe's data.seq_len; a step's FLOPs use each micro-batch's own padded length T_b (padding to the
longest sequence of the batch makes T_b < seq_len): sum over micro-batches of B_b T_b (4N + 2N_train)
+ B_b T_b^2 12 L d.
"""
from __future__ import annotations

import math

import torch

from telemetry.rundir import StepKey

# Dense peak TFLOP/s by device name fragment (SXM parts unless named), per math mode: bf16/fp16 tensor
# cores, TF32 tensor cores (fp32 matmuls/convolutions when TF32 is allowed) and plain FP32 on the CUDA cores
# (TF32 off). Figures from NVIDIA's data sheets and product spec tables (H100, H200, A100, L40, L40S, A10,
# V100, HGX B200), which list tensor-core rates with 2:4 sparsity: the dense rate is half. H20: no NVIDIA
# data sheet is public; FP32 44, TF32 74, BF16 148 are the widely reported figures.
# Volta has no TF32: fp32 math there always runs on the CUDA cores.
# H100 NVL and H200 NVL (PCIe cards, 350-600 W) are slower than the SXM parts whose names they contain:
# NVIDIA's H100 and H200 spec tables (nvidia.com/en-us/data-center/h100/, .../h200/) list per GPU BF16
# 1,671, TF32 835 (both with sparsity) and FP32 60 TFLOPS for the NVL boards against 1,979 / 989 / 67 for
# SXM, so dense bf16 is 835.5, not 989; one H200 NVL owner measures ~836 dense. Their rows come first
# (the match is by name fragment, first hit wins).
PEAK_TFLOPS = {
    "H100 NVL": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H200 NVL": {"bf16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H200": {"bf16": 989.0, "tf32": 494.5, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "H100": {"bf16": 989.0, "tf32": 494.5, "fp32": 67.0},
    "H20": {"bf16": 148.0, "tf32": 74.0, "fp32": 44.0},
    "B200": {"bf16": 2250.0, "tf32": 1100.0, "fp32": 75.0},
    "A100": {"bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "tf32": 183.0, "fp32": 91.6},
    "L40": {"bf16": 181.0, "tf32": 90.5, "fp32": 90.5},
    "A10": {"bf16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "V100": {"bf16": 125.0, "tf32": 15.7, "fp32": 15.7},  # fp16 tensor cores; no bf16, no TF32
}


def fp32_uses_tf32(ops: str = "matmul") -> tuple[bool, str]:
    """(whether torch runs fp32 `ops` - "matmul" (cuBLAS) or "conv" (cuDNN) - on TF32 tensor cores, the
    setting that says so). torch's per-backend `fp32_precision` switches are read first (once one has been
    set, the legacy getters raise or go stale), resolved as torch does: the op's own, else the CUDA
    backend's ("all"), else the generic one; "none" throughout means IEEE fp32."""
    leaf = ((torch.backends.cuda.matmul, "torch.backends.cuda.matmul") if ops == "matmul"
            else (getattr(torch.backends.cudnn, "conv", None), "torch.backends.cudnn.conv"))
    chain = [leaf, (torch.backends.cudnn, "torch.backends.cudnn"), (torch.backends, "torch.backends")]
    try:
        for module, name in chain:
            precision = module.fp32_precision  # "tf32", "ieee" or "none" (inherit)
            if precision != "none":
                return precision == "tf32", f"{name}.fp32_precision = {precision!r}"
    except (AttributeError, RuntimeError):  # torch before the switches
        if ops == "matmul":
            precision = torch.get_float32_matmul_precision()  # 'highest' is plain FP32
            return precision != "highest", f"torch.get_float32_matmul_precision() = {precision!r}"
        allowed = bool(torch.backends.cudnn.allow_tf32)
        return allowed, f"torch.backends.cudnn.allow_tf32 = {allowed}"
    return False, f"{leaf[1]}.fp32_precision = 'none' (nothing set: IEEE fp32)"


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


def flops_per_token(n_matmul: int, n_trainable: int, layers: int, width: int, seq_len: int) -> float:
    return 4.0 * n_matmul + 2.0 * n_trainable + attention_flops_per_pair(layers, width) * seq_len


def attention_flops_per_pair(layers: int, width: int) -> float:
    """Attention's model FLOPs per (query position, key position) pair, forward and backward; width: the
    query's heads x head_dim (hidden_size in the usual configs)."""
    return 12.0 * layers * width


def step_flops(positions: int, position_pairs: int | None, per_token: float, per_pair: float | None,
               seq_len: int | None) -> float:
    """A step's model FLOPs from the positions computed and, where the workload counts them, the
    (query, key) pairs of each micro-batch at its own padded length; per_token holds attention at seq_len."""
    if position_pairs is None or not per_pair or not seq_len:
        return positions * per_token
    return positions * (per_token - per_pair * seq_len) + position_pairs * per_pair


def peak_tflops(device: torch.device, dtype: torch.dtype, ops: str = "matmul") -> tuple[float | None, str]:
    """(peak, which peak and why), or (None, the reason) - never a made-up number. For fp32 the peak follows
    torch's TF32 switch for the workload's dominant `ops`: "matmul" (cuBLAS) or "conv" (cuDNN, whose TF32
    is on by default while matmul's is off)."""
    if device.type != "cuda":
        return None, f"no peak for {device.type}: MFU is reported for GPUs only"
    name = torch.cuda.get_device_name(device)
    for fragment, peaks in PEAK_TFLOPS.items():  # ordered: longer names before their prefixes
        if fragment in name:
            break
    else:
        return None, f"no peak known for {name!r}; add it to trainer/throughput.py PEAK_TFLOPS"
    if dtype in (torch.bfloat16, torch.float16):
        return peaks["bf16"], f"{name} ({fragment}): dense bf16/fp16 tensor-core peak"
    tf32, setting = fp32_uses_tf32(ops)
    if tf32:
        return peaks["tf32"], f"{name} ({fragment}): dense TF32 tensor-core peak, fp32 {ops}s use TF32 ({setting})"
    return peaks["fp32"], (f"{name} ({fragment}): plain FP32 (CUDA-core) peak, fp32 {ops}s do not use TF32 "
                           f"({setting})")


def step_figures(flops: float | None, step_time_s: float, world_size: int, peak: float | None) -> dict:
    """TFLOP/s per device and MFU for a step of `flops` model FLOPs over the world (None: not known)."""
    if flops is None or step_time_s <= 0:
        return {StepKey.TFLOPS_PER_DEVICE: None, StepKey.MFU: None}
    tflops = flops / step_time_s / world_size / 1e12
    return {StepKey.TFLOPS_PER_DEVICE: tflops, StepKey.MFU: tflops / peak if peak else None}
