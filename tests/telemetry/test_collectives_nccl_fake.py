"""The NCCL timing path with a fake Work: durations read lazily, sync calls kept stream-ordered."""
from __future__ import annotations

import torch

from telemetry.collectives import DIST_SPECS, Call, CollectiveTracer


class FakeNcclWork:
    def __init__(self, duration_ms, completed=True):
        self.duration_ms, self.completed, self.waited = duration_ms, completed, False

    def is_completed(self):
        return self.completed

    def _get_duration(self):
        if self.duration_ms is None:
            raise RuntimeError("timing is not enabled")
        return self.duration_ms

    def wait(self):
        self.waited = True
        return True


def test_duration_comes_from_the_work_once_complete():
    call = Call("all_reduce", 4096, 8, "nccl", "dist", 0.0, work=FakeNcclWork(2.5))
    call.resolve()
    assert call.duration_s == 0.0025
    pending = Call("all_reduce", 4096, 8, "nccl", "dist", 0.0, work=FakeNcclWork(2.5, completed=False))
    pending.resolve()
    assert pending.duration_s is None  # never waits for the device
    untimed = Call("all_reduce", 4096, 8, "nccl", "dist", 0.0, work=FakeNcclWork(None))
    untimed.resolve()
    assert untimed.duration_s is None


def test_sync_nccl_call_is_issued_async_and_waited(monkeypatch):
    seen = {}

    def all_reduce(tensor, op=None, group=None, async_op=False):  # same parameters as torch's
        seen["async_op"] = async_op
        seen["work"] = FakeNcclWork(1.0)
        return seen["work"] if async_op else None

    tracer = CollectiveTracer()
    monkeypatch.setattr(CollectiveTracer, "_group_info", staticmethod(lambda group: (8, "nccl")))
    wrapped = tracer._wrap_dist("all_reduce", all_reduce, DIST_SPECS["all_reduce"])
    tracer.begin_step()
    assert wrapped(torch.ones(256)) is None  # the caller asked for a synchronous call and gets one
    assert seen["async_op"] is True and seen["work"].waited
    summary = tracer.end_step().summary()["all_reduce"]
    assert summary["bytes"] == 1024 and summary["time_s"] == 0.001
    assert summary["busbw_gbps"] == 1024 * (2 * 7 / 8) / 0.001 / 1e9
