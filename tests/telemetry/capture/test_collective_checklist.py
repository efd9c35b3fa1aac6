"""The "every collective counted" checklist on 2 gloo ranks (checklist_worker.py): every calling form of
torch.distributed's collectives, the object collectives, the functional ones, DTensor, process groups made
after install, torch.compile, DDP, and a second tracer after a process group is re-created. Each call must be
recorded once, with the op, its group and nccl-tests' S computed here by hand from shapes and dtypes, and
timed or untimed with a named reason."""
from __future__ import annotations

import pickle

import pytest

from telemetry.capture.collectives import CollectiveTracer
from telemetry.capture.comm_step import FUNCOL_GLOO, NO_FUTURE, UNFINISHED

from .two_ranks import run_worker

W = "world"
# item -> the calls each rank records: (op, S bytes); rank-dependent ones below. fp32 unless said.
SAME = {
    "all_reduce": [("all_reduce", 1024 * 4)],
    "all_gather_list": [("all_gather", 2 * 64 * 4)],  # S = the output: 2 tensors of 64
    "all_gather_into_tensor": [("all_gather", 128 * 4)],
    "reduce_scatter_list": [("reduce_scatter", 2 * 64 * 4)],  # S = the input: 2 tensors of 64
    "reduce_scatter_tensor": [("reduce_scatter", 128 * 4)],
    "all_to_all_list": [("all_to_all", 2 * 32 * 4)],  # S = what a rank sends
    "all_to_all_single_even": [("all_to_all", 64 * 4)],
    "broadcast_bf16": [("broadcast", 100 * 2)],
    "reduce_f64": [("reduce", 50 * 8)],
    "gather": [("gather", 16 * 4 * 2)],  # S = the per-rank tensor x n
    "scatter": [("scatter", 16 * 4 * 2)],
    "barrier": [("barrier", 0)],
    "monitored_barrier": [("barrier", 0)],
    "batch_isend_irecv": [("send", 8 * 4), ("recv", 8 * 4)],  # gloo: one work per op
    "async_waited": [("all_reduce", 16 * 4), ("all_gather", 32 * 4)],
    "async_never_waited": [("all_reduce", 16 * 4)],
    "async_issued_step_n": [("all_reduce", 8 * 4)],  # counted where it was issued
    "async_waited_step_n1": [],  # and not again where it is waited for
    "all_reduce_coalesced": [("all_reduce", (4 + 6) * 4)],
    "all_gather_coalesced": [("all_gather", (4 + 2) * 4 * 2)],
    # one allreduce_coalesced at the block's exit: one entry, the calls' summed bytes
    "coalescing_manager": [("all_reduce", (4 + 8) * 4)],
    "coalescing_manager_async": [("all_reduce", (4 + 8) * 4)],
    "funcol_plain": [("all_reduce", 32), ("all_gather", 32 * 2), ("reduce_scatter", 32), ("all_to_all", 32),
                     ("broadcast", 32)],
    # forward calls, then the backward's transposes: all_to_all of the 32 B gradient, all_gather of the
    # reduce-scatter's 16 B gradient x n, reduce_scatter of the gathered 64 B gradient
    "funcol_autograd": [("all_gather", 64), ("reduce_scatter", 32), ("all_to_all", 32), ("all_to_all", 32),
                        ("all_gather", 32), ("reduce_scatter", 64)],
    "funcol_inplace": [("all_gather", 16 * 2), ("all_reduce", 16)],
    "dtensor_shard_to_replicate": [("all_gather", 4 * 4 * 4 * 2)],  # a 4 x 4 shard a rank, gathered
    "dtensor_full_tensor": [("all_gather", 4 * 4 * 4 * 2)],
    "dtensor_partial_to_replicate": [("all_reduce", 4 * 4 * 4)],
    "mesh_group": [("all_reduce", 16)],
    "default_vs_explicit_group": [("all_reduce", 16), ("all_reduce", 16)],
    "new_subgroups": [("all_reduce", 16)],
    "ddp_user_hook": [("all_reduce", (8 * 4 + 4) * 4)],  # Linear(8, 4)'s gradients
    # FSDP2 over two Linear(32, 32) (4224 B each): gathered in forward, again in backward (resharded after
    # forward), then each gradient reduce-scattered (S = the unsharded input)
    "fsdp2": [("all_gather", (32 * 32 + 32) * 4)] * 4 + [("reduce_scatter", (32 * 32 + 32) * 4)] * 2,
    **{f"compiled_{kind}_{i}": [("all_reduce", 16)] for kind in ("funcol", "dist") for i in range(3)},
}


def _pickled(obj) -> int:
    return len(pickle.dumps(obj))  # torch's _object_to_tensor pickles with pickle.Pickler's default protocol


def expected(rank: int) -> dict:
    """The rank-dependent items: uneven all_to_all, point-to-point, and the object collectives, which send the
    pickled sizes (int64) and then the payload padded to the largest, through the c10d calls they make."""
    send, other = ("send", "recv") if rank == 0 else ("recv", "send")
    largest = max(_pickled({"r": r}) for r in range(2))
    return {**SAME,
            "all_to_all_single_uneven": [("all_to_all", [4, 6][rank] * 4)],  # S = the rank's input: 1+3, 2+4
            "send_recv": [(send, 64 * 4), (send, 32 * 4)],
            "all_gather_object": [("all_gather", 8 * 2), ("all_gather", largest * 2)],
            "broadcast_object_list": [("broadcast", 8), ("broadcast", _pickled([1, 2, 3]))],
            "gather_object": [("all_gather", 8 * 2), ("gather", _pickled("x" * 11) * 2)],
            "scatter_object_list": [("broadcast", 8), ("scatter", _pickled("bb") * 2), ("scatter", 8 * 2)],
            "send_recv_object_list": [(send, 8), (send, _pickled("abc"))],
            "funcol_isend_irecv": [(send, 16)]}


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    out = tmp_path_factory.mktemp("checklist")
    return run_worker("checklist_worker.py", out, timeout=400)


@pytest.mark.integration
def test_every_item_is_recorded_once_with_its_op_and_hand_computed_bytes(seen):
    for rank, res in enumerate(seen):
        want = expected(rank)
        for item, calls in want.items():
            got = res[item]
            assert "error" not in got, (rank, item, got.get("error"))
            assert [(op, nbytes) for op, nbytes, *_ in got["calls"]] == calls, (rank, item)


@pytest.mark.integration
def test_each_call_is_timed_or_untimed_with_a_named_reason(seen):
    for res in seen:
        for item, got in res.items():
            for op, nbytes, group, timed, reason in got.get("calls", ()):
                assert timed or reason, (item, op)
        funcol = [c for item in ("funcol_plain", "funcol_inplace", "funcol_isend_irecv", "dtensor_full_tensor")
                  for c in res[item]["calls"]]
        assert {(timed, reason) for *_, timed, reason in funcol} == {(False, FUNCOL_GLOO)}
        # the coalesced block ran at its exit, timed there (each call returned before it ran)
        for item in ("coalescing_manager", "coalescing_manager_async", "all_reduce", "gather", "ddp_user_hook"):
            assert [c[3] for c in res[item]["calls"]] == [True], item
        # gloo's asynchronous send/recv works have no future; an unwaited all_reduce may finish in time
        assert res["send_recv"]["calls"][1][3:] == [False, NO_FUTURE]
        assert all(c[3:] == [False, NO_FUTURE] for c in res["batch_isend_irecv"]["calls"])
        for item in ("async_never_waited", "async_issued_step_n"):
            assert res[item]["calls"][0][4] in (None, UNFINISHED), item


@pytest.mark.integration
def test_untimed_bytes_still_reach_the_step_totals(seen):
    for res in seen:
        s = res["funcol_plain"]["summary"]
        assert sum(v["bytes"] for v in s.values()) == 32 * 5 + 32
        assert sum(v["untimed_bytes"] for v in s.values()) == 32 * 5 + 32
        assert all(v["time_s"] is None and v["untimed_reason"] == FUNCOL_GLOO for v in s.values())


@pytest.mark.integration
def test_groups_made_after_install_are_told_apart_from_the_default_group(seen):
    for rank, res in enumerate(seen):
        assert [c[2] for c in res["default_vs_explicit_group"]["calls"]] == [W, "g[0,1]"]
        assert [c[2] for c in res["new_subgroups"]["calls"]] == [f"g[{rank}]"]
        assert [c[2] for c in res["mesh_group"]["calls"]] == [W]  # a 1-D mesh over the world is the world


@pytest.mark.integration
def test_compiled_regions_count_each_run_as_an_ordinary_call(seen):
    for res in seen:
        for i in range(3):  # on a group made just before: its name first read inside the compiled region
            assert res[f"compiled_funcol_{i}"]["calls"][0][2:] == ["g[0,1]", False, FUNCOL_GLOO]
            assert res[f"compiled_dist_{i}"]["calls"][0][2:4] == ["g[0,1]", True]


@pytest.mark.integration
def test_ddp_without_its_comm_hook_goes_uncounted_on_gloo(seen):
    """The known gap (docs/telemetry.md): the reducer's C++ all-reduce calls nothing wrapped; attach_ddp (or
    a job's hook that calls torch.distributed) is what counts the buckets."""
    for res in seen:
        assert res["ddp_without_attach"]["calls"] == []


@pytest.mark.integration
def test_a_second_tracer_counts_once_and_survives_a_recreated_process_group(seen):
    for res in seen:
        life = res["lifecycle"]
        assert [c[:3] for c in life["second_run"]] == [["all_reduce", 16, W]]
        assert life["first_after_uninstall"] == 0
        assert [c[:3] for c in life["after_reinit"]] == [["all_reduce", 32, W], ["all_gather", 32, W]]


def test_a_cuda_graphs_collectives_count_at_each_replay_not_at_its_capture(monkeypatch):
    """CUDA graph capture cannot run on CPU: a stand-in CUDAGraph class and the pretend ProcessGroupNCCL. The
    capture runs nothing (it counted one phantom call there, and none of the replays that ran it)."""
    import torch

    from telemetry.capture import collectives
    from telemetry.capture.comm_step import CAPTURED

    from .test_collectives_nccl_fake import FakeProcessGroupNCCL, all_reduce, wrap

    class StandInGraph:
        def capture_begin(self, pool=None):
            pass

        def capture_end(self):
            pass

        def replay(self):
            self.replays = getattr(self, "replays", 0) + 1

    from telemetry.capture import completion_hooks
    monkeypatch.setattr(completion_hooks, "backend_name", lambda pg: getattr(pg, "backend", None))
    own = dict(vars(StandInGraph))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    group, tracer = FakeProcessGroupNCCL("g", dim="tp"), CollectiveTracer()
    tracer._wrap_cuda_graphs()
    reduce = wrap(tracer, "all_reduce", all_reduce)
    try:
        graph = StandInGraph()
        tracer.begin_step()
        graph.capture_begin()
        monkeypatch.setattr(collectives, "_capturing", lambda: True)
        reduce(torch.ones(8), group=group)  # 32 B, recorded into the graph
        monkeypatch.setattr(collectives, "_capturing", lambda: False)
        graph.capture_end()
        assert tracer.end_step().calls == []
        tracer.begin_step()
        graph.replay()
        graph.replay()
        step = tracer.end_step()
        assert graph.replays == 2
        assert [(c.op, c.nbytes, c.group["name"], c.duration_s, c.untimed_reason) for c in step.calls] == \
            [("all_reduce", 32, "tp", None, CAPTURED)] * 2
        assert step.health()["captured"] == 2 and step.summary()["all_reduce"]["untimed_bytes"] == 64
    finally:
        tracer.uninstall()
    assert all(vars(StandInGraph)[n] is own[n] for n in ("capture_begin", "capture_end", "replay"))
