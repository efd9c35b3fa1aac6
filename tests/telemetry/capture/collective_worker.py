"""Run by tests/telemetry/capture/test_collectives.py under torchrun (2 gloo ranks): exercises every path
collectives take and writes what the tracer saw to OUT/rank<r>.json."""
from __future__ import annotations

import datetime
import gc
import json
import os
import pickle
import sys
import types
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import OpType

from telemetry.capture import completion_hooks
from telemetry.capture.collectives import CollectiveTracer
from tests.telemetry.capture.torch_names import dist_name


def step(tracer, fn):
    tracer.begin_step()
    fn()
    return tracer.end_step().summary()


def fsdp_retention(tracer) -> dict:
    """FSDP2 with the tracer on its NCCL path (gloo groups pretending to be NCCL, a fake hook registry):
    how many all-gather outputs are still alive when the step ends, and what the reports then time."""
    from torch.distributed.fsdp import fully_shard

    tracer.uninstall()
    hooks, issued, refs = {}, [], []
    # FSDP2 calls torch 2.13's *_single names, or all_gather_into_tensor / reduce_scatter_tensor before them
    ag_name, rs_name = dist_name("all_gather_single"), dist_name("reduce_scatter_single")
    orig = {"all_gather_single": getattr(dist, ag_name), "reduce_scatter_single": getattr(dist, rs_name)}

    def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
        refs.append(weakref.ref(output_tensor))
        issued.append((group, "_ALLGATHER_BASE"))
        return orig["all_gather_single"](output_tensor, input_tensor, group=group, async_op=async_op)

    def reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        issued.append((group, "_REDUCE_SCATTER_BASE"))
        return orig["reduce_scatter_single"](output, input, op=op, group=group, async_op=async_op)

    def register(pg, hook):
        assert pg not in hooks, "registered twice"
        hooks[pg] = hook

    saved = completion_hooks.backend_name, completion_hooks._register_completion_hook
    completion_hooks.backend_name = lambda pg: "nccl"
    completion_hooks._register_completion_hook = register
    setattr(dist, ag_name, all_gather_single)
    setattr(dist, rs_name, reduce_scatter_single)
    nccl = CollectiveTracer().install()
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        nccl.begin_step()
        model(torch.randn(4, 64)).sum().backward()
        gc.collect()
        alive = sum(r() is not None for r in refs)
        for group, op_type in issued:  # the watchdog's reports: op type and a 1 ms device duration
            hooks[group](types.SimpleNamespace(op_type=OpType.__members__[op_type],
                                               active_duration=datetime.timedelta(milliseconds=1)))
        summary = nccl.end_step().summary()
    finally:
        nccl.uninstall()
        completion_hooks.backend_name, completion_hooks._register_completion_hook = saved
        setattr(dist, ag_name, orig["all_gather_single"])
        setattr(dist, rs_name, orig["reduce_scatter_single"])
        tracer.install()
    return {"all_gathers": len(refs), "alive_at_step_end": alive, "summary": summary, "hooks": len(hooks)}


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tracer = CollectiveTracer().install()
    f32 = dict(dtype=torch.float32)
    results = {}

    def explicit():
        dist.all_reduce(torch.ones(1024, **f32))  # 4096 B
        dist.all_gather_into_tensor(torch.empty(2 * 256, **f32), torch.ones(256, **f32))  # S = 2048 B
        dist.reduce_scatter_tensor(torch.empty(256, **f32), torch.ones(512, **f32))  # S = 2048 B
        dist.all_to_all_single(torch.empty(512, **f32), torch.ones(512, **f32))  # S = 2048 B
        dist.broadcast(torch.ones(100, **f32), src=0)  # 400 B
        work = dist.all_reduce(torch.ones(256, **f32), async_op=True)  # 1024 B, timed by its future
        work.wait()
        peer = 1 - rank
        if rank == 0:
            dist.send(torch.ones(64, **f32), dst=peer)  # 256 B
        else:
            dist.recv(torch.empty(64, **f32), src=peer)
        ops = [dist.P2POp(dist.isend, torch.ones(32, **f32), peer),  # 128 B each way
               dist.P2POp(dist.irecv, torch.empty(32, **f32), peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        dist.barrier()
    results["explicit"] = step(tracer, explicit)

    # distributed_c10d's module globals: DeepSpeed binds torch.distributed.all_gather_into_tensor when it is
    # initialised (after the tracer is in) and calls c10d's directly on its coalesced path; in torch 2.13
    # the *_tensor names delegate to the *_single ones through these globals (counted once, not twice)
    from torch.distributed import distributed_c10d as c10d
    bound = dist.all_gather_into_tensor

    def c10d_globals():
        bound(torch.empty(2 * 256, **f32), torch.ones(256, **f32))  # S = 2048 B each
        c10d.all_gather_into_tensor(torch.empty(2 * 256, **f32), torch.ones(256, **f32))
        if hasattr(c10d, "all_gather_single"):
            c10d.all_gather_single(torch.empty(2 * 256, **f32), torch.ones(256, **f32))
            c10d.reduce_scatter_single(torch.empty(256, **f32), torch.ones(512, **f32))
        c10d.reduce_scatter_tensor(torch.empty(256, **f32), torch.ones(512, **f32))
    results["c10d"] = step(tracer, c10d_globals)
    results["has_single"] = hasattr(c10d, "all_gather_single")

    def gathers():
        dist.gather(torch.ones(64, **f32), [torch.empty(64, **f32) for _ in range(world)] if rank == 0 else None,
                    dst=0)  # S = 256 B x n
        dist.scatter(torch.empty(32, **f32), [torch.ones(32, **f32) for _ in range(world)] if rank == 0 else None,
                     src=0)  # S = 128 B x n
        work = dist.gather(torch.ones(16, **f32), [torch.empty(16, **f32) for _ in range(world)] if rank == 0
                           else None, dst=0, async_op=True)  # S = 64 B x n, timed by its future
        work.wait()
        dist.monitored_barrier()  # gloo's barrier that names a missing rank
    results["gathers"] = step(tracer, gathers)

    # object collectives send pickled bytes through c10d's all_gather/broadcast/gather/scatter/send/recv
    def objects():
        dist.all_gather_object([None] * world, rank)  # sizes (int64 each), then the payload padded to the largest
        dist.broadcast_object_list([{"k": 1}], src=0)  # the sizes, then the bytes
        if rank == 0:
            dist.send_object_list([[1, 2, 3]], dst=1)
        else:
            dist.recv_object_list([None], src=0)
    results["objects"] = step(tracer, objects)
    results["pickled"] = {"rank": len(pickle.dumps(rank)), "dict": len(pickle.dumps({"k": 1})),
                          "list": len(pickle.dumps([1, 2, 3]))}

    # functional collectives' autograd and coalesced forms (context/expert parallelism), old and new names
    import warnings

    import torch.distributed._functional_collectives as funcol

    def funcol_forms():
        g = dist.group.WORLD
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the *_tensor_* names are deprecated in 2.13
            outs = [funcol.all_gather_tensor_autograd(torch.ones(8, requires_grad=True), 0, g),  # 32 B x n
                    funcol.reduce_scatter_tensor_autograd(torch.ones(8, requires_grad=True), "sum", 0, g),  # 32 B
                    funcol.all_to_all_single_autograd(torch.ones(8, requires_grad=True), None, None, g),  # 32 B
                    *funcol.all_gather_into_tensor_coalesced([torch.ones(4), torch.ones(2)], g),  # 24 B x n
                    *funcol.reduce_scatter_tensor_coalesced([torch.ones(4), torch.ones(2)], "sum", [0, 0], g),
                    funcol.permute_tensor(torch.ones(3), [1, 0], g)]  # an all_to_all_single of 12 B
        for t in outs:
            funcol.wait_tensor(t)
    results["funcol_forms"] = step(tracer, funcol_forms)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
    model[0].requires_grad_(False)
    model.register_buffer("running", torch.ones(10))  # DDP broadcasts buffers before each forward
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    tracer.attach_ddp(ddp)
    results["ddp"] = step(tracer, lambda: ddp(torch.randn(8, 32)).sum().backward())
    tracer.begin_step()
    ddp(torch.randn(8, 32)).sum().backward()
    results["ddp_call_sources"] = sorted({c.source for c in tracer.end_step().calls})

    from torch.distributed.fsdp import fully_shard
    fmodel = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    for layer in fmodel:
        fully_shard(layer)
    fully_shard(fmodel)
    results["fsdp"] = step(tracer, lambda: fmodel(torch.randn(4, 32)).sum().backward())

    results["fsdp_nccl_path"] = fsdp_retention(tracer)

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (world,))
    tp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    parallelize_module(tp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    tracer.begin_step()
    tp(torch.randn(4, 16)).sum().backward()
    tp_step = tracer.end_step()
    results["tp"] = tp_step.summary()
    results["tp_sources"] = sorted({c.source for c in tp_step.calls})

    # DTensor Shard(0) -> Shard(1): on CPU torch's fallback all_gather; on an accelerator one all_to_all through
    # torch.ops._dtensor.shard_dim_alltoall, taken here on gloo by a mesh that says it is not a CPU mesh
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor
    sharded = distribute_tensor(torch.arange(24.0).reshape(4, 6), mesh, [Shard(0)])  # 2 x 6 floats a rank
    results["shard_to_shard_cpu"] = step(tracer, lambda: sharded.redistribute(mesh, [Shard(1)]).to_local())
    cpu_type = DeviceMesh.device_type
    DeviceMesh.device_type = property(lambda self: "cuda")
    try:
        tracer.begin_step()
        moved = sharded.redistribute(mesh, [Shard(1)]).to_local()
        results["shard_to_shard_accelerator"] = tracer.end_step().summary()
        results["shard_to_shard_values"] = moved.flatten().tolist()
    finally:
        DeviceMesh.device_type = cpu_type

    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    tracer.uninstall()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
