"""telemetry.capture.link_probe with stand-in point-to-point calls: who sends to whom, and the fastest round."""
from __future__ import annotations

import types

import pytest

from telemetry.capture import link_probe as module
from telemetry.capture.link_probe import link_probe

CLOCK = [0.0]  # a clock the stand-in transfers advance: the probe's timing without waiting


class Work:
    def __init__(self, delay=0.0):
        self.delay = delay

    def wait(self):
        CLOCK[0] += self.delay


def test_off_the_ring_or_alone_there_is_nothing_to_time():
    calls = []
    fake = lambda *a, **k: calls.append(a) or Work()  # noqa: E731
    assert link_probe(fake, fake, None, 3, [0, 1], 1024) is None
    assert link_probe(fake, fake, None, 0, [0], 1024) is None
    assert calls == []


def test_each_leader_receives_from_the_previous_and_sends_to_the_next(monkeypatch):
    monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=lambda: CLOCK[0]))
    sent, received = [], []
    delays = iter([0.03, 0.01, 0.02])  # the data transfer of each round; the start marker is instant

    def isend(tensor, dst, group=None, tag=None):
        sent.append((dst, tag, tensor.numel()))
        return Work()

    def irecv(tensor, src, group=None, tag=None):
        received.append((src, tag, tensor.numel()))
        return Work(next(delays) if tag == 72 else 0.0)

    t = link_probe(isend, irecv, "group", 4, [0, 4, 8], 4000, rounds=3)
    assert sent == [(8, 71, 1), (8, 72, 1000)] * 3  # 4000 bytes of float32
    assert received == [(0, 71, 1), (0, 72, 1000)] * 3
    assert t == pytest.approx(0.01)  # the fastest round: a stall slows one round, a slow link all of them
