"""Per-step collective accounting: count, bytes and time of every collective a rank issues.

Mechanism (chosen by measured coverage and overhead; see docs/telemetry.md): the tracer wraps the
Python entry points every PyTorch parallelism goes through -

- `torch.distributed.*` collectives and point-to-point calls: explicit calls, FSDP2's
  all_gather_single / reduce_scatter_single, pipeline stages' isend/irecv/batch_isend_irecv, DeepSpeed
  ZeRO's gathers and reduce-scatters (DeepSpeed binds them at `deepspeed.initialize`: install first);
  the all-gather/reduce-scatter names also where distributed_c10d calls them as module globals;
- `torch.distributed._functional_collectives.*`: DTensor tensor parallelism; the collective a functional
  collective's backward issues (autograd calls nothing wrapped) from hooks on the call's autograd node;
- DDP's gradient buckets, which its C++ reducer issues directly, through a DDP comm hook that
  performs the stock average all-reduce (`attach_ddp`); DDP's parameter and buffer broadcasts
  through `torch.distributed._broadcast_coalesced`.

That costs a few microseconds per call, where an always-on profiler cost 6-25% of a small model's
step on the development machines. Time per call:

- gloo: issue to completion, from the work's future callback (completion happens on gloo's thread);
  blocking calls are timed around the call. Functional collectives on gloo are not timed (their
  works are waited on at an unknown later point): their bytes are reported as `untimed_bytes`.
- NCCL: the tracer never keeps a Work. A Work keeps its output tensors alive, and under FSDP2 each
  all-gather output is a whole unsharded block, so holding works until the step ends multiplies
  peak memory. Instead one completion hook per NCCL process group
  (`ProcessGroup._register_on_completion_hook`, which needs `TORCH_NCCL_ENABLE_TIMING=1`, set by
  `enable_nccl_timing()` before init), registered when the group is made, reports each finished work -
  op type and device-side duration, no tensors - from ProcessGroupNCCL's hook thread, where it is only
  queued; the training thread matches the queued reports at the step's end. Each traced call waits in a
  per-group queue and
  takes the first report of a matching op type (works of one type on one group finish in issue order);
  a call that issues several works (DDP's coalesced broadcasts) counts them from the group's sequence
  number. This times DTensor functional collectives and blocking send/recv too, and one
  batch_isend_irecv is one coalesced work: one entry per batch.
  The watchdog reports completions up to ~100 ms late: a work reported after its step ended is
  counted in its own step with time null (`untimed`, `untimed_bytes`), unless `settle_s` lets
  `end_step` wait that long for the step's reports.
  Without the hook (a torch without `_register_on_completion_hook`, or a group that refuses it), blocking
  NCCL calls are timed by CUDA events recorded around them on the current stream, read without a sync.
- Every step's `StepComm.health()` says how much of this is timed and why the rest is not
  (telemetry/coverage.py).

Bytes follow nccl-tests' S (telemetry/formulas.py), so busbw here and in sweeps mean the same thing.
gloo implements reduce_scatter as clone + all_reduce internally: the wire traffic is twice S there.
A batch of sends and receives is `sendrecv` with S = the larger of the bytes sent and received.

The tracer's parts, by concern: collective_calls.py (the wrappers, what each call costs in bytes, installing
them), completion_hooks.py (one hook per NCCL group, its report queue, matching reports to calls),
cuda_events.py (the fallback timing), comm_groups.py (process group identity), comm_step.py (the records
and each step's accounting and health). This module holds the tracer's state: queues, steps, placement.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter, deque

import torch
import torch.distributed as dist

from telemetry import coverage
from telemetry.capture import completion_hooks, cuda_events
from telemetry.capture.collective_calls import ABSENT, DIST_SPECS, FUNCOL_SPECS, CallWrappers
from telemetry.capture.comm_groups import group_identity, name_group, ranks_name, set_host_map
from telemetry.capture.comm_step import (CAPTURED, COMPILED, EVENTS_ASYNC, FUNCOL_GLOO, LATE, NO_DURATION, Call,
                                         StepComm, call_group, group_totals, totals, untimed_bytes)
from telemetry.capture.completion_hooks import (EVENTS, HOOK, OVERFLOWS, UNCLAIMED, UNMATCHED, drain_reports,
                                                group_timing, host_time, register_timing, token_group_name)
from telemetry.formulas import OPS, RECORDED_OPS

_P2P = frozenset({"send", "recv", "sendrecv"})  # NCCL runs point-to-point on streams of their own
HARNESS = "harness"  # a Call's source inside harness_traffic()
# A queued call with no report this many steps later, and this long after it was issued, never gets one
# (dropped). Both: the watchdog reports ~100 ms late, so 10 ms steps see a report ~10 steps on, and a call
# dropped before its report came had that report credited to the next call of its type.
STALE_STEPS = 4
STALE_S = 10.0


_HARNESS = threading.local()


@contextlib.contextmanager
def harness_traffic():
    """The harness's own bookkeeping exchanges (hosts, inventory, a start-up agreement): traced as usual (on
    NCCL their completion reports are claimed), marked `harness`, and left out of the job's counts."""
    before = getattr(_HARNESS, "on", False)
    _HARNESS.on = True
    try:
        yield
    finally:
        _HARNESS.on = before


def _tally(into: dict[str, list[int]], calls: list[Call]) -> None:
    """Add the job's calls (not the harness's own) to op -> [count, bytes]."""
    for c in calls:
        if c.source != HARNESS:
            entry = into.setdefault(c.op, [0, 0])
            entry[0] += 1
            entry[1] += c.nbytes


def enable_nccl_timing(environ=os.environ) -> None:
    """Ask ProcessGroupNCCL for start events (needed by its completion hook); must precede init."""
    environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")


# ---------------------------------------------------------------- backend access (tests replace these)

def _sequence_number(pg) -> int | None:
    try:
        return int(pg._get_sequence_number_for_group())
    except (RuntimeError, AttributeError, ValueError, TypeError):
        return None


def _deferred_by_coalescing(pg) -> int:
    """How many calls torch holds for `pg`'s open `_coalescing_manager` block (issued as one work at its exit;
    each returned at once, None or an `_IllegalWork`). Without a device, gloo (and any backend) coalesces
    all_reduce, all_gather_into_tensor and reduce_scatter_tensor this way; other calls in the block run at once."""
    try:
        return len(dist.distributed_c10d._world.pg_coalesce_state.get(pg) or ())
    except (AttributeError, TypeError):
        return 0


def _capturing() -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except (RuntimeError, AttributeError):
        return False


def _compiling() -> bool:
    """Inside torch.compile's tracing (dynamo): the call becomes part of a compiled graph."""
    try:
        return bool(torch.compiler.is_compiling())
    except (RuntimeError, AttributeError):
        return False


def register_group(pg, dim: str) -> None:
    """Name `pg` after its mesh dimension (dp, tp, pp, cp, ...). A group that serves several dimensions
    keeps the first name it was given (the mesh owner registers its dimensions in mesh order)."""
    if pg is None:
        return
    name_group(pg, dim)
    register_timing(pg)  # the mesh owner made it just now: its completion hook goes on before any call


class CollectiveTracer(CallWrappers):
    """Install once per process; `begin_step()`/`end_step()` bracket what belongs to a step.

    `settle_s`: how long `end_step` may wait for NCCL completion reports of the step's calls (the
    watchdog reports up to ~100 ms after the device finished). 0 (default): never wait; calls not yet
    reported are counted untimed.
    """

    def __init__(self, settle_s: float = 0.0):
        self.settle_s = settle_s
        self._orig: dict[tuple[object, str], object] = {}
        self._local = threading.local()
        self._step = StepComm()
        self._cond = threading.Condition(threading.Lock())
        self._pending: dict[int, deque[Call]] = {}
        self._steps = 0
        self._busy: dict[tuple, float] = {}  # (group token, stream): where its last placed work ended
        self.late = 0  # reports that arrived after their step's record was made
        self.dropped = 0  # queued calls never reported within STALE_STEPS steps and STALE_S seconds
        self._by_events: deque[Call] = deque()  # EVENTS: calls whose end event is not read yet, in issue order
        self._between: dict[str, Counter] = {k: Counter() for k in coverage.BETWEEN}  # since the last end_step
        self._open = False  # between begin_step and end_step
        # calls made outside any step (setup, DDP's first broadcast, checkpoint saves and loads, whatever a
        # loop does between its steps): op -> [count, bytes], so that the run still counts every collective
        self._outside: dict[str, list[int]] = {}
        self._unclaimed_seen: Counter = Counter(UNCLAIMED)  # counted from here on
        self._overflows_seen: Counter = Counter(OVERFLOWS)
        self.installed = False
        self.retired = False  # uninstalled: hooks it left on autograd nodes count nothing (collective_calls.py)
        completion_hooks.add_tracer(self)

    # ------------------------------------------------------------ install

    def install(self) -> "CollectiveTracer":
        if self.installed:
            return self
        from torch.distributed import distributed_c10d as c10d

        self._wrap_entry_points(c10d)
        self._register_groups(c10d)
        drain_reports()  # works that completed before this tracer existed are not its steps' business
        self._unclaimed_seen = Counter(UNCLAIMED)
        self.installed, self.retired = True, False
        return self

    def uninstall(self) -> None:
        self.drain()  # reports already in are this tracer's: matched (or counted unclaimed) now, not by the next
        self._unbind_importers()
        for (module, name), fn in self._orig.items():
            if fn is ABSENT:
                delattr(module, name)
            else:
                setattr(module, name, fn)
        self._orig.clear()
        with self._cond:
            for q in self._pending.values():  # the group hooks stay (they cannot be removed), find nothing
                for call in q:
                    call.queued = False
            self._pending.clear()
        self.installed, self.retired = False, True


    # ------------------------------------------------------------ recording
    # ------------------------------------------------------------ recording

    @property
    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _source(self, default: str) -> str:
        if getattr(_HARNESS, "on", False):
            return HARNESS
        return getattr(self._local, "source", None) or default

    def _record(self, call: Call) -> Call:
        with self._cond:
            call.step_no = self._steps
            self._step.calls.append(call)
        return call

    @staticmethod
    def _group_info(group) -> tuple[object, int, str | None]:
        """(process group, its size, its backend name); the default group for None."""
        try:
            pg = group if group is not None else dist.distributed_c10d._get_default_group()
        except (RuntimeError, ValueError, AttributeError):
            return None, 1, None
        try:
            size = pg.size()
        except (RuntimeError, AttributeError):
            size = 1
        return pg, size, completion_hooks.backend_name(pg)

    def _call(self, fn, call: Call, pg, types, args, kwargs, several: bool = False, sync: bool = True):
        """Issue `fn` for `call`. On NCCL the call is queued for its completion report before the
        works exist (a report may come back before `fn` returns) and no Work is kept. `several`: the
        call may issue more than one work, counted from the group's sequence number (only where known
        to: a count taken around a call could include another thread's work on the group). `sync`: the
        caller waits for the work (async_op=False), so the current stream is behind its end on return
        (what the CUDA-event fallback needs)."""
        nccl = call.backend == "nccl" and pg is not None
        block = getattr(self._local, "block", None)
        if block is not None and pg is not None:  # inside a coalescing block: maybe part of its one work
            before = _deferred_by_coalescing(pg)
            self._local.depth = 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self._local.depth = 0
            if nccl or _deferred_by_coalescing(pg) > before:  # elsewhere: only what torch kept for the exit
                call.folded = True
                block.append(call)
                return result
            self._opening(call, pg, types, sync)  # issued at once after all (a type torch does not coalesce)
            self._issued(call, pg)
            return result
        self._opening(call, pg, types, sync)
        seq = _sequence_number(pg) if several and call.queued and call.events is None else None
        self._local.depth = 1
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            if nccl:
                self._unqueue(call)
            raise
        finally:
            self._local.depth = 0
        self._issued(call, pg, seq)
        return result

    def _opening(self, call: Call, pg, types, sync: bool = True) -> None:
        """Before `call`'s works are issued: its group, and on NCCL its place in the group's queue."""
        if pg is not None and call.group is None:
            call.group = group_identity(pg)
        if call.backend == "nccl" and pg is not None:
            self._queue(call, pg, types, sync)

    def _issued(self, call: Call, pg, seq: int | None = None) -> None:
        """`call`'s works are issued (and, `sync`, waited for on the stream): it joins the current step; on NCCL
        it now expects its reports (one, or the works counted from the group's sequence number `seq`)."""
        if call.events is not None:  # behind the work's end on this stream (the caller waited for it)
            end = cuda_events.new_event()
            end.record()
            call.events[1] = end
        call.t_returned = time.perf_counter()
        if not call.replayed:
            self._record(call)
        if call.queued:
            after = _sequence_number(pg) if seq is not None else None
            with self._cond:
                call.works = after - seq if after is not None and after - seq >= 1 else 1
                self._settle(call)

    def _queue(self, call: Call, pg, types, sync: bool = True) -> None:
        if _compiling():  # dynamo is tracing: the call's runs happen inside the compiled graph
            call.untimed_reason = COMPILED
            return
        token, mechanism, reason = group_timing(pg)
        call.timing = mechanism
        if token is None:
            call.untimed_reason = reason
            return
        if _capturing():  # graph-captured works are not enqueued for the watchdog: no report will come
            call.untimed_reason = CAPTURED
            captured = getattr(self._local, "captured", None)
            if captured is not None:  # a wrapped CUDAGraph capture: nothing runs now, each replay counts it
                call.replayed = True
                captured.append(call)
            return
        if mechanism == EVENTS:
            if not sync:
                call.untimed_reason = EVENTS_ASYNC
                return
            start = cuda_events.new_event()
            start.record()
            call.events, call.token, call.queued = [start, None], token, True
            with self._cond:
                self._by_events.append(call)
            return
        call.types, call.token, call.queued = types, token, True
        with self._cond:
            self._pending.setdefault(token, deque()).append(call)

    def _unqueue(self, call: Call) -> None:
        with self._cond:
            q = self._by_events if call.events is not None else self._pending.get(call.token)
            if q is not None and call.queued and call in q:
                q.remove(call)
            call.queued = False
            call.events = None

    def drain(self) -> None:
        """Match the completion reports the hooks queued since the last drain, and read the CUDA events
        of event-timed calls that have completed (query() only: never a synchronisation)."""
        drain_reports()
        if self._by_events:
            self._poll_events()

    def _poll_events(self) -> None:
        with self._cond:
            cuda_events.read_completed(self._by_events, self._settle)

    def complete_all(self, token: int, reports: list) -> list:
        """Completion reports (op type, duration, seen finished) for `token`'s group, in order: each credits the
        first queued call that issues that type (works of one type on one group finish in issue order).
        Returns the reports no call of this tracer claimed."""
        left = []
        with self._cond:
            q = self._pending.get(token)
            for report in reports:
                op_type, duration_s, finished = report
                call = None
                if q:
                    head = q[0]
                    call = head if op_type in head.types else next((c for c in q if op_type in c.types), None)
                if call is None:
                    left.append(report)
                    continue
                call.seen += 1
                if finished is not None:
                    call.finished_seen = max(call.finished_seen or finished, finished)
                if duration_s is None:
                    call.bad = True
                else:
                    call.acc_s += duration_s
                self._settle(call)
        return left

    def _settle(self, call: Call) -> None:  # holds self._cond
        if call.works is None or call.seen < call.works:
            return
        q = self._pending.get(call.token)
        if q is not None and call in q:
            q.remove(call)
        call.queued = False
        if call.closed:  # its step's record is made: it stays untimed there
            self.late += 1
            self._between["reported_after_close"][call_group(call)] += 1
        elif call.bad:
            call.untimed_reason = NO_DURATION
        else:
            call.duration_s = call.acc_s

    # ------------------------------------------------------------ steps

    def begin_step(self) -> None:
        with self._cond:
            if not self._open:
                _tally(self._outside, self._step.calls)
            self._step, self._open = StepComm(), True

    def next_run(self) -> None:
        """A tracer the runs of one process share (telemetry/capture/early.py), at a run's close: the calls it
        still holds and its tally of calls outside the steps were that run's; what follows is the next run's."""
        with self._cond:
            self._step, self._open, self._outside = StepComm(), False, {}

    def outside_steps(self) -> dict[str, dict[str, int]]:
        """Calls made outside every step so far, per collective type: `count` and `bytes` (nccl-tests S)."""
        with self._cond:
            out = {op: list(v) for op, v in self._outside.items()}
            if not self._open:  # calls since the last step's end (a final evaluation, the last save)
                _tally(out, self._step.calls)
        return {op: {"count": n, "bytes": b} for op, (n, b) in sorted(out.items())}

    def end_step(self, hold: bool = False) -> StepComm:
        """The step's calls. `hold`: leave its NCCL calls open for completion reports still to come; the
        caller closes the step later with `release` (off the training thread's critical path)."""
        self.drain()  # the reports the hooks queued during the step, matched in one batch
        with self._cond:
            step, self._step, self._open = self._step, StepComm(), False
            self._steps += 1
            old = time.perf_counter() - STALE_S
            for q in (*self._pending.values(), self._by_events):
                while (q and q[0].step_no < self._steps - STALE_STEPS and q[0].works is not None
                       and (q[0].t_returned if q[0].t_returned is not None else q[0].t_issue) < old):
                    call = q.popleft()
                    call.queued, call.events = False, None
                    if not call.closed:  # its step still held (hold_reports_s over STALE_S): untimed, and why
                        call.untimed_reason = LATE
                    self.dropped += 1
                    self._between["never_reported"][call_group(call)] += 1
            step.events = {k: dict(v) for k, v in self._between.items() if v}
            for v in self._between.values():
                v.clear()
        for kind, counter, seen in (("unclaimed_reports", UNCLAIMED, self._unclaimed_seen),
                                    ("queue_full", OVERFLOWS, self._overflows_seen)):
            for token, n in list(counter.items()):
                n -= seen.get(token, 0)
                if n > 0:
                    name = token_group_name(token)
                    step.events.setdefault(kind, {})
                    step.events[kind][name] = step.events[kind].get(name, 0) + n
                    seen[token] += n
        if not hold:
            self.release(step, self.settle_s)
        return step

    def release(self, step: StepComm, wait_s: float = 0.0) -> StepComm:
        """Close a step: wait up to `wait_s` for its calls' reports, count the rest untimed (LATE), and
        place its NCCL calls on the device timeline (`place`)."""
        self.drain()
        if wait_s > 0:  # the hooks only queue their reports: look again every millisecond
            deadline = time.monotonic() + wait_s
            while any(c.queued for c in step.calls) and time.monotonic() < deadline:
                time.sleep(0.001)
                self.drain()
        with self._cond:
            for c in step.calls:
                c.closed = True
                if c.queued:
                    c.untimed_reason = LATE
            self.place(step.calls)
        return step

    def pending(self, step: StepComm) -> int:
        """The step's calls still waiting for a completion report (after matching those queued so far)."""
        self.drain()
        return sum(1 for c in step.calls if c.queued)

    def since_last_step(self) -> dict[str, dict[str, int]]:
        """What the tracer saw after the last step's end (reports of late calls, calls given up on), by group:
        the run's end adds these to its health, no step record holds them."""
        self.drain()
        with self._cond:
            return {k: dict(v) for k, v in self._between.items() if v}

    def still_pending(self) -> dict[str, int]:
        """Calls of closed steps still waiting for a report or event, by group (never reported, at the end)."""
        self.drain()
        out: Counter = Counter()
        with self._cond:
            for q in (*self._pending.values(), self._by_events):
                for c in q:
                    if c.closed and c.queued:
                        out[call_group(c)] += 1
        return dict(out)

    def place(self, calls: list[Call]) -> None:
        """Device-side start and end of each timed NCCL call, on the host's perf_counter timeline.

        ProcessGroupNCCL reports a work's device duration (between its CUDA events), the host time it was
        created, and when the watchdog saw it complete (up to ~100 ms late); not when the device started it.
        The works of one group run one after another on its stream (point-to-point on streams of their own),
        and none starts before the host issued it. So each call is placed at the earliest position those
        facts allow: start = max(its issue, the end of the previous work on the same stream, carried across
        steps), end = start + duration; never after the watchdog saw it complete. The same rule for every
        group puts all groups on one consistent timeline; where the device runs behind the host (a queue of
        compute kernels ahead of the collective) the true start is later, up to the completion seen less
        the duration. Places calls once; called with a step's calls in issue order."""
        for c in sorted(calls, key=lambda c: c.t_issue):
            if c.token is None or c.duration_s is None or c.t_start is not None:
                continue
            key = (c.token, "p2p" if c.op in _P2P else "coll")
            start = max(c.t_issue, self._busy.get(key, c.t_issue))
            if c.finished_seen is not None:
                start = min(start, max(c.finished_seen - c.duration_s, c.t_issue))
            c.t_start, c.t_done = start, start + c.duration_s
            self._busy[key] = c.t_done


__all__ = ["CollectiveTracer", "Call", "StepComm", "OPS", "RECORDED_OPS", "enable_nccl_timing", "harness_traffic",
           "totals", "untimed_bytes", "register_group", "set_host_map", "group_identity", "group_totals",
           # the parts' names this module has always offered (their homes: see the module's docstring)
           "DIST_SPECS", "FUNCOL_SPECS", "ranks_name", "register_timing", "host_time", "drain_reports", "HOOK",
           "EVENTS", "UNMATCHED", "LATE", "FUNCOL_GLOO", "EVENTS_ASYNC", "STALE_STEPS"]
