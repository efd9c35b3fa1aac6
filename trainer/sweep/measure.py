"""A collective sweep run by the harness itself, with nccl-tests' semantics (docs/reference.md section 2).

For each collective and size: warm-up, barrier, then `iters` operations issued back to back under one
timer with one sync at the end; time per op combined across ranks (avg by default); algbw = S/t,
busbw = algbw x factor (telemetry/formulas.py); every result checked against the expected values.
Operands come from a formula of (rank, index) and results are checked against the formula on the device,
so a rank holds the collective's send and receive buffers and nothing that grows with the rank count
(trainer/sweep/plan.py says how much, and the dry run checks it against device memory).

The text output is the tables separate nccl-tests runs print, one run per collective (`# Collective test
starting: X_perf` ... `concluded`), so scripts written for nccl-tests read it: the parameters line, `# Using
devices` with one `#  Rank` line per rank, the three header lines, rows of 13 columns (size, count per rank,
type, redop, root, then time/algbw/busbw/#wrong out of place and in place) and the footer. torch's all_reduce
and broadcast exist only in place, and all_to_all and send/recv only out of place: the block torch lacks holds
`N/A` in each of its four columns (nccl-tests' own mark for a value it did not measure), and null in the JSON
with the reason under `missing`. telemetry/analysis/nccl_tests.py reads this text and real nccl-tests output alike.
"""
from __future__ import annotations

import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

from telemetry.capture.group_timeout import job_timeout
from telemetry.formulas import algbw_GBps, bus_factor, sweep_pairs
from telemetry.rundir import SWEEP_JSON, SWEEP_SIZES, SWEEP_TABLE
from telemetry.work_progress import WorkProgress

from ..error_report import InputError
from .output import (BLOCKS_ALL, HEADER, MISSING, TEST_OF, avg_busbw, describe_straggler, device_info, footer,
                     format_row, keep_earlier_record, preamble, spread_line, timed_block,
                     write_sweep_files)
from .operands import Case, a2a_value, base_value, contribution, count_wrong, fill, reduced
from .plan import count_sizes, counts, held_here, human, memory_problem, sizes, step_of, step_text

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
          "uint8": torch.uint8}
TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16",
              "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8"}
REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
          "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
HOLD_BATCH = 256  # operations in flight at once while holding a size (sweep.min_seconds_per_size)
HOLD_MAX_ITERS = 1_000_000
FACTOR_OP = {"sendrecv": "sendrecv"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")  # the ops that take sweep.redop
ROOTED = ("broadcast", "reduce", "gather", "scatter")  # the ops that take sweep.root
# torch 2.13 renamed the tensor forms; older releases have only the old names
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor




class Sweep:
    def __init__(self, cfg, device: torch.device, hosts: list[dict]):
        self.cfg, self.device = cfg, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dtype = DTYPES[cfg.dtype]
        self.elsize = torch.empty((), dtype=self.dtype).element_size()
        self.hosts = [h["hostname"] for h in hosts]
        self.group = None  # run_sweep gives each collective fresh communicators, as separate nccl-tests runs do
        # gloo: a second group for messages to a lower rank, so that each TCP connection carries one direction,
        # as NCCL's point-to-point connections do (both directions on one gloo socket reached ~89% of a shaped
        # link where one direction per socket reaches 97-99%; see bench/RESULTS.md, issue 11 part 7)
        self.reverse = None
        self.meter = None  # per-size energy/power/counter intervals (telemetry.capture.session.Telemetry.interval)
        self.size_records: list[dict] = []  # rank 0's, one per size and collective
        self.on_size = None  # rank 0: called with each size record as it is made (sweep.jsonl as it goes)
        self.sizes_planned: int | None = None  # per test: the live series' "sizes planned" (telemetry/capture)

    # ------------------------------------------------------------ cases

    def case(self, op: str, size: int, in_place: bool) -> Case | None:
        """The buffers of one op at requested size S in one form; None where torch has no such form."""
        n, r, dev, dt = self.world, self.rank, self.device, self.dtype
        per, count = counts(op, size, n, self.elsize)
        S = count * self.elsize
        redop_name = self.cfg.redop
        redop = REDOPS[redop_name] if op in REDUCING else None
        root = self.cfg.root % n
        if op == "all_reduce":
            if not in_place:
                return None
            buf = torch.empty(count, dtype=dt, device=dev)
            mine, want = contribution(redop_name, r, n), reduced(redop_name, n)
            return Case(op, count, S, lambda: dist.all_reduce(buf, op=redop, group=self.group, async_op=True),
                        lambda: fill(buf, mine), lambda: count_wrong(buf, want, n))
        if op == "broadcast":
            if not in_place:
                return None
            buf = torch.empty(count, dtype=dt, device=dev)
            src = contribution("sum", root, n)
            return Case(op, count, S, lambda: dist.broadcast(buf, src=root, group=self.group, async_op=True),
                        (lambda: fill(buf, src)) if r == root else buf.zero_, lambda: count_wrong(buf, src, n))
        if op == "all_gather":
            out = torch.empty(count, dtype=dt, device=dev)
            inp = out[r * per:(r + 1) * per] if in_place else torch.empty(per, dtype=dt, device=dev)
            # element k of the result is element k % per of rank k // per
            return Case(op, count, S, lambda: _ALL_GATHER(out, inp, group=self.group, async_op=True),
                        lambda: fill(inp, contribution("sum", r, n)),
                        lambda: count_wrong(out, lambda k: (torch.div(k, max(per, 1), rounding_mode="floor") + 1)
                                            * base_value(k % max(per, 1)), n))
        if op == "reduce_scatter":
            inp = torch.empty(count, dtype=dt, device=dev)
            out = inp[r * per:(r + 1) * per] if in_place else torch.empty(per, dtype=dt, device=dev)
            mine, want = contribution(redop_name, r, n), reduced(redop_name, n)
            return Case(op, count, S, lambda: _REDUCE_SCATTER(out, inp, op=redop, group=self.group, async_op=True),
                        lambda: fill(inp, mine), lambda: count_wrong(out, want, n, offset=r * per))
        if op == "all_to_all":
            if in_place:
                return None  # all_to_all_single needs distinct buffers
            inp = torch.empty(count, dtype=dt, device=dev)
            out = torch.empty(count, dtype=dt, device=dev)

            def prepare():
                for j in range(n):  # chunk j goes to rank j
                    fill(inp[j * per:(j + 1) * per], a2a_value(r, j))

            def check():  # chunk j came from rank j
                return sum(count_wrong(out[j * per:(j + 1) * per], a2a_value(j, r), n) for j in range(n))
            return Case(op, count, S, lambda: dist.all_to_all_single(out, inp, group=self.group, async_op=True),
                        prepare, check)
        if op == "sendrecv":
            if in_place:
                return None
            return self._exchange_case(op, count, S, (r + 1) % n, (r - 1) % n)
        if op in ("reduce", "gather", "scatter"):
            return self._rooted_case(op, count, per, S, root, in_place, redop)
        raise ValueError(op)

    def _rooted_case(self, op: str, count: int, per: int, S: int, root: int, in_place: bool, redop) -> Case | None:
        """reduce (torch's exists only in place), gather and scatter to or from `root`: only the root's
        result is checked for reduce and gather (nccl-tests' non-root receive buffers are unused), every
        rank's chunk for scatter. In place, the root's own chunk is part of the whole buffer, as in
        nccl-tests; results are zeroed before each check so a stale correct buffer cannot pass."""
        n, r, dev, dt, redop_name = self.world, self.rank, self.device, self.dtype, self.cfg.redop
        new = lambda k: torch.empty(k, dtype=dt, device=dev)  # noqa: E731
        if op == "reduce":
            if not in_place:
                return None
            buf, mine, want = new(count), contribution(redop_name, r, n), reduced(redop_name, n)
            return Case(op, count, S, lambda: dist.reduce(buf, dst=root, op=redop, group=self.group, async_op=True),
                        lambda: fill(buf, mine), (lambda: count_wrong(buf, want, n)) if r == root else (lambda: 0))
        whole = new(count) if r == root else None  # gather's result, scatter's operand: at the root only
        chunks = list(whole.view(n, per).unbind(0)) if whole is not None else None
        mine = chunks[r] if in_place and chunks is not None else new(per)  # this rank's operand or result
        if op == "gather":
            def prepare():
                if whole is not None:
                    whole.zero_()
                fill(mine, contribution("sum", r, n))
            # element k of the root's result is element k % per of rank k // per (as all_gather's)
            check = (lambda: count_wrong(whole, lambda k: (torch.div(k, max(per, 1), rounding_mode="floor") + 1)
                                         * base_value(k % max(per, 1)), n)) if whole is not None else (lambda: 0)
            return Case(op, count, S, lambda: dist.gather(mine, chunks, dst=root, group=self.group, async_op=True),
                        prepare, check)

        def scatter_prepare():
            if whole is None:
                mine.zero_()
            else:  # chunk j goes to rank j
                for j, chunk in enumerate(chunks):
                    fill(chunk, contribution("sum", j, n))
                if not in_place:
                    mine.zero_()
        return Case(op, count, S, lambda: dist.scatter(mine, chunks, src=root, group=self.group, async_op=True),
                    scatter_prepare, lambda: count_wrong(mine, contribution("sum", r, n), n))

    def _exchange_case(self, op: str, count: int, S: int, peer_to: int, peer_from: int) -> Case:
        dt, dev, r = self.dtype, self.device, self.rank
        send = torch.empty(count, dtype=dt, device=dev)
        recv = torch.empty(count, dtype=dt, device=dev)
        theirs = contribution("sum", peer_from, self.world)
        return Case(op, count, S, lambda: self._exchange(send, peer_to, recv, peer_from),
                    lambda: fill(send, contribution("sum", r, self.world)),
                    lambda: count_wrong(recv, theirs, self.world))

    def _exchange(self, send, dst: int, recv, src: int) -> list:
        """Send to dst and receive from src at once. With a reverse group each message travels on the
        group of its direction (lower to higher rank on `group`, higher to lower on `reverse`)."""
        if self.reverse is None:
            return dist.batch_isend_irecv([dist.P2POp(dist.isend, send, dst, self.group),
                                           dist.P2POp(dist.irecv, recv, src, self.group)])
        r = self.rank
        return [dist.isend(send, dst, group=self.group if r < dst else self.reverse),
                dist.irecv(recv, src, group=self.group if src < r else self.reverse)]

    def new_groups(self, backend: str) -> None:
        """Fresh communicators for the next test (every rank calls this in the same order); the previous
        test's go first, so that their buffers (NCCL's are device memory) do not add up over the tests."""
        for old in (self.group, self.reverse):
            if old is not None:
                dist.destroy_process_group(old)
        timeout = job_timeout()  # the job's, not torch's default (10 min NCCL, 30 min gloo)
        self.group = dist.new_group(backend=backend, timeout=timeout)
        self.reverse = (dist.new_group(backend=backend, timeout=timeout) if backend == "gloo" and self.world > 1
                        else None)

    # ------------------------------------------------------------ timing

    def _wait(self, work) -> None:
        works = work if isinstance(work, list) else [work]
        for w in works:
            if w is not None:
                w.wait()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_case(self, case: Case, iters: int, warmup: int, repeats: int = 1,
                  per_iter: bool = False) -> tuple[list[float], int, list[float] | None]:
        """Seconds per op on this rank for each of `repeats` timings, wrong elements (-1 when not checked),
        and with per_iter every iteration's own seconds (all repeats, in order)."""
        wrong = -1
        if self.cfg.check:
            case.prepare()
            self._wait(case.launch())
            self._sync()
            wrong = case.check()
        case.prepare()  # operands in place before the timed operations, as nccl-tests does
        for _ in range(warmup):
            self._wait(case.launch())
        self._sync()
        times, each = [], ([] if per_iter else None)
        for _ in range(repeats):
            dist.barrier(group=self.group)  # every timing starts together
            if each is None:
                t0 = time.perf_counter()
                works = [case.launch() for _ in range(iters)]
                for w in works:
                    self._wait(w)
                self._sync()
                times.append((time.perf_counter() - t0) / iters)
            else:
                total, per = self._time_each(case, iters)
                times.append(total / iters)
                each += per
        return times, wrong, each

    def _time_each(self, case: Case, iters: int) -> tuple[float, list[float]]:
        """One timed loop that also times each iteration: CUDA events between iterations on the stream
        (no host sync inside the loop, as nccl-tests -I 1), or on CPU a clock read after each completion."""
        if self.device.type == "cuda":
            events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
            t0 = time.perf_counter()
            events[0].record()
            for i in range(iters):
                self._wait(case.launch())  # on CUDA: the current stream waits for the collective, the host does not
                events[i + 1].record()
            self._sync()
            total = time.perf_counter() - t0
            return total, [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(iters)]
        marks = [time.perf_counter()]
        for _ in range(iters):
            self._wait(case.launch())
            marks.append(time.perf_counter())
        return marks[-1] - marks[0], [b - a for a, b in zip(marks, marks[1:])]

    def hold(self, case: Case, seconds_per_op: float) -> int:
        """Keep issuing the operation (untimed) until this form has run sweep.min_seconds_per_size, so that the
        power sampler reads it. Rank 0's clock decides, one tiny broadcast per batch, so every rank issues the
        same number of operations."""
        want = self.cfg.min_seconds_per_size
        if want <= 0:
            return 0
        batch = max(1, min(HOLD_BATCH, int(0.05 / max(seconds_per_op, 1e-7))))  # ~50 ms between decisions
        flag = torch.ones(1, dtype=torch.int32, device=self.device)
        t0, done = time.perf_counter(), 0
        while done < HOLD_MAX_ITERS:
            for w in [case.launch() for _ in range(batch)]:
                self._wait(w)
            self._sync()
            done += batch
            flag.fill_(int(time.perf_counter() - t0 < want))
            dist.broadcast(flag, src=dist.get_global_rank(self.group, 0) if self.group is not None else 0,
                           group=self.group)
            if not int(flag.item()):
                break
        return done

    def combine(self, seconds: float | list[float]) -> float | list[float]:
        """Cross-rank time as nccl-tests' -a: avg (default), min, max, or rank 0's (each of a list, in one call)."""
        many = isinstance(seconds, list)
        t = torch.tensor(seconds if many else [seconds], dtype=torch.float64, device=self.device)
        mode = self.cfg.time_reduction
        if mode == "rank0":
            dist.broadcast(t, src=0, group=self.group)
        elif mode == "avg":
            dist.all_reduce(t, group=self.group)
            t /= self.world
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MIN if mode == "min" else dist.ReduceOp.MAX, group=self.group)
        return [float(v) for v in t.tolist()] if many else float(t.item())

    def gather_iters(self, each: list[float]) -> list[list[float]]:
        """Every rank's per-iteration seconds, in rank order (one all-gather of iters numbers per rank)."""
        mine = torch.tensor(each, dtype=torch.float64, device=self.device)
        out = torch.empty(self.world * len(each), dtype=torch.float64, device=self.device)
        _ALL_GATHER(out, mine, group=self.group)
        rows = out.view(self.world, len(each)).tolist()
        return rows

    def wrong_total(self, wrong: int) -> int | None:
        """Wrong elements summed over ranks; None when not checked (sweep.check false)."""
        if wrong < 0:
            return None
        t = torch.tensor([wrong], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, group=self.group)
        return int(t.item())

    # ------------------------------------------------------------ the sweep

    def measure(self, op: str, size: int) -> dict:
        modes = {"both": (False, True), "out_of_place": (False,), "in_place": (True,)}[self.cfg.in_place]
        per, total = counts(op, size, self.world, self.elsize)
        row: dict = {"size": total * self.elsize, "count": per, "requested_bytes": size,
                     "out_of_place": None, "in_place": None}
        held, t_size = 0, time.perf_counter()
        for in_place in modes:
            key = "in_place" if in_place else "out_of_place"
            case = self.case(op, size, in_place)
            if case is None:
                continue
            secs, wrong, each = self.time_case(case, self.cfg.iters, self.cfg.warmup, self.cfg.repeats,
                                               self.cfg.per_iter_timing)
            combined = self.combine(secs)
            row[key] = timed_block(combined, case.size, bus_factor(FACTOR_OP.get(op, op), self.world),
                                    self.wrong_total(wrong), self.cfg.repeat_stat)
            if each is not None:
                row[key]["per_iter"] = iteration_stats(self.gather_iters(each), self.cfg.per_iter_skip)
            if held_here(self.cfg, size):  # sweep.power_sizes: only the sizes whose power is read
                held += self.hold(case, row[key]["time_us"] / 1e6)
            del case  # this form's buffers go before the next form's (or the next size's) are made
        self._record_size(op, row, held, time.perf_counter() - t_size)
        return row

    def _record_size(self, op: str, row: dict, held: int, seconds: float) -> None:
        """Energy, power and NIC/RDMA counters over this size (every rank's, gathered to rank 0)."""
        if self.meter is None:
            return
        mine = {"rank": self.rank, "host": self.hosts[self.rank], **self.meter.interval()}
        every: list = [None] * self.world
        dist.all_gather_object(every, mine, group=self.group)
        if self.rank == 0:
            self.size_records.append({**size_record(op, row, held, seconds, every),
                                      "sizes_planned": self.sizes_planned})
            if self.on_size is not None:
                self.on_size(self.size_records[-1])

    def pair_time(self, a: int, b: int, size: int, iters: int, check: bool = False,
                  repeats: int = 1) -> tuple[list[float], int | None]:
        """Seconds per bidirectional send/recv between ranks a and b only (the others wait) for each of
        `repeats` timings, and the wrong elements both ends received (None unless `check`)."""
        count = size // self.elsize
        result = torch.zeros(1 + repeats, dtype=torch.float64, device=self.device)  # wrong elements, seconds
        case = None
        if self.rank in (a, b):
            peer = b if self.rank == a else a
            case = self._exchange_case("sendrecv", count, count * self.elsize, peer, peer)
            case.prepare()
            for _ in range(max(self.cfg.warmup, 1)):
                self._wait(case.launch())
            self._sync()
        for i in range(repeats):
            dist.barrier(group=self.group)  # both ends start their timers together
            if case is not None:
                t0 = time.perf_counter()
                for w in [case.launch() for _ in range(iters)]:
                    self._wait(w)
                self._sync()
                result[1 + i] = (time.perf_counter() - t0) / iters / 2  # both ranks report: average them
        if case is not None and check:
            result[0] = case.check()
        del case
        dist.all_reduce(result, group=self.group)  # one reduction carries every number
        dist.barrier(group=self.group)
        return [float(v) for v in result[1:].tolist()], (int(result[0].item()) if check else None)

    def pairs(self) -> dict[str, tuple[int, int] | None]:
        """One pair of ranks on the same host and one on different hosts, where the world has them."""
        return sweep_pairs(self.hosts)

    def measure_pair(self, pair: tuple[int, int], size: int, test: str) -> dict:
        """Send/recv between `pair` only; sweep.jsonl's line names `test` (sendrecv_intra_node, ...), as
        collectives.json, watch and the live series' op label do."""
        count = size // self.elsize
        t_size = time.perf_counter()
        times, wrong = self.pair_time(pair[0], pair[1], count * self.elsize, self.cfg.iters,
                                      check=bool(self.cfg.check), repeats=self.cfg.repeats)
        row = {"size": count * self.elsize, "count": count, "requested_bytes": size, "ranks": list(pair),
               "out_of_place": timed_block(times, count * self.elsize, 1.0, wrong, self.cfg.repeat_stat),
               "in_place": None}
        self._record_size(test, row, 0, time.perf_counter() - t_size)
        return row

    def p2p_matrix(self, size: int, latency_bytes: int = 4) -> dict:
        """Bandwidth (at `size`) and latency (at `latency_bytes`) of a bidirectional send/recv between every
        pair of ranks, one pair at a time (nvbandwidth's and p2pBandwidthLatencyTest's matrix, over NCCL).
        NCCL_P2P_DISABLE decides whether NVLink/PCIe peer access carries it: run once with and once without."""
        n = self.world
        bw = [[None] * n for _ in range(n)]
        lat = [[None] * n for _ in range(n)]
        wrong = 0
        count = size // self.elsize
        for a in range(n):
            for b in range(a + 1, n):
                t, w = self.pair_time(a, b, count * self.elsize, self.cfg.iters, check=bool(self.cfg.check))
                bw[a][b] = bw[b][a] = algbw_GBps(count * self.elsize, t[0])
                wrong += w or 0
                t, _ = self.pair_time(a, b, latency_bytes, self.cfg.latency_iters)
                lat[a][b] = lat[b][a] = t[0] * 1e6
        return {"size": count * self.elsize, "latency_bytes": latency_bytes, "bandwidth_GBps": bw, "latency_us": lat,
                "wrong": wrong if self.cfg.check else None,
                "p2p_disabled": os.environ.get("NCCL_P2P_DISABLE", "0") not in ("", "0"),
                "shm_disabled": os.environ.get("NCCL_SHM_DISABLE", "0") not in ("", "0"),
                "method": "bidirectional send/recv between the pair only, the other ranks waiting; bandwidth is "
                          "bytes per direction / time per exchange"}


def iteration_stats(rows: list[list[float]], skip: int = 0) -> dict:
    """nccl-tests' per-iteration report from every rank's per-iteration seconds: times_us is the slowest
    rank's time per iteration; min/max/avg/p50/p95/p99 (nearest rank)/stdev/cv over times_us after `skip`
    iterations; per_process_max_times_us keeps each rank's own row (one process per rank here)."""
    times = [max(col) for col in zip(*rows)]
    summary = sorted(times[skip:])
    n = len(summary)
    avg = sum(summary) / n
    stdev = math.sqrt(sum((t - avg) ** 2 for t in summary) / n)

    def pct(p: int) -> float:
        return summary[min(n - 1, (n * p + 99) // 100 - 1)]
    out = {"skipped_iterations": skip, "min_us": summary[0] * 1e6, "max_us": summary[-1] * 1e6, "avg_us": avg * 1e6,
           "p50_us": summary[n // 2] * 1e6, "p95_us": pct(95) * 1e6, "p99_us": pct(99) * 1e6,
           "stdev_us": stdev * 1e6, "cv_pct": stdev / avg * 100 if avg > 0 else 0.0,
           "times_us": [t * 1e6 for t in times]}
    if len(rows) > 1:
        out["per_process_max_times_us"] = [[t * 1e6 for t in r] for r in rows]
    return out


def size_record(op: str, row: dict, held: int, seconds: float, every: list[dict]) -> dict:
    """One line of sweep.jsonl: the size's numbers and every rank's energy/power/counter interval, with totals."""
    def total(key):
        vals = [r.get(key) for r in every]
        known = [v for v in vals if v is not None]
        return sum(known) if known else None
    blocks = {b: {k: row[b][k] for k in ("time_us", "algbw_GBps", "busbw_GBps", "wrong")}
              for b in ("out_of_place", "in_place") if row.get(b)}
    power = [r.get("gpu_power_w") for r in every]
    rec = {"op": op, "size": row["size"], "requested_bytes": row.get("requested_bytes"), "count": row["count"],
           **blocks, "seconds": seconds, "hold_iterations": held,
           "gpu_energy_j": total("gpu_energy_j"), "gpu_power_w_sum": total("gpu_power_w"),
           "gpu_power_w": power, "cpu_energy_j": total("cpu_energy_j"),
           "tx_bytes": total("tx_bytes"), "rx_bytes": total("rx_bytes"),
           "rdma_tx_bytes": total("rdma_tx_bytes"), "rdma_rx_bytes": total("rdma_rx_bytes"),
           "loss_events": total("loss_events"), "ranks": every}
    reasons = {r.get("gpu_energy_reason") or r.get("gpu_power_reason") for r in every} - {None}
    if rec["gpu_energy_j"] is None or None in power:
        rec["gpu_reason"] = "; ".join(sorted(reasons)) or "not read"
    return rec


def stragglers(op: str, rows: list[dict], hosts: list[str], threshold_pct: float, ranks: list[int]) -> list[dict]:
    """Per size and form: the slowest rank (and its host) when its mean iteration time exceeds the fastest
    rank's by more than threshold_pct, from per_process_max_times_us; a host whose ranks are all slower
    than every other host's is named a slow node."""
    found = []
    for row in rows:
        for form in ("out_of_place", "in_place"):
            per = (row.get(form) or {}).get("per_iter", {}).get("per_process_max_times_us")
            if not per or len(per) < 2:
                continue
            means = [sum(t) / len(t) for t in per]
            slow = max(range(len(means)), key=means.__getitem__)
            fast = min(range(len(means)), key=means.__getitem__)
            if means[fast] <= 0 or (means[slow] - means[fast]) / means[fast] * 100 <= threshold_pct:
                continue
            by_host: dict[str, list[float]] = {}
            for i, m in enumerate(means):
                by_host.setdefault(hosts[ranks[i]], []).append(m)
            host = hosts[ranks[slow]]
            others = [m for h, ms in by_host.items() if h != host for m in ms]
            slow_node = bool(others) and min(by_host[host]) > max(others)
            found.append({"op": op, "size": row["size"], "form": form, "rank": ranks[slow], "host": host,
                          "mean_us": means[slow], "fastest_rank": ranks[fast], "fastest_mean_us": means[fast],
                          "excess_pct": (means[slow] - means[fast]) / means[fast] * 100, "slow_node": slow_node})
    return found


def _device_memory(cfg, device: torch.device) -> tuple[int, str]:
    """The memory the largest size must fit in, and what it is: sweep.device_memory, the CUDA device's
    total, or on CPU the host's memory shared by the ranks on it."""
    from trainer.sweep.plan import parse_size

    if cfg.device_memory is not None:
        return parse_size(cfg.device_memory, "sweep.device_memory", [], limit=1 << 40), "sweep.device_memory"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.total_memory, f"{props.name} (device {device.index})"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total // local, f"this host's memory shared by {local} local rank(s)"


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class MemoryWatch:
    """This rank's peak memory over the sweep: CUDA's allocator peak on GPUs; on CPU the growth of the
    process's resident set (its high-water mark at the end minus its size at the start)."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            self.start = torch.cuda.memory_allocated(device)
        else:
            self.start = _rss_bytes()

    def result(self) -> dict:
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device=self.device)
            return {"peak_bytes": peak - self.start, "how": "torch.cuda.max_memory_allocated - allocated at start"}
        high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        if self.start is None:
            return {"peak_bytes": None, "how": "/proc/self/statm unreadable"}
        return {"peak_bytes": max(0, high - self.start), "how": "ru_maxrss at the end - resident set at the start"}


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")  # nccl-tests' start_time/end_time format (local time)


# what the sweep is measuring now ("broadcast of 1.0 MiB"), for a failure's one line (trainer/run.py): without it a
# collective that timed out in the sweep was said to be "at start-up" (no training step), and the sweep's
# broadcast of 1 MiB at 1mbit (8 s) under distributed.timeout_s=6 read as rank 0 not answering
POSITION: dict[str, str] = {}


def sweep_position() -> str | None:
    """The sweep's case in progress, or None outside one."""
    return POSITION.get("now")


def run_sweep(cfg, device: torch.device, hosts: list[dict], say, meter=None, marks: list | None = None,
              on_size=None) -> dict:
    """Run every op over every size; `say` prints on rank 0. Returns the JSON-ready result. `meter`: a
    started telemetry session (meters only) read once per size; rank 0 hands each size's record to `on_size`
    as it is made. `marks`, when given, gets (op, bytes, start, end) on time.monotonic() for each row: server
    power per size."""
    from trainer.sweep.plan import parse_size, root_problem

    sw = Sweep(cfg, device, hosts)
    sw.meter, sw.on_size = meter, on_size
    problems: list[str] = []
    lo = parse_size(cfg.min_bytes, "sweep.min_bytes", problems)
    hi = parse_size(cfg.max_bytes, "sweep.max_bytes", problems)
    step = step_of(cfg, problems)
    if problem := root_problem(cfg.root, sw.world):
        raise InputError(problem)
    if "p2p_matrix" in cfg.ops and device.type != "cuda":
        raise InputError(f"sweep.ops: p2p_matrix measures GPU pairs over NCCL and needs CUDA devices; this run is on "
                         f"{device.type} ({dist.get_backend()}); allowed: the other ops on CPU")
    memory, what = _device_memory(cfg, device)
    problem = memory_problem(cfg.ops, hi, sw.world, cfg.dtype, cfg.in_place, memory, what,
                             reserve=(1 << 30) if device.type == "cuda" else 0)
    if problem:
        raise InputError(problem)
    watch = MemoryWatch(device)
    devices: list = [None] * sw.world
    dist.all_gather_object(devices, device_info(device))
    result = {"source": "fabric-harness", "world_size": sw.world, "dtype": cfg.dtype, "redop": cfg.redop,
              "iters": cfg.iters, "warmup": cfg.warmup, "repeats": cfg.repeats,
              "repeat_stat": cfg.repeat_stat, "time_reduction": cfg.time_reduction, "min_bytes": lo, "max_bytes": hi,
              "factor": cfg.factor, "step_bytes": step, "per_iter_timing": cfg.per_iter_timing, "per_iter_skip": cfg.per_iter_skip,
              "min_seconds_per_size": cfg.min_seconds_per_size, "backend": dist.get_backend(), "ops": {}}
    say(f"# fabric-harness collective sweep: {sw.world} ranks on {len(set(sw.hosts))} host(s), {cfg.dtype}, "
        f"{lo} to {hi} bytes {step_text(cfg.factor, step)}, warm-up {cfg.warmup}, iters {cfg.iters}, time {cfg.time_reduction}"
        + (f", {cfg.repeat_stat} of {cfg.repeats} repeats" if cfg.repeats > 1 else ""))
    jobs = [(op, None) for op in cfg.ops if op != "p2p_matrix"]
    if sw.world == 1 and "sendrecv" in cfg.ops:  # a ring of one sends to itself: gloo has no such pair
        jobs.remove(("sendrecv", None))
        say("# fabric-harness: sendrecv skipped: it needs at least 2 ranks (this world has 1)")
        result["skipped"] = {"sendrecv": "needs at least 2 ranks"}
    if cfg.pairs and "sendrecv" in cfg.ops:
        jobs += [(f"sendrecv_{name}", pair) for name, pair in sw.pairs().items() if pair is not None]
    backend = dist.get_backend()
    # on stderr: stdout is the nccl-tests table
    sw.sizes_planned = count_sizes(lo, hi, cfg.factor, step)
    progress = WorkProgress("sweep", len(jobs) * sw.sizes_planned, "sizes", sys.stderr,
                        sw.rank == 0, plain_every_s=30).start()
    for op, pair in jobs:
        # (said, not the previous test's last size: a timeout here is the groups' set-up)
        POSITION["now"] = f"new process groups for its {op} test"
        sw.new_groups(backend)  # fresh connections: no state left by the previous test
        result["ops"][op] = _one_test(sw, cfg, op, pair, (lo, hi, step), hosts, devices, say, marks, progress)
    progress.close()
    if "p2p_matrix" in cfg.ops:
        POSITION["now"] = f"p2p matrix ({human(hi)} send/recv between each pair of GPUs)"
        sw.new_groups(backend)
        result["p2p_matrix"] = _p2p_matrix(sw, hi, say)
    if cfg.latency_table:
        POSITION["now"] = "the latency table (4 B all_reduce, 48 B send/recv)"
        sw.new_groups(backend)
        result["latency_us"] = _latency(sw, cfg, say)
    # the closing exchanges (peak memory here, each host's evidence in the job) are no size's call either
    POSITION["now"] = "the closing exchange after the last test (each rank's peak memory and host evidence)"
    mem: list = [None] * sw.world
    dist.all_gather_object(mem, {"rank": sw.rank, **watch.result()})
    result["memory"] = {"per_rank": mem, "device_memory_bytes": memory, "device_memory_is": what}
    result["sizes"] = sw.size_records if sw.rank == 0 else []
    return result


def _one_test(sw: Sweep, cfg, op: str, pair, bounds: tuple[int, int], hosts: list[dict], devices: list,
              say, marks: list | None, progress: WorkProgress | None = None) -> dict:
    """One nccl-tests run: every size of `op` (or send/recv between `pair` only), its table and its JSON."""
    lo, hi, step = bounds
    type_name = TYPE_NAMES[cfg.dtype]
    rows = []
    started = _stamp()
    base = "sendrecv" if pair else op
    root = cfg.root if op in ROOTED else -1
    redop = cfg.redop if op in REDUCING else "none"
    test = TEST_OF[base]
    ranks = list(pair) if pair else list(range(sw.world))
    say(f"#\n# Collective test starting: {test}")
    say(f"# fabric-harness test: {op}" + (f" (ranks {pair[0]} and {pair[1]}: send/recv between this pair only)"
                                          if pair else ""))
    say("\n".join(preamble(cfg, lo, hi, ranks, hosts, devices, step)))
    say(HEADER)
    for size in sizes(lo, hi, cfg.factor, step):
        t0 = time.monotonic()
        # "(N bytes)" marks a size's call for describe_timeout's advice on one call of a size; a pair's ranks after it
        POSITION["now"] = f"{op} of {human(size)} ({size} bytes)" + (f" between ranks {pair[0]} and {pair[1]}" if pair else "")
        row = sw.measure_pair(pair, size, op) if pair else sw.measure(op, size)
        if marks is not None:
            marks.append((op, size, t0, time.monotonic()))
        row.update(type=type_name, redop=redop, root=root)
        rows.append(row)
        say(format_row(row, type_name, redop, root))
        if progress is not None:
            progress.advance(note=f"{op} {human(size)}")
    checked = [b["wrong"] for r in rows for b in (r.get("out_of_place"), r.get("in_place"))
               if b and b["wrong"] is not None]
    # wrong elements the checks found; `checked` false says no check ran (the footer then reads N/A)
    wrong = sum(w for w in checked if w > 0)
    avg = avg_busbw(rows)
    say("\n".join(footer(wrong if checked else None, avg)))
    if cfg.repeats > 1:
        say(spread_line(rows, cfg.repeats, cfg.repeat_stat))
    slow = stragglers(op, rows, sw.hosts, cfg.straggler_pct, ranks) if cfg.per_iter_timing else []
    for s in slow:
        say(f"# fabric-harness straggler: {describe_straggler(s)}")
    say(f"# Collective test concluded: {test}")
    missing = {b: MISSING.get((base, b)) or f"not measured: sweep.in_place is {cfg.in_place}"
               for b in BLOCKS_ALL if all(r.get(b) is None for r in rows)}
    notes = [] if checked else ["wrong per block: null, results not checked (sweep.check false)"]
    if any(r["count"] == 0 for r in rows):
        notes.append("count 0: a requested size below ranks x element size (or one element) moves no data; "
                     "nccl-tests runs and prints these rows the same way (size 0)")
    return {"test": test, "rows": rows, "avg_busbw_GBps": avg, "wrong": wrong,
                         "checked": bool(checked),
                         "ranks": list(pair) if pair else None, "world_size": len(ranks),
                         "devices": [{"rank": r, "host": hosts[r]["hostname"], "pid": hosts[r].get("pid"),
                                      **devices[r]} for r in ranks],
                         "missing": missing, "notes": notes, "stragglers": slow,
                         "start_time": started, "end_time": _stamp()}


def _p2p_matrix(sw: Sweep, hi: int, say) -> dict:
    """GPU pairs' bandwidth and latency, as a table on stdout."""
    m = sw.p2p_matrix(hi)
    say(f"#\n# fabric-harness p2p matrix: {human(m['size'])} send/recv per pair, P2P "
        f"{'off' if m['p2p_disabled'] else 'on'} (NCCL_P2P_DISABLE), GB/s per direction | latency us at 4 B")
    for a in range(sw.world):
        say(f"#  {a:3d}  " + "  ".join("     -" if b == a else f"{m['bandwidth_GBps'][a][b]:6.2f}"
                                       for b in range(sw.world)) + "  |  " +
            "  ".join("     -" if b == a else f"{m['latency_us'][a][b]:6.1f}" for b in range(sw.world)))
    return m


def _latency(sw: Sweep, cfg, say) -> dict:
    """The latency table fabric evaluations report: a 4 B all-reduce and 48 B send/recv (per pair too)."""
    lat = {}
    if "all_reduce" in cfg.ops or not cfg.ops:
        case = sw.case("all_reduce", 4, True)
        lat["all_reduce_4B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0][0]) * 1e6
        del case
    if sw.world > 1:
        case = sw.case("sendrecv", 48, False)
        lat["sendrecv_48B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0][0]) * 1e6
        del case
        for name, pair in sw.pairs().items():
            if pair is not None:
                lat[f"sendrecv_48B_{name}_us"] = sw.pair_time(pair[0], pair[1], 48, cfg.latency_iters)[0][0] * 1e6
    say("#\n# fabric-harness latency (us): "
        + ", ".join(f"{k.removesuffix('_us')} {v:.2f}" for k, v in lat.items()))
    return lat


def run_job(recipe, rec, device: torch.device) -> dict:
    """The sweep as a job (recipe.job == "sweep"), driven by the run's recorder (telemetry/integrations/recorder.py)
    after the process group exists. A collective sweep: the nccl-tests table on stdout and in collectives.txt
    (as it is measured), numbers in collectives.json, nccl-tests' JSON per collective in nccl-tests/,
    energy/power/counters per size in sweep.jsonl."""
    rec.start_capture(trace=False)  # meters only (energy, power, counters): the sweep times its own calls
    rundir = rec.rundir
    if rundir.rank == 0:  # a rerun: the earlier attempt's record is kept whole, not mixed with this one's
        keep_earlier_record(rundir.path, rec.attempt)
    # rank 0's table goes to the run directory line by line, as nccl-tests' output goes to a job's log: `telemetry
    # watch` follows it, and a sweep that fails or is killed at its 20th size keeps the 19 it measured
    # (and each size's energy, power and counters to sweep.jsonl: the end rewrites it with the transport)
    table = open(os.path.join(rundir.path, SWEEP_TABLE), "w", encoding="utf-8") if rundir.rank == 0 else None
    per_size = open(os.path.join(rundir.path, SWEEP_SIZES), "w", encoding="utf-8") if rundir.rank == 0 else None

    def say(text: str) -> None:
        if table is not None:
            print(text, flush=True)
            table.write(text + "\n")
            table.flush()

    def on_size(record: dict) -> None:
        per_size.write(json.dumps(record) + "\n")
        per_size.flush()
    POSITION.pop("now", None)  # a position an earlier sweep in this process left is not this one's
    try:
        swept = _sweep_job(recipe, rec, device, say, on_size if per_size is not None else None)
    finally:
        for f in (table, per_size):
            if f is not None:
                f.close()
    # cleared only when the sweep ends well: on a failure trainer/run.py's handler, which runs after this
    # function has returned, names the case from it (a `finally` here cleared it first: "at start-up" again)
    POSITION.pop("now", None)
    return swept


def _sweep_job(recipe, rec, device: torch.device, say, on_size) -> dict:
    from telemetry.capture.counters import merge_verdicts
    from telemetry.capture.environment import host_info

    from ..run_writer import write_json_atomic

    rundir, hosts, telemetry, swept = rec.rundir, rec.hosts, rec.telemetry, {}
    tel = recipe.telemetry
    evidence = None
    if tel.enabled and int(os.environ.get("LOCAL_RANK", "0")) == 0:  # host-wide: one reader per host
        from telemetry.capture.sweep_evidence import SweepEvidence
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
        evidence = SweepEvidence(tel.bmc, tel.bmc_chassis, tel.bmc_sample_interval_s, tel.interfaces,
                                 ethtool=tel.ethtool, host=host_info()["hostname"], first_host=dist.get_rank() == 0,
                                 hosts=max(1, dist.get_world_size() // local)
                                 if local and dist.get_world_size() % local == 0 else None)
    result = run_sweep(recipe.sweep, device, hosts, say, meter=telemetry if telemetry and telemetry.started else None,
                       marks=evidence.marks if evidence is not None else None, on_size=on_size)
    rec.check_fabric(final=False)  # NCCL's communicators exist now: record and check the transport
    per_host: list = [None] * dist.get_world_size()
    dist.all_gather_object(per_host, {"host": host_info()["hostname"], **evidence.finish()} if evidence else None)
    result["hosts_evidence"] = [h for h in per_host if h is not None]
    if rundir.rank == 0:
        result["fabric"] = {k: rundir.info["fabric"].get(k) for k in ("backend", "transport", "force_network")}
        write_json_atomic(os.path.join(rundir.path, SWEEP_JSON), result)
        write_sweep_files(rundir.path, result, rundir.info.get("command") or [], rundir.info.get("environment") or {},
                          rundir.info["software"].get("nccl") if device.type == "cuda" else None)
        if result["hosts_evidence"]:  # the sweep's loss verdict over every host, and each host's server power
            verdict = None
            for h in result["hosts_evidence"]:
                c = h["counters"]
                named = {**c, "counts": {f"{h['host']}:{k}": v for k, v in c.get("counts", {}).items()},
                         "reordering": {f"{h['host']}:{k}": v for k, v in c.get("reordering", {}).items()}}
                verdict = merge_verdicts(verdict, named)
            swept = {"counters": verdict,
                     "server_power": {h["host"]: h["server_power"] for h in result["hosts_evidence"]}}
            rundir.update(telemetry={"enabled": True, **swept})
        rundir.update(final={"avg_busbw_GBps": {op: r["avg_busbw_GBps"] for op, r in result["ops"].items()},
                             "wrong": sum(r["wrong"] for r in result["ops"].values()),
                             "latency_us": result.get("latency_us")})
    return swept  # every host's verdict and server power: the run's telemetry summary takes them
