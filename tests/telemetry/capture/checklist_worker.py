"""Run by tests/telemetry/capture/test_collective_checklist.py under torchrun (2 gloo ranks): one step per
item of the "every collective counted" checklist, each call the tracer recorded written to OUT/rank<r>.json
as [op, bytes, group name, timed, untimed reason]; the test holds the bytes computed by hand."""
from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

import torch
import torch.distributed as dist

from telemetry.capture.collectives import CollectiveTracer

F32, BF16, F64 = torch.float32, torch.bfloat16, torch.float64


def calls_of(step) -> list:
    out = []
    for c in step.calls:
        c.resolve()
        out.append([c.op, c.nbytes, (c.group or {}).get("name"), c.duration_s is not None, c.untimed_reason])
    return out


class Checklist:
    def __init__(self, tracer, rank: int, world: int):
        self.tracer, self.rank, self.world, self.peer = tracer, rank, world, 1 - rank
        self.results: dict = {}

    def step(self, name: str, fn) -> None:
        print(f"[checklist] rank {self.rank}: {name}", file=sys.stderr, flush=True)
        self.tracer.begin_step()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                extra = fn()
        except Exception:  # noqa: BLE001 - the item fails in the test with torch's words
            self.tracer.end_step()
            self.results[name] = {"error": traceback.format_exc()[-1500:]}
            dist.barrier()
            return
        step = self.tracer.end_step()
        self.results[name] = {"calls": calls_of(step), "summary": step.summary()}
        if extra is not None:
            self.results[name]["extra"] = extra


def c10d_items(ck: Checklist) -> None:
    rank, world, peer = ck.rank, ck.world, ck.peer
    ck.step("all_reduce", lambda: dist.all_reduce(torch.ones(1024, dtype=F32)))  # 4096
    ck.step("all_gather_list", lambda: dist.all_gather([torch.empty(64) for _ in range(world)],
                                                       torch.ones(64)))  # S = output 2 x 256
    ck.step("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.empty(128), torch.ones(64)))
    ck.step("reduce_scatter_list", lambda: dist.reduce_scatter(torch.empty(64),
                                                               [torch.ones(64) for _ in range(world)]))
    ck.step("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(torch.empty(64), torch.ones(128)))
    ck.step("all_to_all_list", lambda: dist.all_to_all([torch.empty(32) for _ in range(world)],
                                                       [torch.ones(32) for _ in range(world)]))  # 2 x 128
    ck.step("all_to_all_single_even", lambda: dist.all_to_all_single(torch.empty(64), torch.ones(64)))
    # uneven: rank 0 sends 1 to itself and 3 to rank 1; rank 1 sends 2 to rank 0 and 4 to itself
    splits_in = [[1, 3], [2, 4]][rank]
    splits_out = [[1, 2], [3, 4]][rank]
    ck.step("all_to_all_single_uneven", lambda: dist.all_to_all_single(
        torch.empty(sum(splits_out)), torch.ones(sum(splits_in)), splits_out, splits_in))
    ck.step("broadcast_bf16", lambda: dist.broadcast(torch.ones(100, dtype=BF16), src=0))  # 200
    ck.step("reduce_f64", lambda: dist.reduce(torch.ones(50, dtype=F64), dst=0))  # 400
    ck.step("gather", lambda: dist.gather(torch.ones(16), [torch.empty(16) for _ in range(world)]
                                          if rank == 0 else None, dst=0))  # S = 64 x 2
    ck.step("scatter", lambda: dist.scatter(torch.empty(16), [torch.ones(16) for _ in range(world)]
                                            if rank == 0 else None, src=0))
    ck.step("barrier", lambda: dist.barrier())
    ck.step("monitored_barrier", lambda: dist.monitored_barrier())

    def send_recv():
        if rank == 0:
            dist.send(torch.ones(64), dst=1)  # 256
            dist.isend(torch.ones(32), dst=1).wait()  # 128
        else:
            dist.recv(torch.empty(64), src=0)
            dist.irecv(torch.empty(32), src=0).wait()
    ck.step("send_recv", send_recv)

    def batch():
        ops = [dist.P2POp(dist.isend, torch.ones(8), peer), dist.P2POp(dist.irecv, torch.empty(8), peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    ck.step("batch_isend_irecv", batch)

    def async_waited():
        dist.all_reduce(torch.ones(16), async_op=True).wait()  # 64
        dist.all_gather_into_tensor(torch.empty(32), torch.ones(16), async_op=True).wait()  # 128
    ck.step("async_waited", async_waited)
    ck.step("async_never_waited", lambda: (dist.all_reduce(torch.ones(16), async_op=True), None)[1])
    dist.barrier()
    pending = []
    ck.step("async_issued_step_n", lambda: pending.append(dist.all_reduce(torch.ones(8), async_op=True)))
    ck.step("async_waited_step_n1", lambda: pending[0].wait())

    ck.step("all_reduce_coalesced", lambda: dist.all_reduce_coalesced([torch.ones(4), torch.ones(6)]))  # 40
    ck.step("all_gather_coalesced", lambda: dist.all_gather_coalesced(
        [[torch.empty(4), torch.empty(2)] for _ in range(world)], [torch.ones(4), torch.ones(2)]))  # 24 x 2

    def coalescing(async_ops):
        def run():
            with dist._coalescing_manager(async_ops=async_ops) as cm:
                dist.all_reduce(torch.ones(4))  # 16
                dist.all_reduce(torch.ones(8), async_op=async_ops)  # 32
            if async_ops:
                cm.wait()
        return run
    ck.step("coalescing_manager", coalescing(False))
    ck.step("coalescing_manager_async", coalescing(True))


def object_items(ck: Checklist) -> None:
    rank, world = ck.rank, ck.world
    ck.step("all_gather_object", lambda: dist.all_gather_object([None] * world, {"r": rank}))
    ck.step("broadcast_object_list", lambda: dist.broadcast_object_list([[1, 2, 3]], src=0))
    ck.step("gather_object", lambda: dist.gather_object("x" * (10 + rank), [None] * world if rank == 0 else None,
                                                        dst=0))
    ck.step("scatter_object_list", lambda: dist.scatter_object_list([None], ["a", "bb"] if rank == 0 else None,
                                                                    src=0))

    def p2p():
        if rank == 0:
            dist.send_object_list(["abc"], dst=1)
        else:
            dist.recv_object_list([None], src=0)
    ck.step("send_recv_object_list", p2p)


def funcol_items(ck: Checklist) -> None:
    import torch.distributed._functional_collectives as funcol
    g = dist.group.WORLD

    def plain():
        outs = [funcol.all_reduce(torch.ones(8), "sum", g),  # 32
                funcol.all_gather_tensor(torch.ones(8), 0, g),  # 32 x 2
                funcol.reduce_scatter_tensor(torch.ones(8), "sum", 0, g),  # 32
                funcol.all_to_all_single(torch.ones(8), None, None, g),  # 32
                funcol.broadcast(torch.ones(8), 0, g)]  # 32
        for t in outs:
            funcol.wait_tensor(t)
    ck.step("funcol_plain", plain)

    def autograd():
        x = torch.ones(8, requires_grad=True)
        outs = [funcol.all_gather_tensor_autograd(x, 0, g),  # fwd 32 x 2; bwd reduce_scatter of 64
                funcol.reduce_scatter_tensor_autograd(x, "sum", 0, g),  # fwd 32; bwd all_gather 16 x 2
                funcol.all_to_all_single_autograd(x, None, None, g)]  # fwd 32; bwd all_to_all 32
        sum(funcol.wait_tensor(t).sum() for t in outs).backward()
    ck.step("funcol_autograd", autograd)

    def inplace():
        funcol.all_gather_inplace([torch.empty(4) for _ in range(ck.world)], torch.ones(4), g)  # 16 x 2
        funcol.all_reduce_inplace(torch.ones(4), "sum", g)  # 16
    ck.step("funcol_inplace", inplace)

    def p2p():
        if ck.rank == 0:
            funcol.wait_tensor(funcol.isend_inplace(torch.ones(4), 1, 0, g))  # 16
        else:
            funcol.wait_tensor(funcol.irecv_inplace(torch.empty(4), 0, 0, g))
    if hasattr(funcol, "isend_inplace"):
        ck.step("funcol_isend_irecv", p2p)


def dtensor_items(ck: Checklist) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (ck.world,), mesh_dim_names=("dp",))
    sharded = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])  # 4 x 4 fp32 = 64 B a rank
    ck.step("dtensor_shard_to_replicate", lambda: sharded.redistribute(mesh, [Replicate()]).to_local().sum()
            .item())  # all_gather S = 64 x 2
    ck.step("dtensor_full_tensor", lambda: sharded.full_tensor().sum().item())
    from torch.distributed.tensor import DTensor
    partial = DTensor.from_local(torch.ones(4, 4), mesh, [Partial()])
    ck.step("dtensor_partial_to_replicate", lambda: partial.redistribute(mesh, [Replicate()]).to_local().sum()
            .item())  # all_reduce 64
    ck.step("mesh_group", lambda: dist.all_reduce(torch.ones(4), group=mesh.get_group("dp")))  # 16 on "dp"


def group_items(ck: Checklist) -> None:
    explicit = dist.new_group([0, 1])  # after the tracer started

    def same_ranks():
        dist.all_reduce(torch.ones(4))  # default group
        dist.all_reduce(torch.ones(4), group=explicit)
    ck.step("default_vs_explicit_group", same_ranks)
    singles, _ = dist.new_subgroups(group_size=1)
    ck.step("new_subgroups", lambda: dist.all_reduce(torch.ones(4), group=singles))  # size 1


def compiled_items(ck: Checklist) -> None:
    import torch.distributed._functional_collectives as funcol
    g = dist.new_group([0, 1])  # a group no call has named yet: its identity is first read while compiling

    def f_funcol(x):
        return funcol.wait_tensor(funcol.all_reduce(x * 2, "sum", g)) + 1

    def f_dist(x):
        y = x * 2
        dist.all_reduce(y, group=g)
        return y + 1
    cf, cd = torch.compile(f_funcol, backend="eager"), torch.compile(f_dist, backend="eager")
    for i in range(3):  # the first run compiles, the other two run the graph
        ck.step(f"compiled_funcol_{i}", lambda: cf(torch.ones(4)).sum().item())  # 16 each
        ck.step(f"compiled_dist_{i}", lambda: cd(torch.ones(4)).sum().item())


def ddp_items(ck: Checklist) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)  # 36 params: 144 B of gradients
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # no attach_ddp: the reducer's own all-reduce
    ck.step("ddp_without_attach", lambda: ddp(torch.randn(2, 8)).sum().backward())
    ddp.register_comm_hook(None, __import__("torch.distributed.algorithms.ddp_comm_hooks.default_hooks",
                                            fromlist=["x"]).allreduce_hook)
    ck.step("ddp_user_hook", lambda: ddp(torch.randn(2, 8)).sum().backward())


def fsdp_items(ck: Checklist) -> None:
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))  # 4224 B of parameters each
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    ck.step("fsdp2", lambda: model(torch.randn(4, 32)).sum().backward())


def lifecycle_items(ck: Checklist, out_dir: str) -> dict:
    out = {}
    ck.tracer.uninstall()
    second = CollectiveTracer().install()  # a second run in the same process
    second.begin_step()
    dist.all_reduce(torch.ones(4))
    out["second_run"] = calls_of(second.end_step())
    out["first_after_uninstall"] = len(ck.tracer._step.calls)
    dist.destroy_process_group()  # re-created on a store of its own (torchrun's keys are the first group's)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(out_dir, "store"), ck.world),
                            rank=ck.rank, world_size=ck.world)
    second.begin_step()
    dist.all_reduce(torch.ones(8))
    dist.all_gather_into_tensor(torch.empty(8), torch.ones(4))
    out["after_reinit"] = calls_of(second.end_step())
    second.uninstall()
    return out


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ck = Checklist(CollectiveTracer().install(), rank, world)
    for items in (c10d_items, object_items, funcol_items, dtensor_items, group_items, ddp_items, fsdp_items,
                  compiled_items):
        items(ck)
    ck.results["lifecycle"] = lifecycle_items(ck, out)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(ck.results, f, indent=1, default=str)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
