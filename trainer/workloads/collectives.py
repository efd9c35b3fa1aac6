"""A collective sweep run by the harness itself, with nccl-tests' semantics (REFERENCE.md section 2).

For each collective and size: warm-up, barrier, then `iters` operations issued back to back under one
timer with one sync at the end; time per op combined across ranks (avg by default); algbw = S/t,
busbw = algbw x factor (telemetry/formulas.py); every result checked against the expected values.

torch's all_reduce and broadcast exist only in place, so their out-of-place block reads n/a; send/recv
uses separate buffers, so its in-place block reads n/a.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from telemetry.formulas import algbw_gbps, bus_factor

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
          "uint8": torch.uint8}
TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16",
              "int32": "int32", "int64": "int64", "int8": "int8", "uint8": "uint8"}
REDOPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
          "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
# Size S counts the whole collective's data: for these, each rank holds S/n (nccl-tests' convention).
PER_RANK_SPLIT = {"reduce_scatter", "all_gather", "all_to_all"}
FACTOR_OP = {"sendrecv": "sendrecv"}
# torch 2.13 renamed the tensor forms; older releases have only the old names
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def _pattern(n: int, device, dtype) -> torch.Tensor:
    # small integers: exact in every dtype, even after summing over many ranks
    return (torch.arange(n, device=device) % 5 + 1).to(dtype)


def _reduce_expected(values: list[torch.Tensor], redop: str) -> torch.Tensor:
    stack = torch.stack([v.double() for v in values])
    if redop == "sum":
        return stack.sum(0)
    if redop == "prod":
        return stack.prod(0)
    if redop == "min":
        return stack.min(0).values
    if redop == "max":
        return stack.max(0).values
    return stack.mean(0)


def _wrong(out: torch.Tensor, expected: torch.Tensor) -> int:
    got = out.double()
    tol = 1e-2 * expected.abs().clamp(min=1) if out.dtype in (torch.float16, torch.bfloat16) else 1e-6
    return int(((got - expected).abs() > tol).sum())


@dataclass
class Case:
    """Buffers and a launcher for one op at one size; `launch()` issues one operation (async)."""
    op: str
    count: int  # elements in S
    size: int  # S in bytes
    launch: callable
    check: callable  # -> wrong element count on this rank
    group_size: int


class Sweep:
    def __init__(self, cfg, device: torch.device, hosts: list[dict]):
        self.cfg, self.device = cfg, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dtype = DTYPES[cfg.dtype]
        self.elsize = torch.empty((), dtype=self.dtype).element_size()
        self.hosts = [h["hostname"] for h in hosts]
        self.group = None  # run_sweep gives each collective fresh communicators, as separate nccl-tests runs do

    # ------------------------------------------------------------ cases

    def case(self, op: str, size: int, in_place: bool) -> Case | None:
        n, r, dev, dt = self.world, self.rank, self.device, self.dtype
        redop = REDOPS[self.cfg.redop] if op in ("all_reduce", "reduce_scatter") else None
        if op in PER_RANK_SPLIT:
            per = max(1, size // self.elsize // n)
            count = per * n
        else:
            per = count = max(1, size // self.elsize)
        S = count * self.elsize
        contrib = [(q + 1) * _pattern(count if op != "all_gather" else per, dev, dt).double() for q in range(n)]
        if op == "all_reduce":
            if not in_place:
                return None
            buf = torch.empty(count, dtype=dt, device=dev)

            def launch():
                return dist.all_reduce(buf, op=redop, group=self.group, async_op=True)
            expected = _reduce_expected(contrib, self.cfg.redop)
            return Case(op, count, S, launch, self._checker(buf, lambda: buf.copy_(contrib[r].to(dt)), expected), n)
        if op == "broadcast":
            if not in_place:
                return None
            root = self.cfg.root % n
            buf = torch.empty(count, dtype=dt, device=dev)

            def launch():
                return dist.broadcast(buf, src=root, group=self.group, async_op=True)
            fill = (lambda: buf.copy_(contrib[root].to(dt))) if r == root else (lambda: buf.zero_())
            return Case(op, count, S, launch, self._checker(buf, fill, contrib[root]), n)
        if op == "all_gather":
            out = torch.empty(count, dtype=dt, device=dev)
            inp = out[r * per:(r + 1) * per] if in_place else torch.empty(per, dtype=dt, device=dev)

            def launch():
                return _ALL_GATHER(out, inp, group=self.group, async_op=True)
            return Case(op, count, S, launch, self._checker(out, lambda: inp.copy_(contrib[r].to(dt)),
                                                             torch.cat(contrib)), n)
        if op == "reduce_scatter":
            inp = torch.empty(count, dtype=dt, device=dev)
            out = inp[r * per:(r + 1) * per] if in_place else torch.empty(per, dtype=dt, device=dev)

            def launch():
                return _REDUCE_SCATTER(out, inp, op=redop, group=self.group, async_op=True)
            expected = _reduce_expected(contrib, self.cfg.redop)[r * per:(r + 1) * per]
            return Case(op, count, S, launch, self._checker(out, lambda: inp.copy_(contrib[r].to(dt)), expected), n)
        if op == "all_to_all":
            if in_place:
                return None  # all_to_all_single needs distinct buffers
            inp = torch.empty(count, dtype=dt, device=dev)
            out = torch.empty(count, dtype=dt, device=dev)
            # chunk j of rank q holds q*n + j + 1; after the exchange chunk j of rank r holds j*n + r + 1
            send = torch.cat([torch.full((per,), float(r * n + j + 1), dtype=torch.float64) for j in range(n)])
            expected = torch.cat([torch.full((per,), float(j * n + r + 1), dtype=torch.float64) for j in range(n)])

            def launch():
                return dist.all_to_all_single(out, inp, group=self.group, async_op=True)
            return Case(op, count, S, launch, self._checker(out, lambda: inp.copy_(send.to(dt)), expected), n)
        if op == "sendrecv":
            if in_place:
                return None
            return self._sendrecv_case(size, count, S, (r + 1) % n, (r - 1) % n, contrib)
        raise ValueError(op)

    def _sendrecv_case(self, size, count, S, peer_to, peer_from, contrib) -> Case:
        dt, dev, r = self.dtype, self.device, self.rank
        send = torch.empty(count, dtype=dt, device=dev)
        recv = torch.empty(count, dtype=dt, device=dev)

        def launch():
            ops = [dist.P2POp(dist.isend, send, peer_to, self.group), dist.P2POp(dist.irecv, recv, peer_from, self.group)]
            return dist.batch_isend_irecv(ops)
        return Case("sendrecv", count, S, launch,
                    self._checker(recv, lambda: send.copy_(contrib[r].to(dt)), contrib[peer_from]), 2)

    def _checker(self, out, fill, expected):
        fill()  # operands in place before the first launch

        def check() -> int:
            fill()
            self._wait(self._current.launch())
            return _wrong(out, expected.to(out.device))
        return check

    # ------------------------------------------------------------ timing

    def _wait(self, work) -> None:
        works = work if isinstance(work, list) else [work]
        for w in works:
            if w is not None:
                w.wait()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_case(self, case: Case, iters: int, warmup: int) -> tuple[float, int]:
        """Seconds per op on this rank, and wrong elements (-1 when not checked)."""
        self._current = case
        wrong = case.check() if self.cfg.check else -1
        for _ in range(warmup):
            self._wait(case.launch())
        self._sync()
        dist.barrier(group=self.group)
        t0 = time.perf_counter()
        works = [case.launch() for _ in range(iters)]
        for w in works:
            self._wait(w)
        self._sync()
        return (time.perf_counter() - t0) / iters, wrong

    def combine(self, seconds: float) -> float:
        """Cross-rank time as nccl-tests' -a: avg (default), min, max, or rank 0's."""
        t = torch.tensor([seconds], dtype=torch.float64, device=self.device)
        mode = self.cfg.time_reduction
        if mode == "rank0":
            dist.broadcast(t, src=0, group=self.group)
        elif mode == "avg":
            dist.all_reduce(t, group=self.group)
            t /= self.world
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MIN if mode == "min" else dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def wrong_total(self, wrong: int) -> int:
        if wrong < 0:
            return -1
        t = torch.tensor([wrong], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, group=self.group)
        return int(t.item())

    # ------------------------------------------------------------ the sweep

    def measure(self, op: str, size: int) -> dict:
        modes = {"both": (False, True), "out_of_place": (False,), "in_place": (True,)}[self.cfg.in_place]
        row: dict = {}
        for in_place in modes:
            case = self.case(op, size, in_place)
            key = "in_place" if in_place else "out_of_place"
            if case is None:
                row[key] = None
                continue
            secs, wrong = self.time_case(case, self.cfg.iters, self.cfg.warmup)
            t = self.combine(secs)
            factor_op = FACTOR_OP.get(op, op)
            row.update(size=case.size, count=case.count)
            row[key] = {"time_us": t * 1e6, "algbw_gbps": algbw_gbps(case.size, t),
                        "busbw_gbps": algbw_gbps(case.size, t) * bus_factor(factor_op, self.world),
                        "wrong": self.wrong_total(wrong)}
        return row

    def pair_time(self, a: int, b: int, size: int, iters: int) -> float:
        """Seconds per bidirectional send/recv between ranks a and b only (the others wait)."""
        count = max(1, size // self.elsize)
        result = torch.zeros(1, dtype=torch.float64, device=self.device)
        launch = None
        if self.rank in (a, b):
            peer = b if self.rank == a else a
            contrib = {q: (q + 1) * _pattern(count, self.device, self.dtype).double() for q in (a, b)}
            send = contrib[self.rank].to(self.dtype)
            recv = torch.empty(count, dtype=self.dtype, device=self.device)

            def launch():
                return dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer, self.group),
                                               dist.P2POp(dist.irecv, recv, peer, self.group)])
            for _ in range(max(self.cfg.warmup, 1)):
                self._wait(launch())
            self._sync()
        dist.barrier(group=self.group)  # both ends start their timers together
        if launch is not None:
            t0 = time.perf_counter()
            for w in [launch() for _ in range(iters)]:
                self._wait(w)
            self._sync()
            result[0] = (time.perf_counter() - t0) / iters / 2  # both ranks report: average them
        dist.all_reduce(result, group=self.group)
        dist.barrier(group=self.group)
        return float(result.item())

    def pairs(self) -> dict[str, tuple[int, int] | None]:
        """One pair of ranks on the same host and one on different hosts, where the world has them."""
        by_host: dict[str, list[int]] = {}
        for rank, host in enumerate(self.hosts):
            by_host.setdefault(host, []).append(rank)
        intra = next(((rs[0], rs[1]) for rs in by_host.values() if len(rs) > 1), None)
        heads = [rs[0] for rs in by_host.values()]
        return {"intra_node": intra, "inter_node": (heads[0], heads[1]) if len(heads) > 1 else None}

    def measure_pair(self, pair: tuple[int, int], size: int) -> dict:
        count = max(1, size // self.elsize)
        t = self.pair_time(pair[0], pair[1], count * self.elsize, self.cfg.iters)
        alg = algbw_gbps(count * self.elsize, t)
        return {"size": count * self.elsize, "count": count, "ranks": list(pair),
                "out_of_place": {"time_us": t * 1e6, "algbw_gbps": alg, "busbw_gbps": alg, "wrong": -1},
                "in_place": None}


# ---------------------------------------------------------------- tables

HEADER = ("#{:>12} {:>12} {:>8} {:>6} {:>6}  {:^33}  {:^33}\n"
          "#{:>12} {:>12} {:>8} {:>6} {:>6}  {:>8} {:>7} {:>7} {:>7}  {:>8} {:>7} {:>7} {:>7}\n"
          "#{:>12} {:>12} {:>8} {:>6} {:>6}  {:>8} {:>7} {:>7} {:>7}  {:>8} {:>7} {:>7} {:>7}").format(
    "", "", "", "", "", "out-of-place", "in-place",
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
    "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")


def _block(b: dict | None) -> str:
    if b is None:
        return f"{'n/a':>8} {'':>7} {'':>7} {'':>7}"
    wrong = "N/A" if b["wrong"] < 0 else str(b["wrong"])
    return f"{b['time_us']:>8.2f} {b['algbw_gbps']:>7.3f} {b['busbw_gbps']:>7.3f} {wrong:>7}"


def format_row(row: dict, type_name: str, redop: str, root: int) -> str:
    return (f" {row['size']:>12} {row['count']:>12} {type_name:>8} {redop:>6} {root:>6}  "
            f"{_block(row.get('out_of_place'))}  {_block(row.get('in_place'))}")


def avg_busbw(rows: list[dict]) -> float | None:
    """nccl-tests' '# Avg bus bandwidth': the mean busbw over every measured block of every size."""
    vals = [b["busbw_gbps"] for r in rows for b in (r.get("out_of_place"), r.get("in_place")) if b]
    return sum(vals) / len(vals) if vals else None


def run_sweep(cfg, device: torch.device, hosts: list[dict], say) -> dict:
    """Run every op over every size; `say` prints on rank 0. Returns the JSON-ready result."""
    from trainer.config import parse_size

    sw = Sweep(cfg, device, hosts)
    problems: list[str] = []
    lo, hi = parse_size(cfg.min_bytes, "sweep.min_bytes", problems), parse_size(cfg.max_bytes, "sweep.max_bytes", problems)
    if cfg.root >= sw.world:
        raise ValueError(f"sweep.root: got {cfg.root}; allowed: 0..{sw.world - 1} at world size {sw.world}")
    type_name = TYPE_NAMES[cfg.dtype]
    result = {"world_size": sw.world, "dtype": cfg.dtype, "redop": cfg.redop, "iters": cfg.iters,
              "warmup": cfg.warmup, "time_reduction": cfg.time_reduction, "ops": {}}
    say(f"# fabric-harness collective sweep: {sw.world} ranks on {len(set(sw.hosts))} host(s), {cfg.dtype}, "
        f"{lo} to {hi} bytes x{cfg.factor}, warm-up {cfg.warmup}, iters {cfg.iters}, time {cfg.time_reduction}")
    jobs = [(op, None) for op in cfg.ops]
    if cfg.pairs and "sendrecv" in cfg.ops:
        jobs += [(f"sendrecv_{name}", pair) for name, pair in sw.pairs().items() if pair is not None]
    backend = dist.get_backend()
    for op, pair in jobs:
        sw.group = dist.new_group(backend=backend)  # fresh connections: no state left by the previous test
        rows = []
        root = cfg.root if op == "broadcast" else -1
        redop = cfg.redop if op in ("all_reduce", "reduce_scatter") else "none"
        say(f"#\n# {op}" + (f" between ranks {pair[0]} and {pair[1]}" if pair else ""))
        say(HEADER)
        for size in sizes(lo, hi, cfg.factor):
            row = sw.measure_pair(pair, size) if pair else sw.measure(op, size)
            rows.append(row)
            say(format_row(row, type_name, redop, root))
        wrong = sum(b["wrong"] for r in rows for b in (r.get("out_of_place"), r.get("in_place")) if b and b["wrong"] > 0)
        avg = avg_busbw(rows)
        say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        say(f"# Avg bus bandwidth    : {avg:.6g}" if avg is not None else "# Avg bus bandwidth    : n/a")
        result["ops"][op] = {"rows": rows, "avg_busbw_gbps": avg, "wrong": wrong,
                             "ranks": list(pair) if pair else None}
    if cfg.latency_table:
        sw.group = dist.new_group(backend=backend)
        lat = {}
        if "all_reduce" in cfg.ops or not cfg.ops:
            case = sw.case("all_reduce", 4, True)
            lat["all_reduce_4B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0]) * 1e6
        if sw.world > 1:
            case = sw.case("sendrecv", 48, False)
            lat["sendrecv_48B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0]) * 1e6
            for name, pair in sw.pairs().items():
                if pair is not None:
                    lat[f"sendrecv_48B_{name}_us"] = sw.pair_time(pair[0], pair[1], 48, cfg.latency_iters) * 1e6
        result["latency_us"] = lat
        say("#\n# small-message latency (us): " + ", ".join(f"{k.removesuffix('_us')} {v:.2f}" for k, v in lat.items()))
    return result
