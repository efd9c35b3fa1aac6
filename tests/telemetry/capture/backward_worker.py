"""Run by tests/telemetry/capture/test_collective_backward_ranks.py under torchrun (2 gloo ranks): the collectives
functional collectives' backwards issue, and P2POps used across an install and uninstall of the tracer; writes
what the tracer saw to OUT/rank<r>.json."""
from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

from telemetry.capture.collectives import CollectiveTracer
from tests.telemetry.capture.torch_names import Funcol, backward_ones

funcol = Funcol()  # torch 2.13's *_single names, or the older ones of the same collectives


def backwards(tracer, rank: int) -> dict:
    g = dist.group.WORLD
    x = torch.ones(8, requires_grad=True)  # 32 B
    tracer.begin_step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the *_tensor_* names are deprecated in torch 2.13
        outs = [funcol.all_gather_tensor_autograd(x, 0, g),
                funcol.reduce_scatter_tensor_autograd(x, "sum", 0, g),
                # uneven: rank 0 receives 1 + 1 elements, rank 1 receives 3 + 3; each sends 1 and 3
                funcol.all_to_all_single_autograd(x[:4], [1, 1] if rank == 0 else [3, 3], [1, 3], g),
                funcol.all_reduce(x[:5], "sum", g),
                *funcol.all_gather_single_coalesced([x[:4], x[:2]], g),
                *funcol.reduce_scatter_single_coalesced([x[:4], x[:2]], "sum", [0, 0], g)]
    n_forward = len(tracer._step.calls)
    backward_ones(outs)
    step = tracer.end_step()
    for c in step.calls:
        c.resolve()
    return {"forward": [[c.op, c.nbytes] for c in step.calls[:n_forward]],
            "backward": [{"op": c.op, "bytes": c.nbytes, "group": (c.group or {}).get("name"),
                          "timed": c.duration_s is not None, "reason": c.untimed_reason}
                         for c in step.calls[n_forward:]],
            "grad": x.grad.tolist()}


def p2p_across_install(tracer, rank: int) -> dict:
    """P2POps built before install, under one tracer, used under none and under a later one."""
    peer = 1 - rank

    def ops():
        return [dist.P2POp(dist.isend, torch.full((4,), float(rank)), peer),  # 16 B
                dist.P2POp(dist.irecv, torch.empty(4), peer)]

    def run(batch):
        for w in dist.batch_isend_irecv(batch):
            w.wait()
        return batch[1].tensor.tolist()

    out = {}
    tracer.uninstall()
    before = ops()
    first = CollectiveTracer().install()
    under_first = ops()
    first.begin_step()
    out["under_first"] = run(before)
    out["first_counted"] = [c.op for c in first.end_step().calls]
    first.uninstall()
    first.begin_step()
    out["after_uninstall"] = run(under_first) + run(before)  # torch's own batch_isend_irecv, no tracer
    out["uninstalled_counted"] = [c.op for c in first.end_step().calls]
    later = CollectiveTracer().install()
    later.begin_step()
    out["under_later"] = run(under_first) + run(before)
    out["later_counted"] = [[c.op, c.nbytes] for c in later.end_step().calls]
    later.uninstall()
    tracer.install()
    return out


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tracer = CollectiveTracer().install()
    results = {"backwards": backwards(tracer, rank), "p2p": p2p_across_install(tracer, rank)}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    tracer.uninstall()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
