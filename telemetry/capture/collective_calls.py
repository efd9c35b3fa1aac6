"""The collective tracer's call wrappers: what each torch.distributed entry point costs in bytes, and installing the wrappers."""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import time

import torch
import torch.distributed as dist

from telemetry.capture import completion_hooks
from telemetry.capture.comm_groups import group_identity
from telemetry.capture.comm_step import CAPTURED, FUNCOL_GLOO, NO_FUTURE, Call

_NBYTES = lambda t: t.numel() * t.element_size()  # noqa: E731



def arguments_of(fn):
    """A function that names a call's arguments as `inspect.Signature.bind` + `apply_defaults` do, at a fifth
    of the cost or less (bench/tracer_call_cost.py): every traced call pays it, and a tensor-parallel step makes
    hundreds. Functions with *args or **kwargs in their signature keep `bind`."""
    sig = inspect.signature(fn)
    params = sig.parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        def bound(args, kwargs):
            b = sig.bind(*args, **kwargs)
            b.apply_defaults()
            return b.arguments
        return bound
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    names = frozenset(p.name for p in params if p.kind != p.POSITIONAL_ONLY)  # what a keyword may name
    required = frozenset(p.name for p in params if p.default is p.empty)

    def named(args, kwargs):
        if len(args) > len(positional) or (kwargs and (not names.issuperset(kwargs) or
                                                       not kwargs.keys().isdisjoint(positional[:len(args)]))):
            sig.bind(*args, **kwargs)  # a call bind refuses (too many, unknown, twice given): it says why
        a = dict(defaults)
        a.update(zip(positional, args))
        a.update(kwargs)
        if not required.issubset(a):
            sig.bind(*args, **kwargs)  # a required argument missing
        return a
    return named


def _outside(group) -> bool:
    """The placeholder new_group gives a rank that is not in the group (torch's calls return at once on it)."""
    return isinstance(group, int) and not isinstance(group, bool) and group == dist.GroupMember.NON_GROUP_MEMBER


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

_GATHER, _SCATTER = frozenset({"GATHER"}), frozenset({"SCATTER"})
_AR_LIST = frozenset({"ALLREDUCE_COALESCED", "COALESCED"})

# name -> (collective type, bytes from the bound arguments and the group size, whether the call takes
# async_op, NCCL op types). gather/scatter: S = the per-rank tensor x n, as nccl-tests' gather_perf and
# scatter_perf count it; the *_coalesced names are torch's deprecated list forms, still called by older code.
DIST_SPECS = {
    "all_reduce": ("all_reduce", lambda a, n: _NBYTES(a["tensor"]), True, _AR),
    "all_reduce_coalesced": ("all_reduce", lambda a, n: _sum_bytes(a["tensors"]), True, _AR_LIST),
    "all_gather_into_tensor": ("all_gather", lambda a, n: _NBYTES(a["output_tensor"]), True, _AG),
    "all_gather_single": ("all_gather", lambda a, n: _NBYTES(a["output_tensor"]), True, _AG),
    "all_gather": ("all_gather", lambda a, n: _sum_bytes(a["tensor_list"]), True, _AG_LIST),  # sizes may differ
    "all_gather_coalesced": ("all_gather", lambda a, n: _sum_bytes(a["input_tensor_list"]) * n, True, _AG_LIST),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a, n: _NBYTES(a["input"]), True, _RS),
    "reduce_scatter_single": ("reduce_scatter", lambda a, n: _NBYTES(a["input"]), True, _RS),
    "reduce_scatter": ("reduce_scatter", lambda a, n: _sum_bytes(a["input_list"]), True, _RS_LIST),
    "all_to_all_single": ("all_to_all", lambda a, n: _NBYTES(a["input"]), True, _A2A),
    "all_to_all": ("all_to_all", lambda a, n: _sum_bytes(a["input_tensor_list"]), True, _A2A | _BATCH),
    "broadcast": ("broadcast", lambda a, n: _NBYTES(a["tensor"]), True, _BC),
    "reduce": ("reduce", lambda a, n: _NBYTES(a["tensor"]), True, _RED),
    "gather": ("gather", lambda a, n: _NBYTES(a["tensor"]) * n, True, _GATHER),
    "scatter": ("scatter", lambda a, n: _NBYTES(a["tensor"]) * n, True, _SCATTER),
    "barrier": ("barrier", lambda a, n: 0, True, _BAR),
    "monitored_barrier": ("barrier", lambda a, n: 0, False, _BAR),  # gloo only; blocking
    "send": ("send", lambda a, n: _NBYTES(a["tensor"]), False, _SEND),
    "recv": ("recv", lambda a, n: _NBYTES(a["tensor"]), False, _RECV),
    "isend": ("send", lambda a, n: _NBYTES(a["tensor"]), False, _SEND),
    "irecv": ("recv", lambda a, n: _NBYTES(a["tensor"]), False, _RECV),
}
# functional collectives: one spec per kind, under each name torch has given it (torch 2.13's *_tensor_*
# names delegate to the *_single_* ones: a call counts once). The autograd forms (context and expert
# parallelism, sequence-parallel regions) are the forward's call; the collective their backward issues is
# counted from hooks on the call's autograd node (FUNCOL_BACKWARD).
_F_AG = ("all_gather", lambda a, n: _NBYTES(a["self"]) * n, _AG)
_F_RS = ("reduce_scatter", lambda a, n: _NBYTES(a["self"]), _RS)
_F_A2A = ("all_to_all", lambda a, n: _NBYTES(a["self"]), _A2A)
_F_AG_LIST = ("all_gather", lambda a, n: _sum_bytes(a["self"]) * n, _AG_LIST)
_F_RS_LIST = ("reduce_scatter", lambda a, n: _sum_bytes(a["inputs"]), _RS_LIST)
FUNCOL_SPECS = {
    "all_reduce": ("all_reduce", lambda a, n: _NBYTES(a["self"]), _AR),
    "all_reduce_coalesced": ("all_reduce", lambda a, n: _sum_bytes(a["self"]), _AR_LIST),
    "broadcast": ("broadcast", lambda a, n: _NBYTES(a["self"]), _BC),
    **dict.fromkeys(("all_gather_tensor", "all_gather_single", "all_gather_tensor_autograd",
                     "all_gather_single_autograd"), _F_AG),
    **dict.fromkeys(("reduce_scatter_tensor", "reduce_scatter_single", "reduce_scatter_tensor_autograd",
                     "reduce_scatter_single_autograd"), _F_RS),
    **dict.fromkeys(("all_to_all_single", "all_to_all_single_autograd"), _F_A2A),
    **dict.fromkeys(("all_gather_into_tensor_coalesced", "all_gather_single_coalesced"), _F_AG_LIST),
    **dict.fromkeys(("reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced"), _F_RS_LIST),
    # point-to-point (what dynamo maps isend/irecv to; callable eagerly too): group None is the default group
    "isend_inplace": ("send", lambda a, n: _NBYTES(a["tensor"]), _SEND),
    "irecv_inplace": ("recv", lambda a, n: _NBYTES(a["tensor"]), _RECV),
    "batch_p2p_ops_inplace": (lambda a: _p2p_batch(a["op_list"], a["tensors"])[0],
                              lambda a, n: _p2p_batch(a["op_list"], a["tensors"])[1], _SEND | _RECV | _BATCH),
}


def _p2p_batch(kinds, tensors) -> tuple[str, int]:
    """(op, S) of a batch of "isend"/"irecv": `sendrecv` of the larger direction's bytes when it holds both,
    as batch_isend_irecv counts it."""
    sent = sum(_NBYTES(t) for k, t in zip(kinds, tensors) if k == "isend")
    received = sum(_NBYTES(t) for k, t in zip(kinds, tensors) if k != "isend")
    if sent and received:
        return "sendrecv", max(sent, received)
    return ("send", sent) if sent else ("recv", received)
# What the backward of a functional collective issues: the collective's transpose on the same group, issued by
# autograd without a call to anything wrapped here (torch 2.13's _functional_collectives.py registers these
# backwards with torch.library.register_autograd on every _c10d_functional op, the *_autograd names' and the
# plain ones' alike: they call torch.ops._c10d_functional directly; older torch: C++ autograd of the
# _c10d_functional_autograd ops). name -> (the autograd node's name, lower case without underscores; the op the
# backward issues; its NCCL op types; whether S is the forward's output bytes x n (the all_gather of a
# reduce_scatter's gradient) or the output bytes (the gradient reduce-scattered, all-reduced or sent back).
# all_reduce and reduce_scatter backwards refuse any reduce op but sum (they raise before issuing anything).
_B_AG = ("allgatherintotensor", "reduce_scatter", _RS, False)
_B_RS = ("reducescattertensor", "all_gather", _AG, True)
FUNCOL_BACKWARD = {
    "all_reduce": ("allreduce", "all_reduce", _AR, False),
    "all_reduce_coalesced": ("allreducecoalesced", "all_reduce", _AR_LIST, False),
    **dict.fromkeys(("all_gather_tensor", "all_gather_single", "all_gather_tensor_autograd",
                     "all_gather_single_autograd"), _B_AG),
    **dict.fromkeys(("reduce_scatter_tensor", "reduce_scatter_single", "reduce_scatter_tensor_autograd",
                     "reduce_scatter_single_autograd"), _B_RS),
    **dict.fromkeys(("all_to_all_single", "all_to_all_single_autograd"),
                    ("alltoallsingle", "all_to_all", _A2A, False)),
    **dict.fromkeys(("all_gather_into_tensor_coalesced", "all_gather_single_coalesced"),
                    ("allgatherintotensorcoalesced", "reduce_scatter", _RS_LIST, False)),
    **dict.fromkeys(("reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced"),
                    ("reducescattertensorcoalesced", "all_gather", _AG_LIST, True)),
}
_NODE_DEPTH = 6  # the collective's node lies within a few nodes of its result (wait, view, chunk-cat)
_ASYNC_RETURNING = {"isend", "irecv"}
# Every name is also wrapped where distributed_c10d looks it up as a module global (the same wrapper, a call
# reached through another wrapped call counts once): P2POp and batch_isend_irecv test identity against
# isend/irecv (and P2POp.op reads back the current one: P2POpFunction); torch 2.13's all_gather_into_tensor/
# reduce_scatter_tensor delegate to the *_single names there; DeepSpeed's coalesced all-gather calls distributed_c10d's directly; and the object collectives
# (all_gather_object, gather_object, broadcast_object_list, scatter_object_list, send/recv_object_list:
# DCP's planning, metrics gathered to rank 0) send their pickled bytes through all_gather, gather, broadcast,
# scatter, send, recv and batch_isend_irecv there: counted as those calls, with the bytes on the wire.
# Torch modules that bind collectives when imported (DTensor's mesh_broadcast/mesh_scatter) are rebound too.
_BINDING_MODULES = ("torch.distributed.tensor._collective_utils",)
# DTensor's Shard(i) -> Shard(j) redistribute: on an accelerator one all_to_all issued through
# torch.ops._dtensor.shard_dim_alltoall, no torch.distributed call (placement_types binds the function at
# import); on CPU torch falls back to a functional all_gather, counted as that.
_DTENSOR_A2A = ("torch.distributed.tensor._collective_utils", "shard_dim_alltoall",
                ("torch.distributed.tensor.placement_types",))


CAPTURED_CALLS = "calls_traced_by_fabric_harness"  # on a CUDAGraph: the calls its capture issued
TRACED = "traced_by_fabric_harness"  # set on each wrapper this module installs (its __wrapped__: what it replaced)
ABSENT = object()  # an attribute install added where there was none: uninstall deletes it


def torch_own(fn):
    """The function a (chain of) tracer wrapper(s) stands for: torch's own."""
    while getattr(fn, TRACED, False):
        fn = fn.__wrapped__
    return fn


class P2POpFunction:
    """`P2POp.op` while a tracer is installed. torch's batch_isend_irecv and P2POp test `op is isend` against
    distributed_c10d's current isend; a P2POp keeps the function it was given. One built while the tracer was
    installed held the wrapper: used after uninstall (or under a later tracer), torch took its isend for an irecv
    and passed it `group_src` (TypeError), an irecv's wrapper still counted into the uninstalled tracer, and a
    later tracer's batch wrapper counted the send as a recv.
    One built before install held torch's own, and the batch wrapper re-pointed it at the wrapper for good (the
    same failure when reused after uninstall). So each P2POp stores torch's own function, and reads back the
    current one: the wrapper while installed; once uninstalled this descriptor is gone and the stored one is
    what torch expects."""

    def __get__(self, p2p, owner=None):
        if p2p is None:
            return self
        try:
            op = p2p.__dict__["op"]
        except KeyError:
            raise AttributeError("op") from None
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        for name in ("isend", "irecv"):
            current = getattr(c10d, name, None)
            if current is not None and torch_own(current) is op:
                return current
        return op

    def __set__(self, p2p, value):
        p2p.__dict__["op"] = torch_own(value)


def opaque_to_compile(wrapper):
    """`wrapper` as torch.compile must take it: a call it does not trace into (one graph break, the call run
    as written). Traced into, the wrapper's bookkeeping broke the graph at its clock and locks anyway, and
    reading a group's identity there for the first time was a hard error (dynamo refuses a ProcessGroup's
    unregistered attributes), which failed the user's compile. So a collective in a compiled region is an
    ordinary call: counted and timed on each run, never only once at compile time.
    The disabled function is entered only while compiling: torch.compiler.disable's own wrapper costs about
    ten times what `is_compiling` does on every eager call (the hot path), and dynamo folds `is_compiling` to
    True, so it sees only the call to the disabled function."""
    compiler = getattr(torch, "compiler", None)
    disable, is_compiling = getattr(compiler, "disable", None), getattr(compiler, "is_compiling", None)
    if disable is None or is_compiling is None:
        return wrapper
    opaque = disable(wrapper)

    @functools.wraps(wrapper)
    def front(*args, **kwargs):
        if is_compiling():
            return opaque(*args, **kwargs)
        return wrapper(*args, **kwargs)

    return front


def registering(fn):
    """A group-creating function that registers the new group's completion hook before returning it."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        pg = fn(*args, **kwargs)
        try:
            completion_hooks.register_timing(pg)
        except Exception:  # noqa: BLE001 - a non-member placeholder or a foreign object: its first call decides
            pass
        return pg
    return wrapper


class CallWrappers:
    """The wrapping half of CollectiveTracer: installs the wrappers and builds them. Each wrapper records a
    `Call` through the tracer (`_call`, `_record`), which owns the queues, the steps and their records."""

    def _wrap_entry_points(self, c10d) -> None:
        """Put the wrappers in place of torch.distributed's collectives, functional collectives, DDP's
        broadcasts, batch_isend_irecv and the coalescing manager (the originals kept for `uninstall`)."""
        # imported before any name is wrapped: it binds c10d's collectives at import (its legacy_* names, the
        # keys of dynamo's remap table), and those must stay torch's own, installed or not
        try:
            import torch.distributed._functional_collectives as funcol
        except ImportError:  # very old torch: no functional collectives to see
            funcol = None
        try:  # DTensor, likewise: loaded now, so that its bindings are rebound below
            import torch.distributed.tensor.placement_types  # noqa: F401
        except ImportError:
            pass
        for name, spec in DIST_SPECS.items():
            fn = getattr(dist, name, None)
            if fn is not None:
                wrapper = self._wrap_dist(name, fn, spec)
                self._patch(dist, name, wrapper)
                if getattr(c10d, name, None) is fn:
                    self._patch(c10d, name, wrapper)
        if funcol is not None:
            for name, spec in FUNCOL_SPECS.items():
                fn = getattr(funcol, name, None)
                if fn is not None:
                    self._patch(funcol, name, self._wrap_funcol(fn, spec, FUNCOL_BACKWARD.get(name)))
        if hasattr(dist, "_broadcast_coalesced"):  # DDP's parameter and buffer broadcasts
            self._patch(dist, "_broadcast_coalesced", self._wrap_broadcast_coalesced(dist._broadcast_coalesced))
        if hasattr(dist, "batch_isend_irecv"):
            fn = dist.batch_isend_irecv
            self._patch(dist, "batch_isend_irecv", self._wrap_batch(fn))
            if getattr(c10d, "batch_isend_irecv", None) is fn:
                self._patch(c10d, "batch_isend_irecv", dist.batch_isend_irecv)
        if hasattr(c10d, "_coalescing_manager"):  # Megatron's DDP gradient sync, DeepSpeed's coalesced gathers
            wrapped = self._wrap_coalescing(c10d._coalescing_manager)
            if getattr(dist, "_coalescing_manager", None) is c10d._coalescing_manager:
                self._patch(dist, "_coalescing_manager", wrapped)
            self._patch(c10d, "_coalescing_manager", wrapped)
        self._rebind_importers()
        self._wrap_dtensor_alltoall()
        self._wrap_cuda_graphs()
        p2p_op = getattr(c10d, "P2POp", None)
        if p2p_op is not None:
            self._orig[(p2p_op, "op")] = vars(p2p_op).get("op", ABSENT)
            p2p_op.op = P2POpFunction()

    def _wrap_cuda_graphs(self) -> None:
        """A CUDA graph's collectives run at its replays, never at its capture, and issue no completion report:
        the calls traced between `capture_begin` and `capture_end` are kept on the graph, and each `replay`
        counts them again, untimed (CAPTURED). A capture the wrappers did not see (begun before install, or
        through torch._C directly) still counts its calls once, at capture."""
        cls = getattr(sys.modules.get("torch.cuda"), "CUDAGraph", None)
        if cls is None or not all(callable(vars(cls).get(n)) for n in ("capture_begin", "capture_end", "replay")):
            return
        tracer, begin, end, replay = self, cls.capture_begin, cls.capture_end, cls.replay

        def capture_begin(graph, *args, **kwargs):
            tracer._local.captured = []
            try:
                return begin(graph, *args, **kwargs)
            except BaseException:
                tracer._local.captured = None
                raise

        def capture_end(graph, *args, **kwargs):
            calls, tracer._local.captured = getattr(tracer._local, "captured", None), None
            result = end(graph, *args, **kwargs)
            setattr(graph, CAPTURED_CALLS, list(calls or ()))
            return result

        def replay_(graph, *args, **kwargs):
            t = time.perf_counter()
            for c in getattr(graph, CAPTURED_CALLS, ()):
                tracer._record(Call(c.op, c.nbytes, c.group_size, c.backend, c.source, t, untimed_reason=CAPTURED,
                                    group=c.group, coalesced=c.coalesced, timing=c.timing))
            return replay(graph, *args, **kwargs)

        for name, wrapper in (("capture_begin", capture_begin), ("capture_end", capture_end), ("replay", replay_)):
            wrapper.__name__ = name
            self._patch(cls, name, wrapper)

    def _wrap_dtensor_alltoall(self) -> None:
        modname, name, importers = _DTENSOR_A2A
        module = sys.modules.get(modname)
        fn = getattr(module, name, None)
        if fn is None:
            return
        wrapper = self._wrap_shard_dim_alltoall(fn)
        for target in (module, *(sys.modules.get(m) for m in importers)):
            if getattr(target, name, None) is fn:
                self._patch(target, name, wrapper)

    def _wrap_shard_dim_alltoall(self, fn):
        tracer = self

        def wrapper(input, gather_dim, shard_dim, mesh, mesh_dim):
            if tracer._depth or mesh.device_type == "cpu":  # torch's CPU fallback: counted as its all_gather
                return fn(input, gather_dim, shard_dim, mesh, mesh_dim)
            pg, size, backend = tracer._group_info(mesh.get_group(mesh_dim))
            call = Call("all_to_all", _NBYTES(input), size, backend, tracer._source("dtensor"), time.perf_counter())
            result = tracer._call(fn, call, pg, _A2A, (input, gather_dim, shard_dim, mesh, mesh_dim), {})
            if backend != "nccl":  # the op waits for its work
                call.t_done, call.blocking = time.perf_counter(), True
            return result

        wrapper.__name__ = fn.__name__
        return opaque_to_compile(wrapper)

    def _rebind_importers(self) -> None:
        """Point the collectives that loaded torch modules bound at import time at the wrappers."""
        wrappers = {id(self._orig[(dist, name)]): getattr(dist, name) for (module, name) in list(self._orig)
                    if module is dist}
        for modname in _BINDING_MODULES:
            module = sys.modules.get(modname)
            for attr, value in list(vars(module).items()) if module is not None else ():
                if callable(value) and id(value) in wrappers:
                    self._patch(module, attr, wrappers[id(value)])

    def _unbind_importers(self) -> None:
        """Before `uninstall` restores the patched attributes: a torch.distributed module imported while the
        wrappers were in place (DTensor's _collective_utils, imported when a job first uses DTensor) bound a
        wrapper; it gets the original back too, else its calls would go to this tracer once uninstalled and no
        later tracer would see them."""
        wrapped = {id(w): (w, fn) for (m, name), fn in self._orig.items()
                   if getattr(w := getattr(m, name), "__wrapped__", None) is fn}  # still this tracer's wrapper
        for modname, module in list(sys.modules.items()):
            if module is None or not modname.startswith("torch.distributed"):
                continue
            for attr, value in list(getattr(module, "__dict__", {}).items()):
                pair = wrapped.get(id(value))
                if pair is not None and pair[0] is value:
                    setattr(module, attr, pair[1])

    def _register_groups(self, c10d) -> None:
        """Completion hooks on every NCCL group at its creation: the groups that exist now, and those made
        later through new_group/split_group (DeviceMesh binds them in its own module)."""
        try:
            existing = list(c10d._world.pg_map)
        except (AttributeError, RuntimeError):
            existing = []
        for pg in existing:
            completion_hooks.register_timing(pg)
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
            wrapper = registering(fn)
            for module in modules:
                if getattr(module, name, None) is fn:
                    self._patch(module, name, wrapper)
            if getattr(dist, name, None) is fn:
                self._patch(dist, name, wrapper)

    def original(self, name: str):
        """The unwrapped torch.distributed function (telemetry's own gathers must not count)."""
        return self._orig.get((dist, name), getattr(dist, name))

    def _patch(self, module, name: str, wrapper) -> None:
        self._orig[(module, name)] = getattr(module, name)
        wrapper.__wrapped__ = self._orig[(module, name)]
        setattr(wrapper, TRACED, True)
        setattr(module, name, wrapper)

    def _wrap_dist(self, name, fn, spec):
        op, nbytes_of, has_async, types = spec
        named = arguments_of(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer.retired:  # bound while installed (DeepSpeed's comm backend, megatron's module globals) and
                # called after: the call goes where torch.distributed points now (a later run's tracer, or torch)
                now = getattr(dist, name, fn)
                return (fn if now is installed else now)(*args, **kwargs)
            if tracer._depth:  # a collective implemented by another one: count the outer call only
                return fn(*args, **kwargs)
            a = named(args, kwargs)
            if _outside(a.get("group")):  # torch returns at once on a rank outside the group: nothing ran
                return fn(*args, **kwargs)
            pg, size, backend = tracer._group_info(a.get("group"))
            call = Call(op, nbytes_of(a, size), size, backend, tracer._source("dist"), time.perf_counter())
            caller_async = bool(a.get("async_op", False)) if has_async else name in _ASYNC_RETURNING
            result = tracer._call(fn, call, pg, types, args, kwargs, sync=not caller_async)
            if backend == "nccl" or call.folded:  # timed by the group's report, or as its coalescing block
                return result
            if caller_async and result is not None:
                tracer._attach(call, result)
            else:
                call.t_done, call.blocking = time.perf_counter(), True
            return result

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        installed = opaque_to_compile(wrapper)  # what torch.distributed's attribute holds
        return installed

    @staticmethod
    def _attach(call: Call, work) -> None:
        """gloo: time to completion from the work's future; the callback holds the call, not the work."""
        try:
            fut = work.get_future()  # an _IllegalWork (a call held by a coalescing block) has None there
        except (RuntimeError, AttributeError, TypeError, ValueError):  # gloo's send/recv works have no future
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
            # each P2POp reads back the installed isend/irecv, whenever it was built (P2POpFunction)
            isend = torch_own(dist.isend)
            kinds = ["send" if torch_own(p2p.op) is isend else "recv" for p2p in p2p_op_list]
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
        return opaque_to_compile(wrapper)

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

        return opaque_to_compile(wrapper)

    def _wrap_funcol(self, fn, spec, backward=None):
        op, nbytes_of, types = spec
        named = arguments_of(fn)
        tracer = self

        def wrapper(*args, **kwargs):
            if tracer._depth:
                return fn(*args, **kwargs)
            a = named(args, kwargs)
            group = a.get("group", a.get("group_name"))
            pg = funcol_pg(dist.group.WORLD if group is None or group == "" else group)
            size = pg.size() if pg is not None else funcol_group_size(group)
            backend = completion_hooks.backend_name(pg) if pg is not None else None
            call = Call(op(a) if callable(op) else op, nbytes_of(a, size), size, backend, tracer._source("funcol"),
                        time.perf_counter())
            if backend != "nccl":  # waited on at an unknown later point; its bytes show as untimed
                call.untimed_reason = FUNCOL_GLOO if backend == "gloo" else f"functional collective on {backend}"
            result = tracer._call(fn, call, pg, types, args, kwargs, sync=False)
            if backward is not None and str(a.get("reduceOp", "sum")).lower() == "sum":
                tracer._hook_backward(backward, a.get("self", a.get("inputs")), result, pg, call)
            return result

        wrapper.__name__ = fn.__name__
        return opaque_to_compile(wrapper)

    def _hook_backward(self, spec, inputs, result, pg, forward: Call) -> None:
        """The collective the backward of a functional collective issues, counted from a pre-hook and a hook on
        the call's autograd node (none: its result carries no autograd history, nothing runs in backward). Each
        run of the node is a call on the forward's group: queued for its completion report on NCCL; on gloo
        timed around the node, which waits for its work (wait_tensor blocks on CPU); elsewhere untimed with the
        forward's reason. A backward run after this tracer's uninstall counts nothing here."""
        key, op, types, times_n = spec
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        if _compiling() or not any(getattr(t, "grad_fn", None) is not None for t in outputs):
            return
        node = autograd_node(outputs, inputs if isinstance(inputs, (list, tuple)) else [inputs], key)
        if node is None:
            return
        nbytes = _sum_bytes(outputs) * (forward.group_size if times_n else 1)
        size, backend, source = forward.group_size, forward.backend, forward.source
        reason = None if backend in ("nccl", "gloo") else forward.untimed_reason
        tracer, running = self, []

        def before(grad_outputs):
            if tracer.retired:  # a graph that outlived its tracer: on NCCL the report shows as unclaimed
                return
            call = Call(op, nbytes, size, backend, source, time.perf_counter(), untimed_reason=reason)
            tracer._opening(call, pg, types)
            running.append(call)

        def after(grad_inputs, grad_outputs):
            if running:
                call = running.pop()
                tracer._issued(call, pg)
                if backend == "gloo":
                    call.t_done, call.blocking = time.perf_counter(), True

        node.register_prehook(before)
        node.register_hook(after)

    def _wrap_coalescing(self, fn):
        """A `_coalescing_manager` block on NCCL is one work, reported once as COALESCED (or a *_COALESCED
        fast path) with no sizes: one entry for the block, with the summed bytes of the calls inside. Elsewhere
        (gloo) the calls torch holds for the block's exit (`_deferred_by_coalescing`) are one entry too, timed
        around the exit (or by the block's work when `async_ops`): each of them returned before it ran, with
        an `_IllegalWork` where it was asynchronous."""
        tracer = self

        @contextlib.contextmanager
        def wrapper(group=None, device=None, async_ops=False):
            pg, size, backend = tracer._group_info(group)
            if tracer._depth or getattr(tracer._local, "block", None) is not None or pg is None:
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
            op, nbytes = block_op_bytes(block)
            call = Call(op, nbytes, size, backend, block[0].source,
                        min(c.t_issue for c in block) if block else t0, coalesced=len(block))
            # the block's work is issued at the manager's exit: queued first, as its report may beat the return
            tracer._call(lambda: inner.__exit__(None, None, None), call, pg, _BLOCK, (), {}, sync=not async_ops)
            if backend == "nccl":
                return
            works = getattr(cm, "works", None)
            if async_ops and works:
                tracer._attach(call, works[-1])
            elif async_ops:
                call.untimed_reason = NO_FUTURE
            else:
                call.t_done, call.blocking = time.perf_counter(), True

        wrapper.__wrapped__ = fn
        return wrapper

    def attach_ddp(self, ddp_model) -> None:
        """Route DDP's bucket all-reduces through the traced all_reduce, averaged as DDP does. A DDP that holds
        this hook already (an earlier Telemetry's: a Trainer's second train(), a second Telemetry) keeps it, now
        reporting to this tracer: DDP takes one hook, and that one is not the job's own."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        owner = getattr(ddp_model, DDP_HOOK_OWNER, None)
        if isinstance(owner, list):
            owner[0] = self
            return
        owner = [self]

        def hook(process_group, bucket):
            tracer = owner[0]
            tracer._local.source = "ddp"
            try:
                return allreduce_hook(process_group, bucket)
            finally:
                tracer._local.source = None

        ddp_model.register_comm_hook(ddp_model.process_group, hook)
        setattr(ddp_model, DDP_HOOK_OWNER, owner)


DDP_HOOK_OWNER = "fabric_telemetry_hook_tracer"  # a DDP's attribute: [the tracer its hook reports to]


def own_hook_reason(exc: Exception) -> str:
    """Why attach_ddp left a DDP model alone: the job registered its own comm hook (DDP takes one)."""
    return ("DDP gradient buckets go through the job's own comm hook, counted only where it calls "
            f"torch.distributed (a hook that reduces by other means leaves them unseen): {exc}")


def block_op_bytes(block: list) -> tuple[str, int]:
    """(collective type, S) of a coalescing block's calls, as one work: sends and receives together are a
    `sendrecv` of the larger of the bytes sent and received (as batch_isend_irecv counts them), else the
    first call's type with the calls' summed bytes."""
    ops = {c.op for c in block}
    if ops == {"send", "recv"}:
        return "sendrecv", max(sum(c.nbytes for c in block if c.op == k) for k in ("send", "recv"))
    return block[0].op, sum(c.nbytes for c in block)


def _compiling() -> bool:
    try:
        return bool(torch.compiler.is_compiling())
    except (RuntimeError, AttributeError):
        return False


def autograd_node(outputs, inputs, key: str):
    """The autograd node of the collective that made `outputs` (its name holds `key`, lower case without
    underscores; a coalesced form's name and key both say coalesced): the nearest to the outputs, never one of
    the inputs' own history (an input made by an earlier collective has a node of the same name)."""
    stop = {t.grad_fn for t in inputs if isinstance(t, torch.Tensor) and t.grad_fn is not None}
    frontier, seen = [t.grad_fn for t in outputs if getattr(t, "grad_fn", None) is not None], set()
    coalesced = key.endswith("coalesced")
    for _ in range(_NODE_DEPTH):
        following = []
        for node in frontier:
            if node in seen or node in stop:
                continue
            seen.add(node)
            name = node.name().lower().replace("_", "")
            if key in name and ("coalesced" in name) == coalesced:
                return node
            following.extend(n for n, _ in node.next_functions if n is not None)
        frontier = following
    return None


def funcol_pg(group):
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


def funcol_group_size(group) -> int:
    try:
        from torch.distributed.device_mesh import DeviceMesh

        if isinstance(group, DeviceMesh):
            return group.size()
        if isinstance(group, list):
            return len(group[0]) if group and isinstance(group[0], list) else len(group)
    except (RuntimeError, ValueError, ImportError):
        pass
    return 1
