"""FLOPs per token, TFLOP/s and MFU against hand-computed values; no MFU without a known peak."""
from __future__ import annotations

import pytest
import torch

from trainer.throughput import (PEAK_TFLOPS, attention_flops_per_pair, flops_per_token, matmul_params, peak_tflops,
                                step_figures, step_flops)


def test_formula_by_hand():
    # Llama-2-70B-like: N = 68.5e9 matmul params, LoRA 0.2e9 trainable, 80 layers, d 8192, T 4096
    per_token = flops_per_token(68.5e9, 0.2e9, 80, 8192, 4096)
    assert per_token == pytest.approx(4 * 68.5e9 + 2 * 0.2e9 + 12 * 80 * 8192 * 4096)
    # full fine-tuning reduces to the familiar 6N + 12 L d T
    assert flops_per_token(1e9, 1e9, 10, 1024, 2048) == pytest.approx(6e9 + 12 * 10 * 1024 * 2048)


def test_matmul_params_count_linears_only():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    model[1].requires_grad_(False)
    assert matmul_params(model) == (8 * 4 + 4 + 4 * 2 + 2, 4 * 2 + 2)


def test_tflops_and_mfu():
    fig = step_figures(flops=1_000_000 * 1e9, step_time_s=2.0, world_size=8, peak=989.0)
    assert fig["tflops_per_device"] == pytest.approx(1e15 / 2 / 8 / 1e12)
    assert fig["mfu"] == pytest.approx(62.5 / 989.0)
    assert step_figures(1000 * 1e6, 1.0, 1, None)["mfu"] is None
    assert step_figures(None, 1.0, 1, 989.0) == {"tflops_per_device": None, "mfu": None}


def test_step_flops_use_each_batch_length():
    """Padding to the longest sequence of a batch: attention costs T_b^2 per sequence, not seq_len x T_b."""
    n, n_train, layers, hidden, seq_len = 1e9, 1e7, 4, 256, 4096
    per_token = flops_per_token(n, n_train, layers, hidden, seq_len)
    per_pair = attention_flops_per_pair(layers, hidden)
    # two micro-batches of 2 sequences padded to 1,000 and 3,000 positions
    positions = 2 * 1000 + 2 * 3000
    pairs = 2 * 1000 * 1000 + 2 * 3000 * 3000
    by_hand = positions * (4 * n + 2 * n_train) + 12 * layers * hidden * pairs
    assert step_flops(positions, pairs, per_token, per_pair, seq_len) == pytest.approx(by_hand)
    # padded to seq_len everywhere, the per-token formula holds exactly
    full = 4 * seq_len
    assert step_flops(full, full * seq_len, per_token, per_pair, seq_len) == pytest.approx(full * per_token)
    # a workload without attention pairs (images: per sample) keeps units x per-unit
    assert step_flops(10, None, 5.0, None, None) == 50.0


def test_no_peak_on_cpu_and_table_order():
    peak, reason = peak_tflops(torch.device("cpu"), torch.float32)
    assert peak is None and "GPUs only" in reason
    names = list(PEAK_TFLOPS)
    assert names.index("H100 PCIe") < names.index("H100") and names.index("L40S") < names.index("L40")


@pytest.fixture
def h100(monkeypatch):
    """A CUDA device named like an H100 SXM; torch's TF32 switches restored after the test."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    matmul, conv = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield torch.device("cuda", 0)
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = conv


def test_fp32_peak_follows_torchs_tf32_switch(h100):
    torch.set_float32_matmul_precision("highest")  # torch's default: fp32 matmuls on the CUDA cores
    peak, reason = peak_tflops(h100, torch.float32)
    assert peak == 67.0 and "plain FP32" in reason and "do not use TF32" in reason, reason
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores
    peak, reason = peak_tflops(h100, torch.float32)
    assert peak == 494.5 and "TF32 tensor-core peak" in reason and "'tf32'" in reason, reason
    assert peak_tflops(h100, torch.bfloat16) == (989.0,
                                                 "NVIDIA H100 80GB HBM3 (H100): dense bf16/fp16 tensor-core peak")
    # cuDNN convolutions have their own switch, on by default
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    assert peak_tflops(h100, torch.float32, ops="conv")[0] == 494.5
    torch.backends.cudnn.allow_tf32 = False
    peak, reason = peak_tflops(h100, torch.float32, ops="conv")
    assert peak == 67.0 and "fp32 convs do not use TF32" in reason, reason


@pytest.mark.parametrize("name,fp32,tf32", [("NVIDIA H100 PCIe", 51.0, 378.0), ("NVIDIA H200", 67.0, 494.5),
                                            ("NVIDIA A100-SXM4-80GB", 19.5, 156.0), ("NVIDIA L40S", 91.6, 183.0),
                                            ("NVIDIA L40", 90.5, 90.5)])
def test_plain_fp32_and_tf32_peaks_per_device(h100, monkeypatch, name, fp32, tf32):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    torch.set_float32_matmul_precision("highest")
    assert peak_tflops(h100, torch.float32)[0] == fp32
    torch.set_float32_matmul_precision("high")
    assert peak_tflops(h100, torch.float32)[0] == tf32


def test_torch_without_the_fp32_precision_switch_uses_the_legacy_getters(h100, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(torch.backends.cuda, "matmul", SimpleNamespace(allow_tf32=False))  # no fp32_precision
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    peak, reason = peak_tflops(h100, torch.float32)
    assert peak == 67.0 and "torch.get_float32_matmul_precision() = 'highest'" in reason
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "medium")
    assert peak_tflops(h100, torch.float32)[0] == 494.5


def test_unknown_device_has_no_peak(h100, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Imaginary X1")
    peak, reason = peak_tflops(h100, torch.float32)
    assert peak is None and "no peak known for 'NVIDIA Imaginary X1'" in reason


@pytest.mark.parametrize("name, bf16", [("NVIDIA H100 NVL", 835.5), ("NVIDIA H200 NVL", 835.5),
                                        ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H200", 989.0)])
def test_nvl_boards_have_their_own_lower_peak(h100, monkeypatch, name, bf16):
    """The NVL PCIe boards' names contain H100 / H200: they used to match the SXM rows (989)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_tflops(h100, torch.bfloat16)[0] == bf16
    assert names_before("H100 NVL", "H100") and names_before("H200 NVL", "H200")


def names_before(a: str, b: str) -> bool:
    from trainer.throughput import PEAK_TFLOPS
    names = list(PEAK_TFLOPS)
    return names.index(a) < names.index(b)
