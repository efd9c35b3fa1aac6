"""The NCCL path against a pretend ProcessGroupNCCL: no Work kept, durations from completion reports.

The fake models what matters of ProcessGroupNCCL (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp):
a Work holds its output tensors; every collective, and every coalesced batch, is one work on the group's
stream (a batch_isend_irecv is one COALESCED work); a blocking call returns once the work is enqueued
(stream-ordered, the host does not wait); single send/recv run on a stream of their own; a hook
registered once per group gets, from the watchdog, each completed work's op type, sequence number and
device-side duration - never the work or its tensors; registering needs TORCH_NCCL_ENABLE_TIMING and
refuses a second hook.

With a `Clock` it also models the timing of the real thing: the device runs behind the host (a work starts
`device_lag_s` after its issue at the earliest, and after the previous work on its stream), the watchdog
reports a work `report_delay_s` after the device finished it (~100 ms on ProcessGroupNCCL), with
time_started the host's issue time and time_finished when the watchdog saw it (steady_clock timedeltas, as
torch since 2025); a `_coalescing_manager` block is one work reported once as COALESCED, with no sizes; and
each group has an identity (its global ranks and DeviceMesh's `mesh_<dim>` description).
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import gc
import threading
import time
import types
import weakref
from collections import deque

import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import OpType

from telemetry import coverage
from telemetry.capture import collective_calls, collectives, completion_hooks, cuda_events
from telemetry.capture.collectives import DIST_SPECS, FUNCOL_SPECS, LATE, CollectiveTracer, harness_traffic


class FakeWorkInfo:
    def __init__(self, op_type: str, seq: int, duration_s: float, started=None, finished=None):
        self.op_type, self.seq = OpType.__members__[op_type], seq
        self.time_started = started if started is not None else datetime.datetime.now()
        self.time_finished = finished if finished is not None else self.time_started
        # None: a report whose duration could not be read (the tracer must count it, not take it as 0)
        self.active_duration = None if duration_s is None else datetime.timedelta(seconds=duration_s)


class Clock:
    """Simulated time, for the host (perf_counter, monotonic: one steady clock, as on Linux) and the device.
    Advancing it lets the pretend watchdog report what the device has finished by then."""

    def __init__(self):
        self.now, self.groups = 1000.0, []

    def perf_counter(self):
        return self.now

    monotonic = perf_counter

    def time(self):
        return self.now + 1.7e9

    def advance(self, dt: float) -> None:
        self.now += dt
        for g in self.groups:
            g.deliver_until(self.now)


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

    def __init__(self, name: str, size: int = 2, timing: bool = True, ranks=None, dim: str | None = None,
                 clock: Clock | None = None, device_lag_s: float = 0.0, report_delay_s: float = 0.0):
        self.group_name, self._size, self.timing = name, size, timing
        self.ranks = list(ranks) if ranks is not None else list(range(size))
        self.group_desc = f"mesh_{dim}" if dim else "undefined"
        self.hook, self.registrations = None, 0
        self.seq_collective = self.seq_p2p = 0
        self.streams: dict[str, deque] = {"nccl": deque()}
        self.durations: list[tuple[str, float]] = []
        self.clock, self.device_lag_s, self.report_delay_s = clock, device_lag_s, report_delay_s
        self.free_at: dict[str, float] = {}  # when each stream's last work ends on the device
        self.reports: list[tuple[float, FakeWorkInfo]] = []  # (when the watchdog reports it, what)
        self.placed: list[tuple[str, float, float, float]] = []  # (op type, host issue, device start, end)
        self.coalescing: list | None = None
        if clock is not None:
            clock.groups.append(self)

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
        if self.coalescing is not None and stream == "nccl":  # inside a block: part of its one work
            self.coalescing.extend(tensors)
            return FakeNcclWork(tensors)
        if stream == "nccl":
            self.seq_collective += 1
            seq = self.seq_collective
        else:
            self.seq_p2p += 1
            seq = self.seq_p2p
        d = self.device_time(sum(t.numel() * t.element_size() for t in tensors))
        self.durations.append((op_type, d))
        if self.clock is None:
            self.streams.setdefault(stream, deque()).append((op_type, seq, d))
            return FakeNcclWork(tensors)
        issued = self.clock.now
        start = max(issued + self.device_lag_s, self.free_at.get(stream, -1.0))
        end = self.free_at[stream] = start + d
        self.placed.append((op_type, issued, start, end))
        seen = end + self.report_delay_s
        steady = datetime.timedelta(seconds=1)  # the clock's values are seconds since the steady epoch
        self.reports.append((seen, FakeWorkInfo(op_type, seq, d, started=steady * issued, finished=steady * seen)))
        self.deliver_until(self.clock.now)
        return FakeNcclWork(tensors)

    def deliver_until(self, t: float) -> None:
        """The hook thread: report every work the watchdog has seen complete by `t`, in that order."""
        due = sorted((r for r in self.reports if r[0] <= t), key=lambda r: r[0])
        self.reports = [r for r in self.reports if r[0] > t]
        for _, info in due:
            if self.hook is not None:
                self.hook(info)

    @contextlib.contextmanager
    def coalesced_block(self):
        """ProcessGroupNCCL between startCoalescing and endCoalescing: one work for the block."""
        self.coalescing = []
        yield
        tensors, self.coalescing = self.coalescing, None
        self.issue("COALESCED", tensors)

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


def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    work = group.issue("GATHER", [tensor])  # the device time of the rank's own part
    return work if async_op else None


def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    work = group.issue("SCATTER", [tensor])
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


@contextlib.contextmanager
def coalescing_manager(group=None, device=None, async_ops=False):
    with group.coalesced_block():
        yield None


def funcol_all_reduce(self, reduceOp, group, tag=""):  # noqa: N803 - torch's parameter names
    if isinstance(group, FakeProcessGroupNCCL):
        group.issue("ALLREDUCE", [self])
    return self.clone()


class P2P:
    def __init__(self, op, tensor, peer, group):
        self.op, self.tensor, self.peer, self.group = op, tensor, peer, group


@pytest.fixture(autouse=True)
def fake_backends(monkeypatch):
    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: getattr(pg, "backend", None))


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
    for n in range(2):  # a second tracer in the same process: the group's hook is reused
        tracer = CollectiveTracer()
        reduce = wrap(tracer, "all_reduce", all_reduce)
        tracer.begin_step()
        reduce(torch.ones(4), group=g)
        g.watchdog()
        assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6
        if n == 0:
            tracer.uninstall()
    assert g.registrations == 1
    later = FakeProcessGroupNCCL("made-later")  # e.g. a DeviceMesh group FSDP creates after start
    tracer.begin_step()
    reduce(torch.ones(4), group=later)
    later.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["untimed"] == 0 and later.registrations == 1
    tracer.uninstall()


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


def test_a_rank_outside_the_group_counts_nothing():
    """torch returns at once on a rank outside the call's group (new_group gives it NON_GROUP_MEMBER): no
    collective ran there, so none is counted (it was: an all_reduce, gather and barrier of a group of rank 0
    alone showed on rank 1 too, with their bytes)."""
    issued = []  # torch's early return for a non-member: a warning, no work

    def reduce_(tensor, op=None, group=None, async_op=False):
        issued.append("all_reduce")

    def gather_(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
        issued.append("gather")

    def barrier_(group=None, async_op=False, device_ids=None):
        issued.append("barrier")
    tracer, outside = CollectiveTracer(), dist.GroupMember.NON_GROUP_MEMBER
    tracer.begin_step()
    wrap(tracer, "all_reduce", reduce_)(torch.ones(4), group=outside)
    wrap(tracer, "gather", gather_)(torch.ones(4), None, dst=0, group=outside)
    wrap(tracer, "barrier", barrier_)(group=outside)
    assert issued == ["all_reduce", "gather", "barrier"]  # the call still reaches torch
    assert tracer.end_step().summary() == {}


def test_an_all_gather_of_uneven_tensors_counts_what_it_gathered():
    """ProcessGroupNCCL's all_gather takes output tensors of different sizes (one broadcast per rank in one
    coalesced ALLGATHER work): S is the gathered bytes, the same on every rank; it was this rank's input x n."""
    def all_gather(tensor_list, tensor, group=None, async_op=False):
        work = group.issue("ALLGATHER", tensor_list)
        return work if async_op else None
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    gat = wrap(tracer, "all_gather", all_gather)
    for mine in (torch.ones(10), torch.ones(30)):  # rank 0's and rank 1's call: 40 B and 120 B in, 160 B gathered
        tracer.begin_step()
        gat([torch.empty(10), torch.empty(30)], mine, group=g)
        g.watchdog()
        s = tracer.end_step().summary()["all_gather"]
        assert (s["count"], s["bytes"], s["untimed"]) == (1, 160, 0)


def test_dtensor_shard_to_shard_on_nccl_claims_its_all_to_all_report():
    """DTensor's Shard(i) -> Shard(j) on an accelerator: torch.ops._dtensor.shard_dim_alltoall, one ALLTOALL_BASE
    work; its report is claimed (it was unclaimed: no traced call), S = the rank's shard."""
    g, tracer = FakeProcessGroupNCCL("tp"), CollectiveTracer()
    mesh = types.SimpleNamespace(device_type="cuda", get_group=lambda dim: g)

    def shard_dim_alltoall(input, gather_dim, shard_dim, mesh, mesh_dim):
        g.issue("ALLTOALL_BASE", [input]).wait()
        return input.clone()
    a2a = tracer._wrap_shard_dim_alltoall(shard_dim_alltoall)
    tracer.begin_step()
    a2a(torch.ones(4, 6), 0, 1, mesh, 0)
    g.watchdog()
    step = tracer.end_step()
    s = step.summary()["all_to_all"]
    assert (s["count"], s["bytes"], s["untimed"], s["time_s"]) == (1, 96, 0, g.durations[0][1])
    assert "unclaimed_reports" not in step.events


def test_gather_and_scatter_match_their_own_reports_with_nccl_tests_bytes():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    gat, sca, reduce = wrap(tracer, "gather", gather), wrap(tracer, "scatter", scatter), wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    gat(torch.ones(25), [torch.empty(25), torch.empty(25)], dst=0, group=g)  # 100 B per rank
    sca(torch.empty(50), None, src=1, group=g)  # 200 B per rank
    reduce(torch.ones(10), group=g)
    g.watchdog(reverse=True)
    s = tracer.end_step().summary()
    assert (s["gather"]["bytes"], s["scatter"]["bytes"]) == (200, 400)  # the per-rank tensor x n (2)
    assert (s["gather"]["time_s"], s["scatter"]["time_s"], s["all_reduce"]["time_s"]) == (110e-6, 210e-6, 50e-6)
    assert s["gather"]["busbw_GBps"] == pytest.approx(200 * 0.5 / 110e-6 / 1e9)  # nccl-tests' (n-1)/n


def test_calls_outside_every_step_are_counted_apart_and_never_in_a_step():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce, gat = wrap(tracer, "all_reduce", all_reduce), wrap(tracer, "gather", gather)
    reduce(torch.ones(10), group=g)  # setup, before any step
    tracer.begin_step()
    reduce(torch.ones(20), group=g)
    g.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["bytes"] == 80
    gat(torch.ones(5), None, dst=0, group=g)  # between steps (a checkpoint save)
    assert tracer.outside_steps() == {"all_reduce": {"count": 1, "bytes": 40}, "gather": {"count": 1, "bytes": 40}}
    tracer.begin_step()  # an evaluation bracketed as its own step is not outside
    reduce(torch.ones(3), group=g)
    g.watchdog()
    tracer.end_step()
    reduce(torch.ones(1), group=g)  # after the last step
    with harness_traffic():  # the harness's own exchange (hosts, inventory): its report claimed, not counted
        reduce(torch.ones(7), group=g)
    g.watchdog()
    assert tracer.outside_steps() == {"all_reduce": {"count": 2, "bytes": 44}, "gather": {"count": 1, "bytes": 40}}
    tracer.begin_step()
    assert tracer.end_step().events == {}  # no report went unclaimed
    assert tracer.outside_steps() == {"all_reduce": {"count": 2, "bytes": 44}, "gather": {"count": 1, "bytes": 40}}


def test_the_hook_never_raises_into_the_watchdog():
    class Broken:
        @property
        def op_type(self):
            raise RuntimeError("boom")
    before = collectives.UNMATCHED["<error>"]
    completion_hooks.dispatch(10**9, Broken())
    assert collectives.UNMATCHED["<error>"] == before + 1


def test_settle_waits_for_the_steps_reports():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer(settle_s=60.0)
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    threading.Thread(target=g.watchdog).start()  # the hook thread reports while end_step waits
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6


def test_a_call_never_reported_is_dropped_after_a_few_steps(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(collectives, "time", clock)
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    g.streams["nccl"].clear()  # e.g. a work the watchdog never saw
    for _ in range(collectives.STALE_STEPS + 2):  # steps, but too soon: a report may still come
        tracer.end_step()
    assert tracer.dropped == 0
    clock.advance(collectives.STALE_S + 1)
    tracer.end_step()
    assert tracer.dropped == 1 and not any(tracer._pending.values())


# ---------------------------------------------------------------- late reports, coalesced blocks, device lag

def test_a_coalescing_block_is_one_entry_with_the_blocks_bytes():
    g, tracer = FakeProcessGroupNCCL("dp"), CollectiveTracer()
    reduce, block = wrap(tracer, "all_reduce", all_reduce), tracer._wrap_coalescing(coalescing_manager)
    tracer.begin_step()
    with block(group=g, async_ops=True):
        for n in (100, 200, 300):
            reduce(torch.ones(n), group=g, async_op=True)
    reduce(torch.ones(10), group=g)  # after the block: its own work and report
    assert [d[0] for d in g.durations] == ["COALESCED", "ALLREDUCE"]  # one work for the block
    g.watchdog()
    s = tracer.end_step().summary()["all_reduce"]
    assert s["count"] == 2 and s["bytes"] == 2400 + 40 and s["untimed"] == 0
    assert s["time_s"] == pytest.approx(g.durations[0][1] + g.durations[1][1])
    assert not any(tracer._pending.values())


def test_completion_times_are_read_in_either_clock_type():
    now = time.perf_counter()
    wall = datetime.datetime.now()
    assert collectives.host_time(wall) == pytest.approx(now + (wall.timestamp() - time.time()), abs=0.05)
    steady = datetime.timedelta(seconds=time.monotonic())  # torch >= 2025: steady_clock since its epoch
    assert collectives.host_time(steady) == pytest.approx(time.perf_counter(), abs=0.05)
    assert collectives.host_time(None) is None


def simulate(monkeypatch, report_delay_s: float, device_lag_s: float, hold: bool, steps: int = 5,
             run_health: list | None = None) -> list[dict]:
    """A tp x dp step loop on the pretend NCCL, through the telemetry session: forward tp all-reduces inside a
    node, backward dp gradient buckets in coalescing blocks across nodes, an optimizer step. Returns each
    step's record as the loop would write it (in order, once released)."""
    from telemetry.capture import session

    clock = Clock()
    for module in (collectives, collective_calls, completion_hooks):  # the tracer's modules that read the clock
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(session, "time", clock)
    collectives.set_host_map(["a", "a", "b", "b"])
    tp = FakeProcessGroupNCCL("tp-pg", ranks=[0, 1], dim="tp", clock=clock, device_lag_s=device_lag_s,
                              report_delay_s=report_delay_s)
    dp = FakeProcessGroupNCCL("dp-pg", ranks=[0, 2], dim="dp", clock=clock, device_lag_s=device_lag_s,
                              report_delay_s=report_delay_s)
    tel = session.Telemetry(session.TelemetrySettings(cross_rank_every=0, link_probe_every=0, nccl_debug=False,
                                                      power_sample_interval_s=60.0, sysfs="/nonexistent"))
    tel.start()
    tel._hold = hold  # what start() decides from the default group's backend (NCCL)
    tracer = tel.tracer
    reduce, block = wrap(tracer, "all_reduce", all_reduce), tracer._wrap_coalescing(coalescing_manager)
    written = []
    pending = collections.deque()
    try:
        for step in range(1, steps + 1):
            tel.start_step(step)
            t0 = clock.now
            for _ in range(4):  # forward: activations all-reduced over tp, the host running ahead
                clock.advance(0.004)
                reduce(torch.ones(2000), group=tp)
            tel.mark("backward_begin")
            for _ in range(3):  # backward: gradient buckets, each one coalesced block over dp
                clock.advance(0.01)
                with block(group=dp, async_ops=True):
                    for _ in range(4):
                        reduce(torch.ones(500), group=dp, async_op=True)
            clock.advance(0.002)
            tel.mark("backward_end")
            tel.mark("optimizer_begin")
            clock.advance(0.02)
            tel.mark("optimizer_end")
            record = {"step": step, "step_time_s": clock.now - t0}
            tel.end_step(step, record["step_time_s"], into=record)
            pending.append(record)  # as trainer/run_writer.py writes them: in order, once not held
            while pending and not pending[0].get("_held"):
                written.append(pending.popleft())
        clock.advance(0.5)  # the end of the run: the last reports come in
        tel.flush(collective=True)
        written += list(pending)
        if run_health is not None:
            run_health.append(tel.summary()["comm_health"])
    finally:
        tel.close()
        collectives.set_host_map(None)
    return written


def test_every_call_is_timed_under_late_reports_and_the_estimate_is_unchanged(monkeypatch):
    ideal = simulate(monkeypatch, report_delay_s=0.0, device_lag_s=0.0, hold=False)
    # as ProcessGroupNCCL: reports ~100 ms after the device finished, the device 30 ms behind the host
    late = simulate(monkeypatch, report_delay_s=0.1, device_lag_s=0.03, hold=True)
    unheld = simulate(monkeypatch, report_delay_s=0.1, device_lag_s=0.03, hold=False)
    assert len(ideal) == len(late) == 5
    assert [r["step"] for r in late] == [1, 2, 3, 4, 5] and not any("_held" in r for r in late)
    for a, b in zip(ideal, late):
        s = b["comm"]["all_reduce"]
        assert s["untimed"] == 0 and s["count"] == 4 + 3  # 100% timed; each block is one entry
        assert s["bytes"] == a["comm"]["all_reduce"]["bytes"] == 4 * 8000 + 3 * 4 * 2000
        assert b["comm_groups"]["dp"]["count"] == 3 and b["comm_groups"]["dp"]["scope"] == "inter"
        assert b["comm_groups"]["tp"]["count"] == 4 and b["comm_groups"]["tp"]["scope"] == "intra"
        assert b["exposed_comm_s"] is not None and a["exposed_comm_s"] is not None
        assert abs(b["exposed_comm_s"] - a["exposed_comm_s"]) <= 0.01 * a["step_time_s"]
        assert abs(b["comm_time_s"] - a["comm_time_s"]) <= 0.01 * a["step_time_s"]
    # without holding, the step's last reports come after its end: they go untimed
    assert all(u["comm"]["all_reduce"]["untimed"] > 0 for u in unheld)
    assert all(u["comm_groups"]["dp"]["untimed"] > 0 for u in unheld)


def test_tracer_health_per_step_and_per_run_under_late_reports(monkeypatch):
    held_run, unheld_run = [], []
    late = simulate(monkeypatch, report_delay_s=0.1, device_lag_s=0.03, hold=True, run_health=held_run)
    unheld = simulate(monkeypatch, report_delay_s=0.1, device_lag_s=0.03, hold=False, run_health=unheld_run)
    for r in late:  # held for the late reports: every call and byte timed, on both groups
        h = r["comm_health"]
        assert h["verdict"] == coverage.FULL and (h["calls"], h["timed"], h["late"]) == (7, 7, 0)
        assert h["calls_pct"] == h["bytes_pct"] == 100.0
        assert h["by_group"]["dp"]["timing"] == collectives.HOOK
    assert held_run[0]["verdict"] == coverage.FULL and held_run[0]["calls"] == 35
    # not held: 130 ms from issue to report, a 40 ms step: every call is late, its report comes a step later
    first, second = unheld[0]["comm_health"], unheld[1]["comm_health"]
    assert (first["late"], first["by_group"]["dp"]["late"], first["by_group"]["tp"]["late"]) == (7, 3, 4)
    assert first["verdict"] == ("timing covers 0% of calls and 0% of bytes; missing: dp: 3 not reported when the "
                                "step closed; tp: 4 not reported when the step closed")
    assert sum(r["comm_health"]["reported_after_close"] for r in unheld) > 0  # counted in the step they came in
    assert second["late"] == 7
    run = unheld_run[0]
    assert run["late"] == sum(r["comm_health"]["late"] for r in unheld)
    assert run["reported_after_close"] + run["never_reported"] == run["late"]  # each late call accounted for
    assert run["timed"] + run["late"] == run["calls"] == 35


def test_tracer_health_names_never_reported_no_duration_and_unclaimed_by_group(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(collectives, "time", clock)
    dp, tp = FakeProcessGroupNCCL("dp-pg", dim="dp"), FakeProcessGroupNCCL("tp-pg", dim="tp")
    collectives.register_group(dp, "dp")
    collectives.register_group(tp, "tp")
    tracer = CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(10), group=dp)  # reported with a duration
    reduce(torch.ones(20), group=dp)  # reported without one
    reduce(torch.ones(30), group=tp)  # never reported
    for g in (dp, tp):
        g.streams["nccl"].clear()  # the watchdog's reports are written out below
    dp.hook(FakeWorkInfo("ALLREDUCE", 1, 50e-6))
    dp.hook(FakeWorkInfo("ALLREDUCE", 2, None))
    dp.hook(FakeWorkInfo("ALLREDUCE", 3, 10e-6))  # a work the tracer never saw (a compiled graph's, C++'s)
    step = tracer.end_step().health()
    assert (step["calls"], step["timed"], step["no_duration"], step["late"]) == (3, 1, 1, 1)
    assert (step["bytes"], step["timed_bytes"]) == (240, 40)
    assert step["by_group"]["dp"]["unclaimed_reports"] == 1 and step["by_group"]["tp"]["late"] == 1
    assert step["verdict"] == ("timing covers 33.3% of calls and 16.6% of bytes; missing: dp: 1 reported without a "
                               "duration; tp: 1 not reported when the step closed; completion reports matched no "
                               "traced call: 1 on dp; those are collectives the tracer did not see (compiled "
                               "graphs, calls from C++)")
    clock.advance(collectives.STALE_S + 1)
    gave_up = [tracer.end_step().health() for _ in range(collectives.STALE_STEPS + 1)]
    assert sum(h["never_reported"] for h in gave_up) == 1
    assert [h["by_group"]["tp"]["never_reported"] for h in gave_up if h["never_reported"]] == [1]


def test_calls_in_graph_capture_or_compilation_are_counted_apart(monkeypatch):
    g, tracer = FakeProcessGroupNCCL("g", dim="dp"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    monkeypatch.setattr(collectives, "_capturing", lambda: True)
    reduce(torch.ones(4), group=g)
    monkeypatch.setattr(collectives, "_capturing", lambda: False)
    monkeypatch.setattr(collectives, "_compiling", lambda: True)
    reduce(torch.ones(4), group=g)
    monkeypatch.setattr(collectives, "_compiling", lambda: False)
    g.watchdog()
    h = tracer.end_step().health()
    assert (h["captured"], h["compiled"], h["timed"]) == (1, 1, 0)
    assert "1 issued in CUDA graph capture, 1 traced into a compiled graph" in h["verdict"]


def test_a_call_in_a_torch_compiled_function_is_accounted_for(monkeypatch, tmp_path):
    """Real dynamo (eager backend) over a traced call on the pretend group: whatever dynamo makes of the
    wrapper, each work is a timed call or a report counted unclaimed, never lost."""
    # torch 2.8 and 2.9 set TORCHINDUCTOR_CACHE_DIR in os.environ when they compile: restored after the test
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    g, tracer = FakeProcessGroupNCCL("compiled-g"), CollectiveTracer()
    collectives.register_timing(g)  # its hook goes on when the group is made (new_group, the mesh owner)
    reduce = wrap(tracer, "all_reduce", all_reduce)

    def f(x):
        y = x * 2
        reduce(y, group=g)
        return y + 1

    compiled = torch.compile(f, backend="eager")
    tracer.begin_step()
    for _ in range(3):
        compiled(torch.ones(4))
    g.watchdog()
    h = tracer.end_step().health()
    assert h["calls"] == 3 and h["timed"] + h["compiled"] == 3
    assert h["timed"] + h["unclaimed_reports"] == 3
    torch._dynamo.reset()


# ---------------------------------------------------------------- batched dispatch, hooks at group creation

def test_the_hook_only_queues_reports_the_step_end_matches_them():
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    assert type(g.hook).__name__ == "builtin_function_or_method"  # a deque's append: no Python frame, no lock
    g.watchdog()  # the hook thread
    (call,) = tracer._step.calls
    assert call.queued and call.duration_s is None  # nothing matched on the hook thread
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6


def test_a_full_report_queue_is_said_in_the_health(monkeypatch):
    monkeypatch.setattr(completion_hooks, "REPORT_QUEUE_MAX", 4)
    g, tracer = FakeProcessGroupNCCL("small-queue", dim="pp"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    for _ in range(6):
        reduce(torch.ones(4), group=g)
    g.watchdog()  # 6 reports into a queue of 4: the 2 oldest are lost
    h = tracer.end_step().health()
    assert h["by_group"]["pp"]["queue_full"] == 1 and h["timed"] == 4 and h["late"] == 2
    assert "times the group's report queue was found full (the oldest reports lost): 1 on pp" in h["verdict"]


def test_the_hook_goes_on_when_the_group_is_made_not_at_its_first_call():
    made = []

    def new_group(*args, **kwargs):
        made.append(FakeProcessGroupNCCL(f"made-{len(made)}"))
        return made[-1]

    new_group_registering = collective_calls.registering(new_group)
    pg = new_group_registering(ranks=[0, 1])
    assert pg.registrations == 1 and pg.hook is not None  # before any call on it
    mesh_pg = FakeProcessGroupNCCL("mesh-dp")
    collectives.register_group(mesh_pg, "dp")  # trainer/distributed.py ParallelDims, as it makes the meshes
    assert mesh_pg.registrations == 1
    tracer = CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=pg)
    pg.watchdog()
    assert tracer.end_step().summary()["all_reduce"]["time_s"] == 26e-6 and pg.registrations == 1


def test_install_wraps_the_group_makers_and_uninstall_restores_them(monkeypatch):
    from torch.distributed import device_mesh

    monkeypatch.setattr(completion_hooks, "_register_completion_hook", lambda pg, hook: None)
    before = (dist.new_group, device_mesh.new_group, dist.distributed_c10d.new_group)
    tracer = CollectiveTracer().install()
    try:
        assert dist.new_group.__wrapped__ is before[0] and device_mesh.new_group.__wrapped__ is before[1]
        assert dist.distributed_c10d.new_group is dist.new_group
    finally:
        tracer.uninstall()
    assert (dist.new_group, device_mesh.new_group, dist.distributed_c10d.new_group) == before


# ---------------------------------------------------------------- without the completion hook: CUDA events

class FakeCudaStream:
    """The current CUDA stream as far as events see it: `tail` is when the device finishes what is queued on it."""

    def __init__(self, clock: Clock):
        self.clock, self.tail = clock, clock.now


class FakeCudaEvent:
    """torch.cuda.Event(enable_timing=True), modelled on the CUDA runtime: record() enqueues it on the current
    stream, where it completes when the device gets there; query() says whether it has, without waiting;
    elapsed_time() needs both events recorded and complete, else raises (cudaErrorNotReady), and is in ms."""

    def __init__(self, stream: FakeCudaStream):
        self.stream, self.at = stream, None

    def record(self):
        self.at = max(self.stream.tail, self.stream.clock.now)

    def query(self) -> bool:
        return self.at is not None and self.stream.clock.now >= self.at

    def elapsed_time(self, end) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return (end.at - self.at) * 1000.0


class FakeProcessGroupNCCLWithoutHook(FakeProcessGroupNCCL):
    """ProcessGroupNCCL once the completion hook is gone upstream (the flight recorder replaces it)."""

    @property
    def _register_on_completion_hook(self):
        raise AttributeError("'ProcessGroupNCCL' object has no attribute '_register_on_completion_hook'")

    def issue(self, op_type, tensors, stream="nccl", sync=False):
        work = super().issue(op_type, tensors, stream)
        return work


def events_world(monkeypatch):
    clock = Clock()
    for module in (collectives, collective_calls, completion_hooks):  # the tracer's modules that read the clock
        monkeypatch.setattr(module, "time", clock)
    current = FakeCudaStream(clock)
    monkeypatch.setattr(cuda_events, "events_available", lambda: True)
    monkeypatch.setattr(cuda_events, "new_event", lambda: FakeCudaEvent(current))
    g = FakeProcessGroupNCCLWithoutHook("nohook", dim="dp", clock=clock, device_lag_s=0.0)

    def all_reduce_on_device(tensor, op=None, group=None, async_op=False):
        # ProcessGroupNCCL: its stream waits for the current stream, runs the work; a blocking call makes the
        # current stream wait for the work's end (the host does not wait)
        group.free_at["nccl"] = max(group.free_at.get("nccl", -1.0), current.tail)
        work = group.issue("ALLREDUCE", [tensor])
        if not async_op:
            current.tail = group.free_at["nccl"]
        return work if async_op else None
    return clock, current, g, all_reduce_on_device


def test_without_the_hook_cuda_events_time_blocking_calls_and_late_events_are_held(monkeypatch, capsys):
    clock, current, g, all_reduce_on_device = events_world(monkeypatch)
    tracer = CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce_on_device)
    tracer.begin_step()
    current.tail = clock.now + 0.002  # compute queued ahead of the collective
    reduce(torch.ones(1000), group=g)
    clock.advance(0.01)  # the device has finished by the step's end
    s = tracer.end_step().summary()["all_reduce"]
    assert s["time_s"] == pytest.approx(4010e-6) and s["untimed"] == 0  # the work itself, not the compute before
    err = capsys.readouterr().err
    assert err.count("no _register_on_completion_hook") == 1 and "timing taken over by CUDA events" in err

    tracer.begin_step()
    reduce(torch.ones(1000), group=g)  # still running on the device when the step ends: held like a late report
    first = tracer.end_step()
    assert first.summary()["all_reduce"]["untimed_reason"] == LATE and first.health()["late"] == 1
    tracer.begin_step()
    reduce(torch.ones(1000), group=g, async_op=True).wait()  # asynchronous: its end is not on this stream
    clock.advance(0.1)
    second = tracer.end_step()
    h = second.health()
    assert h["by_group"]["dp"]["reported_after_close"] == 1 and tracer.late == 1
    assert h["other_untimed"] == 1 and second.summary()["all_reduce"]["untimed_reason"] == collectives.EVENTS_ASYNC
    assert f"1 untimed for another reason ({collectives.EVENTS_ASYNC})" in h["verdict"]
    assert h["by_group"]["dp"]["timing"] == collectives.EVENTS
    reduce(torch.ones(10), group=g)
    assert "no _register_on_completion_hook" not in capsys.readouterr().err  # said once


def test_without_the_hook_and_without_a_gpu_the_calls_are_untimed_with_the_reason(monkeypatch):
    g, tracer = FakeProcessGroupNCCLWithoutHook("nohook-cpu"), CollectiveTracer()
    monkeypatch.setattr(cuda_events, "events_available", lambda: False)
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    h = tracer.end_step().health()
    assert h["no_timing"] == 1 and "1 on a group with no timing mechanism" in h["verdict"]


def test_device_placement_is_per_stream_never_before_issue_and_carried_across_steps():
    tracer = CollectiveTracer()
    calls = [collectives.Call("all_reduce", 8, 2, "nccl", "dist", t, duration_s=d, token=1)
             for t, d in ((0.0, 0.5), (0.1, 0.2), (2.0, 0.1))]
    p2p = collectives.Call("send", 8, 2, "nccl", "dist", 0.05, duration_s=0.1, token=1)
    other = collectives.Call("all_reduce", 8, 2, "nccl", "dist", 0.2, duration_s=0.1, token=2)
    tracer.place(calls + [p2p, other])
    assert [(c.t_start, c.t_done) for c in calls] == [(0.0, 0.5), (0.5, 0.7), (2.0, 2.1)]
    assert (p2p.t_start, other.t_start) == (0.05, 0.2)  # streams of their own: not behind the collectives
    later = collectives.Call("all_reduce", 8, 2, "nccl", "dist", 2.05, duration_s=0.1, token=1)
    tracer.place([later])  # the next step: behind what the stream still had
    assert later.t_start == pytest.approx(2.1)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """ProcessGroupNCCL's isend: inside a coalescing block, part of the block's one work (as batch_isend_irecv
    relies on), else a work on the peer's point-to-point stream."""
    return group.issue("SEND", [tensor], stream="nccl" if group.coalescing is not None else f"p2p:{dst}")


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    return group.issue("RECV", [tensor], stream="nccl" if group.coalescing is not None else f"p2p:{src}")


def test_sends_and_receives_in_a_coalescing_block_are_one_sendrecv_as_a_batch_is():
    """A pipeline exchange written as isend/irecv inside _coalescing_manager (what batch_isend_irecv does
    itself): one work, counted as batch_isend_irecv counts it - sendrecv, S = the larger direction's bytes."""
    g, tracer = FakeProcessGroupNCCL("pp"), CollectiveTracer()
    send_, recv_ = wrap(tracer, "isend", isend), wrap(tracer, "irecv", irecv)
    block = tracer._wrap_coalescing(coalescing_manager)
    tracer.begin_step()
    with block(group=g, async_ops=True):
        send_(torch.ones(32), dst=1, group=g)
        recv_(torch.empty(32), src=1, group=g)
    assert [d[0] for d in g.durations] == ["COALESCED"]
    g.watchdog()
    summary = tracer.end_step().summary()
    assert set(summary) == {"sendrecv"} and summary["sendrecv"]["bytes"] == 128
    assert summary["sendrecv"]["count"] == 1 and summary["sendrecv"]["untimed"] == 0


def test_short_steps_under_a_held_record_keep_each_report_on_its_own_call(monkeypatch):
    """10 ms steps, the pretend watchdog reporting 100 ms after the device finished (ProcessGroupNCCL's ~100 ms
    poll): a call's report comes ~10 steps after its step ended, well inside the session's 2 s hold. The call
    waits for it: timed with its own duration, never given up on while its step is held, and its report never
    credited to a later call of the same type (which would shift every later duration by one call)."""
    clock = Clock()
    for module in (collectives, collective_calls, completion_hooks):
        monkeypatch.setattr(module, "time", clock)
    g = FakeProcessGroupNCCL("dp-pg", clock=clock, report_delay_s=0.1)
    tracer = CollectiveTracer()
    completion_hooks.register_timing(g)
    reduce = wrap(tracer, "all_reduce", all_reduce)
    held, done = collections.deque(), []
    for step in range(1, 21):
        tracer.begin_step()
        clock.advance(0.005)
        reduce(torch.ones(100 * step), group=g)  # each step's own size: its duration names it
        clock.advance(0.005)
        held.append((step, tracer.end_step(hold=True)))
        while held and tracer.pending(held[0][1]) == 0:  # the session's check at each step's end
            s, comm = held.popleft()
            done.append((s, tracer.release(comm)))
    clock.advance(0.5)
    while held:
        s, comm = held.popleft()
        done.append((s, tracer.release(comm)))
    for s, comm in done:
        (call,) = comm.calls
        assert call.duration_s == pytest.approx(g.device_time(400 * s)), (s, call.untimed_reason)
    assert tracer.dropped == 0


def test_a_call_given_up_on_while_its_step_is_held_says_it_was_late(monkeypatch):
    """hold_reports_s set above STALE_S: the call is given up on before its step is released; the record says
    why (late), not an unknown reason."""
    clock = Clock()
    monkeypatch.setattr(collectives, "time", clock)
    g, tracer = FakeProcessGroupNCCL("g"), CollectiveTracer()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    tracer.begin_step()
    reduce(torch.ones(4), group=g)
    g.streams["nccl"].clear()  # the watchdog never reports it
    first = tracer.end_step(hold=True)
    clock.advance(collectives.STALE_S + 1)
    for _ in range(collectives.STALE_STEPS + 1):
        tracer.begin_step()
        tracer.end_step(hold=True)
    assert tracer.dropped == 1
    summary = tracer.release(first).summary()["all_reduce"]
    assert summary["untimed"] == 1 and summary["untimed_reason"] == LATE
