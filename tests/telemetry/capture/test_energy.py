"""Energy sources: NVML mocked with autospec, RAPL on a fake tree, the no-hardware path, replay.

Nothing here depends on the machine having (or lacking) a GPU: NVML and torch's device properties are
fakes, and the no-driver path is forced.
"""
from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace
from unittest import mock

import pynvml
import pytest

from telemetry.capture.energy import (EnergyMeter, NvmlEnergy, ReplayEnergy, Unavailable, open_cpu_source, open_gpu_source,
                                       total_j)

# Four GPUs as NVML (PCI order) sees them: index i has UUID GPU-<UUIDS[i]> and bus 0x18 + 0x10 i.
UUIDS = [f"{i:08x}-1111-2222-3333-{0xabc000 + i:012x}" for i in range(4)]
BUSES = [0x18 + 0x10 * i for i in range(4)]
MIG = "deadbeef-0000-4000-8000-00000000c0de"  # a MIG instance on GPU 1


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


def not_found(*_):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)


def four_gpu_nvml(energy_mj=(5_000_000,)):
    """NVML with four GPUs found by UUID, MIG UUID or PCI address; handles are 'handle<NVML index>'."""
    nvml = fake_nvml(energy_mj)
    nvml.nvmlDeviceGetCount.return_value = 4
    by_uuid = {f"GPU-{u}": f"handle{i}" for i, u in enumerate(UUIDS)} | {f"MIG-{MIG}": "mig-handle"}
    by_pci = {f"00000000:{b:02X}:00.0": f"handle{i}" for i, b in enumerate(BUSES)}
    nvml.nvmlDeviceGetHandleByUUID.side_effect = lambda u: by_uuid[u] if u in by_uuid else not_found()
    nvml.nvmlDeviceGetHandleByPciBusId.side_effect = lambda b: by_pci[b] if b in by_pci else not_found()
    nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle.side_effect = {"mig-handle": "handle1"}.__getitem__
    nvml.nvmlDeviceGetIndex.side_effect = lambda h: int(h.removeprefix("handle"))
    nvml.nvmlDeviceGetUUID.side_effect = lambda h: f"GPU-{UUIDS[int(h.removeprefix('handle'))]}"
    return nvml


def fake_cuda_properties(uuid=True, pci=True):
    """torch.cuda.get_device_properties as the CUDA runtime answers it under CUDA_VISIBLE_DEVICES: ordinal
    N is the Nth visible entry (an NVML index, a GPU-<uuid> prefix or a MIG-<uuid>)."""

    def properties(ordinal):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1,2,3").split(",")[ordinal]
        if visible.startswith("MIG-"):
            own_uuid, gpu = MIG, 1
        elif visible.startswith("GPU-"):
            gpu = next(i for i, u in enumerate(UUIDS) if f"GPU-{u}".startswith(visible))
            own_uuid = UUIDS[gpu]
        else:
            gpu = int(visible)
            own_uuid = UUIDS[gpu]
        fields = {"name": "NVIDIA H100 80GB HBM3"}
        if uuid:  # torch prints the runtime's UUID without NVML's GPU-/MIG- prefix
            fields["uuid"] = own_uuid
        if pci:
            fields |= {"pci_domain_id": 0, "pci_bus_id": BUSES[gpu], "pci_device_id": 0}
        return SimpleNamespace(**fields)

    return properties


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


def test_real_nvml_bindings_without_a_driver_say_so(monkeypatch):
    # the real nvidia-ml-py, its driver library made unloadable: the same on machines with and without a GPU
    def no_library(*_):
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    source = open_gpu_source(0)
    assert isinstance(source, Unavailable) and source.reason.startswith("NVML not available")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed at all
    assert "nvidia-ml-py is not installed" in open_gpu_source(0).reason


@pytest.mark.parametrize("visible,ordinal", [
    ("2,3", 1),  # the case: cuda:1 is NVML GPU 3, not NVML GPU 1
    ("3", 0),
    (f"GPU-{UUIDS[3][:8]},GPU-{UUIDS[0]}", 0),  # UUIDs (a unique prefix is enough for CUDA)
])
def test_a_remapped_rank_reads_its_own_gpu(monkeypatch, visible, ordinal):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    nvml = four_gpu_nvml([7_000_000, 7_000_000, 7_100_000])
    meter = EnergyMeter(open_gpu_source(ordinal, nvml=nvml, properties=fake_cuda_properties()),
                        sample_interval_s=10)
    assert meter.step()["energy_j"] == {"gpu3": pytest.approx(100.0)}
    meter.close()
    nvml.nvmlDeviceGetHandleByUUID.assert_called_once_with(f"GPU-{UUIDS[3]}")
    nvml.nvmlDeviceGetHandleByIndex.assert_not_called()  # the CUDA ordinal is never taken as an NVML index
    assert nvml.nvmlDeviceGetTotalEnergyConsumption.call_args_list == [mock.call("handle3")] * 3
    assert meter.describe() == {"source": "nvml", "reason": None, "devices": [{
        "device": "gpu3", "cuda_device": ordinal, "cuda_visible_devices": visible, "nvml_index": 3,
        "uuid": f"GPU-{UUIDS[3]}", "pci_bus_id": "00000000:48:00.0", "matched_by": "uuid"}]}


def test_without_a_uuid_the_pci_address_finds_the_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    source = open_gpu_source(1, nvml=four_gpu_nvml(), properties=fake_cuda_properties(uuid=False))
    assert source.devices() == ["gpu3"] and source.handles == ["handle3"]
    assert source.mapping[0]["matched_by"] == "pci_bus_id" and source.mapping[0]["nvml_index"] == 3
    source.nvml.nvmlDeviceGetHandleByPciBusId.assert_called_once_with("00000000:48:00.0")


def test_a_mig_instance_reads_its_parent_gpu_and_says_so(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"MIG-{MIG}")
    source = open_gpu_source(0, nvml=four_gpu_nvml(), properties=fake_cuda_properties())
    assert source.handles == ["handle1"] and source.devices() == ["gpu1"]
    assert source.mapping[0]["mig_device"] == f"MIG-{MIG}" and "whole GPU" in source.mapping[0]["note"]


def test_a_gpu_nvml_cannot_place_is_unknown_not_another_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    nvml = four_gpu_nvml()
    nvml.nvmlDeviceGetHandleByUUID.side_effect = not_found
    nvml.nvmlDeviceGetHandleByPciBusId.side_effect = not_found
    source = open_gpu_source(1, nvml=nvml, properties=fake_cuda_properties())
    assert isinstance(source, Unavailable) and source.reason.startswith("CUDA device 1 matches no NVML device")
    assert f"GPU-{UUIDS[3]}" in source.reason and "00000000:48:00.0" in source.reason
    nvml.nvmlShutdown.assert_called_once()  # the NVML session opened for the lookup is closed again

    def no_runtime(ordinal):
        raise AssertionError("Torch not compiled with CUDA enabled")

    source = open_gpu_source(0, nvml=four_gpu_nvml(), properties=no_runtime)
    assert "cannot read the UUID or PCI address of CUDA device 0" in source.reason


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


class Clock:
    """A stand-in monotonic clock (seconds) that the test moves by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def nvml_like(clock: Clock, watts):
    """NVML as it behaves (fake): nvmlDeviceGetTotalEnergyConsumption is a counter of whole millijoules
    since driver load, the integral of the board's power; nvmlDeviceGetPowerUsage is a trailing 1 s average
    in milliwatts (Ampere and newer). `watts(t)` is the board's draw, piecewise constant; the integrals are
    taken in 1 ms slices, exact for steps on a millisecond grid."""

    def joules(t1: float) -> float:
        return sum(watts(k / 1000) for k in range(int(round(t1 * 1000)))) / 1000

    nvml = fake_nvml([])
    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: int(joules(clock.t) * 1000)
    nvml.nvmlDeviceGetPowerUsage.side_effect = lambda h: int((joules(clock.t) - joules(max(clock.t - 1, 0))) * 1000)
    return nvml


def counter_refreshed_every_50_ms(clock, watts: float):
    """A fake NVML board at constant power whose energy counter, like some boards', moves only every 50 ms."""
    nvml = nvml_like(clock, lambda t: watts)
    exact = nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect

    def refreshed(handle):
        now, clock.t = clock.t, int(round(clock.t * 1000)) // 50 * 50 / 1000
        try:
            return exact(handle)
        finally:
            clock.t = now

    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = refreshed
    return nvml


def test_a_step_with_no_power_sample_gets_energy_over_its_duration():
    clock = Clock()
    nvml = nvml_like(clock, lambda t: 400.0)
    # the sampler's period is far longer than the steps: no sample falls inside one
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600, clock=clock)
    clock.t = 1.0
    meter.begin()
    for _ in range(3):
        clock.t += 0.020  # 20 ms steps, under the sampler's 100 ms default
        step = meter.step()
        assert step["energy_j"]["gpu0"] == pytest.approx(8.0, abs=1e-3)  # 400 W x 20 ms
        assert step["power_w"]["gpu0"] == pytest.approx(400.0, rel=1e-3)
    meter.close()


def test_the_first_step_counts_from_its_start_not_from_the_meter_opening():
    clock = Clock()
    # 100 W while the model is built (50 s after the meter opened), 400 W once training starts
    nvml = nvml_like(clock, lambda t: 100.0 if t < 50 else 400.0)
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600, clock=clock)
    clock.t = 50.0
    meter.begin()
    clock.t = 50.5
    meter.begin()  # a later call changes nothing: consecutive steps' intervals meet
    clock.t = 51.0
    first = meter.step()
    meter.close()
    assert first["energy_j"]["gpu0"] == pytest.approx(400.0, abs=1e-3)  # not 100 W x 50 s + 400 J
    assert first["power_w"]["gpu0"] == pytest.approx(400.0, rel=1e-3)


def test_sampled_power_is_kept_where_the_step_holds_samples():
    # NVML's own 1 s average, as sampled, stands where there are samples (the previous behaviour)
    nvml = fake_nvml([1_000_000, 1_000_000, 1_000_000, 1_100_000], power_mw=(250_000,))
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=0.005)
    meter.begin()
    time.sleep(0.05)
    step = meter.step()
    meter.close()
    assert step["energy_j"]["gpu0"] == pytest.approx(100.0)
    assert step["power_w"]["gpu0"] == pytest.approx(250.0)


def test_power_is_unknown_without_samples_or_energy():
    nvml = fake_nvml([], energy_supported=False)
    clock = Clock()
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600, clock=clock)
    meter.begin()
    clock.t = 0.02
    step = meter.step()
    meter.close()
    assert step["energy_j"] == {"gpu0": None} and step["power_w"] == {"gpu0": None}


def test_a_session_counts_the_first_steps_energy_from_its_start(tmp_path):
    """Through the session: energy spent between telemetry's start and step 1's start (model build, data)
    is in no step. RAPL on a fake tree stands for the counter (the GPU meter has no NVML here)."""
    from telemetry.capture.session import Telemetry
    from telemetry.settings import TelemetrySettings

    dom = tmp_path / "class" / "powercap" / "intel-rapl:0"
    dom.mkdir(parents=True)
    (dom / "max_energy_range_uj").write_text("1000000000\n")
    (dom / "energy_uj").write_text("1000000\n")
    tel = Telemetry(TelemetrySettings(sysfs=str(tmp_path), interfaces=[], cross_rank_every=0), run_dir=None)
    tel.start(trace=False)
    try:
        (dom / "energy_uj").write_text("51000000\n")  # 50 J while the model was built
        tel.start_step(1)
        (dom / "energy_uj").write_text("53000000\n")  # 2 J in the step
        assert tel.cpu.step()["energy_j"] == {"cpu-package0": pytest.approx(2.0)}
    finally:
        tel.close()


def test_an_nvml_read_failing_mid_run_is_unknown_with_a_reason_not_a_crash():
    """A fake NVML whose energy read fails on one step (NVML_ERROR_UNKNOWN, as a busy or lost GPU answers):
    that step's energy is null with the reason; the training step is not ended by the telemetry."""
    readings = iter([1_000_000, 1_000_000, pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN), 1_300_000, 1_400_000])

    def read(_handle):
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    nvml = fake_nvml([])
    nvml.nvmlDeviceGetTotalEnergyConsumption.side_effect = read
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600)
    failed = meter.step()
    assert failed["energy_j"] == {"gpu0": None} and "could not be read" in failed["reason"]
    after = meter.step()  # its start was the failed reading: unknown too, never two steps' energy in one
    assert after["energy_j"] == {"gpu0": None} and after["reason"]
    assert meter.step()["energy_j"] == {"gpu0": pytest.approx(100.0)}
    meter.close()


def test_an_energy_counter_that_went_back_is_unknown_with_a_reason():
    """NVML's counter is mJ since driver load: a driver reload sets it back. No wrap range applies, so the
    interval's energy is null with the reason (never negative, never 0)."""
    meter = EnergyMeter(ReplayEnergy("nvml", ["gpu0"], [[5000.0], [5100.0], [20.0], [80.0]]))
    assert meter.step()["energy_j"] == {"gpu0": 100.0}
    back = meter.step()
    assert back["energy_j"] == {"gpu0": None} and "went back" in back["reason"]
    later = meter.step()
    assert later["energy_j"] == {"gpu0": 60.0} and "reason" not in later


def test_a_package_unread_makes_the_hosts_cpu_energy_unknown_not_a_partial_sum():
    """Two RAPL packages (fake tree), one whose counter went back without a wrap range: the host's CPU energy
    is null with the reason, not package 0's alone."""
    meter = EnergyMeter(ReplayEnergy("rapl", ["cpu-package0", "cpu-package1"], [[10.0, 50.0], [30.0, 5.0]]))
    step = meter.step()
    assert step["energy_j"] == {"cpu-package0": 20.0, "cpu-package1": None}
    assert total_j(step["energy_j"]) is None and "cpu-package1" in step["reason"]


def test_the_runs_gpu_energy_is_null_with_the_reason_when_a_steps_is_unknown(tmp_path):
    """Through the session: a GPU whose counter went back in step 2 (a driver reload, played back from recorded
    readings): run.json's gpu_energy_j is not steps 1 and 3 alone presented as the run's, but null with why."""
    from telemetry.capture.session import Telemetry
    from telemetry.settings import TelemetrySettings

    tel = Telemetry(TelemetrySettings(sysfs=str(tmp_path), interfaces=[], cross_rank_every=0), run_dir=None)
    tel.start(trace=False)
    try:
        tel.gpu.close()
        tel.gpu = EnergyMeter(ReplayEnergy("nvml", ["gpu0"], [[5000.0], [5000.0], [5100.0], [20.0], [80.0]]))
        records = []
        for step in (1, 2, 3):
            tel.start_step(step)
            records.append(tel.end_step(step, step_time_s=1.0, into={}))
        assert [r["gpu_energy_j"] for r in records] == [100.0, None, 60.0]
        assert "went back" in records[1]["gpu_energy_reason"]
        summary = tel.summary()
        assert summary["gpu_energy_j"] is None and "1 of 3" in summary["gpu_energy_reason"]
    finally:
        tel.close()


@pytest.mark.parametrize("given, cuda, expected", [(None, True, 1), (None, False, None), ("cpu", True, None)])
def test_a_session_without_a_device_meters_the_cuda_device_in_use(monkeypatch, given, cuda, expected):
    """A Telemetry built without a device (an HF Trainer's: the framework sets the device later) meters the
    current CUDA device at start, as the run recorder does; one built for the CPU meters no GPU."""
    import torch

    from telemetry.capture import session
    from telemetry.settings import TelemetrySettings

    opened = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(session, "open_gpu_source", lambda index, nvml=None: opened.append(index) or Unavailable("gpu", "fake"))
    tel = session.Telemetry(TelemetrySettings(interfaces=[], cross_rank_every=0), run_dir=None,
                            device=torch.device(given) if given else None)
    tel.start(trace=False)
    try:
        assert opened == [expected]
    finally:
        tel.close()


@pytest.mark.parametrize("local_rank, current, count, expected", [
    (1, 0, 2, 1),  # the device never set (a script that moves its model with .to(local_rank)): the local rank's
    (1, 1, 2, 1),  # set by the framework
    (1, 0, 1, 0),  # one visible GPU per process (CUDA_VISIBLE_DEVICES): the only one
    (0, 0, 2, 0),
    (3, 0, 2, 0),  # more local ranks than GPUs: no GPU of its own to guess; the current one
])
def test_a_session_without_a_device_meters_its_local_ranks_gpu_where_none_was_set(monkeypatch, local_rank, current,
                                                                                 count, expected):
    """review65: a torchrun script that moves its model to cuda:LOCAL_RANK without torch.cuda.set_device (the
    DDP tutorial's `model.to(rank)`) leaves every rank's current device at 0: every rank of a host metered GPU 0's
    power and energy as its own. Where the current device is still 0 on a later local rank with a GPU of its own,
    that GPU is metered (as torch's barrier guesses a rank's device)."""
    import torch

    from telemetry.capture import session
    from telemetry.settings import TelemetrySettings

    opened = []
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(session, "open_gpu_source", lambda index, nvml=None: opened.append(index) or Unavailable("gpu", "fake"))
    tel = session.Telemetry(TelemetrySettings(interfaces=[], cross_rank_every=0), run_dir=None)
    tel.start(trace=False)
    try:
        assert opened == [expected]
    finally:
        tel.close()


def test_a_counter_that_did_not_advance_in_a_short_step_is_unknown_power_not_zero():
    """NVML's energy counter is refreshed every few milliseconds on some boards (~10 ms reported in
    gpuopenanalytics/pynvml#18): a step shorter than that, with no power sample inside it, can read a delta of
    0 J. The step's power is then unknown with the reason, never 0 W; the energy delta itself stays (the next
    step's delta holds what this one's missed, so the run's total is right)."""
    clock = Clock()
    nvml = counter_refreshed_every_50_ms(clock, 400.0)
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600, clock=clock)
    clock.t = 1.0
    meter.begin()
    clock.t = 1.02  # the counter still reads its 1.000 s value
    stalled = meter.step()
    clock.t = 1.06  # past the next refresh: 50 ms of energy in this step's delta
    moved = meter.step()
    meter.close()
    assert stalled["energy_j"]["gpu0"] == 0 and stalled["power_w"]["gpu0"] is None
    assert "did not advance" in stalled["reason"] and "gpu0" in stalled["reason"]
    assert moved["energy_j"]["gpu0"] == pytest.approx(20.0, abs=1e-3) and moved["power_w"]["gpu0"] > 0
    assert "reason" not in moved


def test_the_step_whose_delta_holds_a_stalled_counters_energy_reads_its_power_over_the_stall():
    """review65: after steps whose counter did not advance (power null), the next delta holds their energy too;
    divided by its own interval alone it read 2.5x the power (1000 W on a 400 W board: steps of 20 ms, a counter
    refreshed every 50 ms). The power of such a delta is over the time since the counter last advanced."""
    clock = Clock()
    nvml = counter_refreshed_every_50_ms(clock, 400.0)
    meter = EnergyMeter(NvmlEnergy([0], nvml=nvml), sample_interval_s=3600, clock=clock)
    clock.t = 1.0
    meter.begin()
    steps = []
    for n in range(1, 51):  # 20 ms steps for a second
        clock.t = 1.0 + n * 0.02
        steps.append(meter.step())
    meter.close()
    powers = [s["power_w"]["gpu0"] for s in steps if s["power_w"]["gpu0"] is not None]
    assert sum(s["energy_j"]["gpu0"] for s in steps) == pytest.approx(400.0, abs=1e-3)  # the total stays right
    assert len(powers) == 20 and all(300 <= p <= 520 for p in powers), powers
    assert sum(powers) / len(powers) == pytest.approx(400.0, rel=0.1)
