"""The harness's own cost per step for NIC/RDMA counters, with an ethtool that takes 300 ms per NIC.

    python -m bench.nic_counters [--nics 1 4 8 16] [--steps 20] [--ethtool-s 0.3]

Each run builds a sysfs tree with N mlx5 RDMA ports (the driver's counter and hw_counters file names, each
with its netdev) and puts a stand-in `ethtool` first on PATH: a script that sleeps `--ethtool-s` and prints
a published mlx5_core `ethtool -S` text (isc-projects/ethq tests/mlx5_core, kept in
tests/telemetry/evidence_fixtures/ethtool_S_mlx5_core_ethq.txt). Then, per N:
- before: `CounterReader.delta()` at each step's end, as the step path did (every NIC's ethtool in turn);
- after: a telemetry session's whole `end_step` (the counters taken from the sampler threads' latest
  samples, plus energy and the tracer), with `take()` alone timed too, over `--steps` steps of 50 ms.
Results: one JSON line per N in bench/results/nic_counters.jsonl (command, machine, date).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from bench.support.results import append_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(REPO, "tests", "telemetry", "evidence_fixtures", "ethtool_S_mlx5_core_ethq.txt")
RESULTS = os.path.join(REPO, "bench", "results", "nic_counters.jsonl")
HW = ("out_of_sequence", "np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "packet_seq_err",
      "local_ack_timeout_err", "duplicate_request", "out_of_buffer")
PORT = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_discards",
        "port_rcv_errors", "symbol_error", "link_downed", "port_xmit_wait")


def _write(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as f:
        f.write(f"{value}\n")


def build(root: str, nics: int, ethtool_s: float) -> tuple[str, list[str]]:
    """A sysfs tree with `nics` mlx5 ports and a bin/ethtool stand-in; returns (bin dir, netdev names)."""
    names = []
    for i in range(nics):
        dev, net = f"mlx5_{i}", f"ens{i}np0"
        port = os.path.join(root, "sys", "class", "infiniband", dev, "ports", "1")
        _write(os.path.join(port, "link_layer"), "Ethernet")
        _write(os.path.join(port, "rate"), "400 Gb/sec (4X NDR)")
        _write(os.path.join(port, "state"), "4: ACTIVE")
        for k in PORT:
            _write(os.path.join(port, "counters", k), 0)
        for k in HW:
            _write(os.path.join(port, "hw_counters", k), 0)
        os.makedirs(os.path.join(root, "sys", "class", "infiniband", dev, "device", "net", net), exist_ok=True)
        names.append(net)
    with open(FIXTURE, encoding="utf-8") as f:
        text = f.read().split("\n", 1)[1]  # less the source line
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir)
    with open(os.path.join(root, "ethtool_S.txt"), "w", encoding="utf-8") as f:
        f.write("NIC statistics:\n" + "".join(f"     {line}\n" for line in text.splitlines() if line.strip()))
    script = os.path.join(bindir, "ethtool")
    with open(script, "w", encoding="utf-8") as f:
        f.write(f"#!/bin/sh\n# stand-in: ethtool -S IFACE, {ethtool_s} s, published mlx5_core text\n"
                f"sleep {ethtool_s}\ncat {os.path.join(root, 'ethtool_S.txt')}\n")
    os.chmod(script, 0o755)
    return bindir, names


def measure(nics: int, steps: int, ethtool_s: float) -> dict:
    from telemetry.capture import counter_sampler
    from telemetry.capture.counters import CounterReader
    from telemetry.capture.session import Telemetry, TelemetrySettings

    with tempfile.TemporaryDirectory() as root:
        bindir, names = build(root, nics, ethtool_s)
        os.environ["PATH"] = bindir + os.pathsep + os.environ["PATH"]
        sysfs = os.path.join(root, "sys")
        try:
            reader = CounterReader(interfaces=[], root=sysfs, ethtool=True)
            before = []
            for _ in range(min(steps, 3)):  # the step path before: every NIC's ethtool, one after another
                t0 = time.perf_counter()
                reader.delta()
                before.append(time.perf_counter() - t0)
            tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, nccl_debug=False, sysfs=sysfs,
                                              interfaces=[]))
            takes, ends = [], []
            real_take = counter_sampler.CounterSampler.take

            def timed_take(self, *a):
                t0 = time.perf_counter()
                out = real_take(self, *a)
                takes.append(time.perf_counter() - t0)
                return out

            counter_sampler.CounterSampler.take = timed_take
            tel.start()
            try:
                eth_nics = len(tel.counters.ethtool_interfaces)
                straddled = 0
                for step in range(1, steps + 1):
                    tel.start_step(step)
                    time.sleep(0.05)  # the step's own work
                    t0 = time.perf_counter()
                    rec = tel.end_step(step)
                    ends.append(time.perf_counter() - t0)
                    straddled += any(w.get("straddles") for w in rec["host"]["counters_window"].values())
                sampling = tel.counters.describe()
            finally:
                counter_sampler.CounterSampler.take = real_take
                tel.close()
        finally:
            os.environ["PATH"] = os.environ["PATH"].split(os.pathsep, 1)[1]
    # an ethtool source that has not finished a read yet (a short run: ethtool runs at most once a second) has no mean
    eth_reads = [s["mean_read_s"] for name, s in sampling["sources"].items()
                 if name.startswith("eth:") and s.get("mean_read_s") is not None]
    return {"nics": nics, "ethtool_nics": eth_nics, "ethtool_s": ethtool_s, "steps": steps,
            "before_step_path_ms_median": round(statistics.median(before) * 1e3, 1),
            "after_end_step_ms_median": round(statistics.median(ends) * 1e3, 3),
            "after_end_step_ms_max": round(max(ends) * 1e3, 3),
            "after_take_us_median": round(statistics.median(takes) * 1e6, 1),
            "steps_with_a_straddling_window": straddled,
            "ethtool_mean_read_s": round(statistics.mean(eth_reads), 3) if eth_reads else None,
            "sysfs_mean_read_ms": round(sampling["sources"]["sysfs"]["mean_read_s"] * 1e3, 3)}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nic_counters", description=__doc__.split("\n\n")[0])
    p.add_argument("--nics", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ethtool-s", type=float, default=0.3, help="seconds the stand-in ethtool takes per call")
    args = p.parse_args()
    for n in args.nics:
        append_result(RESULTS, "bench.nic_counters", measure(n, args.steps, args.ethtool_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
