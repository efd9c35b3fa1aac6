"""NCCL completion hooks, one per process group, their report queues, and matching the queued reports to traced calls."""
from __future__ import annotations

import datetime
import itertools
import sys
import threading
import time
import weakref
from collections import Counter, deque

import torch.distributed as dist

from telemetry.capture import cuda_events
from telemetry.capture.comm_groups import UNKNOWN_GROUP, PerGroup, group_identity, group_label

# A hook cannot be removed or registered twice on a group: one per group for the process, registered when
# the group is made (the tracer wraps new_group/split_group, and registers the groups that exist at install),
# else at the group's first traced call. The hook is the bound `append` of a deque of the group's own: the
# hook thread pays one C-level call per completed work (~7,700 per llama70b_lora step), with no Python frame
# and no lock; the training thread matches the queued reports in batches (`drain_reports`) at step ends.
# Where a group has no hook (a torch without `_register_on_completion_hook`, or a group that refuses it),
# NCCL calls are timed by CUDA events the tracer records around them on the current stream (`EVENTS`).
HOOK, EVENTS = "completion_hook", "cuda_events"
REPORT_QUEUE_MAX = 1 << 18  # reports a group keeps between drains (a few MB); beyond it the oldest are lost
_HOOKS = PerGroup()  # group -> (token, mechanism, reason)
_QUEUES: list[tuple[int, deque]] = []  # (token, the group's report queue), appended under _REGISTRY_LOCK
_TOKEN_GROUP: dict[int, "weakref.ref | object"] = {}  # token -> its process group (for names in the health)
_TOKENS = itertools.count(1)
_TRACERS: weakref.WeakSet = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
_DRAIN_LOCK = threading.Lock()
UNMATCHED: Counter = Counter()  # reports no traced call claimed, by op type: works issued outside the wrappers
UNCLAIMED: Counter = Counter()  # the same by group token
OVERFLOWS: Counter = Counter()  # drains that found a group's queue full (reports may have been lost), by token
_ANNOUNCED: set = set()
NO_HOOK_API = "this torch's ProcessGroup has no _register_on_completion_hook"


# ---------------------------------------------------------------- backend access (tests replace these)

def backend_name(pg) -> str | None:
    try:
        return dist.get_backend(pg)
    except (RuntimeError, ValueError, AttributeError):
        return None


def _register_completion_hook(pg, hook) -> None:
    pg._register_on_completion_hook(hook)


def add_tracer(tracer) -> None:
    """A tracer that drains offer their groups' reports to (held weakly: `complete_all(token, reports)`)."""
    with _REGISTRY_LOCK:
        _TRACERS.add(tracer)


def _has_hook_api(pg) -> bool:
    """Whether the group offers the completion hook at all (marked for deprecation upstream)."""
    return hasattr(pg, "_register_on_completion_hook")


def _announce(pg, mechanism: str | None, reason: str) -> None:
    """Say once per kind of cause which mechanism times NCCL calls instead of the completion hook."""
    key = (mechanism, reason.split(": ", 1)[-1])
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    takes_over = ("CUDA events recorded around each blocking call on the current stream (asynchronous calls "
                  "untimed)" if mechanism == EVENTS else "nothing: these calls are counted untimed (no GPU)")
    print(f"[telemetry] {reason}; timing taken over by {takes_over}", file=sys.stderr, flush=True)


def group_timing(pg) -> tuple[int | None, str | None, str | None]:
    """(token, mechanism, reason) for a group: (token, HOOK, None) once it reports completions to us;
    (token, EVENTS, why no hook) where CUDA events time its calls; (None, None, reason) when nothing can."""
    with _REGISTRY_LOCK:
        got = _HOOKS.get(pg)
        fresh = got is None
        if fresh:
            got = _register(pg)
            _HOOKS.set(pg, got)
    if fresh and got[1] != HOOK:
        _announce(pg, got[1], got[2])
    return got


def _register(pg) -> tuple:  # holds _REGISTRY_LOCK
    token = next(_TOKENS)
    try:
        _TOKEN_GROUP[token] = weakref.ref(pg)
    except TypeError:
        _TOKEN_GROUP[token] = pg
    if not _has_hook_api(pg):
        reason = f"no completion hook on group {group_label(pg)}: {NO_HOOK_API}"
    else:
        queue: deque = deque(maxlen=REPORT_QUEUE_MAX)
        try:
            _register_completion_hook(pg, queue.append)
            _QUEUES.append((token, queue))
            return token, HOOK, None
        except Exception as e:  # timing off at init, a hook of someone else's, not NCCL
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            reason = f"no completion hook on group {group_label(pg)}: {first}"
    if cuda_events.events_available():
        return token, EVENTS, reason
    return None, None, reason


def register_timing(pg) -> None:
    """Register the completion hook of an NCCL group now (at its creation), not at its first call."""
    if pg is not None and backend_name(pg) == "nccl":
        group_timing(pg)


def _group_gone(token: int) -> bool:
    ref = _TOKEN_GROUP.get(token)
    return isinstance(ref, weakref.ref) and ref() is None


def token_group_name(token: int) -> str:
    ref = _TOKEN_GROUP.get(token)
    pg = ref() if isinstance(ref, weakref.ref) else ref
    return group_identity(pg)["name"] if pg is not None else UNKNOWN_GROUP


def drain_reports() -> int:
    """Match every completion report the groups' hooks queued since the last drain to the traced calls
    waiting for one (on the calling thread, in each group's report order). Returns the number drained."""
    with _DRAIN_LOCK:
        with _REGISTRY_LOCK:
            queues, tracers = list(_QUEUES), list(_TRACERS)
        drained = 0
        for token, queue in queues:
            n = len(queue)
            if not n:
                if _group_gone(token):  # destroyed: its hook (and so its queue) goes with it
                    with _REGISTRY_LOCK:
                        _QUEUES.remove((token, queue))
                        _TOKEN_GROUP.pop(token, None)
                continue
            if n == queue.maxlen:
                OVERFLOWS[token] += 1
            drained += n
            _dispatch_all(token, [queue.popleft() for _ in range(n)], tracers)
        return drained


_OP_NAMES: dict = {}


def _parse(info) -> tuple[str, float | None, float | None]:
    """(op type name, duration in s, when the watchdog saw it on the perf_counter timeline) of a WorkInfo."""
    op = info.op_type
    name = _OP_NAMES.get(op)
    if name is None:
        name = _OP_NAMES[op] = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
    finished = getattr(info, "time_finished", None)
    return name, _seconds(info.active_duration), (host_time(finished) if finished is not None else None)


def _dispatch_all(token: int, infos: list, tracers: list) -> None:
    """A group's reports, in order: parsed, then offered to each tracer in one batch; the rest are unclaimed."""
    parsed = []
    for info in infos:
        try:
            parsed.append(_parse(info))
        except Exception:  # noqa: BLE001 - a damaged report is counted, never raised
            UNMATCHED["<error>"] += 1
    for tracer in tracers:
        if not parsed:
            break
        parsed = tracer.complete_all(token, parsed)
    for name, _, _ in parsed:
        UNMATCHED[name] += 1
        UNCLAIMED[token] += 1


def dispatch(token: int, info, tracers=None) -> None:
    """One report (the batch path for a single report)."""
    if tracers is None:
        with _REGISTRY_LOCK:
            tracers = list(_TRACERS)
    _dispatch_all(token, [info], tracers)


def host_time(value) -> float | None:
    """A WorkInfo time on this process's perf_counter timeline, or None. torch reported system_clock
    (datetime, wall clock) and, since 2025, steady_clock (timedelta since the steady clock's epoch, which
    on Linux is CLOCK_MONOTONIC, the clock perf_counter reads): both branches are taken by type."""
    try:
        if isinstance(value, datetime.datetime):
            return value.timestamp() - (time.time() - time.perf_counter())
        if isinstance(value, datetime.timedelta):
            return value.total_seconds() - (time.monotonic() - time.perf_counter())
    except (OverflowError, OSError, ValueError):
        return None
    return None


def _seconds(value) -> float | None:
    """WorkInfo.active_duration: a timedelta (pybind's chrono conversion); float milliseconds accepted."""
    if type(value) is datetime.timedelta:
        s = value.total_seconds()
        return s if s >= 0 else None
    try:
        s = value.total_seconds() if hasattr(value, "total_seconds") else float(value) / 1000.0
    except (TypeError, ValueError):
        return None
    return s if s >= 0 else None
