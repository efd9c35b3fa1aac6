"""Per-step collective accounting: count, bytes and time of every collective a rank issues.

Mechanism (chosen by measured coverage and overhead; see docs/telemetry.md): the tracer wraps the
Python entry points every PyTorch parallelism goes through -

- `torch.distributed.*` collectives and point-to-point calls: explicit calls, FSDP2's
  all_gather_single / reduce_scatter_single, pipeline stages' isend/irecv/batch_isend_irecv, DeepSpeed
  ZeRO's gathers and reduce-scatters (DeepSpeed binds them at `deepspeed.initialize`: install first);
  the all-gather/reduce-scatter names also where distributed_c10d calls them as module globals;
- `torch.distributed._functional_collectives.*`: DTensor tensor parallelism;
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
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import itertools
import os
import sys
import threading
import time
import weakref
from collections import Counter, deque
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from telemetry import coverage
from telemetry.formulas import OPS, RECORDED_OPS, bus_factor

_NBYTES = lambda t: t.numel() * t.element_size()  # noqa: E731



def _sum_bytes(tensors) -> int:
    return sum(_NBYTES(t) for t in tensors)


# c10d OpType names a call's works report as (ProcessGroupNCCL; NCCL's barrier is a 1-element all_reduce)
_AR, _BAR = frozenset({"ALLREDUCE"}), frozenset({"BARRIER", "ALLREDUCE"})
_AG = frozenset({"_ALLGATHER_BASE", "ALLGATHER"})
_AG_LIST = _AG | {"ALLGATHER_COALESCED", "COALESCED"}
_RS = frozenset({"_REDUCE_SCATTER_BASE", "REDUCE_SCATTER"})
_RS_LIST = _RS | {"REDUCE_SCATTER_TENSOR_COALESCED", "COALESCED"}
_A2A = frozenset({"ALLTOALL_BASE", "ALLTOALL"})
_BC, _RED = frozenset({"BROADCAST"}), frozenset({"REDUCE"})
_SEND, _RECV = frozenset({"SEND"}), frozenset({"RECV", "RECVANYSOURCE"})
_BATCH = frozenset({"COALESCED"})
# one work for a whole _coalescing_manager block: COALESCED, or the fast path's *_COALESCED types
_BLOCK = frozenset({"COALESCED", "ALLREDUCE_COALESCED", "ALLGATHER_COALESCED", "REDUCE_SCATTER_TENSOR_COALESCED"})
_P2P = frozenset({"send", "recv", "sendrecv"})  # NCCL runs point-to-point on streams of their own

# name -> (collective type, bytes from the bound arguments, whether the call takes async_op, NCCL op types)
DIST_SPECS = {
    "all_reduce": ("all_reduce", lambda a: _NBYTES(a["tensor"]), True, _AR),
    "all_gather_into_tensor": ("all_gather", lambda a: _NBYTES(a["output_tensor"]), True, _AG),
    "all_gather_single": ("all_gather", lambda a: _NBYTES(a["output_tensor"]), True, _AG),
    "all_gather": ("all_gather", lambda a: _NBYTES(a["tensor"]) * len(a["tensor_list"]), True, _AG_LIST),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a: _NBYTES(a["input"]), True, _RS),
    "reduce_scatter_single": ("reduce_scatter", lambda a: _NBYTES(a["input"]), True, _RS),
    "reduce_scatter": ("reduce_scatter", lambda a: _sum_bytes(a["input_list"]), True, _RS_LIST),
    "all_to_all_single": ("all_to_all", lambda a: _NBYTES(a["input"]), True, _A2A),
    "all_to_all": ("all_to_all", lambda a: _sum_bytes(a["input_tensor_list"]), True, _A2A | _BATCH),
    "broadcast": ("broadcast", lambda a: _NBYTES(a["tensor"]), True, _BC),
    "reduce": ("reduce", lambda a: _NBYTES(a["tensor"]), True, _RED),
    "barrier": ("barrier", lambda a: 0, True, _BAR),
    "send": ("send", lambda a: _NBYTES(a["tensor"]), False, _SEND),
    "recv": ("recv", lambda a: _NBYTES(a["tensor"]), False, _RECV),
    "isend": ("send", lambda a: _NBYTES(a["tensor"]), False, _SEND),
    "irecv": ("recv", lambda a: _NBYTES(a["tensor"]), False, _RECV),
}
FUNCOL_SPECS = {
    "all_reduce": ("all_reduce", lambda a, n: _NBYTES(a["self"]), _AR),
    "all_reduce_coalesced": ("all_reduce", lambda a, n: _sum_bytes(a["self"]),
                             frozenset({"ALLREDUCE_COALESCED", "COALESCED"})),
    "all_gather_tensor": ("all_gather", lambda a, n: _NBYTES(a["self"]) * n, _AG),
    "all_gather_single": ("all_gather", lambda a, n: _NBYTES(a["self"]) * n, _AG),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, n: _NBYTES(a["self"]), _RS),
    "reduce_scatter_single": ("reduce_scatter", lambda a, n: _NBYTES(a["self"]), _RS),
    "all_to_all_single": ("all_to_all", lambda a, n: _NBYTES(a["self"]), _A2A),
    "broadcast": ("broadcast", lambda a, n: _NBYTES(a["self"]), _BC),
}
_ASYNC_RETURNING = {"isend", "irecv"}
# Also wrapped where distributed_c10d looks them up as module globals: P2POp and batch_isend_irecv test
# identity against isend/irecv; torch 2.13's all_gather_into_tensor/reduce_scatter_tensor delegate to
# the *_single names there, and DeepSpeed's coalesced all-gather calls distributed_c10d's directly.
_C10D_GLOBALS = ("isend", "irecv", "all_gather_into_tensor", "all_gather_single", "reduce_scatter_tensor",
                 "reduce_scatter_single")  # return a Work without an async_op flag

# Why a call has no time (the summary lists the reasons of its untimed calls).
LATE = "completion reported after the step ended"
FUNCOL_GLOO = "functional collectives are timed on NCCL only"
NO_FUTURE = "this backend's work has no future to time it"
UNFINISHED = "not complete when the step ended"
CAPTURED = "issued during CUDA graph capture (no completion report)"
COMPILED = ("traced while torch.compile was compiling (run inside the compiled graph, or after a graph break, "
            "without the tracer: its works' reports show as unclaimed)")
NO_DURATION = "the completion report carried no duration"
EVENTS_ASYNC = ("asynchronous NCCL call on a group timed by CUDA events (the end of its work is not on the issuing "
                "stream)")
STALE_STEPS = 4  # a queued call with no report this many steps later never gets one (dropped)


def enable_nccl_timing(environ=os.environ) -> None:
    """Ask ProcessGroupNCCL for start events (needed by its completion hook); must precede init."""
    environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")


# ---------------------------------------------------------------- backend access (tests replace these)

def _backend_name(pg) -> str | None:
    try:
        return dist.get_backend(pg)
    except (RuntimeError, ValueError, AttributeError):
        return None


def _register_completion_hook(pg, hook) -> None:
    pg._register_on_completion_hook(hook)


def _sequence_number(pg) -> int | None:
    try:
        return int(pg._get_sequence_number_for_group())
    except (RuntimeError, AttributeError, ValueError, TypeError):
        return None


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


# ---------------------------------------------------------------- process group identity

# Which mesh dimension each process group is (registered by whoever builds the meshes: trainer/distributed.py),
# and every rank's host (run.json `hosts`), from which a group's scope follows: "intra" when all its ranks
# share a host (NVLink, loopback), "inter" when it spans hosts (the fabric).
_GROUP_DIMS: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()
_GROUP_DIMS_STRONG: dict[int, tuple[object, str]] = {}
_IDENTITY: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_IDENTITY_STRONG: dict[int, tuple[object, dict]] = {}
_HOST_OF_RANK: list[str] | None = None
INTRA, INTER = "intra", "inter"
NO_HOSTS = "the host of each rank was not recorded"


def register_group(pg, dim: str) -> None:
    """Name `pg` after its mesh dimension (dp, tp, pp, cp, ...). A group that serves several dimensions
    keeps the first name it was given (the mesh owner registers its dimensions in mesh order)."""
    if pg is None:
        return
    with _REGISTRY_LOCK:
        try:
            _GROUP_DIMS.setdefault(pg, dim)
            _IDENTITY.pop(pg, None)
        except TypeError:  # a group that cannot be weakly referenced
            _GROUP_DIMS_STRONG.setdefault(id(pg), (pg, dim))
            _IDENTITY_STRONG.pop(id(pg), None)
    register_timing(pg)  # the mesh owner made it just now: its completion hook goes on before any call


def _registered_dim(pg) -> str | None:
    try:
        return _GROUP_DIMS.get(pg)
    except TypeError:
        return _GROUP_DIMS_STRONG.get(id(pg), (None, None))[1]


def _size(pg) -> int:
    try:
        return int(pg.size())
    except (RuntimeError, AttributeError, TypeError, ValueError):
        return 1


def set_host_map(hosts: list[str | None] | None) -> None:
    """Every rank's host name, in global rank order (run.json `hosts`); groups' scopes follow from it."""
    global _HOST_OF_RANK
    with _REGISTRY_LOCK:
        _HOST_OF_RANK = list(hosts) if hosts else None
        _IDENTITY.clear()
        _IDENTITY_STRONG.clear()


def _group_ranks(pg) -> list[int] | None:
    ranks = getattr(pg, "ranks", None)  # test doubles and foreign groups may say so themselves
    if ranks is not None:
        return [int(r) for r in ranks]
    try:
        return [int(r) for r in dist.get_process_group_ranks(pg)]
    except (RuntimeError, ValueError, AttributeError, KeyError, TypeError):
        return None


def ranks_name(ranks: list[int]) -> str:
    """A stable name for a group no mesh named, from its global ranks: g[0,1,2,3], or g[0..62/2] (first,
    last and stride) for longer evenly spaced ones."""
    if len(ranks) <= 8:
        return "g[" + ",".join(map(str, ranks)) + "]"
    steps = {b - a for a, b in zip(ranks, ranks[1:])}
    if len(steps) == 1:
        return f"g[{ranks[0]}..{ranks[-1]}/{steps.pop()}]"
    return f"g[{ranks[0]},{ranks[1]},...,{ranks[-1]}]({len(ranks)})"


def group_identity(pg) -> dict:
    """{name, dim, size, ranks, scope, hosts} of a process group, computed once per group.

    name: the mesh dimension where one was registered (or the group's DeviceMesh description says it), else
    "world" for the default group, else a name from its ranks. scope: "intra" (one host), "inter" (spans
    hosts), or None with `scope_reason` when the ranks' hosts are unknown."""
    with _REGISTRY_LOCK:
        try:
            got = _IDENTITY.get(pg)
            weak = True
        except TypeError:
            got = _IDENTITY_STRONG.get(id(pg), (None, None))[1]
            weak = False
        if got is not None:
            return got
        host_map = _HOST_OF_RANK
    dim = _registered_dim(pg)
    desc = str(getattr(pg, "group_desc", "") or "")
    if dim is None and desc.startswith("mesh_") and desc != "mesh_default":
        dim = desc[len("mesh_"):]
    ranks = _group_ranks(pg)
    size = _size(pg)
    try:
        default = pg is dist.distributed_c10d._get_default_group()
    except (RuntimeError, ValueError, AttributeError):
        default = False
    name = dim or ("world" if default else ranks_name(ranks) if ranks else _group_label(pg))
    ident = {"name": name, "dim": dim, "size": size, "ranks": ranks, "scope": None}
    if host_map is not None and ranks:
        hosts = sorted({host_map[r] for r in ranks if 0 <= r < len(host_map) and host_map[r] is not None})
        if hosts:
            ident["hosts"] = len(hosts)
            ident["scope"] = INTER if len(hosts) > 1 else INTRA
    if ident["scope"] is None:
        ident["scope_reason"] = NO_HOSTS if host_map is None else "the group's ranks are not known"
    with _REGISTRY_LOCK:
        if weak:
            _IDENTITY[pg] = ident
        else:
            _IDENTITY_STRONG[id(pg)] = (pg, ident)
    return ident


# ---------------------------------------------------------------- completion hooks, once per group

# A hook cannot be removed or registered twice on a group: one per group for the process, registered when
# the group is made (the tracer wraps new_group/split_group, and registers the groups that exist at install),
# else at the group's first traced call. The hook is the bound `append` of a deque of the group's own: the
# hook thread pays one C-level call per completed work (~7,700 per llama70b_lora step), with no Python frame
# and no lock; the training thread matches the queued reports in batches (`drain_reports`) at step ends.
# Where a group has no hook (a torch without `_register_on_completion_hook`, or a group that refuses it),
# NCCL calls are timed by CUDA events the tracer records around them on the current stream (`EVENTS`).
HOOK, EVENTS = "completion_hook", "cuda_events"
REPORT_QUEUE_MAX = 1 << 18  # reports a group keeps between drains (a few MB); beyond it the oldest are lost
_HOOKS: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()
_HOOKS_STRONG: dict[int, tuple[object, tuple]] = {}  # groups that cannot be weakly referenced
_QUEUES: list[tuple[int, deque]] = []  # (token, the group's report queue), appended under _REGISTRY_LOCK
_TOKEN_GROUP: dict[int, "weakref.ref | object"] = {}  # token -> its process group (for names in the health)
_TOKENS = itertools.count(1)
_TRACERS: "weakref.WeakSet[CollectiveTracer]" = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
_DRAIN_LOCK = threading.Lock()
UNMATCHED: Counter = Counter()  # reports no traced call claimed, by op type: works issued outside the wrappers
UNCLAIMED: Counter = Counter()  # the same by group token
OVERFLOWS: Counter = Counter()  # drains that found a group's queue full (reports may have been lost), by token
_ANNOUNCED: set = set()
NO_HOOK_API = "this torch's ProcessGroup has no _register_on_completion_hook"


def _group_label(pg) -> str:
    return str(getattr(pg, "group_name", None) or getattr(pg, "name", lambda: "?")())


def _has_hook_api(pg) -> bool:
    """Whether the group offers the completion hook at all (marked for deprecation upstream)."""
    return hasattr(pg, "_register_on_completion_hook")


def _events_available() -> bool:
    try:
        return torch.cuda.is_available()
    except (RuntimeError, AttributeError):
        return False


def _new_event():
    """A CUDA event with timing (tests replace this with a fake modelling query() and elapsed_time())."""
    return torch.cuda.Event(enable_timing=True)


def _announce(pg, mechanism: str | None, reason: str) -> None:
    """Say once per kind of cause which mechanism times NCCL calls instead of the completion hook."""
    key = (mechanism, reason.split(": ", 1)[-1])
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    takes_over = ("CUDA events recorded around each blocking call on the current stream (asynchronous calls "
                  "untimed)" if mechanism == EVENTS else "nothing: these calls are counted untimed (no GPU)")
    print(f"[telemetry] {reason}; timing taken over by {takes_over}", file=sys.stderr, flush=True)


def _group_timing(pg) -> tuple[int | None, str | None, str | None]:
    """(token, mechanism, reason) for a group: (token, HOOK, None) once it reports completions to us;
    (token, EVENTS, why no hook) where CUDA events time its calls; (None, None, reason) when nothing can."""
    with _REGISTRY_LOCK:
        try:
            got = _HOOKS.get(pg)
            weak = True
        except TypeError:
            got = _HOOKS_STRONG.get(id(pg), (None, None))[1]
            weak = False
        fresh = got is None
        if fresh:
            got = _register(pg)
            if weak:
                _HOOKS[pg] = got
            else:
                _HOOKS_STRONG[id(pg)] = (pg, got)
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
        reason = f"no completion hook on group {_group_label(pg)}: {NO_HOOK_API}"
    else:
        queue: deque = deque(maxlen=REPORT_QUEUE_MAX)
        try:
            _register_completion_hook(pg, queue.append)
            _QUEUES.append((token, queue))
            return token, HOOK, None
        except Exception as e:  # timing off at init, a hook of someone else's, not NCCL
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            reason = f"no completion hook on group {_group_label(pg)}: {first}"
    if _events_available():
        return token, EVENTS, reason
    return None, None, reason


def register_timing(pg) -> None:
    """Register the completion hook of an NCCL group now (at its creation), not at its first call."""
    if pg is not None and _backend_name(pg) == "nccl":
        _group_timing(pg)


def _group_gone(token: int) -> bool:
    ref = _TOKEN_GROUP.get(token)
    return isinstance(ref, weakref.ref) and ref() is None


def _token_group_name(token: int) -> str:
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
        parsed = tracer._complete_all(token, parsed)
    for name, _, _ in parsed:
        UNMATCHED[name] += 1
        UNCLAIMED[token] += 1


def _dispatch(token: int, info, tracers=None) -> None:
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


# ---------------------------------------------------------------- records

@dataclass(eq=False)  # identity, not field equality: queues remove the very call that completed
class Call:
    op: str
    nbytes: int
    group_size: int
    backend: str | None
    source: str
    t_issue: float
    t_done: float | None = None
    duration_s: float | None = None
    untimed_reason: str | None = None
    blocking: bool = False  # completed on the calling thread before the call returned (gloo, not async)
    t_returned: float | None = None  # when the call gave the caller back its thread (issuing can take a while)
    # NCCL: filled from completion reports, never from a Work
    types: frozenset = frozenset()
    token: int | None = None
    works: int | None = None  # reports expected; None while the call is still issuing
    seen: int = 0
    acc_s: float = 0.0
    bad: bool = False
    queued: bool = False
    closed: bool = False
    step_no: int = 0
    group: dict | None = None  # group_identity() of the process group it ran on (None: unknown)
    t_start: float | None = None  # NCCL: where its works ran on the device, on the host timeline (`place`)
    finished_seen: float | None = None  # NCCL: when the watchdog saw its last work complete (host clock)
    coalesced: int = 0  # calls folded into this one _coalescing_manager block's single work
    events: list | None = None  # EVENTS: [start, end] CUDA events around the call, until they are read
    timing: str | None = None  # NCCL: HOOK or EVENTS, the mechanism that times it

    def resolve(self) -> None:
        if self.duration_s is not None or self.token is not None:
            return
        if self.t_done is not None:
            self.duration_s = max(self.t_done - self.t_issue, 0.0)
        elif self.untimed_reason is None:
            self.untimed_reason = UNFINISHED


def _call_group(call: "Call") -> str:
    return (call.group or {}).get("name") or UNKNOWN_GROUP


def _untimed_kind(reason: str | None) -> str:
    """The tracer-health category of an untimed call, from its reason."""
    if reason == LATE:
        return "late"
    if reason == NO_DURATION:
        return "no_duration"
    if reason == CAPTURED:
        return "captured"
    if reason == COMPILED:
        return "compiled"
    if reason and reason.startswith("no completion hook"):
        return "no_timing"
    return "other_untimed"


@dataclass
class StepComm:
    calls: list[Call] = field(default_factory=list)
    # what the tracer saw between the previous step's end and this one's, by group name: reports of earlier
    # steps' calls that came after those steps closed, calls given up on, reports no traced call claimed
    events: dict = field(default_factory=dict)

    def summary(self) -> dict:
        per_op: dict[str, dict] = {}
        for c in self.calls:
            c.resolve()
            s = per_op.setdefault(c.op, {"count": 0, "bytes": 0, "time_s": 0.0, "untimed": 0, "untimed_bytes": 0,
                                         "_bus": 0.0, "_reasons": set()})
            s["count"] += 1
            s["bytes"] += c.nbytes
            if c.duration_s is None:
                s["untimed"] += 1
                s["untimed_bytes"] += c.nbytes
                s["_reasons"].add(c.untimed_reason or "unknown")
            else:
                s["time_s"] += c.duration_s
                s["_bus"] += c.nbytes * bus_factor(c.op, max(c.group_size, 1))
        out = {}
        for op, s in per_op.items():
            timed = s["count"] - s["untimed"]
            time_s = s["time_s"] if timed else None
            busbw = s["_bus"] / time_s / 1e9 if time_s else None
            out[op] = {"count": s["count"], "bytes": s["bytes"], "time_s": time_s, "untimed": s["untimed"],
                       "untimed_bytes": s["untimed_bytes"], "busbw_GBps": busbw}
            if s["untimed"]:
                out[op]["untimed_reason"] = "; ".join(sorted(s["_reasons"]))
        return out

    def health(self) -> dict:
        """The step's tracer health (telemetry/coverage.py): calls timed, and why the others are not, per group."""
        out = coverage.empty()
        groups: dict[str, dict] = {}
        for c in self.calls:
            c.resolve()
            name = (c.group or {}).get("name") or UNKNOWN_GROUP
            g = groups.setdefault(name, {**coverage.empty(), "timing": None})
            g["timing"] = g["timing"] or c.timing or (("host" if c.backend == "gloo" else c.backend)
                                                      if c.backend != "nccl" else None)
            g["calls"] += 1
            g["bytes"] += c.nbytes
            if c.duration_s is not None:
                g["timed"] += 1
                g["timed_bytes"] += c.nbytes
            else:
                kind = _untimed_kind(c.untimed_reason)
                g[kind] += 1
                if kind == "other_untimed":
                    g.setdefault("other_reasons", set()).add(c.untimed_reason or "unknown")
        for kind, by_group in self.events.items():
            for name, n in by_group.items():
                groups.setdefault(name, {**coverage.empty(), "timing": None})[kind] += n
        for g in groups.values():
            if "other_reasons" in g:
                g["other_reasons"] = sorted(g["other_reasons"])
        coverage.add(out, {"by_group": groups})
        for g in groups.values():
            for k in coverage.COUNTS:
                out[k] += g[k]
        return coverage.finish(out)

    def group_summary(self) -> dict:
        """The step's communication per process group: {name: {dim, size, scope, bytes, count, time_s,
        untimed, untimed_bytes, busbw_GBps, by_op}}; busbw takes the bus factor at that group's size."""
        by_group: dict[str, list[Call]] = {}
        for c in self.calls:
            by_group.setdefault((c.group or {}).get("name") or UNKNOWN_GROUP, []).append(c)
        out = {}
        for name, calls in by_group.items():
            ident = calls[0].group or {"dim": None, "size": max(calls[0].group_size, 1), "scope": None,
                                       "scope_reason": "the call's process group is not known"}
            entry = {"dim": ident.get("dim"), "size": ident.get("size"), "scope": ident.get("scope")}
            if ident.get("scope") is None:
                entry["scope_reason"] = ident.get("scope_reason")
            if ident.get("hosts") is not None:
                entry["hosts"] = ident["hosts"]
            if ident.get("ranks") is not None and len(ident["ranks"]) <= 64:
                entry["ranks"] = ident["ranks"]
            by_op = StepComm(calls).summary()
            entry.update(group_totals(by_op, ident.get("size") or 1))
            entry["by_op"] = by_op
            out[name] = entry
        return out


def _registering(fn):
    """A group-creating function that registers the new group's completion hook before returning it."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        pg = fn(*args, **kwargs)
        try:
            register_timing(pg)
        except Exception:  # noqa: BLE001 - a non-member placeholder or a foreign object: its first call decides
            pass
        return pg
    return wrapper


class CollectiveTracer:
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
        self.dropped = 0  # queued calls never reported within STALE_STEPS steps
        self._by_events: deque[Call] = deque()  # EVENTS: calls whose end event is not read yet, in issue order
        self._between: dict[str, Counter] = {k: Counter() for k in coverage.BETWEEN}  # since the last end_step
        self._unclaimed_seen: Counter = Counter(UNCLAIMED)  # counted from here on
        self._overflows_seen: Counter = Counter(OVERFLOWS)
        self.installed = False
        with _REGISTRY_LOCK:
            _TRACERS.add(self)

    # ------------------------------------------------------------ install

    def install(self) -> "CollectiveTracer":
        if self.installed:
            return self
        from torch.distributed import distributed_c10d as c10d

        for name, spec in DIST_SPECS.items():
            fn = getattr(dist, name, None)
            if fn is not None:
                wrapper = self._wrap_dist(name, fn, spec)
                self._patch(dist, name, wrapper)
                if name in _C10D_GLOBALS and getattr(c10d, name, None) is fn:
                    self._patch(c10d, name, wrapper)
        try:
            import torch.distributed._functional_collectives as funcol
        except ImportError:  # very old torch: no functional collectives to see
            funcol = None
        if funcol is not None:
            for name, spec in FUNCOL_SPECS.items():
                fn = getattr(funcol, name, None)
                if fn is not None:
                    self._patch(funcol, name, self._wrap_funcol(fn, spec))
        if hasattr(dist, "_broadcast_coalesced"):  # DDP's parameter and buffer broadcasts
            self._patch(dist, "_broadcast_coalesced", self._wrap_broadcast_coalesced(dist._broadcast_coalesced))
        if hasattr(dist, "batch_isend_irecv"):
            self._patch(dist, "batch_isend_irecv", self._wrap_batch(dist.batch_isend_irecv))
        if hasattr(c10d, "_coalescing_manager"):  # Megatron's DDP gradient sync, DeepSpeed's coalesced gathers
            wrapped = self._wrap_coalescing(c10d._coalescing_manager)
            if getattr(dist, "_coalescing_manager", None) is c10d._coalescing_manager:
                self._patch(dist, "_coalescing_manager", wrapped)
            self._patch(c10d, "_coalescing_manager", wrapped)
        self._register_groups(c10d)
        drain_reports()  # works that completed before this tracer existed are not its steps' business
        self._unclaimed_seen = Counter(UNCLAIMED)
        self.installed = True
        return self

    def _register_groups(self, c10d) -> None:
        """Completion hooks on every NCCL group at its creation: the groups that exist now, and those made
        later through new_group/split_group (DeviceMesh binds them in its own module)."""
        try:
            existing = list(c10d._world.pg_map)
        except (AttributeError, RuntimeError):
            existing = []
        for pg in existing:
            register_timing(pg)
        modules = [c10d]
        try:
            from torch.distributed import device_mesh
            modules.append(device_mesh)
        except ImportError:
            pass
        for name in ("new_group", "split_group", "_new_group_with_tag"):
            fn = getattr(c10d, name, None)
            if fn is None:
                continue
            wrapper = _registering(fn)
            for module in modules:
                if getattr(module, name, None) is fn:
                    self._patch(module, name, wrapper)
            if getattr(dist, name, None) is fn:
                self._patch(dist, name, wrapper)

    def uninstall(self) -> None:
        self.drain()  # reports already in are this tracer's: matched (or counted unclaimed) now, not by the next
        for (module, name), fn in self._orig.items():
            setattr(module, name, fn)
        self._orig.clear()
        with self._cond:
            for q in self._pending.values():  # the group hooks stay (they cannot be removed), find nothing
                for call in q:
                    call.queued = False
            self._pending.clear()
        self.installed = False

    def original(self, name: str):
        """The unwrapped torch.distributed function (telemetry's own gathers must not count)."""
        return self._orig.get((dist, name), getattr(dist, name))

    def _patch(self, module, name: str, wrapper) -> None:
        self._orig[(module, name)] = getattr(module, name)
        wrapper.__wrapped__ = self._orig[(module, name)]
        setattr(module, name, wrapper)

    # ------------------------------------------------------------ recording

    @property
    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _source(self, default: str) -> str:
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
        return pg, size, _backend_name(pg)

    def _call(self, fn, call: Call, pg, types, args, kwargs, several: bool = False, sync: bool = True):
        """Issue `fn` for `call`. On NCCL the call is queued for its completion report before the
        works exist (a report may come back before `fn` returns) and no Work is kept. `several`: the
        call may issue more than one work, counted from the group's sequence number (only where known
        to: a count taken around a call could include another thread's work on the group). `sync`: the
        caller waits for the work (async_op=False), so the current stream is behind its end on return
        (what the CUDA-event fallback needs)."""
        nccl = call.backend == "nccl" and pg is not None
        block = getattr(self._local, "block", None)
        if nccl and block is not None:  # inside a coalescing block: part of the block's one work
            block.append(call)
            self._local.depth = 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._local.depth = 0
        if pg is not None and call.group is None:
            call.group = group_identity(pg)
        if nccl:
            self._queue(call, pg, types, sync)
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
        if call.events is not None:  # behind the work's end on this stream (the caller waited for it)
            end = _new_event()
            end.record()
            call.events[1] = end
        call.t_returned = time.perf_counter()
        self._record(call)
        if call.queued:
            after = _sequence_number(pg) if seq is not None else None
            with self._cond:
                call.works = after - seq if after is not None and after - seq >= 1 else 1
                self._settle(call)
        return result

    def _queue(self, call: Call, pg, types, sync: bool = True) -> None:
        if _compiling():  # dynamo is tracing: the call's runs happen inside the compiled graph
            call.untimed_reason = COMPILED
            return
        token, mechanism, reason = _group_timing(pg)
        call.timing = mechanism
        if token is None:
            call.untimed_reason = reason
            return
        if _capturing():  # graph-captured works are not enqueued for the watchdog: no report will come
            call.untimed_reason = CAPTURED
            return
        if mechanism == EVENTS:
            if not sync:
                call.untimed_reason = EVENTS_ASYNC
                return
            start = _new_event()
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
            while self._by_events:
                call = self._by_events[0]
                start, end = call.events or (None, None)
                if call.queued and (end is None or not end.query()):
                    break  # events on one stream complete in order: the later ones are not done either
                self._by_events.popleft()
                if not call.queued:
                    continue
                try:
                    duration_s = start.elapsed_time(end) / 1000.0
                except (RuntimeError, ValueError):
                    duration_s = None
                call.events = None
                call.seen = call.works = 1
                if duration_s is None or duration_s < 0:
                    call.bad = True
                else:
                    call.acc_s = duration_s
                self._settle(call)

    def _complete_all(self, token: int, reports: list) -> list:
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
            self._between["reported_after_close"][_call_group(call)] += 1
        elif call.bad:
            call.untimed_reason = NO_DURATION
        else:
            call.duration_s = call.acc_s

    def _wrap_dist(self, name, fn, spec):
        op, nbytes_of, has_async, types = spec
        sig = inspect.signature(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer._depth:  # a collective implemented by another one: count the outer call only
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            pg, size, backend = tracer._group_info(a.get("group"))
            call = Call(op, nbytes_of(a), size, backend, tracer._source("dist"), time.perf_counter())
            caller_async = bool(a.get("async_op", False)) if has_async else name in _ASYNC_RETURNING
            result = tracer._call(fn, call, pg, types, args, kwargs, sync=not caller_async)
            if backend == "nccl":  # timed by the group's completion report; the Work stays the caller's
                return result
            if caller_async and result is not None:
                tracer._attach(call, result)
            else:
                call.t_done, call.blocking = time.perf_counter(), True
            return result

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return wrapper

    @staticmethod
    def _attach(call: Call, work) -> None:
        """gloo: time to completion from the work's future; the callback holds the call, not the work."""
        try:
            fut = work.get_future()
        except (RuntimeError, AttributeError):  # gloo's send/recv works have no future: time unknown
            call.untimed_reason = NO_FUTURE
            return

        def done(_fut, call=call):
            call.t_done = time.perf_counter()
        fut.add_done_callback(done)

    def _wrap_batch(self, fn):
        tracer = self

        def wrapper(p2p_op_list):
            if tracer._depth or not p2p_op_list:
                return fn(p2p_op_list)
            t0 = time.perf_counter()
            # torch tests `op is isend` against the current functions: ops built before install
            # hold the originals, so point them at the installed ones
            current = {tracer.original("isend"): dist.isend, tracer.original("irecv"): dist.irecv}
            kinds = []
            for p2p in p2p_op_list:
                p2p.op = current.get(p2p.op, p2p.op)
                kinds.append("send" if p2p.op is dist.isend else "recv")
            pg, size, backend = tracer._group_info(p2p_op_list[0].group)
            if backend == "nccl":  # NCCL coalesces the batch into one work: one entry for the batch
                sent = sum(_NBYTES(p.tensor) for p, k in zip(p2p_op_list, kinds) if k == "send")
                received = sum(_NBYTES(p.tensor) for p, k in zip(p2p_op_list, kinds) if k == "recv")
                op = "sendrecv" if set(kinds) == {"send", "recv"} else kinds[0]
                call = Call(op, max(sent, received), size, backend, tracer._source("dist"), t0)
                return tracer._call(fn, call, pg, _BATCH, (p2p_op_list,), {}, sync=False)
            tracer._local.depth = 1
            try:
                works = fn(p2p_op_list)
            finally:
                tracer._local.depth = 0
            t_returned = time.perf_counter()
            for i, p2p in enumerate(p2p_op_list):  # gloo: one work per op
                ppg, psize, pbackend = tracer._group_info(p2p.group)
                call = tracer._record(Call(kinds[i], _NBYTES(p2p.tensor), psize, pbackend,
                                           tracer._source("dist"), t0, t_returned=t_returned,
                                           group=group_identity(ppg) if ppg is not None else None))
                work = works[i] if works is not None and i < len(works) else None
                if work is not None:
                    tracer._attach(call, work)
                else:
                    call.untimed_reason = NO_FUTURE
            return works

        wrapper.__name__ = fn.__name__
        return wrapper

    def _wrap_broadcast_coalesced(self, fn):
        tracer = self

        def wrapper(process_group, tensors, buffer_size, *args, **kwargs):
            if tracer._depth:
                return fn(process_group, tensors, buffer_size, *args, **kwargs)
            pg, size, backend = tracer._group_info(process_group)
            call = Call("broadcast", _sum_bytes(tensors), size, backend, tracer._source("ddp"), time.perf_counter())
            # one broadcast work per bucket: on NCCL the group's sequence number counts them
            result = tracer._call(fn, call, pg, _BC, (process_group, tensors, buffer_size, *args), kwargs,
                                  several=True)
            if backend != "nccl":
                call.t_done, call.blocking = time.perf_counter(), True  # blocking on gloo
            return result

        return wrapper

    def _wrap_funcol(self, fn, spec):
        op, nbytes_of, types = spec
        sig = inspect.signature(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer._depth:
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            group = bound.arguments.get("group")
            pg = _funcol_pg(group)
            size = pg.size() if pg is not None else _funcol_group_size(group)
            backend = _backend_name(pg) if pg is not None else None
            call = Call(op, nbytes_of(bound.arguments, size), size, backend, tracer._source("funcol"),
                        time.perf_counter())
            if backend != "nccl":  # waited on at an unknown later point; its bytes show as untimed
                call.untimed_reason = FUNCOL_GLOO if backend == "gloo" else f"functional collective on {backend}"
            return tracer._call(fn, call, pg, types, args, kwargs, sync=False)

        wrapper.__name__ = fn.__name__
        return wrapper

    def _wrap_coalescing(self, fn):
        """A `_coalescing_manager` block on NCCL is one work, reported once as COALESCED (or a *_COALESCED
        fast path) with no sizes: one entry for the block, with the summed bytes of the calls inside."""
        tracer = self

        @contextlib.contextmanager
        def wrapper(group=None, device=None, async_ops=False):
            pg, size, backend = tracer._group_info(group)
            if tracer._depth or getattr(tracer._local, "block", None) is not None or backend != "nccl":
                with fn(group, device, async_ops) as cm:
                    yield cm
                return
            inner = fn(group, device, async_ops)
            block = tracer._local.block = []
            t0 = time.perf_counter()
            try:
                cm = inner.__enter__()
            except BaseException:
                tracer._local.block = None
                raise
            try:
                yield cm
            except BaseException as exc:
                tracer._local.block = None
                if not inner.__exit__(type(exc), exc, exc.__traceback__):
                    raise
                return
            tracer._local.block = None
            if not block:
                inner.__exit__(None, None, None)
                return
            call = Call(block[0].op, sum(c.nbytes for c in block), size, backend, block[0].source,
                        min(c.t_issue for c in block) if block else t0, coalesced=len(block))
            # the block's work is issued at the manager's exit: queued first, as its report may beat the return
            tracer._call(lambda: inner.__exit__(None, None, None), call, pg, _BLOCK, (), {}, sync=not async_ops)

        wrapper.__wrapped__ = fn
        return wrapper

    # ------------------------------------------------------------ DDP

    def attach_ddp(self, ddp_model) -> None:
        """Route DDP's bucket all-reduces through the traced all_reduce, averaged as DDP does."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        tracer = self

        def hook(process_group, bucket):
            tracer._local.source = "ddp"
            try:
                return allreduce_hook(process_group, bucket)
            finally:
                tracer._local.source = None

        ddp_model.register_comm_hook(ddp_model.process_group, hook)

    # ------------------------------------------------------------ steps

    def begin_step(self) -> None:
        with self._cond:
            self._step = StepComm()

    def end_step(self, hold: bool = False) -> StepComm:
        """The step's calls. `hold`: leave its NCCL calls open for completion reports still to come; the
        caller closes the step later with `release` (off the training thread's critical path)."""
        self.drain()  # the reports the hooks queued during the step, matched in one batch
        with self._cond:
            step, self._step = self._step, StepComm()
            self._steps += 1
            for q in (*self._pending.values(), self._by_events):
                while q and q[0].step_no < self._steps - STALE_STEPS and q[0].works is not None:
                    call = q.popleft()
                    call.queued, call.events = False, None
                    self.dropped += 1
                    self._between["never_reported"][_call_group(call)] += 1
            step.events = {k: dict(v) for k, v in self._between.items() if v}
            for v in self._between.values():
                v.clear()
        for kind, counter, seen in (("unclaimed_reports", UNCLAIMED, self._unclaimed_seen),
                                    ("queue_full", OVERFLOWS, self._overflows_seen)):
            for token, n in list(counter.items()):
                n -= seen.get(token, 0)
                if n > 0:
                    name = _token_group_name(token)
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
                        out[_call_group(c)] += 1
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


def _funcol_pg(group):
    """The process group a functional collective runs on (None for the legacy rank-list form)."""
    try:
        from torch.distributed.device_mesh import DeviceMesh

        if isinstance(group, DeviceMesh):
            return group.get_group() if group.ndim == 1 else None
        if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], DeviceMesh):
            return group[0].get_group(group[1])
        if isinstance(group, str):
            from torch.distributed.distributed_c10d import _resolve_process_group
            return _resolve_process_group(group)
    except (RuntimeError, ValueError, ImportError, KeyError):
        return None
    if isinstance(group, dist.ProcessGroup) or (hasattr(group, "size") and hasattr(group, "group_name")):
        return group
    return None


def _funcol_group_size(group) -> int:
    try:
        from torch.distributed.device_mesh import DeviceMesh

        if isinstance(group, DeviceMesh):
            return group.size()
        if isinstance(group, list):
            return len(group[0]) if group and isinstance(group[0], list) else len(group)
    except (RuntimeError, ValueError, ImportError):
        pass
    return 1


UNKNOWN_GROUP = "unknown"


def group_totals(by_op: dict, size: int) -> dict:
    """A group's totals over its collective types: bytes, count, time (None if no call was timed), untimed
    bytes and busbw at the group's size (the timed calls' bus bytes over their time)."""
    timed = [(op, s) for op, s in by_op.items() if s["time_s"] is not None]
    time_s = sum(s["time_s"] for _, s in timed) if timed else None
    bus = sum(s["busbw_GBps"] * s["time_s"] for _, s in timed if s["busbw_GBps"] is not None)
    return {"bytes": sum(s["bytes"] for s in by_op.values()), "count": sum(s["count"] for s in by_op.values()),
            "time_s": time_s, "untimed": sum(s["untimed"] for s in by_op.values()),
            "untimed_bytes": sum(s["untimed_bytes"] for s in by_op.values()),
            "busbw_GBps": bus / time_s if time_s else None}


def totals(summary: dict) -> tuple[int, float | None]:
    """Total bytes and total known time over all collective types of a step."""
    nbytes = sum(s["bytes"] for s in summary.values())
    times = [s["time_s"] for s in summary.values() if s["time_s"] is not None]
    return nbytes, (sum(times) if times else None)


def untimed_bytes(summary: dict) -> int | None:
    """Bytes of the step's calls with no time (None for records written before this field existed)."""
    if any("untimed_bytes" not in s and s.get("untimed") for s in summary.values()):
        return None
    return sum(s.get("untimed_bytes", 0) for s in summary.values())


__all__ = ["CollectiveTracer", "Call", "StepComm", "OPS", "RECORDED_OPS", "enable_nccl_timing", "totals",
           "untimed_bytes", "register_group", "set_host_map", "group_identity", "group_totals"]
