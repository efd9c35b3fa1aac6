"""GPU and CPU energy behind one small interface (REFERENCE.md section 6).

Energy comes from cumulative counters read at step boundaries (no device sync): NVML's total-energy
counter (mJ since driver load, Volta and newer) per GPU, and RAPL package counters (uJ) for CPUs.
Power is sampled by a background thread (NVML's reading is a ~1 s average on Ampere and newer, so it
is shown, never integrated). Where nothing is readable the source says why and reports None, never 0.
"""
from __future__ import annotations

import glob
import os
import threading
from typing import Protocol


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


class NvmlEnergy:
    name = "nvml"

    def __init__(self, indices: list[int] | None = None, nvml=None):
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py
        self.nvml = nvml
        self.reason = None
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        self.indices = list(range(count)) if indices is None else [i for i in indices if i < count]
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self._energy_ok = []
        for h in self.handles:
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                self._energy_ok.append(True)
            except nvml.NVMLError:  # pre-Volta or not supported on this board
                self._energy_ok.append(False)

    def devices(self) -> list[str]:
        return [f"gpu{i}" for i in self.indices]

    def energy_j(self) -> list[float | None]:
        out = []
        for h, ok in zip(self.handles, self._energy_ok):
            out.append(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0 if ok else None)
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


def open_gpu_source(local_gpu: int | None, nvml=None) -> EnergySource:
    """NVML for this rank's GPU, or the reason it cannot be read."""
    if local_gpu is None:
        return Unavailable("nvml", "no GPU is used by this rank")
    try:
        if nvml is None:
            import pynvml as nvml
    except ImportError:
        return Unavailable("nvml", "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        return NvmlEnergy([local_gpu], nvml=nvml)
    except nvml.NVMLError as exc:  # NVMLError_LibraryNotFound without a driver
        return Unavailable("nvml", f"NVML not available: {exc}")


def open_cpu_source(root: str = "/sys") -> EnergySource:
    rapl = RaplEnergy(root)
    return rapl if rapl.reason is None else Unavailable("rapl", rapl.reason)


class EnergyMeter:
    """Per-step energy from counter deltas plus a background power sampler for one source."""

    def __init__(self, source: EnergySource, sample_interval_s: float = 0.1):
        self.source = source
        self.reason = source.reason
        self._last = source.energy_j() if source.reason is None else []
        self._samples: list[list[float | None]] = []
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

    def step(self) -> dict:
        """Energy (J) and mean sampled power (W) per device since the last call."""
        if self.reason is not None:
            return {"energy_j": None, "power_w": None, "reason": self.reason}
        now = self.source.energy_j()
        wraps = self.source.wrap_j() if hasattr(self.source, "wrap_j") else [None] * len(now)
        energy = []
        for before, after, wrap in zip(self._last, now, wraps):
            if before is None or after is None:
                energy.append(None)
            elif after < before:  # counter wrapped (RAPL) or driver reloaded
                energy.append(after + wrap - before if wrap else None)
            else:
                energy.append(after - before)
        self._last = now
        with self._lock:
            samples, self._samples = self._samples, []
        power = []
        for i in range(len(now)):
            values = [s[i] for s in samples if i < len(s) and s[i] is not None]
            power.append(sum(values) / len(values) if values else None)
        return {"energy_j": dict(zip(self.source.devices(), energy)), "power_w": dict(zip(self.source.devices(), power))}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.source.close()

