"""FLOPs per token, TFLOP/s and MFU against hand-computed values; no MFU without a known peak."""
from __future__ import annotations

import pytest
import torch

from trainer.throughput import PEAK_TFLOPS, flops_per_token, matmul_params, peak_tflops, step_figures


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
    fig = step_figures(units=1_000_000, step_time_s=2.0, world_size=8, per_unit=1e9, peak=989.0)
    assert fig["tflops_per_device"] == pytest.approx(1e15 / 2 / 8 / 1e12)
    assert fig["mfu"] == pytest.approx(62.5 / 989.0)
    assert step_figures(1000, 1.0, 1, 1e6, None)["mfu"] is None


def test_no_peak_on_cpu_and_table_order():
    peak, reason = peak_tflops(torch.device("cpu"), torch.float32)
    assert peak is None and "GPUs only" in reason
    names = list(PEAK_TFLOPS)
    assert names.index("H100 PCIe") < names.index("H100") and names.index("L40S") < names.index("L40")
