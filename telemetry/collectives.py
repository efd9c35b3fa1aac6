"""Per-step collective accounting: count, bytes and time of every collective a rank issues.

Mechanism (chosen by measured coverage and overhead; see docs/telemetry.md): the tracer wraps the
Python entry points every PyTorch parallelism goes through -

- `torch.distributed.*` collectives and point-to-point calls: explicit calls, FSDP2's
  all_gather_single / reduce_scatter_single, pipeline stages' isend/irecv/batch_isend_irecv;
- `torch.distributed._functional_collectives.*`: DTensor tensor parallelism;
- DDP's gradient buckets, which its C++ reducer issues directly, through a DDP comm hook that
  performs the stock average all-reduce (`attach_ddp`); DDP's parameter and buffer broadcasts
  through `torch.distributed._broadcast_coalesced`.

That costs a few microseconds per call, where an always-on profiler cost 6-25% of a small model's
step on the development machines. Time per call:

- gloo: issue to completion, from the work's future callback (completion happens on gloo's thread);
  blocking calls are timed around the call.
- NCCL: device-side duration from the start/end CUDA events ProcessGroupNCCL records when timing is
  on (`TORCH_NCCL_ENABLE_TIMING=1`, set by `enable_nccl_timing()` before init), read with
  `work._get_duration()` at step end, when the loop's own loss read-back has already synchronised:
  no device sync is added. A work not complete by then is counted with time null.
- Functional collectives (DTensor) complete asynchronously at an unknown later wait: counted with
  bytes and time null; profiled windows (`telemetry/exposed.py`) give their time.

Bytes follow nccl-tests' S (telemetry/formulas.py), so busbw here and in sweeps mean the same thing.
gloo implements reduce_scatter as clone + all_reduce internally: the wire traffic is twice S there.
"""
from __future__ import annotations

import inspect
import os
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .formulas import OPS, bus_factor

_NBYTES = lambda t: t.numel() * t.element_size()  # noqa: E731


def _sum_bytes(tensors) -> int:
    return sum(_NBYTES(t) for t in tensors)


# name -> (collective type, bytes from the bound arguments, whether the call takes async_op)
DIST_SPECS = {
    "all_reduce": ("all_reduce", lambda a: _NBYTES(a["tensor"]), True),
    "all_gather_into_tensor": ("all_gather", lambda a: _NBYTES(a["output_tensor"]), True),
    "all_gather_single": ("all_gather", lambda a: _NBYTES(a["output_tensor"]), True),
    "all_gather": ("all_gather", lambda a: _NBYTES(a["tensor"]) * len(a["tensor_list"]), True),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a: _NBYTES(a["input"]), True),
    "reduce_scatter_single": ("reduce_scatter", lambda a: _NBYTES(a["input"]), True),
    "reduce_scatter": ("reduce_scatter", lambda a: _sum_bytes(a["input_list"]), True),
    "all_to_all_single": ("all_to_all", lambda a: _NBYTES(a["input"]), True),
    "all_to_all": ("all_to_all", lambda a: _sum_bytes(a["input_tensor_list"]), True),
    "broadcast": ("broadcast", lambda a: _NBYTES(a["tensor"]), True),
    "reduce": ("reduce", lambda a: _NBYTES(a["tensor"]), True),
    "barrier": ("barrier", lambda a: 0, True),
    "send": ("send", lambda a: _NBYTES(a["tensor"]), False),
    "recv": ("recv", lambda a: _NBYTES(a["tensor"]), False),
    "isend": ("send", lambda a: _NBYTES(a["tensor"]), False),
    "irecv": ("recv", lambda a: _NBYTES(a["tensor"]), False),
}
FUNCOL_SPECS = {
    "all_reduce": ("all_reduce", lambda a, n: _NBYTES(a["self"])),
    "all_reduce_coalesced": ("all_reduce", lambda a, n: _sum_bytes(a["self"])),
    "all_gather_tensor": ("all_gather", lambda a, n: _NBYTES(a["self"]) * n),
    "all_gather_single": ("all_gather", lambda a, n: _NBYTES(a["self"]) * n),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, n: _NBYTES(a["self"])),
    "reduce_scatter_single": ("reduce_scatter", lambda a, n: _NBYTES(a["self"])),
    "all_to_all_single": ("all_to_all", lambda a, n: _NBYTES(a["self"])),
    "broadcast": ("broadcast", lambda a, n: _NBYTES(a["self"])),
}
_ASYNC_RETURNING = {"isend", "irecv"}  # return a Work without an async_op flag


def enable_nccl_timing(environ=os.environ) -> None:
    """Ask ProcessGroupNCCL for start events so work._get_duration() works; must precede init."""
    environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")


@dataclass
class Call:
    op: str
    nbytes: int
    group_size: int
    backend: str | None
    source: str
    t_issue: float
    t_done: float | None = None
    work: object | None = None
    duration_s: float | None = None

    def resolve(self) -> None:
        if self.duration_s is not None:
            return
        if self.work is not None and self.backend == "nccl":
            try:
                if self.work.is_completed():
                    ms = self.work._get_duration()
                    self.duration_s = ms / 1000.0 if ms is not None and ms >= 0 else None
            except RuntimeError:  # timing not enabled on this group
                self.duration_s = None
            return
        if self.t_done is not None:
            self.duration_s = max(self.t_done - self.t_issue, 0.0)


@dataclass
class StepComm:
    calls: list[Call] = field(default_factory=list)

    def summary(self) -> dict:
        per_op: dict[str, dict] = {}
        for c in self.calls:
            c.resolve()
            s = per_op.setdefault(c.op, {"count": 0, "bytes": 0, "time_s": 0.0, "untimed": 0, "_bus": 0.0,
                                         "_timed_bytes_factor": 0.0})
            s["count"] += 1
            s["bytes"] += c.nbytes
            if c.duration_s is None:
                s["untimed"] += 1
            else:
                s["time_s"] += c.duration_s
                s["_timed_bytes_factor"] += c.nbytes * bus_factor(c.op, max(c.group_size, 1))
        out = {}
        for op, s in per_op.items():
            timed = s["count"] - s["untimed"]
            time_s = s["time_s"] if timed else None
            busbw = s["_timed_bytes_factor"] / time_s / 1e9 if time_s else None
            out[op] = {"count": s["count"], "bytes": s["bytes"], "time_s": time_s, "untimed": s["untimed"],
                       "busbw_gbps": busbw}
        return out


class CollectiveTracer:
    """Install once per process; `begin_step()`/`end_step()` bracket what belongs to a step."""

    def __init__(self):
        self._orig: dict[tuple[object, str], object] = {}
        self._local = threading.local()
        self._step = StepComm()
        self._lock = threading.Lock()
        self.installed = False

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
                if name in ("isend", "irecv"):  # P2POp and batch_isend_irecv test identity against these
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
        self.installed = True
        return self

    def uninstall(self) -> None:
        for (module, name), fn in self._orig.items():
            setattr(module, name, fn)
        self._orig.clear()
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
        with self._lock:
            self._step.calls.append(call)
        return call

    @staticmethod
    def _group_info(group) -> tuple[int, str | None]:
        try:
            return dist.get_world_size(group), dist.get_backend(group)
        except (RuntimeError, ValueError):
            return 1, None

    def _wrap_dist(self, name, fn, spec):
        op, nbytes_of, has_async = spec
        sig = inspect.signature(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer._depth:  # a collective implemented by another one: count the outer call only
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            size, backend = tracer._group_info(a.get("group"))
            caller_async = bool(a.get("async_op", False)) if has_async else name in _ASYNC_RETURNING
            force_async = has_async and not caller_async and backend == "nccl"  # to get a Work to time
            if force_async:
                a["async_op"] = True
            call = Call(op, nbytes_of(a), size, backend, tracer._source("dist"), time.perf_counter())
            tracer._local.depth = 1
            try:
                result = fn(*bound.args, **bound.kwargs)
            finally:
                tracer._local.depth = 0
            tracer._record(call)
            if force_async:
                call.work = result
                result.wait()  # what the synchronous call would have done; no host sync on NCCL
                return None
            if caller_async and result is not None:
                tracer._attach(call, result, backend)
            else:
                call.t_done = time.perf_counter()
            return result

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return wrapper

    def _attach(self, call: Call, work, backend) -> None:
        if backend == "nccl":
            call.work = work
            return
        try:
            fut = work.get_future()
        except (RuntimeError, AttributeError):  # this backend has no futures: time unknown
            return

        def done(_fut, call=call):
            call.t_done = time.perf_counter()
        fut.add_done_callback(done)

    def _wrap_batch(self, fn):
        tracer = self

        def wrapper(p2p_op_list):
            if tracer._depth:
                return fn(p2p_op_list)
            t0 = time.perf_counter()
            # torch tests `op is isend` against the current functions: ops built before install
            # hold the originals, so point them at the installed ones
            current = {tracer.original("isend"): dist.isend, tracer.original("irecv"): dist.irecv}
            kinds = []
            for p2p in p2p_op_list:
                p2p.op = current.get(p2p.op, p2p.op)
                kinds.append("send" if p2p.op is dist.isend else "recv")
            tracer._local.depth = 1
            try:
                works = fn(p2p_op_list)
            finally:
                tracer._local.depth = 0
            for i, p2p in enumerate(p2p_op_list):
                kind = kinds[i]
                size, backend = tracer._group_info(p2p.group)
                call = tracer._record(Call(kind, _NBYTES(p2p.tensor), size, backend, tracer._source("dist"), t0))
                work = works[i] if works is not None and i < len(works) else (works[0] if works else None)
                if work is not None:
                    tracer._attach(call, work, backend)
            return works

        wrapper.__name__ = fn.__name__
        return wrapper

    def _wrap_broadcast_coalesced(self, fn):
        tracer = self

        def wrapper(process_group, tensors, buffer_size, *args, **kwargs):
            if tracer._depth:
                return fn(process_group, tensors, buffer_size, *args, **kwargs)
            size, backend = tracer._group_info(process_group)
            call = Call("broadcast", _sum_bytes(tensors), size, backend, tracer._source("ddp"), time.perf_counter())
            tracer._local.depth = 1
            try:
                return fn(process_group, tensors, buffer_size, *args, **kwargs)  # blocking
            finally:
                tracer._local.depth = 0
                call.t_done = time.perf_counter()
                tracer._record(call)

        return wrapper

    def _wrap_funcol(self, fn, spec):
        op, nbytes_of = spec
        sig = inspect.signature(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer._depth:
                return fn(*args, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            size = _funcol_group_size(bound.arguments.get("group"))
            call = Call(op, nbytes_of(bound.arguments, size), size, None, tracer._source("funcol"),
                        time.perf_counter())
            tracer._local.depth = 1
            try:
                return fn(*args, **kwargs)
            finally:
                tracer._local.depth = 0
                tracer._record(call)

        wrapper.__name__ = fn.__name__
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
        with self._lock:
            self._step = StepComm()

    def end_step(self) -> StepComm:
        with self._lock:
            step, self._step = self._step, StepComm()
        return step


def _funcol_group_size(group) -> int:
    try:
        from torch.distributed.device_mesh import DeviceMesh

        if isinstance(group, DeviceMesh):
            return group.size()
        if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], DeviceMesh):
            return group[0].size(group[1])
        if isinstance(group, dist.ProcessGroup):
            return group.size()
        if isinstance(group, list):
            return len(group[0]) if group and isinstance(group[0], list) else len(group)
        if isinstance(group, str):
            from torch.distributed.distributed_c10d import _resolve_process_group
            return _resolve_process_group(group).size()
    except (RuntimeError, ValueError, ImportError):
        pass
    return 1


def totals(summary: dict) -> tuple[int, float | None]:
    """Total bytes and total known time over all collective types of a step."""
    nbytes = sum(s["bytes"] for s in summary.values())
    times = [s["time_s"] for s in summary.values() if s["time_s"] is not None]
    return nbytes, (sum(times) if times else None)


__all__ = ["CollectiveTracer", "Call", "StepComm", "OPS", "enable_nccl_timing", "totals"]
