"""NVML energy and power on the physical GPU: the counter the harness reads grows while the GPU works,
and the sampled power is a plausible number of watts (not None, not 0)."""
from __future__ import annotations

import time

import pytest
import torch

from .common import GPU

pytestmark = GPU


def test_nvml_energy_grows_and_power_is_read_on_the_gpu_in_use():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    from telemetry.capture.energy import NvmlEnergy

    source = NvmlEnergy(cuda_devices=[torch.cuda.current_device()])
    try:
        assert source.reason is None, source.reason
        assert len(source.devices()) == 1
        before = source.energy_j()[0]
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # about three seconds of matmuls
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        after = source.energy_j()[0]
        power = source.power_w()[0]
    finally:
        source.close()
    assert before is not None and after is not None and after > before  # joules spent on the matmuls
    assert power is not None and 0 < power < 2000
