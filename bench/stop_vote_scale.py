"""The stop vote at scale: connections each rank opens and what a vote costs, up to 1,024 simulated ranks.

    python -m bench.stop_vote_scale --worlds 8 64 128 1024 --iters 20 --out bench/results/stop_vote_scale.jsonl

Simulated ranks: one process holds W gloo process groups, one per rank, made from one shared store on
loopback, each driven by its own thread, so the real gloo code paths (connection set-up, send/recv,
all-reduce) run at W = 1,024 on one machine. Per world:

1. Start-up: sockets opened and store look-ups made (a counting wrapper around the shared store) by
   creating the group, before (a world group connected eagerly: every pair
   at creation, as `dist.new_group(backend="gloo")` does) and now (`telemetry.capture.gloo_lazy.lazy_gloo_group`'s lazy
   connections: only a listening socket). Eager at 1,024 would need 1,024 x 1,023 sockets, beyond this
   machine's file-descriptor limit: it is skipped above --eager-max and its count is N - 1 per rank.
   An eager gloo (torch 2.7, which ignores TORCH_GLOO_LAZY_INIT) waits for and reads every rank's address:
   2 x N look-ups per rank, 2 x N^2 in all (2 million at 1,024 ranks), which is why torch 2.8 is the floor
   (trainer/torch_floor.py probes the behaviour).
2. The vote: sockets open after the first tree vote (each rank's parent and children only), and the
   time of one vote from the barrier release until the slowest rank has the answer - before (a gloo
   all-reduce MAX over the eager group, every step) and now (`trainer.stop.tree_max`). All W ranks share
   2 cores here, so every hop also waits for a CPU: the times are upper bounds for W = 1,024.
3. Per step: the vote is held about once a second of training (`trainer.stop.VOTE_INTERVAL_S`), so its
   cost per step is the vote time x votes per step, from the schedule's rule for a few step times.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import statistics
import threading
import time

import torch
import torch.distributed as dist

from bench.support.sockets import open_sockets
from trainer import stop


class Ranks:
    """W persistent threads, one per simulated rank; `run(fn)` calls fn(rank) on all and times the slowest."""

    def __init__(self, world: int):
        self.world = world
        self.fn = None
        self.start = threading.Barrier(world + 1)
        self.done = threading.Barrier(world + 1)
        self.errors: list = []
        self.threads = [threading.Thread(target=self._loop, args=(r,), daemon=True) for r in range(world)]
        for t in self.threads:
            t.start()

    def _loop(self, rank: int) -> None:
        while True:
            self.start.wait()
            if self.fn is None:
                return
            try:
                self.fn(rank)
            except Exception as exc:  # reported by run()
                self.errors.append(exc)
            self.done.wait()

    def run(self, fn) -> float:
        self.fn = fn
        t = time.perf_counter()
        self.start.wait()
        self.done.wait()
        dt = time.perf_counter() - t
        if self.errors:
            raise RuntimeError(self.errors[0])
        return dt

    def close(self) -> None:
        self.fn = None
        self.start.wait()


class CountingStore(dist.Store):
    """The shared in-process store, counting the requests gloo makes of it (a TCPStore serves the same
    requests over the network, one at a time per client, all on one server)."""

    def __init__(self):
        super().__init__()
        self.inner = dist.HashStore()
        self.ops: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def _count(self, op: str) -> None:
        with self._lock:
            self.ops[op] += 1

    def set(self, key, value):
        self._count("set")
        self.inner.set(key, value)

    def get(self, key):
        self._count("get")
        return self.inner.get(key)

    def add(self, key, value):
        self._count("add")
        return self.inner.add(key, value)

    def wait(self, keys, timeout=None):
        self._count("wait")
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def check(self, keys):
        self._count("check")
        return self.inner.check(keys)

    def compare_set(self, key, expected, desired):
        self._count("compare_set")
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key):
        self._count("delete_key")
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()

    def set_timeout(self, timeout):
        self.inner.set_timeout(timeout)

    def total(self) -> int:
        with self._lock:
            return sum(self.ops.values())


def make_groups(ranks: Ranks, lazy: bool, timeout_s: int = 300) -> tuple[list, float, int, CountingStore]:
    """One gloo group per simulated rank: (groups, seconds to create, sockets opened, the store)."""
    store = CountingStore()
    groups = [None] * ranks.world
    before = open_sockets()
    if lazy:
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
    try:
        def make(r):
            groups[r] = dist.ProcessGroupGloo(store, r, ranks.world, datetime.timedelta(seconds=timeout_s))
        seconds = ranks.run(make)
    finally:
        os.environ.pop("TORCH_GLOO_LAZY_INIT", None)
    return groups, seconds, open_sockets() - before, store


def measure(world: int, iters: int, eager_max: int) -> dict:
    ranks = Ranks(world)
    out: dict = {"world": world, "tree_depth_rounds": 2 * max(1, (world - 1).bit_length())}
    degrees = [len(c) + (p is not None) for p, c in (stop.tree_peers(r, world) for r in range(world))]
    out["tree_peers_per_rank"] = {"max": max(degrees), "mean": statistics.fmean(degrees), "rank0": degrees[0]}

    lazy, lazy_s, lazy_sockets, store = make_groups(ranks, lazy=True)
    # every group listens on one socket of its own; the rest are connections (one end per rank)
    out["now_create_s"], out["now_connections_at_start_per_rank"] = lazy_s, lazy_sockets / world - 1
    out["now_store_ops_at_start_per_rank"] = store.total() / world
    created_ops = store.total()
    opened = open_sockets()
    msgs = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]

    def tree(r):
        msgs[r].zero_()
        if r == world - 1:
            msgs[r][0] = stop.SIGTERM
        stop.tree_max(lazy[r], r, world, msgs[r], on_root=lambda m: m.__setitem__(1, 99))

    first = ranks.run(tree)
    assert all(m.tolist() == [stop.SIGTERM, 99] for m in msgs), "the vote disagreed"
    # both ends of each connection are in this process: connection sockets / world = peers per rank
    out["now_connections_after_vote_per_rank"] = (open_sockets() - opened) / world + out["now_connections_at_start_per_rank"]
    out["now_first_vote_s"] = first
    out["now_store_ops_first_vote_per_rank"] = (store.total() - created_ops) / world
    out["now_vote_s"] = statistics.median(ranks.run(tree) for _ in range(iters))

    if world <= eager_max:
        eager, eager_s, eager_sockets, eager_store = make_groups(ranks, lazy=False)
        out["before_create_s"], out["before_connections_at_start_per_rank"] = eager_s, eager_sockets / world - 1
        out["before_store_ops_at_start_per_rank"] = eager_store.total() / world
        out["before_store_ops_at_start"] = dict(eager_store.ops)
        flags = [torch.zeros(1, dtype=torch.int32) for _ in range(world)]
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX

        def allreduce(r):
            flags[r].fill_(1 if r == world - 1 else 0)
            eager[r].allreduce([flags[r]], opts).wait()

        ranks.run(allreduce)
        assert all(int(f) == 1 for f in flags)
        out["before_vote_s"] = statistics.median(ranks.run(allreduce) for _ in range(iters))
        del eager
    else:
        out["before_connections_at_start_per_rank"] = world - 1  # not run: world x (world - 1) sockets
        out["before_store_ops_at_start_per_rank"] = 2 * world + 1  # not run: a wait and a get per rank, a set
        out["before_note"] = f"eager group not created above {eager_max} simulated ranks (file descriptors)"
    ranks.close()
    # the schedule: votes per step for a few step times (VOTE_INTERVAL_S of training between votes)
    out["now_vote_cost_per_step"] = {
        f"{st}s step": out["now_vote_s"] / max(1, min(stop.MAX_VOTE_EVERY, int(stop.VOTE_INTERVAL_S / st)))
        for st in (0.1, 1.0, 10.0)}
    return out


def main(argv=None) -> None:
    import sys

    sys.setswitchinterval(1e-4)  # W threads share one interpreter: hand the GIL over quickly
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[8, 64, 128, 1024])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--eager-max", type=int, default=128)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = []
    for world in args.worlds:
        row = measure(world, args.iters, args.eager_max)
        rows.append(row)
        print(json.dumps(row))
    line = {"command": "python -m bench.stop_vote_scale " + " ".join(
                [f"--worlds {' '.join(map(str, args.worlds))}", f"--iters {args.iters}", f"--eager-max {args.eager_max}"]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
            "vote_interval_s": stop.VOTE_INTERVAL_S, "results": rows}
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
