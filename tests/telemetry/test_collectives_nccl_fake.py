"""The NCCL path against a pretend ProcessGroupNCCL: no Work kept, durations from completion reports.

The fake models what matters of ProcessGroupNCCL (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp):
a Work holds its output tensors; every collective, and every coalesced batch, is one work on the group's
stream (a batch_isend_irecv is one COALESCED work); a blocking call returns once the work is enqueued
(stream-ordered, the host does not wait); single send/recv run on a stream of their own; a hook
registered once per group gets, from the watchdog, each completed work's op type, sequence number and
device-side duration - never the work or its tensors; registering needs TORCH_NCCL_ENABLE_TIMING and
refuses a second hook.
"""
from __future__ import annotations

import datetime
import gc
import threading
import weakref
from collections import deque

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import OpType

from telemetry.capture import collectives
from telemetry.capture.collectives import DIST_SPECS, FUNCOL_SPECS, LATE, CollectiveTracer


class FakeWorkInfo:
    def __init__(self, op_type: str, seq: int, duration_s: float):
        self.op_type, self.seq = OpType.__members__[op_type], seq
        self.time_started = self.time_finished = datetime.datetime.now()
        self.active_duration = datetime.timedelta(seconds=duration_s)


class FakeNcclWork:
    def __init__(self, outputs):
        self.outputs = list(outputs)  # as WorkNCCL's outputs_: alive as long as the Work is
        self.waited = False

    def wait(self):  # the current stream waits for the NCCL stream; the host does not
        self.waited = True
        return True

    def result(self):
        return self.outputs


class FakeProcessGroupNCCL:
    backend = "nccl"

    def __init__(self, name: str, size: int = 2, timing: bool = True):
        self.group_name, self._size, self.timing = name, size, timing
        self.hook, self.registrations = None, 0
        self.seq_collective = self.seq_p2p = 0
        self.streams: dict[str, deque] = {"nccl": deque()}
        self.durations: list[tuple[str, float]] = []

    def size(self):
        return self._size

    def _register_on_completion_hook(self, hook):
        if self.hook is not None:
            raise RuntimeError("ProcessGroupNCCL OnCompletion hook already registered")
        if not self.timing:
            raise ValueError("ProcessGroupNCCL OnCompletion hook requires recording start and end events which "
                             "require setting TORCH_NCCL_ENABLE_TIMING environment variable.")
        self.hook = hook
        self.registrations += 1

    def _get_sequence_number_for_group(self):
        return self.seq_collective  # as recent ProcessGroupNCCL: collectives and coalesced groups only

    @staticmethod
    def device_time(nbytes: int) -> float:
        return (10 + nbytes) / 1e6  # 10 us + 1 us per byte, whole microseconds (timedelta's resolution)

    def issue(self, op_type: str, tensors, stream: str = "nccl") -> FakeNcclWork:
        if stream == "nccl":
            self.seq_collective += 1
            seq = self.seq_collective
        else:
            self.seq_p2p += 1
            seq = self.seq_p2p
        d = self.device_time(sum(t.numel() * t.element_size() for t in tensors))
        self.streams.setdefault(stream, deque()).append((op_type, seq, d))
        self.durations.append((op_type, d))
        return FakeNcclWork(tensors)

    def watchdog(self, reverse: bool = False):
        """The device finished everything issued: report every work, stream by stream in issue order
        (`reverse`: the watchdog saw later works complete first)."""
        done = [w for q in self.streams.values() for w in q]
        for q in self.streams.values():
            q.clear()
        for op_type, seq, d in (reversed(done) if reverse else done):
            if self.hook is not None:
                self.hook(FakeWorkInfo(op_type, seq, d))


class FakeGlooGroup:
    backend = "gloo"
    group_name = "gloo"

    def size(self):
        return 2


# torch.distributed's signatures, ProcessGroupNCCL's behaviour

def all_reduce(tensor, op=None, group=None, async_op=False):
    work = group.issue("ALLREDUCE", [tensor])
    return work if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    work = group.issue("_ALLGATHER_BASE", [output_tensor])
    return work if async_op else None


def barrier(group=None, async_op=False, device_ids=None):
    work = group.issue("ALLREDUCE", [torch.zeros(1)])  # NCCL's barrier is a 1-element all_reduce
    return work if async_op else None


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    group.issue("SEND", [tensor], stream=f"p2p:{dst}").wait()  # returns once enqueued


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    group.issue("RECV", [tensor], stream=f"p2p:{src}").wait()
    return src


def batch_isend_irecv(p2p_op_list):
    group = p2p_op_list[0].group
    return [group.issue("COALESCED", [p.tensor for p in p2p_op_list])]  # one work for the batch


def broadcast_coalesced(process_group, tensors, buffer_size, src=0):
    bucket, size = [], 0
    for t in tensors:  # one broadcast per bucket of buffer_size bytes
        bucket.append(t)
        size += t.numel() * t.element_size()
        if size >= buffer_size:
            process_group.issue("BROADCAST", bucket).wait()
            bucket, size = [], 0
    if bucket:
        process_group.issue("BROADCAST", bucket).wait()


def funcol_all_reduce(self, reduceOp, group, tag=""):  # noqa: N803 - torch's parameter names
    if isinstance(group, FakeProcessGroupNCCL):
        group.issue("ALLREDUCE", [self])
    return self.clone()


class P2P:
    def __init__(self, op, tensor, peer, group):
        self.op, self.tensor, self.peer, self.group = op, tensor, peer, group


@pytest.fixture(autouse=True)
def fake_backends(monkeypatch):
    monkeypatch.setattr(collectives, "_backend_name", lambda pg: getattr(pg, "backend", None))


def wrap(tracer, name, fn):
    return tracer._wrap_dist(name, fn, DIST_SPECS[name])


def test_sync_collective_keeps_no_work_and_takes_the_device_duration():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    gather = wrap(tracer, "all_gather_into_tensor", all_gather_into_tensor)
    tracer.begin_step()
    out = torch.empty(512)
    alive = weakref.ref(out)
    assert gather(out, torch.ones(256), group=g) is None  # synchronous, as the caller asked
    del out
    gc.collect()
    assert alive() is None  # nothing of the tracer's holds the work or its output
    g.watchdog()
    s = tracer.end_step().summary()["all_gather"]
    assert s["count"] == 1 and s["bytes"] == 2048 and s["time_s"] == g.durations[0][1] == 2058e-6
    assert s["untimed"] == 0 and s["untimed_bytes"] == 0
    assert s["busbw_GBps"] == pytest.approx(2048 * 0.5 / 2058e-6 / 1e9)


def test_async_work_goes_to_the_caller_only():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    work = reduce(torch.ones(256), group=g, async_op=True)
    assert isinstance(work, FakeNcclWork) and not work.waited  # no wait added
    kept = weakref.ref(work)
    work.wait()
    del work
    gc.collect()
    assert kept() is None
    g.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 1034e-6


def test_batch_isend_irecv_is_one_entry_with_one_duration():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    batch = tracer._wrap_batch(batch_isend_irecv)
    tracer.begin_step()
    works = batch([P2P(dist.isend, torch.ones(32), 1, g), P2P(dist.irecv, torch.empty(32), 1, g)])
    assert len(works) == 1
    g.watchdog()
    summary = tracer.end_step().summary()
    assert set(summary) == {"sendrecv"}  # not a send and a recv each charged the batch's time
    s = summary["sendrecv"]
    assert s["count"] == 1 and s["bytes"] == 128 and s["time_s"] == g.durations[0][1]
    assert s["busbw_GBps"] == pytest.approx(128 / s["time_s"] / 1e9)  # nccl-tests' sendrecv: S / t

    tracer.begin_step()
    batch([P2P(dist.isend, torch.ones(32), 1, g), P2P(dist.isend, torch.ones(16), 0, g)])
    g.watchdog()
    assert tracer.end_step().summary() == {"send": {"count": 1, "bytes": 192, "time_s": 202e-6, "untimed": 0,
                                                    "untimed_bytes": 0, "busbw_GBps": 192 / 202e-6 / 1e9}}


def test_blocking_send_and_recv_take_the_device_time_not_the_host_time():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    snd, rcv = wrap(tracer, "send", send), wrap(tracer, "recv", recv)
    tracer.begin_step()
    snd(torch.ones(1000), dst=1, group=g)  # enqueued: the host returns at once
    assert rcv(torch.empty(500), src=1, group=g) == 1
    g.watchdog()
    s = tracer.end_step().summary()
    assert s["send"]["time_s"] == 4010e-6 and s["recv"]["time_s"] == 2010e-6


def test_functional_collectives_timed_on_nccl_untimed_bytes_on_gloo():
    g, tracer = FakeProcessGroupNCCL("tp"), CollectiveTracer()
    funcol = tracer._wrap_funcol(funcol_all_reduce, FUNCOL_SPECS["all_reduce"])
    tracer.begin_step()
    funcol(torch.ones(64), "sum", g)
    g.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 266e-6
    tracer.begin_step()
    funcol(torch.ones(64), "sum", FakeGlooGroup())
    s = tracer.end_step().summary()["all_reduce"]
    assert s["time_s"] is None and s["untimed"] == 1 and s["untimed_bytes"] == 256
    assert s["untimed_reason"] == collectives.FUNCOL_GLOO
    assert collectives.untimed_bytes({"all_reduce": s}) == 256


def test_a_report_after_the_step_ended_leaves_the_call_untimed_and_the_next_step_aligned():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(100), group=g)
    first = tracer.end_step().summary()["all_reduce"]
    assert first["time_s"] is None and first["untimed_bytes"] == 400 and first["untimed_reason"] == LATE
    tracer.begin_step()
    reduce(torch.ones(200), group=g)
    g.watchdog()  # both reports now: the first belongs to the closed step
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 810e-6
    assert tracer.late == 1 and first["time_s"] is None


def test_one_hook_per_group_shared_by_tracers_and_groups_made_later():
    g = FakeProcessGroupNCCL("g")
    for _ in range(2):  # a second tracer in the same process: the group's hook is reused
        tracer = CollectiveTracer()
        reduce = wrap(tracer, "all_reduce", all_reduce)
        tracer.begin_step()
        reduce(torch.ones(4), group=g)
        g.watchdog()
        assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6
        tracer.uninstall()
    assert g.registrations == 1
    later = FakeProcessGroupNCCL("made-later")  # e.g. a DeviceMesh group FSDP creates after start
    tracer.begin_step()
    reduce(torch.ones(4), group=later)
    later.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["untimed"] == 0 and later.registrations == 1


def test_a_group_that_refuses_the_hook_is_counted_untimed_with_the_reason():
    for refusing in (FakeProcessGroupNCCL("off", timing=False), FakeProcessGroupNCCL("taken")):
        if refusing.timing:
            refusing._register_on_completion_hook(lambda info: None)  # someone else's hook
        tracer = CollectiveTracer()
        reduce = wrap(tracer, "all_reduce", all_reduce)
        tracer.begin_step()
        reduce(torch.ones(4), group=refusing)
        refusing.watchdog()
        s = tracer.end_step().summary()["all_reduce"]
        assert s["time_s"] is None and s["untimed_bytes"] == 16
        assert s["untimed_reason"].startswith(f"no completion hook on group {refusing.group_name}: ")
        assert ("TORCH_NCCL_ENABLE_TIMING" if not refusing.timing else "already registered") in s["untimed_reason"]
        assert not any(tracer._pending.values())  # nothing waits for a report that cannot come


def test_a_call_of_several_works_sums_them():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    bc = tracer._wrap_broadcast_coalesced(broadcast_coalesced)
    tracer.begin_step()
    bc(g, [torch.ones(250) for _ in range(3)], 1000)  # three buckets, three works
    g.watchdog()
    s = tracer.end_step().summary()["broadcast"]
    assert s["count"] == 1 and s["bytes"] == 3000 and s["time_s"] == pytest.approx(3 * 1010e-6)


def test_reports_are_matched_by_op_type_whatever_their_order():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    gather = wrap(tracer, "all_gather_into_tensor", all_gather_into_tensor)
    bar, batch = wrap(tracer, "barrier", barrier), tracer._wrap_batch(batch_isend_irecv)
    tracer.begin_step()
    gather(torch.empty(100), torch.ones(50), group=g)
    batch([P2P(dist.isend, torch.ones(25), 1, g), P2P(dist.irecv, torch.empty(25), 1, g)])
    bar(group=g)
    g.watchdog(reverse=True)
    s = tracer.end_step().summary()
    assert (s["all_gather"]["time_s"], s["sendrecv"]["time_s"], s["barrier"]["time_s"]) == (410e-6, 210e-6, 14e-6)


def test_the_hook_never_raises_into_the_watchdog():
    class Broken:
        @property
        def op_type(self):
            raise RuntimeError("boom")
    before = collectives.UNMATCHED["<error>"]
    collectives._dispatch(10**9, Broken())
    assert collectives.UNMATCHED["<error>"] == before + 1


def test_settle_waits_for_the_steps_reports():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer(settle_s=60.0)
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    threading.Thread(target=g.watchdog).start()  # the hook thread reports while end_step waits
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6


def test_a_call_never_reported_is_dropped_after_a_few_steps():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    g.streams["nccl"].clear()  # e.g. a work the watchdog never saw
    for _ in range(collectives.STALE_STEPS + 2):
        tracer.end_step()
    assert tracer.dropped == 1 and not any(tracer._pending.values())
