"""The tracer's argument naming (telemetry/capture/collective_calls.py `arguments_of`) against
inspect.Signature.bind + apply_defaults, for every torch.distributed and functional-collective entry point
the tracer wraps, on this torch's own signatures."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.distributed as dist

from telemetry.capture.collective_calls import DIST_SPECS, FUNCOL_SPECS, arguments_of

funcol = pytest.importorskip("torch.distributed._functional_collectives")
WRAPPED = [getattr(dist, n) for n in DIST_SPECS if hasattr(dist, n)] + \
          [getattr(funcol, n) for n in FUNCOL_SPECS if hasattr(funcol, n)]


def _bound(fn, args, kwargs) -> dict:
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return dict(b.arguments)


def _calls(fn):
    """Ways a caller passes a function's arguments: all positional, the first positional and the rest by
    name, and the required ones only."""
    params = list(inspect.signature(fn).parameters.values())
    values = [torch.zeros(2) if p.default is p.empty else p.default for p in params]
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    yield tuple(values[:len(pos)]), {p.name: v for p, v in zip(params, values) if p.kind == p.KEYWORD_ONLY}
    if pos:
        yield (values[0],), {p.name: v for p, v in zip(params[1:], values[1:])}
    yield (), {p.name: v for p, v in zip(params, values) if p.default is p.empty}


@pytest.mark.parametrize("fn", WRAPPED, ids=lambda f: f"{f.__module__.rsplit('.', 1)[-1]}.{f.__name__}")
def test_named_arguments_equal_binds(fn):
    named = arguments_of(fn)
    for args, kwargs in _calls(fn):
        assert named(args, kwargs) == _bound(fn, args, kwargs), (args, kwargs)


def test_calls_bind_refuses_are_refused_with_binds_words():
    named = arguments_of(dist.all_reduce)
    t = torch.zeros(2)
    for args, kwargs, words in [((t,), {"bogus": 1}, "unexpected keyword argument 'bogus'"),
                                ((t, None, None, False, 5), {}, "too many positional arguments"),
                                ((), {}, "missing a required argument: 'tensor'"),
                                ((t,), {"tensor": t}, "multiple values for argument 'tensor'")]:
        with pytest.raises(TypeError, match=words):
            named(args, kwargs)


def test_a_positional_only_parameter_given_by_keyword_is_refused_as_bind_refuses_it():
    def f(a, /, b=1):
        return a

    named = arguments_of(f)
    assert named((1,), {"b": 2}) == {"a": 1, "b": 2}
    with pytest.raises(TypeError, match="positional"):
        named((), {"a": 1})


def test_a_signature_with_var_arguments_keeps_bind():
    def f(a, *rest, b=2, **more):
        return a

    named = arguments_of(f)
    assert named((1, 5, 6), {"c": 3}) == _bound(f, (1, 5, 6), {"c": 3}) == {"a": 1, "rest": (5, 6), "b": 2,
                                                                           "more": {"c": 3}}


def test_install_wraps_each_name_where_c10d_and_dtensor_look_it_up_and_uninstall_restores_them():
    from torch.distributed import distributed_c10d as c10d
    collective_utils = pytest.importorskip("torch.distributed.tensor._collective_utils")

    from telemetry.capture.collectives import CollectiveTracer

    names = [n for n in (*DIST_SPECS, "batch_isend_irecv") if getattr(c10d, n, None) is getattr(dist, n, 0)]
    before = {n: getattr(c10d, n) for n in names}
    bound = {n: getattr(collective_utils, n) for n in ("broadcast", "scatter")}
    tracer = CollectiveTracer().install()
    try:
        for n in names:  # the object collectives and c10d's own delegations reach the wrappers
            assert getattr(c10d, n) is getattr(dist, n) is not before[n], n
        assert "gather" in names and "scatter" in names and "send" in names
        for n in bound:  # DTensor's mesh_broadcast / mesh_scatter bound c10d's at import
            assert getattr(collective_utils, n) is getattr(dist, n) is not bound[n], n
    finally:
        tracer.uninstall()
    assert all(getattr(c10d, n) is getattr(dist, n) is before[n] for n in names)
    assert all(getattr(collective_utils, n) is fn for n, fn in bound.items())


def test_a_torch_module_imported_while_installed_gets_the_originals_back_at_uninstall(monkeypatch):
    """DTensor's _collective_utils is imported when a job first uses DTensor, often after install: its
    `from distributed_c10d import broadcast, scatter` then binds the wrappers. Uninstall gives it the
    originals back; before, its calls kept going to the uninstalled tracer and a later tracer never saw them."""
    import sys
    import types

    from torch.distributed import distributed_c10d as c10d

    from telemetry.capture.collectives import CollectiveTracer

    originals = {n: getattr(c10d, n) for n in ("broadcast", "scatter", "all_reduce")}
    tracer = CollectiveTracer().install()
    try:
        late = types.ModuleType("torch.distributed._imported_while_traced")
        for n in originals:  # what `from torch.distributed.distributed_c10d import ...` binds now
            setattr(late, n, getattr(c10d, n))
        late.unrelated = len
        monkeypatch.setitem(sys.modules, late.__name__, late)
        assert all(getattr(late, n) is not fn for n, fn in originals.items())
    finally:
        tracer.uninstall()
    assert all(getattr(late, n) is fn for n, fn in originals.items())
    assert late.unrelated is len


@pytest.mark.integration
def test_functional_collectives_bind_torchs_own_functions_whatever_the_install_order():
    """torch.distributed._functional_collectives binds c10d's collectives when imported (legacy_*, the keys of
    dynamo's remap table for compiled code). The tracer imports it before wrapping anything, so those bindings
    stay torch's own: imported under the wrappers, they outlived uninstall (dynamo then no longer remapped
    dist.all_reduce in compiled code)."""
    import os
    import subprocess
    import sys

    from ...conftest import REPO

    script = """
import sys
from torch.distributed import distributed_c10d as c10d
from telemetry.capture.collectives import CollectiveTracer
assert "torch.distributed._functional_collectives" not in sys.modules
names = ("all_reduce", "isend", "irecv", "all_gather", "all_to_all_single", "batch_isend_irecv")
originals = {n: getattr(c10d, n) for n in names}
tracer = CollectiveTracer().install()
import torch.distributed._functional_collectives as funcol
tracer.uninstall()
bound = {n: getattr(funcol, "legacy_" + n) for n in ("allreduce", "isend", "irecv", "all_gather",
                                                      "all_to_all_single", "batch_p2p_ops")}
assert list(bound.values()) == list(originals.values()), bound
assert all(fn in funcol.traceable_collective_remaps for fn in originals.values())
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_dtensors_shard_dim_alltoall_is_wrapped_where_placement_types_bound_it_and_restored():
    utils = pytest.importorskip("torch.distributed.tensor._collective_utils")
    placement_types = pytest.importorskip("torch.distributed.tensor.placement_types")
    from telemetry.capture.collectives import CollectiveTracer

    before = utils.shard_dim_alltoall
    assert placement_types.shard_dim_alltoall is before
    tracer = CollectiveTracer().install()
    try:
        assert placement_types.shard_dim_alltoall is utils.shard_dim_alltoall is not before
    finally:
        tracer.uninstall()
    assert placement_types.shard_dim_alltoall is utils.shard_dim_alltoall is before


def test_a_wrapper_bound_during_an_earlier_run_counts_in_the_run_now():
    """DeepSpeed's communication backend (deepspeed.comm.cdb, made once per process) binds
    all_gather_into_tensor/reduce_scatter_tensor at its first init; megatron binds at import. A second run in
    the same process (a new tracer, the first uninstalled) still calls the first run's wrapper through that
    binding: the call must reach the current tracer, not stay with the retired one (which nobody reads, and
    which on NCCL would claim the completion report the current call waits for)."""
    from telemetry.capture.collectives import CollectiveTracer

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        first = CollectiveTracer().install()
        bound = dist.all_reduce  # what cdb / a module global keeps
        first.uninstall()
        second = CollectiveTracer().install()
        try:
            first.begin_step()
            second.begin_step()
            bound(torch.ones(4))
            assert [c.op for c in second.end_step().calls] == ["all_reduce"]
            assert first.end_step().calls == []
        finally:
            second.uninstall()
        bound(torch.ones(4))  # no tracer installed: torch's own all-reduce, recorded nowhere
        first.begin_step()
        assert first.end_step().calls == []
    finally:
        dist.destroy_process_group()


def test_an_eager_call_does_not_pay_for_the_compile_opaque_wrapper(monkeypatch):
    """torch.compiler.disable's wrapper runs on every call it guards (about 1 us, a gloo all_reduce's 4%):
    an eager call goes straight to the tracer's wrapper; only a call while compiling enters the disabled one."""
    from telemetry.capture.collective_calls import opaque_to_compile
    entered = []

    def disable(fn):
        def disabled(*a, **k):
            entered.append(fn)
            return fn(*a, **k)
        return disabled

    monkeypatch.setattr(torch.compiler, "disable", disable)
    eager = opaque_to_compile(lambda x: x + 1)
    assert eager(1) == 2 and entered == []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    compiling = opaque_to_compile(lambda x: x + 2)
    assert compiling(1) == 3 and len(entered) == 1
