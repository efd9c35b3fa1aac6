"""Server power and NIC counters around a collective sweep, which runs without the per-step session:
whole-server power per (operation, size) window and one counter verdict for the sweep, per host."""
from __future__ import annotations

import socket
import sys

from telemetry.capture import bmc_power
from telemetry.capture.congestion import summarize


class SweepEvidence:
    """On each host's first rank: a BMC sampler and a counter reader, opened before the sweep."""

    def __init__(self, bmc, chassis: str | None, interval_s: float, interfaces, sysfs: str = "/sys",
                 ethtool: bool = True, host: str | None = None, first_host: bool = True, hosts: int | None = None):
        from telemetry.capture.counters import CounterReader  # moves to capture with the layout change

        self.marks: list[tuple[str, int, float, float]] = []  # (op, bytes, t0, t1) on time.monotonic()
        self.sampler, self.info = None, {"source": None, "reason": "telemetry.bmc is not set"}
        address, why = bmc_power.bmc_for_host(bmc, host or socket.gethostname(), first_host, hosts)
        if address is None and bmc:
            self.info = {"source": None, "reason": why}
        if address:
            try:
                source = bmc_power.open_bmc_source(address, chassis)
                self.sampler = bmc_power.PowerSampler(source, interval_s).start()
                self.info = {**source.describe(), "interval_s": interval_s}
            except bmc_power.BmcError as exc:
                self.info = {"source": None, "reason": str(exc)}
                print(f"[telemetry] server power not read: {exc}", file=sys.stderr, flush=True)
        self.counters = CounterReader(interfaces, root=sysfs, ethtool=ethtool)

    def finish(self) -> dict:
        from telemetry.capture.counters import loss_verdict

        deltas = self.counters.delta()
        self.counters.close()
        out = {"counters": loss_verdict([deltas]), "congestion": summarize(deltas), "server_power": dict(self.info)}
        if self.sampler is not None:
            rows = []
            for op, size, t0, t1 in self.marks:
                w = self.sampler.window(t0, t1)
                rows.append({"op": op, "bytes": size, "seconds": t1 - t0, "watts": w["watts"],
                             "energy_j": w["energy_j"], "samples": w["samples"]})
            if self.marks:
                whole = self.sampler.window(self.marks[0][2], self.marks[-1][3])
                out["server_power"].update(mean_w=whole["watts"], energy_j=whole["energy_j"])
            out["server_power"]["rows"] = rows
            self.sampler.close()
        return out
