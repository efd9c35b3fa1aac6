"""Energy sources: NVML mocked with autospec, RAPL on a fake tree, the no-hardware path, replay."""
from __future__ import annotations

import time
from unittest import mock

import pynvml
import pytest

from telemetry.energy import EnergyMeter, NvmlEnergy, ReplayEnergy, Unavailable, open_cpu_source, open_gpu_source


def fake_nvml(energy_mj, power_mw=(300_000,), energy_supported=True):
    nvml = mock.create_autospec(pynvml, instance=False)
    nvml.NVMLError = pynvml.NVMLError
    nvml.nvmlDeviceGetCount.return_value = 2
    nvml.nvmlDeviceGetHandleByIndex.side_effect = lambda i: f"handle{i}"
    if energy_supported:
        nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = list(energy_mj)
    else:
        nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml.nvmlDeviceGetPowerUsage.side_effect = lambda h: power_mw[0]
    return nvml


def test_nvml_energy_is_a_counter_delta_in_joules():
    # probe at open, baseline at meter start, then one step
    nvml = fake_nvml([1_000_000, 1_000_000, 1_250_500])
    meter = EnergyMeter(NvmlEnergy([1], nvml=nvml), sample_interval_s=0.01)
    time.sleep(0.05)
    step = meter.step()
    meter.close()
    assert step["energy_j"] == {"gpu1": pytest.approx(250.5)}
    assert step["power_w"]["gpu1"] == pytest.approx(300.0)
    nvml.nvmlDeviceGetHandleByIndex.assert_called_once_with(1)
    nvml.nvmlShutdown.assert_called_once()


def test_boards_without_the_energy_counter_report_none():
    source = NvmlEnergy([0], nvml=fake_nvml([], energy_supported=False))
    assert source.energy_j() == [None]


def test_no_driver_means_unavailable_with_a_reason_never_zero():
    nvml = mock.create_autospec(pynvml, instance=False)
    nvml.NVMLError = pynvml.NVMLError
    nvml.nvmlInit.side_effect = pynvml.NVMLError_LibraryNotFound(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    source = open_gpu_source(0, nvml=nvml)
    assert isinstance(source, Unavailable) and "NVML not available" in source.reason
    step = EnergyMeter(source).step()
    assert step == {"energy_j": None, "power_w": None, "reason": source.reason}
    assert open_gpu_source(None).reason == "no GPU is used by this rank"


def test_real_machine_without_gpu():
    source = open_gpu_source(0)  # this CI machine has no NVIDIA driver
    assert isinstance(source, Unavailable) and source.reason


def test_rapl_counters_and_wraparound(tmp_path):
    dom = tmp_path / "class" / "powercap" / "intel-rapl:0"
    dom.mkdir(parents=True)
    (tmp_path / "class" / "powercap" / "intel-rapl:0:0").mkdir()  # a sub-domain: not counted
    (dom / "max_energy_range_uj").write_text("1000000000\n")
    (dom / "energy_uj").write_text("999000000\n")
    meter = EnergyMeter(open_cpu_source(str(tmp_path)))
    (dom / "energy_uj").write_text("2000000\n")  # wrapped past 1000 J
    assert meter.step()["energy_j"] == {"cpu-package0": pytest.approx(3.0)}
    assert open_cpu_source(str(tmp_path / "nothing")).reason.startswith("no RAPL domains")


def test_replay_plays_recorded_readings():
    meter = EnergyMeter(ReplayEnergy("nvml", ["gpu0"], [[10.0], [13.5], [20.0]]))
    assert meter.step()["energy_j"] == {"gpu0": 3.5}
    assert meter.step()["energy_j"] == {"gpu0": 6.5}
