"""Run by tests/telemetry/capture/test_session_cross_rank.py under torchrun (gloo): feeds Telemetry.cross_rank
crafted per-rank values (ties, unknowns on some ranks and on all), computes the same figures the old way
(every rank's vector on rank 0), records which collectives telemetry issued, and writes OUT/rank<r>.json.
With SILENT_PEER_TIMEOUT_S set, the job's timeout is that, rank 1 never sends its first step's values (a peer
behind a cut link), and rank 0 writes how its wait on the side group ended."""
from __future__ import annotations

import datetime
import functools
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from telemetry.capture.cross_rank import REDUCED, ROWS, cross_rank_figures, reduction_payload
from telemetry.capture.session import Telemetry, TelemetrySettings

SPIED = ("all_gather_into_tensor", "all_gather_single", "all_gather", "all_gather_object", "all_reduce", "reduce",
         "gather", "gather_object", "send", "recv", "broadcast", "isend", "irecv")
STEPS = 4
MEDIAN_EVERY = 2
calls: list[dict] = []
spying = {"on": False}


def spy(name, fn):
    @functools.wraps(fn)  # the tracer binds arguments by the wrapped function's signature
    def wrapper(*args, **kwargs):
        if spying["on"]:
            tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
            nbytes = tensor.numel() * tensor.element_size() if tensor is not None else None
            calls.append({"name": name, "bytes": nbytes})
        return fn(*args, **kwargs)
    return wrapper


def crafted(rank: int, step: int) -> list[float]:
    """Multiples of 1/4 (sums are exact in any order), ties across ranks, and unknowns: field 1 on rank 0
    only at step 2, field 2 everywhere at step 3, about a third of the rest at random-looking places."""
    out = []
    for i in range(len(REDUCED)):
        v = ((rank * 7 + i * 3 + step * 5) % 4) * 0.25 + i
        if (i == 2 and step == 3) or (i == 1 and step == 2 and rank == 0) or (rank + i + step) % 3 == 0:
            v = math.nan
        out.append(v)
    return out


def old_figures(rows: list[list[float]]) -> dict:
    """The figures as computed before, from every rank's vector (the full gather)."""
    def spread(i):
        known = [(row[i], r) for r, row in enumerate(rows) if not math.isnan(row[i])]
        if not known:
            return None
        vs = [v for v, _ in known]
        return {"min": min(vs), "median": statistics.median(vs), "max": max(vs), "max_rank": max(known)[1],
                "ranks": len(vs), "sum": sum(vs)}
    return {name: spread(i) for i, name in enumerate(REDUCED)}


def silent_peer(out: str, timeout_s: float) -> None:
    settings = TelemetrySettings(nccl_debug=False)
    Telemetry.prepare_environment(settings, None, "gloo")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    rank = dist.get_rank()
    tel = Telemetry(settings, run_dir=os.path.join(out, "run"))
    tel.start()
    done = os.path.join(out, "rank0.json")
    if rank == 0:
        result = {"cross_rank_info": tel.cross_rank_info}
        began = time.monotonic()
        try:
            tel.cross_rank(crafted(rank, 1), 1)
            result["error"] = None
        except RuntimeError as exc:
            result["error"] = str(exc)[:500]
        result["waited_s"] = time.monotonic() - began
        with open(done + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f, default=lambda o: None)
        os.replace(done + ".tmp", done)
    else:  # silent until rank 0 has its answer (bounded: the test's own timeout ends a hang)
        while not os.path.exists(done):
            time.sleep(0.2)
        with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
            json.dump({"silent": True}, f)
    sys.stdout.flush()
    os._exit(0)  # no tear-down through a group that lost a peer


def main(out: str) -> None:
    settings = TelemetrySettings(nccl_debug=False, cross_rank_median_every=MEDIAN_EVERY, cross_rank_pipelined=True)
    Telemetry.prepare_environment(settings, None, "gloo")  # as the harness does, before the process group
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in SPIED:  # before the tracer installs: what it calls "original" is the spy
        if hasattr(dist, name):  # all_gather_single: torch 2.13 on
            setattr(dist, name, spy(name, getattr(dist, name)))
    tel = Telemetry(settings, run_dir=os.path.join(out, "run"))
    tel.start()
    result = {"rank": rank, "world": world, "steps": [], "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME"),
              "cross_rank_info": tel.cross_rank_info}
    for step in range(1, STEPS + 1):
        mine = crafted(rank, step)
        calls.clear()
        spying["on"] = True
        record = tel.cross_rank(mine, step)
        spying["on"] = False
        rows: list = [None] * world
        dist.all_gather_object(rows, mine)  # the reference: every vector, as the old code had it
        result["steps"].append({"step": step, "calls": list(calls), "record": record,
                                "reference": old_figures(rows) if rank == 0 else None})
    # the same values up the pipelined tree (a level per step; cross_rank.py) over the real side group: rank 0's
    # figures equal the whole tree's; in steady state one post per step, then the drain at the run's end
    piped, posts = {}, []
    world = dist.get_world_size()
    hosts = world // int(os.environ["LOCAL_WORLD_SIZE"])  # torchrun's, as the session counts hosts
    for step in range(1, STEPS + 1):
        mine = crafted(rank, step)
        per_rank = step % MEDIAN_EVERY == 0
        calls.clear()
        spying["on"] = True
        for owner, got in tel._pipeline.post(reduction_payload(mine, rank) + ([mine] if per_rank else []),
                                             per_rank, owner=step):
            median = owner % MEDIAN_EVERY == 0  # the completed step's, a level per step ago
            piped[owner] = {"at": step, "figures": cross_rank_figures(got[:ROWS], got[ROWS:] if median else None,
                                                                        world, hosts)}
        spying["on"] = False
        posts.append(list(calls))
    for owner, got in tel._pipeline.drain():
        per_rank = owner % MEDIAN_EVERY == 0
        piped[owner] = {"at": None, "figures": cross_rank_figures(got[:ROWS], got[ROWS:] if per_rank else None,
                                                                   world, hosts)}
    result["piped"], result["posts"] = piped, posts
    # a real step: the job's own all_reduce is counted, telemetry's reduction is not
    tel.start_step(STEPS + 1)
    dist.all_reduce(torch.ones(16))
    result["end_step"] = tel.end_step(STEPS + 1, 0.5)
    result["summary"] = tel.summary()
    tel.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, default=lambda o: None)
    dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("SILENT_PEER_TIMEOUT_S"):
        silent_peer(sys.argv[1], float(os.environ["SILENT_PEER_TIMEOUT_S"]))
    else:
        main(sys.argv[1])
