"""NIC and RDMA counters read off the step path: sampler threads read them, the step takes the latest.

`ethtool -S` starts a process per NIC (tens to hundreds of milliseconds each on a loaded RoCE host), and a
host's sysfs counters are hundreds of file reads. Read at each step's end on the host's local rank 0, they
held that rank and, through the cross-rank reduction, every other rank. Here each source has a thread of its
own - the sysfs counters (every `interval_s`), and each ethtool interface (at most once a second, or every
`interval_s` if longer) - that stamps each sample with the perf_counter times its read began and ended. `take()` at a
step's end only subtracts the source's sample used last time from its newest one: no file read, no process,
no wait.

A step's counters are therefore the growth between two samples, not between the step's own ends. Each
source's window is recorded with the step (`counters_window`): where its two samples fall against the step
(`from_s`, `to_s`, seconds from the step's start; a sample's time is the middle of its read), the share of
the window inside the step and of the step inside the window, and `straddles: true` when the window reaches
into another step (it began before this step did, or ended before this step ended, by more than half a
read): that much growth moves to a neighbouring step; summed over steps nothing is lost or counted twice. A source with no new sample since
the previous step gives no growth this step (null with the reason), and all of it next time.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from telemetry.capture.counters import CounterReader, diff, went_back

SYSFS = "sysfs"
# ethtool starts a process per read: at most one per NIC a second (PFC pauses and discards need no finer grain)
ETHTOOL_MIN_INTERVAL_S = 1.0
COUNTER_WENT_BACK = ("these counters went back (device reset or re-registered, or a 32-bit counter wrapped): "
                     "their growth in this window is unknown and left out")
NO_SAMPLE = "no new sample of this source since the previous step (its growth goes to the next step)"


@dataclass(frozen=True)
class Sample:
    t0: float  # when the read began (perf_counter)
    t1: float  # when it ended
    values: dict

    @property
    def t(self) -> float:
        return (self.t0 + self.t1) / 2


class _Source:
    def __init__(self, name: str, read, every_s: float):
        self.name, self.read, self.every_s = name, read, every_s
        self.latest: Sample | None = None  # replaced whole by the sampler thread: readers need no lock
        self.taken: Sample | None = None  # the sample the last step ended on
        self.reads = 0
        self.read_s = 0.0
        self.failures = 0


class CounterSampler:
    """Samples a CounterReader's sources on threads of its own; `take()` is the step path's only call."""

    def __init__(self, reader: CounterReader, interval_s: float = 0.1, clock=time.perf_counter, start: bool = True):
        self.reader, self.interval_s, self.clock = reader, interval_s, clock
        self.sources = [_Source(SYSFS, reader.read_sysfs, interval_s)]  # the sysfs files: one source
        eth = reader.ethtool
        if eth is not None:
            for iface in eth.interfaces:
                self.sources.append(_Source(f"eth:{iface}", lambda i=iface: {f"eth:{i}": eth._wanted(i)},
                                            max(interval_s, ETHTOOL_MIN_INTERVAL_S)))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._begun = False
        # the first sample of every source: the reader's own first read (at its construction, just now), so
        # start-up runs no extra ethtool per NIC
        now = self.clock()
        first = getattr(reader, "_last", None) or {}
        for src in self.sources:
            values = ({k: v for k, v in first.items() if not k.startswith("eth:")} if src.name == SYSFS else
                      {src.name: first[src.name]} if src.name in first else None)
            if values is None:
                self.sample(src)
            else:
                src.latest = Sample(now, now, values)
            src.taken = src.latest
        if start:
            self.start()

    @property
    def ports(self) -> list[tuple[str, int]]:
        """The RDMA ports counted (the reader's)."""
        return self.reader.ports

    def keep_ports(self, ports: list[tuple[str, int]]) -> None:
        """Count only these RDMA ports from now on (the ones NCCL uses: rdma_devices.py); `take()` leaves the
        others out of samples read before, so no step counts a port left out."""
        self.reader.keep_ports(ports)

    def _kept_devices(self) -> set[str]:
        return {f"rdma:{d}/{n}" for d, n in self.reader.ports}

    @property
    def ethtool_interfaces(self) -> list[str]:
        return [s.name[len("eth:"):] for s in self.sources if s.name != SYSFS]

    def start(self) -> None:
        for src in self.sources:
            t = threading.Thread(target=self._loop, args=(src,), name=f"telemetry-counters:{src.name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _loop(self, src: _Source) -> None:
        while not self._stop.is_set():
            began = self.clock()
            self.sample(src)
            self._stop.wait(max(src.every_s - (self.clock() - began), 0.0))

    def sample(self, src: _Source) -> None:
        """Read one source now (on the calling thread) and make it the source's newest sample. A read that
        lost devices it had (ethtool failed) is not kept: the window grows to the next good read."""
        t0 = self.clock()
        try:
            values = src.read()
        except Exception:  # noqa: BLE001 - a sampler thread must not die; the gap shows as a longer window
            values = None
        t1 = self.clock()
        src.reads += 1
        src.read_s += t1 - t0
        before = src.latest.values if src.latest is not None and src.name != SYSFS else {}
        if values is None or any(before.get(d) and not values.get(d) for d in before):  # ethtool failed
            src.failures += 1
            return
        src.latest = Sample(t0, t1, values)

    def sample_now(self) -> None:
        """Read every source on the calling thread (the collective sweep's intervals, not the step path)."""
        for src in self.sources:
            self.sample(src)

    def begin(self) -> dict[str, dict[str, int]]:
        """The first step starts now: each source's newest sample becomes the one the step counts from, so the
        traffic before it (model broadcast, checkpoint load, data download) is no step's. Returns that growth
        (the run's loss verdict still counts it); later calls return {} and change nothing."""
        if self._begun:
            return {}
        self._begun = True
        before: dict[str, dict[str, int]] = {}
        for src in self.sources:
            latest, taken = src.latest, src.taken
            if latest is not None and taken is not None and latest is not taken:
                before.update(diff(taken.values, latest.values))
                src.taken = latest
        return before

    def take(self, t_start: float | None, t_end: float) -> tuple[dict, dict]:
        """(per-device counter growth, per-source window) for the step (t_start, t_end]: each source's newest
        sample less the one the previous step ended on."""
        deltas: dict[str, dict[str, int]] = {}
        windows: dict[str, dict] = {}
        for src in self.sources:
            latest, taken = src.latest, src.taken
            if latest is None or taken is None or latest is taken:
                windows[src.name] = {"sample": None, "reason": NO_SAMPLE}
                continue
            grown = diff(taken.values, latest.values)
            if src.name == SYSFS:  # a read begun before keep_ports may still hold a port left out
                keep = self._kept_devices()
                grown = {k: v for k, v in grown.items() if not k.startswith("rdma:") or k in keep}
            deltas.update(grown)
            src.taken = latest
            origin = t_start if t_start is not None else taken.t
            a, b = taken.t, latest.t  # the counted window; each end known to within half its read's time
            slack = max((taken.t1 - taken.t0) / 2, (latest.t1 - latest.t0) / 2, 1e-3)
            inside = max(0.0, min(b, t_end) - max(a, origin))
            windows[src.name] = {
                "from_s": round(a - origin, 6), "to_s": round(b - origin, 6), "step_s": round(t_end - origin, 6),
                # how much of the counted window lies in this step, and how much of the step it covers
                "in_step_share": round(inside / (b - a), 4) if b > a else None,
                "step_share": round(inside / (t_end - origin), 4) if t_end > origin else None,
                "straddles": bool(a < origin - slack or b < t_end - slack)}
            back = went_back(taken.values, latest.values)
            if back:  # left out of the deltas: a reset or a wrap, growth unknown
                windows[src.name]["went_back"] = back
                windows[src.name]["went_back_reason"] = COUNTER_WENT_BACK
        return deltas, windows

    def describe(self) -> dict:
        """run.json `telemetry.counter_sampling`: how the counters were sampled, and what ethtool cost."""
        out = {"interval_s": self.interval_s, "sources": {}}
        for src in self.sources:
            out["sources"][src.name] = {"reads": src.reads, "failed_reads": src.failures,
                                        "mean_read_s": round(src.read_s / src.reads, 6) if src.reads else None}
        return out

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()
        self.reader.close()
