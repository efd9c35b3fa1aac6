"""The collectives the tracer does not see issued, counted anyway: the one a functional collective's backward
issues (autograd runs it, no wrapped function is called), and P2POps that cross an install or uninstall.

In-process: a gloo group of one (torch's real autograd nodes and batch_isend_irecv's identity test) and the
pretend ProcessGroupNCCL of test_collectives_nccl_fake.py (the backward's completion report is claimed, with
group sizes above one). The 2-rank gloo run is test_collective_backward_ranks.py."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

from telemetry.capture import completion_hooks
from telemetry.capture.collective_calls import FUNCOL_BACKWARD, FUNCOL_SPECS
from telemetry.capture.collectives import CollectiveTracer

from .test_collectives_nccl_fake import FakeGlooGroup, FakeProcessGroupNCCL
from .torch_names import Funcol, backward_ones, differentiable, plain_funcols_have_autograd

pytest.importorskip("torch.distributed._functional_collectives")
funcol = Funcol()  # torch 2.13's *_single names, or the older ones of the same collectives


@pytest.fixture
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def tracer(group_of_one):
    t = CollectiveTracer().install()
    yield t
    t.uninstall()


def _calls(tracer, fn) -> list:
    tracer.begin_step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the *_tensor_* names are deprecated in torch 2.13
        fn()
    return [(c.op, c.nbytes) for c in tracer.end_step().calls]


def test_each_functional_backward_is_counted_with_its_transposed_op_and_bytes(tracer, group_of_one):
    """On a group of n: all_gather's backward reduce-scatters the gathered gradient (S = output bytes),
    reduce_scatter's all-gathers it (S = output bytes x n), all_reduce all-reduces it, all_to_all sends it
    back (S = output bytes); here n = 1, the pretend NCCL test below takes n = 4, the 2-rank run n = 2."""
    g = group_of_one
    x = torch.ones(6, 4, requires_grad=True)  # 96 B
    plain_backward = plain_funcols_have_autograd()
    p = x if plain_backward else x.detach()  # torch 2.9 and older: the plain forms have no backward to count

    def forms():
        outs = [funcol.all_gather_tensor_autograd(x, 0, g), funcol.all_gather_single(p, 1, g),
                funcol.reduce_scatter_tensor_autograd(x, "sum", 0, g), funcol.reduce_scatter_single(p, "SUM", 1, g),
                funcol.all_to_all_single_autograd(x, None, None, g), funcol.all_reduce(p, "sum", g),
                *funcol.all_reduce_coalesced([p, p[:2]], "sum", g),
                *funcol.all_gather_single_coalesced([p, p[:2]], g),
                *funcol.reduce_scatter_single_coalesced([p, p[:2]], "sum", [0, 0], g)]
        backward_ones(outs)

    calls = _calls(tracer, forms)
    forward, backward = calls[:9], calls[9:]
    both = 96 + 32  # the coalesced forms' two tensors
    assert forward == [("all_gather", 96), ("all_gather", 96), ("reduce_scatter", 96), ("reduce_scatter", 96),
                       ("all_to_all", 96), ("all_reduce", 96), ("all_reduce", both), ("all_gather", both),
                       ("reduce_scatter", both)]
    # autograd runs the nodes in reverse order of creation
    if not plain_backward:
        assert backward == [("all_to_all", 96), ("all_gather", 96), ("reduce_scatter", 96)]
        return
    assert backward == [("all_gather", both), ("reduce_scatter", both), ("all_reduce", both), ("all_reduce", 96),
                        ("all_to_all", 96), ("all_gather", 96), ("all_gather", 96), ("reduce_scatter", 96),
                        ("reduce_scatter", 96)]
    assert x.grad is not None


def test_a_backward_on_gloo_is_timed_around_its_node_with_the_forwards_group(tracer, group_of_one):
    tracer.begin_step()
    backward_ones([differentiable("all_gather_single")(torch.ones(8, requires_grad=True), 0, group_of_one)])
    step = tracer.end_step()
    fwd, bwd = step.calls
    assert (bwd.op, bwd.nbytes, bwd.backend, bwd.group_size) == ("reduce_scatter", 32, "gloo", 1)
    assert bwd.group == fwd.group and bwd.group["name"] == "world" and bwd.source == fwd.source == "funcol"
    # the node waits for its work (wait_tensor blocks on CPU): timed as a blocking call, unlike the forward
    s = step.summary()
    assert bwd.blocking and s["reduce_scatter"]["untimed"] == 0 and s["reduce_scatter"]["time_s"] >= 0
    assert s["all_gather"]["untimed"] == 1
    assert s["all_gather"]["untimed_reason"] == "functional collectives are timed on NCCL only"


def test_no_backward_is_counted_when_none_runs_or_none_is_issued(tracer, group_of_one):
    g = group_of_one
    x = torch.ones(4, requires_grad=True)

    def without():
        outs = [funcol.all_gather_single(x.detach(), 0, g)]  # no autograd history
        with torch.no_grad():
            outs.append(funcol.all_reduce(x, "sum", g))
        outs.append(differentiable("all_to_all_single")(x, None, None, g))  # history, but backward never runs
        for o in outs:
            funcol.wait_tensor(o)
    assert _calls(tracer, without) == [("all_gather", 16), ("all_reduce", 16), ("all_to_all", 16)]

    if not plain_funcols_have_autograd():
        return  # torch 2.9 and older: only the *_autograd form has a backward, and it refuses max in the forward
    tracer.begin_step()
    y = funcol.reduce_scatter_single(x, "max", 0, g)  # torch's backward refuses all but sum, before issuing
    with pytest.raises(RuntimeError, match="only supports 'sum'"):
        backward_ones([y])
    assert [(c.op, c.nbytes) for c in tracer.end_step().calls] == [("reduce_scatter", 16)]


def test_a_collective_of_a_collectives_output_hooks_its_own_node_once(tracer, group_of_one):
    """The nearest node of that name is the call's own: an input made by an earlier all_gather has one too."""
    g = group_of_one
    x = torch.ones(3, requires_grad=True)

    def chained():
        y = differentiable("all_gather_single")(x, 0, g)
        z = differentiable("all_gather_single")(y * 2, 0, g)
        torch.autograd.backward([z], [torch.ones_like(z)], retain_graph=True)
        backward_ones([z])  # each run of a node issues its collective again
    assert _calls(tracer, chained) == [("all_gather", 12), ("all_gather", 12)] + [("reduce_scatter", 12)] * 4


def test_a_graph_that_outlives_its_tracer_counts_its_backward_nowhere(group_of_one):
    """Its hooks are the uninstalled tracer's: counting there would hide the call from the tracer in use (on NCCL
    the uninstalled one would claim the report); counting nothing leaves the report unclaimed, which says so."""
    first = CollectiveTracer().install()
    first.begin_step()
    y = differentiable("all_gather_single")(torch.ones(2, requires_grad=True), 0, group_of_one)
    first.uninstall()
    later = CollectiveTracer().install()
    try:
        later.begin_step()
        backward_ones([y])
        assert later.end_step().calls == []
    finally:
        later.uninstall()
    assert [c.op for c in first.end_step().calls] == ["all_gather"]


# ---------------------------------------------------------------- the NCCL path (pretend ProcessGroupNCCL)

class AllGatherIntoTensor(torch.autograd.Function):
    """Named as torch's node is: its backward issues the reduce-scatter on the group, as torch's does."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        group.issue("_ALLGATHER_BASE", [x])
        return x.repeat(group.size())

    @staticmethod
    def backward(ctx, grad):
        ctx.group.issue("_REDUCE_SCATTER_BASE", [grad])
        return grad.view(ctx.group.size(), -1).sum(0), None


class ReduceScatterTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        group.issue("_REDUCE_SCATTER_BASE", [x])
        return x.view(group.size(), -1).sum(0)

    @staticmethod
    def backward(ctx, grad):
        gathered = grad.repeat(ctx.group.size())
        ctx.group.issue("_ALLGATHER_BASE", [gathered])
        return gathered, None


class AllToAllSingle(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_rows, group):
        ctx.group, ctx.rows = group, x.shape[0]
        group.issue("ALLTOALL_BASE", [x])
        return x.new_ones(out_rows, *x.shape[1:])  # uneven splits: this rank receives more than it sends

    @staticmethod
    def backward(ctx, grad):
        ctx.group.issue("ALLTOALL_BASE", [grad])
        return grad.new_ones(ctx.rows, *grad.shape[1:]), None, None


def all_gather_single(self, gather_dim, group, tag=""):
    return AllGatherIntoTensor.apply(self, group)


def reduce_scatter_single(self, reduceOp, scatter_dim, group, tag=""):  # noqa: N803 - torch's parameter names
    return ReduceScatterTensor.apply(self, group)


def all_to_all_single(self, output_split_sizes, input_split_sizes, group, tag=""):
    return AllToAllSingle.apply(self, sum(output_split_sizes), group)


@pytest.fixture
def fake_backends(monkeypatch):
    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: getattr(pg, "backend", None))


def _wrapped(tracer, name, fn):
    return tracer._wrap_funcol(fn, FUNCOL_SPECS[name], FUNCOL_BACKWARD[name])


def test_on_nccl_the_backwards_report_is_claimed_and_times_it(fake_backends):
    g, tracer = FakeProcessGroupNCCL("cp", size=4), CollectiveTracer()
    ag = _wrapped(tracer, "all_gather_single", all_gather_single)
    rs = _wrapped(tracer, "reduce_scatter_single", reduce_scatter_single)
    a2a = _wrapped(tracer, "all_to_all_single", all_to_all_single)
    tracer.begin_step()
    x = torch.ones(8, requires_grad=True)  # 32 B
    loss = ag(x, 0, g).sum() + rs(x, "sum", 0, g).sum() + a2a(x, [3, 3, 3, 3], [2, 2, 2, 2], g).sum()
    loss.backward()
    g.watchdog()
    step = tracer.end_step()
    assert [(c.op, c.nbytes, c.duration_s) for c in step.calls] == [
        ("all_gather", 32 * 4, g.device_time(32)), ("reduce_scatter", 32, g.device_time(32)),
        ("all_to_all", 32, g.device_time(32)),
        # backward, in reverse: all_to_all of the 12-row gradient (the forward's output, not its input);
        # all_gather of the 2-element gradient to 4 x 2 (S = output x n); reduce_scatter of the gathered 32 x 4
        ("all_to_all", 48, g.device_time(48)), ("all_gather", 8 * 4, g.device_time(32)),
        ("reduce_scatter", 128, g.device_time(128))]
    assert step.events.get("unclaimed_reports") is None
    assert step.health()["timed"] == 6


class _Issues:
    """What the pretend node's backward issues on, where the wrapper is given a group it cannot time."""

    def size(self):
        return 2

    def issue(self, op_type, tensors):
        pass


def test_off_nccl_the_backward_is_timed_on_gloo_and_untimed_with_the_forwards_reason_elsewhere(fake_backends):
    tracer = CollectiveTracer()
    ag = _wrapped(tracer, "all_gather_single",
                  lambda self, gather_dim, group, tag="": AllGatherIntoTensor.apply(self, _Issues()))
    tracer.begin_step()
    ag(torch.ones(2, requires_grad=True), 0, FakeGlooGroup()).sum().backward()
    ag(torch.ones(2, requires_grad=True), 0, [0, 1]).sum().backward()  # the legacy rank-list form: no group
    fwd_gloo, bwd_gloo, fwd_ranks, bwd_ranks = tracer.end_step().calls
    for c in (bwd_gloo, bwd_ranks):
        c.resolve()
    assert (bwd_gloo.op, bwd_gloo.nbytes, bwd_gloo.untimed_reason, bwd_gloo.blocking) == ("reduce_scatter", 16,
                                                                                          None, True)
    assert bwd_gloo.duration_s is not None and bwd_gloo.group == fwd_gloo.group
    assert (bwd_ranks.op, bwd_ranks.nbytes, bwd_ranks.duration_s) == ("reduce_scatter", 16, None)
    assert bwd_ranks.untimed_reason == fwd_ranks.untimed_reason == "functional collective on None"


# ---------------------------------------------------------------- P2POps across install and uninstall

def _ops(peer=0):
    return [dist.P2POp(dist.isend, torch.ones(4), peer), dist.P2POp(dist.irecv, torch.empty(2), peer)]


def test_a_p2pop_reads_back_what_torch_tests_it_against_whenever_it_was_built(group_of_one):
    """batch_isend_irecv picks the peer keyword by `op is isend` (distributed_c10d's current one). A P2POp
    built under the tracer held the wrapper: after uninstall torch took its isend for an irecv and passed it
    `group_src` (TypeError), and one built before install was re-pointed at the wrapper for good."""
    from torch.distributed import distributed_c10d as c10d

    isend, irecv = c10d.isend, c10d.irecv
    before = _ops()
    first = CollectiveTracer().install()
    during = _ops()
    for p in before + during:  # under the tracer: the wrappers, as torch's check and the batch wrapper see them
        assert (p.op is c10d.isend is dist.isend is not isend) or (p.op is c10d.irecv is not irecv)
    first.uninstall()
    for ops in (before, during):  # torch's own again, and nothing left in the instances pointing at a wrapper
        assert [p.op for p in ops] == [isend, irecv] and [vars(p)["op"] for p in ops] == [isend, irecv]
    assert "op" not in vars(dist.P2POp)
    later = CollectiveTracer().install()
    try:
        assert [p.op for p in during] == [c10d.isend, c10d.irecv] and c10d.isend is not isend
        assert repr(during[0]).startswith("P2POp(isend")
    finally:
        later.uninstall()
    assert c10d.isend is isend and during[0].op is isend


def test_a_batch_counts_sends_and_receives_whichever_tracer_built_the_ops(group_of_one):
    """gloo cannot send to itself: torch's batch is stood in for by one that does what it does with each op
    (the peer keyword by `op is isend`, then the call), returning a finished work per op."""
    from torch.distributed import distributed_c10d as c10d

    class Done:
        def get_future(self):
            fut = torch.futures.Future()
            fut.set_result(None)
            return fut

    seen = []

    def batch(p2p_op_list):
        for p in p2p_op_list:
            seen.append(("group_dst" if p.op is c10d.isend else "group_src", torch_kind(p.op)))
        return [Done() for _ in p2p_op_list]

    def torch_kind(op):
        return "isend" if op is c10d.isend else "irecv" if op is c10d.irecv else "foreign"

    first = CollectiveTracer().install()
    built_under_first = _ops()
    first.uninstall()
    tracer = CollectiveTracer()
    wrapped = tracer._wrap_batch(batch)
    later = tracer.install()
    try:
        tracer.begin_step()
        wrapped(built_under_first)
        wrapped(_ops())
        assert [(c.op, c.nbytes) for c in tracer.end_step().calls] == [("send", 16), ("recv", 8)] * 2
    finally:
        later.uninstall()
    batch(built_under_first)  # after uninstall, as torch's own batch sees them
    assert seen == [("group_dst", "isend"), ("group_src", "irecv")] * 3
