"""Host NIC and RDMA counters as per-step deltas (docs/reference.md section 5).

- /sys/class/net/<if>/statistics: right for socket transports (TCP, gloo); RDMA traffic is not there.
- /sys/class/infiniband/<dev>/ports/<p>/counters: port_xmit_data/port_rcv_data count 4-byte words and,
  on mlx5, include RoCE traffic; hw_counters hold out-of-sequence, retransmission and ECN/CNP counts.

`root` is the sysfs mount point so tests can point it at a fake tree.
"""
from __future__ import annotations

import os
import threading

from telemetry.capture.congestion import HW_COUNTERS, EthtoolReader, classify

NET_STATS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "tx_dropped", "rx_dropped", "tx_errors",
             "rx_errors")
IB_PORT_COUNTERS = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                    "port_xmit_discards", "port_rcv_errors", "symbol_error", "link_downed", "port_xmit_wait")
IB_HW_COUNTERS = HW_COUNTERS  # mlx5, bnxt_re, efa and irdma names (telemetry/capture/congestion.py)
# Counters whose growth means something was dropped or had to be sent again. out_of_sequence is not
# here: it counts reordering (normal under adaptive routing), reported apart (REORDER_COUNTERS).
LOSS_COUNTERS = ("tx_dropped", "rx_dropped", "tx_errors", "rx_errors", "port_xmit_discards", "port_rcv_errors",
                 "symbol_error", "link_downed")
REORDER_COUNTERS = ("out_of_sequence",)
WORDS = ("port_xmit_data", "port_rcv_data")  # in units of 4 bytes


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def on_sysfs(root: str) -> bool:
    """Whether `root` is a sysfs mount (a kernel attribute there is regenerated on every read at offset 0, so
    one descriptor kept open reads fresh values); False for a fake tree of plain files or an unknown mount table."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real = os.path.realpath(root)
    return any(len(m) > 2 and m[1] == real and m[2] == "sysfs" for m in mounts)


class SysfsFiles:
    """Integer attributes read through descriptors opened once: a sampler reading a few dozen counters ten times
    a second spent ~10x more on open/close than on the reads (0.18 vs 0.013 ms per 8 files on the development
    VM). Only for a real sysfs mount (on_sysfs); a descriptor whose file went away is dropped and reopened."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # the sampler thread and a sweep's interval may read at once

    def read_int(self, path: str) -> int | None:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            with self._lock:
                if path in self._fds:  # another thread opened it meanwhile
                    os.close(fd)
                    fd = self._fds[path]
                else:
                    self._fds[path] = fd
        try:
            return int(os.pread(fd, 64, 0).split()[0])
        except (ValueError, IndexError):
            return None
        except OSError:  # the device went away: open it afresh next time
            with self._lock:
                if self._fds.get(path) == fd:
                    del self._fds[path]
                    os.close(fd)
            return None

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def list_interfaces(root: str = "/sys") -> list[dict]:
    """Every network interface with state, MTU and speed (Mb/s; None where the driver reports none)."""
    base = os.path.join(root, "class", "net")
    out = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        speed = _read_int(os.path.join(base, name, "speed"))
        out.append({"name": name, "operstate": _read_text(os.path.join(base, name, "operstate")),
                    "mtu": _read_int(os.path.join(base, name, "mtu")),
                    "speed_mbps": speed if speed is not None and speed > 0 else None})
    return out


def list_hcas(root: str = "/sys") -> list[dict]:
    """RDMA devices and ports with link layer (InfiniBand or Ethernet = RoCE), rate and state."""
    base = os.path.join(root, "class", "infiniband")
    out = []
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        ports = os.path.join(base, dev, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            p = os.path.join(ports, port)
            out.append({"device": dev, "port": int(port), "link_layer": _read_text(os.path.join(p, "link_layer")),
                        "rate": _read_text(os.path.join(p, "rate")), "state": _read_text(os.path.join(p, "state"))})
    return out


class CounterReader:
    """Reads the chosen interfaces' and HCA ports' counters; `delta()` gives growth since the last call."""

    def __init__(self, interfaces: list[str] | None = None, hcas: list[str] | None = None, root: str = "/sys",
                 ethtool: EthtoolReader | bool = False):
        self.root = root
        present = [i["name"] for i in list_interfaces(root)]
        self.interfaces = [i for i in (interfaces if interfaces is not None else present) if i in present]
        ports = list_hcas(root)
        wanted = set(hcas) if hcas is not None else None
        self.ports = [(p["device"], p["port"]) for p in ports if wanted is None or p["device"] in wanted]
        # PFC pause frames and port discards come from the driver through ethtool -S, on the same NICs
        self.ethtool = EthtoolReader(self._ethtool_interfaces()) if ethtool is True else (ethtool or None)
        self._hw_present: dict[tuple[str, int], list[str]] = {}
        self._files = SysfsFiles() if on_sysfs(root) else None
        self._read_int = self._files.read_int if self._files is not None else _read_int
        self._last = self.read()

    def close(self) -> None:
        """Close the counters' descriptors (a later read opens them again)."""
        if self._files is not None:
            self._files.close()

    def keep_ports(self, ports: list[tuple[str, int]]) -> None:
        """Count only these RDMA ports from now on (the ones NCCL uses: telemetry/capture/rdma_devices.py)."""
        keep = set(ports)
        self.ports = [p for p in self.ports if p in keep]
        self._last = {k: v for k, v in self._last.items()
                      if not k.startswith("rdma:") or tuple(k[5:].rsplit("/", 1)) in {(d, str(n)) for d, n in keep}}

    def _ethtool_interfaces(self) -> list[str]:
        """The counted interfaces plus the netdev behind each RDMA port (RoCE: its PFC counters)."""
        names = list(self.interfaces)
        for dev, _ in self.ports:
            ndir = os.path.join(self.root, "class", "infiniband", dev, "device", "net")
            names += [n for n in (sorted(os.listdir(ndir)) if os.path.isdir(ndir) else []) if n not in names]
        return names

    def read(self) -> dict[str, dict[str, int]]:
        snap = self.read_sysfs()
        if self.ethtool is not None:
            snap.update(self.ethtool.read())
        return snap

    def read_sysfs(self) -> dict[str, dict[str, int]]:
        """The sysfs counters only (file reads, no process started)."""
        snap: dict[str, dict[str, int]] = {}
        for name in self.interfaces:
            stats = os.path.join(self.root, "class", "net", name, "statistics")
            values = {k: v for k in NET_STATS if (v := self._read_int(os.path.join(stats, k))) is not None}
            snap[f"net:{name}"] = values
        for dev, port in self.ports:
            p = os.path.join(self.root, "class", "infiniband", dev, "ports", str(port))
            values = {}
            for k in IB_PORT_COUNTERS:
                v = self._read_int(os.path.join(p, "counters", k))
                if v is not None:
                    values[k] = v
            hw = os.path.join(p, "hw_counters")
            present = self._hw_present.get((dev, port))
            if present is None:  # the driver's set of files is fixed: list it once, not ~60 failed opens a read
                files = set(os.listdir(hw)) if os.path.isdir(hw) else set()
                present = self._hw_present[(dev, port)] = [k for k in IB_HW_COUNTERS if k in files]
            for k in present:
                v = self._read_int(os.path.join(hw, k))
                if v is not None:
                    values[k] = v
            snap[f"rdma:{dev}/{port}"] = values
        return snap

    def delta(self) -> dict[str, dict[str, int]]:
        """Growth since the last call, read now on the calling thread (ethtool included: ~ms to 100s of ms per
        NIC). The step path uses telemetry/capture/counter_sampler.py instead."""
        now = self.read()
        out = diff(self._last, now)
        self._last = now
        return out


def diff(before: dict[str, dict[str, int]], now: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per-device counter growth from `before` to `now`, RDMA data words as bytes. A counter that went back
    (the device was reset or re-registered, or a 32-bit driver counter wrapped: which, and how often, cannot be
    told) has unknown growth: it is left out, never a negative count (went_back names it)."""
    out = {}
    for dev, values in now.items():
        prior = before.get(dev, {})
        d = {k: v - prior[k] for k, v in values.items() if k in prior and v >= prior[k]}
        for k in WORDS:  # report bytes, not 4-byte words
            if k in d:
                d[k.replace("_data", "_bytes")] = d.pop(k) * 4
        if dev.startswith("rdma:"):  # EFA ports have no port data counters: the device's own byte counts
            for words, own in (("port_xmit_bytes", "tx_bytes"), ("port_rcv_bytes", "rx_bytes")):
                if words not in d and own in d:
                    d[words] = d[own]
        out[dev] = d
    return out


def went_back(before: dict[str, dict[str, int]], now: dict[str, dict[str, int]]) -> list[str]:
    """'device:counter' for each counter lower in `now` than in `before` (its growth is unknown: diff)."""
    return sorted(f"{dev}:{k}" for dev, values in now.items() for k, v in values.items()
                  if k in before.get(dev, {}) and v < before[dev][k])


def _kind(name: str) -> str | None:
    if name in LOSS_COUNTERS:
        return "loss"
    if name in REORDER_COUNTERS:
        return "reorder"
    c = classify(name)
    return c[0] if c and c[0] in ("loss", "reorder") else None


def loss_verdict(deltas: list[dict[str, dict[str, int]]]) -> dict:
    """The run's loss verdict: 'loss' if any drop/error/retransmission counter grew, 'clean' if none did.
    Reordering (out_of_sequence) is counted apart and never makes a run 'loss'."""
    totals: dict[str, int] = {}
    reorder: dict[str, int] = {}
    for step in deltas:
        for dev, values in step.items():
            for k, v in values.items():
                kind = _kind(k)
                if v and kind == "loss":
                    totals[f"{dev}:{k}"] = totals.get(f"{dev}:{k}", 0) + v
                elif v and kind == "reorder":
                    reorder[f"{dev}:{k}"] = reorder.get(f"{dev}:{k}", 0) + v
    seen = any(step for step in deltas)
    if not seen:
        return {"verdict": None, "reason": "no counters were read", "counts": {}, "reordering": {}}
    return _verdict(totals, reorder)


def _verdict(counts: dict[str, int], reorder: dict[str, int]) -> dict:
    reason = ("no drops, errors or retransmissions" if not counts else
              "drops, errors or retransmissions seen: " + ", ".join(sorted(counts)))
    if reorder:
        reason += (f"; {sum(reorder.values())} packets arrived out of sequence (reordering: expected under adaptive "
                   "routing or packet spraying, not loss)")
    return {"verdict": "clean" if not counts else "loss", "counts": counts, "reordering": reorder, "reason": reason}


def merge_verdicts(earlier: dict | None, now: dict | None) -> dict:
    """One verdict over a resumed run's attempts: the counts add up; an attempt that read no counters
    (a resume with nothing left to do) leaves the earlier verdict as it was."""
    if not earlier or earlier.get("verdict") is None:
        return now or {"verdict": None, "reason": "no counters were read", "counts": {}, "reordering": {}}
    if not now or now.get("verdict") is None:
        return earlier
    merged = []
    for key in ("counts", "reordering"):
        out = dict(earlier.get(key) or {})
        for k, v in (now.get(key) or {}).items():
            out[k] = out.get(k, 0) + v
        merged.append(out)
    return _verdict(*merged)
