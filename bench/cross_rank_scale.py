"""Telemetry's cost as the world grows: the per-step cross-rank part, run.json's hosts list, the bytes
written per step per rank, and rank 0's NCCL log parse; measured at small worlds on CPU (gloo) so that
docs/telemetry.md can model 1,024 ranks.

    python -m bench.cross_rank_scale --worlds 2 4 8 --iters 200 --out bench/results/cross_rank_scale.jsonl

1. Cross-rank methods, interleaved in one job per world (torchrun --standalone, gloo side group, a
   barrier before each timed call): the shipped tree reduction (`Telemetry.cross_rank`, with and
   without the median gather), its pipelined form (`telemetry.cross_rank_pipelined`: one step end's post,
   a tree level per step), the previous all_gather of every rank's vector, and torch's gloo
   `reduce` (two calls: MAX and SUM) for comparison. Rank 0's time is when the figures exist.
2. The tiny recipe at each world (10 steps): run.json's hosts list, bytes per step per rank in
   ranks/*.telemetry.jsonl, bytes per step in metrics.jsonl.
3. The NCCL log parser's rate on synthetic logs (to model rank 0 reading 1,024 of them).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from bench.support.sockets import open_sockets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- 1. worker (under torchrun)

def worker(iters: int, warmup: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from telemetry.capture.cross_rank import PipelinedTree, reduction_payload
    from telemetry.capture.gloo_lazy import lazy_gloo_group
    from telemetry.capture.session import REDUCED, Telemetry, TelemetrySettings

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sockets = [open_sockets()]
    t0 = time.perf_counter()
    eager = dist.new_group(backend="gloo")  # what the previous version created: a full mesh of sockets
    eager_s = time.perf_counter() - t0
    sockets.append(open_sockets())
    t0 = time.perf_counter()
    lazy_gloo_group()  # what the shipped version creates (lazy connections where torch has them)
    lazy_s = time.perf_counter() - t0
    tel = Telemetry(TelemetrySettings(nccl_debug=False, cross_rank_median_every=0))
    tel.start()
    group = tel._group
    fields = len(REDUCED)
    mine = [0.1 + 0.01 * rank + i for i in range(fields)]
    mine[3] = float("nan")  # an unknown field, as real steps have
    sockets.append(open_sockets())
    dist.barrier(group=eager)  # every rank counted before any tree connection exists
    for step in range(3):  # the tree connects each rank to its parent and children, no one else
        tel.cross_rank(mine, step)
    dist.barrier(group=eager)  # every connection accepted before counting
    sockets.append(open_sockets())
    socket_counts = {"eager group": sockets[1] - sockets[0], "side group after 3 steps": sockets[3] - sockets[2]}

    def tree():
        tel.cross_rank(mine, 1)

    def tree_median():
        tel.s.cross_rank_median_every = 1
        tel.cross_rank(mine, 1)
        tel.s.cross_rank_median_every = 0

    piped = PipelinedTree(rank, world, group, tel.tracer.original("isend"), tel.tracer.original("irecv"), fields)

    def tree_pipelined():  # one step end: post this rank's values, fold the parts its children sent a step ago
        piped.post(reduction_payload(mine, rank), False, None)

    def old_all_gather():  # the previous implementation: every rank receives every vector
        local = torch.tensor(mine, dtype=torch.float64)
        buf = torch.empty(world * fields, dtype=torch.float64)
        tel.tracer.original("all_gather_into_tensor")(buf, local, group=group)
        if rank == 0:
            rows = buf.view(world, fields).tolist()
            for i in range(fields):
                known = [(row[i], r) for r, row in enumerate(rows) if not math.isnan(row[i])]
                if known:
                    vs = [v for v, _ in known]
                    min(vs), statistics.median(vs), max(vs), max(known)[1], sum(vs)

    def gloo_reduce():  # torch's reduce: a ring inside gloo (MAX of [x, -x, rank key], SUM of [x, known])
        a = torch.tensor(mine * 3, dtype=torch.float64)
        b = torch.tensor(mine * 2, dtype=torch.float64)
        tel.tracer.original("reduce")(a, dst=0, op=dist.ReduceOp.MAX, group=group)
        tel.tracer.original("reduce")(b, dst=0, op=dist.ReduceOp.SUM, group=group)

    def hop():  # one message each way between ranks 0 and 1 (the others wait): twice the per-hop latency
        buf = torch.zeros(5 * fields, dtype=torch.float64)
        if rank == 0:
            tel.tracer.original("isend")(buf, 1, group=group).wait()
            tel.tracer.original("irecv")(buf, 1, group=group).wait()
        elif rank == 1:
            tel.tracer.original("irecv")(buf, 0, group=group).wait()
            tel.tracer.original("isend")(buf, 0, group=group).wait()

    def flat_gather():  # the obvious way to get every value to rank 0: a fan-in of world - 1 messages
        local = torch.tensor(mine, dtype=torch.float64)
        bufs = [torch.empty_like(local) for _ in range(world)] if rank == 0 else None
        tel.tracer.original("gather")(local, bufs, dst=0, group=group)

    methods = {"ping-pong 0<->1": hop, "tree": tree, "tree+median": tree_median,
               "tree, a level per step (one post)": tree_pipelined,
               "all_gather (previous)": old_all_gather,
               "gloo reduce x2": gloo_reduce, "gather to rank 0": flat_gather}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for it in range(warmup + iters):
        for name, fn in methods.items():
            dist.barrier(group=eager)
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            if it >= warmup:
                times[name].append(dt)
    piped.drain()
    rows: list = [None] * world
    dist.all_gather_object(rows, {"times": times, "eager_s": eager_s, "lazy_s": lazy_s, "sockets": socket_counts})
    if rank == 0:
        summary = {
            "world": world,
            "group_create_s": {"eager (full mesh)": rows[0]["eager_s"], "shipped (lazy)": rows[0]["lazy_s"]},
            "rank0_us": {m: {"median": statistics.median(v) * 1e6, "p90": sorted(v)[int(0.9 * len(v))] * 1e6}
                         for m, v in times.items()},
            "slowest_rank_us_median": {m: max(statistics.median(r["times"][m]) for r in rows) * 1e6 for m in methods},
            "payload_bytes": 5 * fields * 8, "vector_bytes": fields * 8,
            "sockets_per_rank": {k: [r["sockets"][k] for r in rows] for k in socket_counts},
        }
        with open(out, "w", encoding="utf-8") as f:
            json.dump(summary, f)
    tel.close()
    dist.destroy_process_group()


def run_methods(world: int, iters: int, warmup: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"methods-{world}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
           os.path.abspath(__file__), "--worker", "--iters", str(iters), "--warmup", str(warmup), "--worker-out", out]
    # the worker runs as a file: the repository on its path, so it imports bench.support as the parent does
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, timeout=600)
    with open(out, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- 2. the tiny recipe

def run_recipe(world: int, steps: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"tiny-{world}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", "-m",
           "trainer", "recipes/tiny_llama_lora.yaml", f"output_dir={out}", f"max_steps={steps}",
           "data.seq_len=128", "train.global_batch_size=16", "train.micro_batch_size=2",
           "train.eval_every_samples=null", "train.save_final=false", "train.resume=never"]
    t = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True,
                   timeout=900)
    wall = time.perf_counter() - t
    with open(os.path.join(out, "run.json"), encoding="utf-8") as f:
        info = json.load(f)
    hosts_bytes = len(json.dumps(info["hosts"], indent=2, default=str))
    rank_files = sorted(os.listdir(os.path.join(out, "ranks")))
    per_rank = []
    for name in rank_files:
        if name.endswith(".telemetry.jsonl"):
            path = os.path.join(out, "ranks", name)
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            per_rank.append(os.path.getsize(path) / len(lines))
    metrics = os.path.join(out, "metrics.jsonl")
    with open(metrics, encoding="utf-8") as f:
        m_lines = f.read().splitlines()
    last = json.loads(m_lines[-1])
    return {"world": world, "steps": steps, "wall_s": wall,
            "run_json_bytes": os.path.getsize(os.path.join(out, "run.json")),
            "hosts_list_bytes": hosts_bytes, "hosts_bytes_per_rank": hosts_bytes / world,
            "rank_jsonl_bytes_per_step_per_rank": statistics.mean(per_rank),
            "rank_jsonl_bytes_per_step_per_rank_range": [min(per_rank), max(per_rank)],
            "metrics_bytes_per_step": os.path.getsize(metrics) / len(m_lines),
            "metrics_ranks_block_bytes": len(json.dumps(last.get("ranks"))),
            "median_step_s": statistics.median(json.loads(x)["step_time_s"] for x in m_lines[2:])}


# ---------------------------------------------------------------- 3. NCCL log parse rate

def parse_rate(files: int, tmp: str) -> dict:
    """Synthetic per-rank logs shaped like NCCL INFO with INIT,NET,GRAPH,ENV on an 8-GPU RoCE node:
    a header, then per communicator 32 channels of ring and tree connection lines."""
    from telemetry.capture.nccl_log import parse_dir

    logs = os.path.join(tmp, "nccl-logs")
    os.makedirs(logs, exist_ok=True)
    for r in range(files):
        host, pid, g = f"node{r // 8:04d}", 1000 + r, r % 8
        p = f"{host}:{pid}:{pid + 1} [{g}] NCCL INFO "
        lines = [p + "NCCL version 2.21.5+cuda12.4", p + "NET/Plugin: No plugin found (libnccl-net.so)",
                 p + "NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
                 p + "Using network IB", p + "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'"]
        lines += [p + f"NCCL_{k} set by environment to {v}" for k, v in
                  (("SOCKET_IFNAME", "eth0"), ("IB_HCA", "mlx5"), ("IB_GID_INDEX", "3"), ("DEBUG_SUBSYS", "x"))]
        for comm in range(3):  # world, dp and tp communicators
            for ch in range(32):
                lines.append(p + f"Channel {ch:02d}/0 : {r}[{g}] -> {r + 1}[{(g + 1) % 8}] via P2P/IPC/read")
                lines.append(p + f"Channel {ch:02d}/0 : {r}[{g}] -> {r + 8}[{g}] [send] via NET/IB/{g % 2}/GDRDMA")
                lines.append(p + f"Channel {ch:02d}/0 : {r - 8}[{g}] -> {r}[{g}] [receive] via NET/IB/{g % 2}/GDRDMA")
            lines += [p + "Connected all rings", p + "Connected all trees",
                      p + f"comm 0x7f00{comm} rank {r} nRanks 1024 nNodes 128 localRanks 8 localRank {g} "
                      "- Init COMPLETE"]
        with open(os.path.join(logs, f"nccl.{host}.{pid}.log"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    size = sum(os.path.getsize(os.path.join(logs, n)) for n in os.listdir(logs))
    t = time.perf_counter()
    out = parse_dir(logs)
    dt = time.perf_counter() - t
    assert out["transport"] == "roce" and out["log_files"] == files
    return {"files": files, "bytes": size, "bytes_per_file": size / files, "parse_s": dt,
            "mb_per_s": size / dt / 1e6}


# ---------------------------------------------------------------- 4. CPU work per step at a large world

def cpu_costs(world: int, reps: int) -> dict:
    """What rank 0 computes per step, without the network: building and folding payloads (once per
    tree round), the figures, and the previous code's statistics over every rank's vector."""
    import timeit

    import torch

    from telemetry.capture.cross_rank import REDUCED, combine_payloads, cross_rank_figures, reduction_payload

    fields = len(REDUCED)
    rows = [[0.1 + 0.001 * r + i if (r + i) % 7 else math.nan for i in range(fields)] for r in range(world)]
    acc, other = reduction_payload(rows[0], 0), reduction_payload(rows[1], 1)
    everyone = torch.tensor(rows, dtype=torch.float64)  # what rank 0 holds after a median step's tree
    each = lambda fn: min(timeit.repeat(fn, number=reps, repeat=3)) / reps * 1e6  # noqa: E731

    def old_stats():
        for i in range(fields):
            known = [(row[i], r) for r, row in enumerate(rows) if not math.isnan(row[i])]
            vs = [v for v, _ in known]
            min(vs), statistics.median(vs), max(vs), max(known)[1], sum(vs)

    return {"world": world,
            "payload_build_us": each(lambda: reduction_payload(rows[0], 0)),
            "combine_us": each(lambda: combine_payloads(acc, other)),
            "figures_us": each(lambda: cross_rank_figures(acc, None)),
            "figures_with_median_us": each(lambda: cross_rank_figures(acc, rows)),
            "previous_rank0_stats_us": each(old_stats),
            "median_rows_tolist_us": each(lambda: everyone.tolist())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--log-files", type=int, default=64)
    p.add_argument("--skip-recipe", action="store_true")
    p.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.iters, args.warmup, args.worker_out)
        return
    result = {"benchmark": "cross_rank_scale", "date": datetime.date.today().isoformat(),
              "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "device": "cpu (gloo)",
              "load_average_at_start": os.getloadavg(), "methods": [], "recipe": [], "nccl_parse": None}
    with tempfile.TemporaryDirectory() as tmp:
        for world in args.worlds:
            m = run_methods(world, args.iters, args.warmup, tmp)
            result["methods"].append(m)
            print(f"world {world}: " + ", ".join(f"{k} {v['median']:.0f} us" for k, v in m["rank0_us"].items())
                  + f"; side group {m['group_create_s']}; sockets per rank {m['sockets_per_rank']}", flush=True)
        if not args.skip_recipe:
            for world in args.worlds:
                r = run_recipe(world, args.steps, tmp)
                result["recipe"].append(r)
                print(f"tiny recipe world {world}: hosts {r['hosts_list_bytes']} B, ranks/*.jsonl "
                      f"{r['rank_jsonl_bytes_per_step_per_rank']:.0f} B/step/rank, metrics.jsonl "
                      f"{r['metrics_bytes_per_step']:.0f} B/step", flush=True)
        result["cpu_1024"] = cpu_costs(1024, 200)
        print(f"CPU work at 1,024 ranks: {result['cpu_1024']}", flush=True)
        result["nccl_parse"] = parse_rate(args.log_files, tmp)
        print(f"NCCL log parse: {result['nccl_parse']}", flush=True)
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
