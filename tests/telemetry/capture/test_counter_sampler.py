"""NIC/RDMA counters off the step path: sampler threads read sysfs and ethtool, the step takes the latest.

The sysfs tree is a fake with the mlx5 driver's file names (test_congestion.py); ethtool's text is the
published mlx5_core `ethtool -S` output (evidence_fixtures/ethtool_S_mlx5_core_ethq.txt), returned by an
in-process stand-in for the `ethtool -S` process that records which thread ran it.
"""
from __future__ import annotations

import os
import threading

import pytest

from telemetry.capture import congestion as cg
from telemetry.capture import counter_sampler
from telemetry.capture.counter_sampler import NO_SAMPLE, SYSFS, CounterSampler
from telemetry.capture.counters import CounterReader, loss_verdict

from .test_congestion import mlx5_port, published
from .test_counters import write

MLX5_TEXT = published("ethtool_S_mlx5_core_ethq.txt").split("\n", 1)[1]  # less the source line


def rdma_bytes(root, words: int) -> None:
    write(root / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters" / "port_xmit_data", words)


def test_the_step_path_never_runs_ethtool(tmp_path, monkeypatch):
    from telemetry.capture.session import Telemetry, TelemetrySettings

    mlx5_port(tmp_path)
    rdma_bytes(tmp_path, 0)
    calls = []

    def ethtool_s(self, iface):  # stands in for the `ethtool -S IFACE` process
        calls.append((iface, threading.current_thread().name))
        return MLX5_TEXT

    monkeypatch.setattr(counter_sampler, "ETHTOOL_MIN_INTERVAL_S", 0.0)  # a short test: read as often as sysfs
    monkeypatch.setattr(cg.shutil, "which", lambda name: "/usr/sbin/ethtool")
    monkeypatch.setattr(cg.EthtoolReader, "_ethtool", ethtool_s)
    tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, sysfs=str(tmp_path), interfaces=[],
                                      counter_sample_interval_s=0.005))
    tel.start()
    at_start = len(calls)
    assert at_start and tel.counters.ethtool_interfaces == ["eth2"]  # the netdev behind mlx5_0
    try:
        for step in range(1, 6):
            tel.start_step(step)
            rdma_bytes(tmp_path, 100 * step)
            while len(calls) < at_start + 2 * step:  # let the sampler threads read (the step does not)
                threading.Event().wait(0.002)
            rec = tel.end_step(step)
            assert set(rec["host"]["counters_window"]) == {SYSFS, "eth:eth2"}
    finally:
        tel.close()
    after = calls[at_start:]
    assert after and {name for _, name in after} == {"telemetry-counters:eth:eth2"}
    assert threading.main_thread().name not in {name for _, name in after}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_step_deltas_follow_the_samples_and_say_when_they_straddle_steps(tmp_path):
    mlx5_port(tmp_path)
    rdma_bytes(tmp_path, 0)
    clock = Clock()
    sampler = CounterSampler(CounterReader(interfaces=[], root=str(tmp_path)), interval_s=0.1, clock=clock,
                             start=False)  # samples taken by hand below, at chosen times
    (sysfs,) = sampler.sources
    device = "rdma:mlx5_0/1"

    # step 1 (100.0, 101.0]: sampled at 100.5 (250 words in so far) and at 101.0 (400)
    for t, words in ((100.5, 250), (101.0, 400)):
        clock.now = t
        rdma_bytes(tmp_path, words)
        sampler.sample(sysfs)
    deltas, windows = sampler.take(100.0, 101.0)
    assert deltas[device]["port_xmit_bytes"] == 1600  # the first sample (at start) to the last: 400 words
    assert windows[SYSFS]["straddles"] is False and windows[SYSFS]["in_step_share"] == 1.0

    # step 2 (101.0, 102.0): no sample taken during it
    deltas, windows = sampler.take(101.0, 102.0)
    assert deltas == {} and windows[SYSFS] == {"sample": None, "reason": NO_SAMPLE}

    # step 3 (102.0, 103.0]: a sample at 102.6 covers steps 2 and 3 (600 more words since 101.0)
    clock.now = 102.6
    rdma_bytes(tmp_path, 1000)
    sampler.sample(sysfs)
    deltas, windows = sampler.take(102.0, 103.0)
    w = windows[SYSFS]
    assert deltas[device]["port_xmit_bytes"] == 2400 and w["straddles"] is True
    assert (w["from_s"], w["to_s"]) == (-1.0, 0.6) and w["in_step_share"] == 0.375 and w["step_share"] == 0.6

    # nothing lost or counted twice: the steps add up to the growth from start to the last sample
    assert 1600 + 0 + 2400 == 1000 * 4


def test_a_failed_ethtool_read_keeps_the_last_good_sample(tmp_path):
    texts = iter([MLX5_TEXT, MLX5_TEXT, ""])  # the filter read, the first sample, then ethtool fails
    eth = cg.EthtoolReader(["eth2"], run=lambda iface: next(texts))
    sampler = CounterSampler(CounterReader(interfaces=[], root=str(tmp_path), ethtool=eth), start=False)
    src = sampler.sources[1]
    good = src.latest
    sampler.sample(src)
    assert src.latest is good and src.failures == 1
    assert sampler.describe()["sources"]["eth:eth2"]["failed_reads"] == 1


@pytest.mark.integration  # starts the stand-in ethtool process
def test_with_a_300_ms_ethtool_on_path_the_step_never_waits_for_it(tmp_path, monkeypatch):
    from telemetry.capture.session import Telemetry, TelemetrySettings

    mlx5_port(tmp_path)
    rdma_bytes(tmp_path, 0)
    (tmp_path / "ethtool_S.txt").write_text("NIC statistics:\n" + "".join(
        f"     {line}\n" for line in MLX5_TEXT.splitlines() if line.strip()))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ethtool").write_text(f"#!/bin/sh\nsleep 0.3\ncat {tmp_path / 'ethtool_S.txt'}\n")
    (bindir / "ethtool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    runs, real_run = [], cg.subprocess.run

    def run(cmd, *args, **kwargs):
        runs.append((cmd[0], threading.current_thread().name))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(cg.subprocess, "run", run)
    tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, sysfs=str(tmp_path), interfaces=[]))
    tel.start()
    at_start = len(runs)
    assert runs[0][0] == str(bindir / "ethtool")
    try:
        for step in range(1, 4):
            tel.start_step(step)
            threading.Event().wait(0.2)
            rec = tel.end_step(step)
            assert "eth:eth2" in rec["host"]["counters_window"]
    finally:
        tel.close()
    after = runs[at_start:]  # (the sampler thread's first read may start before at_start is taken)
    assert threading.main_thread().name not in {name for _, name in after}
    assert {name for _, name in runs} == {"MainThread", "telemetry-counters:eth:eth2"}


def test_a_port_left_out_after_a_sample_was_read_is_not_counted(tmp_path):
    for dev in ("mlx5_0", "mlx5_1"):
        port = tmp_path / "class" / "infiniband" / dev / "ports" / "1"
        write(port / "state", "4: ACTIVE")
        write(port / "counters" / "port_xmit_data", 0)
    sampler = CounterSampler(CounterReader(interfaces=[], root=str(tmp_path)), start=False)
    write(tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters" / "port_xmit_data", 10**9)
    sampler.sample_now()  # read with both ports
    sampler.keep_ports([("mlx5_0", 1)])  # then NCCL's log names mlx5_0 only (a storage card is mlx5_1)
    deltas, _ = sampler.take(None, 1e9)
    assert set(deltas) == {"rdma:mlx5_0/1"}


def test_a_counter_that_went_back_is_unknown_never_negative_nor_loss(tmp_path):
    """A port reset (driver reload, link flap re-registering the device) or a 32-bit driver counter wrapping
    brings counters back near 0 (modelled on the fake sysfs tree): its growth is unknown and left out with the
    reason, never a negative byte count, and a loss counter that went back does not make the run 'loss'."""
    mlx5_port(tmp_path, oos=50)
    rdma_bytes(tmp_path, 1000)
    hw = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "hw_counters"
    write(hw / "local_ack_timeout_err", 7)
    clock = Clock()
    sampler = CounterSampler(CounterReader(interfaces=[], root=str(tmp_path)), interval_s=0.1, clock=clock,
                             start=False)
    (sysfs,) = sampler.sources
    clock.now = 101.0
    rdma_bytes(tmp_path, 10)  # the port was reset: its counters restart from 0
    write(hw / "local_ack_timeout_err", 0)
    write(hw / "out_of_sequence", 0)
    sampler.sample(sysfs)
    deltas, windows = sampler.take(100.0, 101.0)
    grown = deltas["rdma:mlx5_0/1"]
    assert all(v >= 0 for v in grown.values()), grown
    assert "port_xmit_bytes" not in grown and "local_ack_timeout_err" not in grown
    assert windows[SYSFS]["went_back"] == ["rdma:mlx5_0/1:local_ack_timeout_err", "rdma:mlx5_0/1:out_of_sequence",
                                           "rdma:mlx5_0/1:port_xmit_data"]
    assert "unknown" in windows[SYSFS]["went_back_reason"]
    assert loss_verdict([deltas])["verdict"] == "clean"


def test_the_first_steps_counters_count_from_its_start_and_setup_loss_still_counts(tmp_path):
    """The sampler starts at telemetry's start; before step 1 the model's parameters are broadcast and a
    checkpoint is read over the fabric (modelled as growth sampled before the step): step 1's RDMA bytes are its
    own, as the tracer leaves setup collectives out of the steps, while a drop during setup stays in the
    returned growth for the run's loss verdict."""
    mlx5_port(tmp_path)
    rdma_bytes(tmp_path, 0)
    hw = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "hw_counters"
    clock = Clock()
    sampler = CounterSampler(CounterReader(interfaces=[], root=str(tmp_path)), interval_s=0.1, clock=clock,
                             start=False)
    (sysfs,) = sampler.sources
    device = "rdma:mlx5_0/1"
    clock.now = 150.0  # setup: 5000 words and one ack timeout before step 1
    rdma_bytes(tmp_path, 5000)
    write(hw / "local_ack_timeout_err", 1)
    sampler.sample(sysfs)
    before = sampler.begin()  # step 1 starts
    assert before[device]["port_xmit_bytes"] == 20000 and before[device]["local_ack_timeout_err"] == 1
    assert sampler.begin() == {}  # later steps change nothing
    clock.now = 151.0
    rdma_bytes(tmp_path, 5100)
    sampler.sample(sysfs)
    deltas, _ = sampler.take(150.0, 151.0)
    assert deltas[device]["port_xmit_bytes"] == 400 and deltas[device]["local_ack_timeout_err"] == 0
    assert loss_verdict([before, deltas])["verdict"] == "loss"
