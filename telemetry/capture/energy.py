"""GPU and CPU energy behind one small interface (docs/reference.md section 6).

Energy comes from cumulative counters read at step boundaries (no device sync): NVML's total-energy
counter (mJ since driver load, Volta and newer) per GPU, and RAPL package counters (uJ) for CPUs.
Power is sampled by a background thread (NVML's reading is a ~1 s average on Ampere and newer, so it
is shown, never integrated). A step shorter than the sampler's period may hold no sample: its power is
then the energy counter's delta over the step's duration, so every step has one where energy is known.
Where nothing is readable the source says why and reports None, never 0.
"""
from __future__ import annotations

import glob
import os
import threading
import time
from typing import Callable, Protocol
from telemetry.errors import HarnessError


class EnergySource(Protocol):
    name: str
    reason: str | None  # why it is unavailable; None when it works

    def devices(self) -> list[str]: ...
    def energy_j(self) -> list[float | None]: ...  # cumulative, per device
    def power_w(self) -> list[float | None]: ...  # instantaneous, per device
    def close(self) -> None: ...


class Unavailable:
    """The honest stand-in: nothing to read, and the reason why."""

    def __init__(self, name: str, reason: str):
        self.name, self.reason = name, reason

    def devices(self) -> list[str]:
        return []

    def energy_j(self) -> list[float | None]:
        return []

    def power_w(self) -> list[float | None]:
        return []

    def close(self) -> None:
        pass


class DeviceNotMapped(HarnessError):
    """A CUDA device that no NVML device could be matched to: its energy is unknown, never another GPU's."""


_ZERO_UUID = "00000000-0000-0000-0000-000000000000"  # what some drivers report when they have none


def cuda_identity(ordinal: int, properties=None) -> dict:
    """The CUDA runtime's UUID (hex, no prefix) and PCI address (NVML's form) of this process's device
    `ordinal`; either is None where the runtime gives none. `properties` stands in for
    torch.cuda.get_device_properties (tests)."""
    if properties is None:
        import torch

        properties = torch.cuda.get_device_properties
    p = properties(ordinal)
    uuid = str(getattr(p, "uuid", "") or "").lower()
    uuid = uuid.removeprefix("gpu-").removeprefix("mig-")
    pci = None
    if all(hasattr(p, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        pci = f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
    return {"uuid": uuid if uuid and uuid != _ZERO_UUID else None, "pci_bus_id": pci}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older nvidia-ml-py returns bytes


def _nvml_handle_for_cuda(nvml, ordinal: int, properties=None) -> tuple[object, dict]:
    """(NVML handle, how it was matched) for CUDA device `ordinal`: by UUID (a GPU's, or a MIG
    instance's, whose parent GPU is read), else by PCI address. Raises DeviceNotMapped."""
    try:
        ident = cuda_identity(ordinal, properties)
    except Exception as exc:  # noqa: BLE001 - no CUDA runtime, bad ordinal: the energy is unknown
        raise DeviceNotMapped(f"cannot read the UUID or PCI address of CUDA device {ordinal}: {exc}") from None
    tried, handle, via, mig = [], None, None, None
    if ident["uuid"]:
        for prefix in ("GPU-", "MIG-"):
            try:
                handle, via = nvml.nvmlDeviceGetHandleByUUID(prefix + ident["uuid"]), "uuid"
            except nvml.NVMLError as exc:
                tried.append(f"UUID {prefix}{ident['uuid']}: {exc}")
                continue
            if prefix == "MIG-":  # energy and power counters exist for the whole GPU only
                mig = prefix + ident["uuid"]
                handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            break
    if handle is None and ident["pci_bus_id"]:
        try:
            handle, via = nvml.nvmlDeviceGetHandleByPciBusId(ident["pci_bus_id"]), "pci_bus_id"
        except nvml.NVMLError as exc:
            tried.append(f"PCI {ident['pci_bus_id']}: {exc}")
    if handle is None:
        raise DeviceNotMapped(f"CUDA device {ordinal} matches no NVML device "
                              f"({'; '.join(tried) or 'the CUDA runtime gives no UUID or PCI address'})")
    index = nvml.nvmlDeviceGetIndex(handle)
    mapping = {"device": f"gpu{index}", "cuda_device": ordinal,
               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "nvml_index": index,
               "uuid": _text(nvml.nvmlDeviceGetUUID(handle)), "pci_bus_id": ident["pci_bus_id"], "matched_by": via}
    if mig:
        mapping["mig_device"] = mig
        mapping["note"] = "a MIG instance: energy and power are the whole GPU's, shared with its other instances"
    return handle, mapping


class NvmlEnergy:
    """NVML counters for GPUs named by NVML index (`indices`) or by this process's CUDA ordinal
    (`cuda_devices`). CUDA ordinals are not NVML indices: CUDA_VISIBLE_DEVICES renumbers them (and may name
    UUIDs or MIG instances) and CUDA's default order is fastest-first, NVML's is PCI order. An ordinal is
    therefore matched by what the CUDA runtime says the device is (its UUID, else its PCI address), and
    `mapping` records the match so a run can show which physical GPU it read."""

    name = "nvml"

    def __init__(self, indices: list[int] | None = None, nvml=None, cuda_devices: list[int] | None = None,
                 properties=None):
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py
        self.nvml = nvml
        self.reason = None
        nvml.nvmlInit()
        try:
            if cuda_devices is not None:
                found = [_nvml_handle_for_cuda(nvml, d, properties) for d in cuda_devices]
                self.handles = [h for h, _ in found]
                self.mapping = [m for _, m in found]
            else:
                count = nvml.nvmlDeviceGetCount()
                wanted = list(range(count)) if indices is None else [i for i in indices if i < count]
                self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in wanted]
                self.mapping = [{"device": f"gpu{i}", "nvml_index": i, "matched_by": "nvml_index"} for i in wanted]
        except BaseException:
            self.close()
            raise
        self.indices = [m["nvml_index"] for m in self.mapping]
        self._energy_ok = []
        for h in self.handles:
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                self._energy_ok.append(True)
            except nvml.NVMLError:  # pre-Volta or not supported on this board
                self._energy_ok.append(False)

    def devices(self) -> list[str]:
        return [f"gpu{i}" for i in self.indices]  # NVML index: the physical GPU, whatever the rank's ordinal

    def energy_j(self) -> list[float | None]:
        out = []
        for h, ok in zip(self.handles, self._energy_ok):
            try:  # a read failing mid-run (GPU lost, driver busy) is an unknown reading, not the training's end
                out.append(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0 if ok else None)
            except self.nvml.NVMLError:
                out.append(None)
        return out

    def power_w(self) -> list[float | None]:
        out = []
        for h in self.handles:
            try:
                out.append(self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except self.nvml.NVMLError:
                out.append(None)
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


class RaplEnergy:
    """CPU package energy from /sys/class/powercap (intel-rapl:N), wrap-around handled by the caller's deltas."""

    name = "rapl"

    def __init__(self, root: str = "/sys"):
        self.reason = None
        paths = sorted(glob.glob(os.path.join(root, "class", "powercap", "intel-rapl:[0-9]*")))
        self.domains = [p for p in paths if p.count(":") == 1]  # packages, not their sub-domains
        self.ranges = []
        readable = []
        for d in self.domains:
            try:
                with open(os.path.join(d, "energy_uj")) as f:
                    int(f.read())
                readable.append(d)
            except (OSError, ValueError):
                continue
        if not self.domains:
            self.reason = "no RAPL domains under /sys/class/powercap"
        elif not readable:
            self.reason = "RAPL energy_uj is not readable (needs root on recent kernels)"
        self.domains = readable
        for d in self.domains:
            try:
                with open(os.path.join(d, "max_energy_range_uj")) as f:
                    self.ranges.append(int(f.read()))
            except (OSError, ValueError):
                self.ranges.append(None)

    def devices(self) -> list[str]:
        return [f"cpu-package{i}" for i in range(len(self.domains))]

    def energy_j(self) -> list[float | None]:
        out = []
        for d in self.domains:
            try:
                with open(os.path.join(d, "energy_uj")) as f:
                    out.append(int(f.read()) / 1e6)
            except (OSError, ValueError):
                out.append(None)
        return out

    def power_w(self) -> list[float | None]:
        return [None] * len(self.domains)

    def wrap_j(self) -> list[float | None]:
        return [r / 1e6 if r else None for r in self.ranges]

    def close(self) -> None:
        pass


class ReplayEnergy:
    """Recorded readings played back in order: for tests and for re-running a report offline."""

    def __init__(self, name: str, devices: list[str], energy: list[list[float]], power: list[list[float]] | None = None):
        self.name, self.reason = name, None
        self._devices, self._energy, self._power = devices, list(energy), list(power or [])
        self._i = self._p = 0

    def devices(self) -> list[str]:
        return self._devices

    def energy_j(self) -> list[float | None]:
        value = self._energy[min(self._i, len(self._energy) - 1)]
        self._i += 1
        return value

    def power_w(self) -> list[float | None]:
        if not self._power:
            return [None] * len(self._devices)
        value = self._power[min(self._p, len(self._power) - 1)]
        self._p += 1
        return value

    def close(self) -> None:
        pass


def open_gpu_source(local_gpu: int | None, nvml=None, properties=None) -> EnergySource:
    """NVML for this rank's GPU (`local_gpu` is its CUDA ordinal, as in torch.device("cuda", N)), or the
    reason it cannot be read. `properties` stands in for torch.cuda.get_device_properties (tests)."""
    if local_gpu is None:
        return Unavailable("nvml", "no GPU is used by this rank")
    try:
        if nvml is None:
            import pynvml as nvml
    except ImportError:
        return Unavailable("nvml", "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        return NvmlEnergy(nvml=nvml, cuda_devices=[local_gpu], properties=properties)
    except nvml.NVMLError as exc:  # NVMLError_LibraryNotFound without a driver
        return Unavailable("nvml", f"NVML not available: {exc}")
    except DeviceNotMapped as exc:
        return Unavailable("nvml", str(exc))


def open_cpu_source(root: str = "/sys") -> EnergySource:
    rapl = RaplEnergy(root)
    return rapl if rapl.reason is None else Unavailable("rapl", rapl.reason)


def total_j(energy: dict | None) -> float | None:
    """The devices' total energy (J) from EnergyMeter.step()'s `energy_j`: None when any device's is unknown (a
    package that could not be read is not 0 J; the step's reason names it)."""
    if not energy or any(v is None for v in energy.values()):
        return None
    return sum(energy.values())


class EnergyMeter:
    """Per-step energy from counter deltas plus a background power sampler for one source.

    `clock` (seconds, monotonic) times each interval: a stand-in clock for tests that drive a fake
    counter with it."""

    def __init__(self, source: EnergySource, sample_interval_s: float = 0.1,
                 clock: Callable[[], float] = time.perf_counter):
        self.source = source
        self.reason = source.reason
        self.clock = clock
        self._last = source.energy_j() if source.reason is None else []
        self._t_last = clock()
        self._begun = False
        self._samples: list[list[float | None]] = []
        self._stalled: dict[str, float] = {}  # device -> start of the intervals its counter has not advanced in
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if source.reason is None and any(p is not None for p in source.power_w()):
            self._thread = threading.Thread(target=self._sample, args=(sample_interval_s,), daemon=True,
                                            name="telemetry-power")
            self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            reading = self.source.power_w()
            with self._lock:
                self._samples.append(reading)

    def begin(self) -> None:
        """The first step starts now: its energy counts from here, not from when the meter opened (model
        build and data loading are no step's); power samples taken before are dropped. Later calls do
        nothing, so that consecutive steps' intervals meet and no energy falls between them."""
        if self._begun or self.reason is not None:
            return
        self._begun = True
        self._last = self.source.energy_j()
        self._t_last = self.clock()
        self._stalled = {}
        with self._lock:
            self._samples = []

    def step(self) -> dict:
        """Energy (J) and power (W) per device since the last call (or `begin`): power is the mean of the
        sampler's readings in the interval, or, with none in it (an interval shorter than the sampler's
        period), the energy delta over the interval's duration (over the time since the counter last advanced, where it
        stood still in the intervals before: the delta holds their energy too)."""
        if self.reason is not None:
            return {"energy_j": None, "power_w": None, "reason": self.reason}
        now = self.source.energy_j()
        t_now = self.clock()
        t_start, seconds, self._t_last = self._t_last, t_now - self._t_last, t_now
        wraps = self.source.wrap_j() if hasattr(self.source, "wrap_j") else [None] * len(now)
        energy, why = [], []
        for device, before, after, wrap in zip(self.source.devices(), self._last, now, wraps):
            if before is None or after is None:
                energy.append(None)
                if self._energy_known(device):  # a board without the counter says so in the meter's reason
                    why.append(f"{device}: the energy counter could not be read at the interval's "
                               f"{'start' if before is None else 'end'}")
            elif after < before:  # counter wrapped (RAPL) or driver reloaded
                energy.append(after + wrap - before if wrap else None)
                if not wrap:
                    why.append(f"{device}: the energy counter went back ({before:.3f} J to {after:.3f} J: driver "
                               "reloaded or counter reset), this interval's energy is unknown")
            else:
                energy.append(after - before)
        self._last = now
        with self._lock:
            samples, self._samples = self._samples, []
        power = []
        for i, device in enumerate(self.source.devices()):
            values = [s[i] for s in samples if i < len(s) and s[i] is not None]
            stalled = self._stalled.pop(device, None)  # when the counter last advanced, if it has stood since
            if values:
                power.append(sum(values) / len(values))
            elif energy[i] == 0 and seconds > 0:  # the counter's refresh period is longer than the interval
                power.append(None)
                self._stalled[device] = t_start if stalled is None else stalled
                why.append(f"{device}: the energy counter did not advance in this {seconds * 1000:.1f} ms interval "
                           "and no power sample fell in it (the counter refreshes less often); its power is unknown")
            elif energy[i] is not None and seconds > 0:  # after a stall the delta holds the stalled steps' energy too
                power.append(energy[i] / (t_now - stalled if stalled is not None else seconds))
            else:
                power.append(None)
        out = {"energy_j": dict(zip(self.source.devices(), energy)), "power_w": dict(zip(self.source.devices(), power))}
        if why:
            out["reason"] = "; ".join(why)
        return out

    def _energy_known(self, device: str) -> bool:
        """Whether `device` has an energy counter at all (NVML: not on pre-Volta boards)."""
        ok = getattr(self.source, "_energy_ok", None)
        if ok is None:
            return True
        return dict(zip(self.source.devices(), ok)).get(device, True)

    def describe(self) -> dict:
        """What this meter reads, for run.json: the source, each device (for NVML: which physical GPU,
        matched how) and the reason where nothing is read."""
        mapping = getattr(self.source, "mapping", None)
        return {"source": self.source.name, "reason": self.reason,
                "devices": mapping if mapping is not None else [{"device": d} for d in self.source.devices()]}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.source.close()

