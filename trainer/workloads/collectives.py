"""A collective sweep run by the harness itself, with nccl-tests' semantics (docs/reference.md section 2).

For each collective and size: warm-up, barrier, then `iters` operations issued back to back under one
timer with one sync at the end; time per op combined across ranks (avg by default); algbw = S/t,
busbw = algbw x factor (telemetry/formulas.py); every result checked against the expected values.

The text output is the tables separate nccl-tests runs print, one run per collective (`# Collective test
starting: X_perf` ... `concluded`), so scripts written for nccl-tests read it: the parameters line, `# Using
devices` with one `#  Rank` line per rank, the three header lines, rows of 13 columns (size, count per rank,
type, redop, root, then time/algbw/busbw/#wrong out of place and in place) and the footer. torch's all_reduce
and broadcast exist only in place, and all_to_all and send/recv only out of place: the block torch lacks holds
`N/A` in each of its four columns (nccl-tests' own mark for a value it did not measure), and null in the JSON
with the reason under `missing`. telemetry/analysis/nccl_tests.py reads this text and real nccl-tests output alike.
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from telemetry.formulas import algbw_GBps, bus_factor

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
        # gloo: a second group for messages to a lower rank, so that each TCP connection carries one direction,
        # as NCCL's point-to-point connections do (both directions on one gloo socket reached ~89% of a shaped
        # link where one direction per socket reaches 97-99%; see bench/RESULTS.md, issue 11 part 7)
        self.reverse = None

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
            return self._exchange(send, peer_to, recv, peer_from)
        return Case("sendrecv", count, S, launch,
                    self._checker(recv, lambda: send.copy_(contrib[r].to(dt)), contrib[peer_from]), 2)

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
        """Fresh communicators for the next test (every rank calls this in the same order)."""
        self.group = dist.new_group(backend=backend)
        self.reverse = dist.new_group(backend=backend) if backend == "gloo" and self.world > 1 else None

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

    def time_case(self, case: Case, iters: int, warmup: int, repeats: int = 1) -> tuple[list[float], int]:
        """Seconds per op on this rank for each of `repeats` timings, and wrong elements (-1 when not checked)."""
        self._current = case
        wrong = case.check() if self.cfg.check else -1
        for _ in range(warmup):
            self._wait(case.launch())
        self._sync()
        times = []
        for _ in range(repeats):
            dist.barrier(group=self.group)  # every timing starts together
            t0 = time.perf_counter()
            works = [case.launch() for _ in range(iters)]
            for w in works:
                self._wait(w)
            self._sync()
            times.append((time.perf_counter() - t0) / iters)
        return times, wrong

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
        # S and the count per rank as nccl-tests prints them (each rank's share where S is split over the
        # ranks); set here so that a size with no form measured still has its row
        per = max(1, size // self.elsize // self.world) if op in PER_RANK_SPLIT else max(1, size // self.elsize)
        total = per * self.world if op in PER_RANK_SPLIT else per
        row: dict = {"size": total * self.elsize, "count": per, "out_of_place": None, "in_place": None}
        for in_place in modes:
            case = self.case(op, size, in_place)
            key = "in_place" if in_place else "out_of_place"
            if case is None:
                row[key] = None
                continue
            secs, wrong = self.time_case(case, self.cfg.iters, self.cfg.warmup, self.cfg.repeats)
            row[key] = _timed_block(self.combine(secs), case.size, bus_factor(FACTOR_OP.get(op, op), self.world),
                                    self.wrong_total(wrong), self.cfg.repeat_stat)
        return row

    def pair_time(self, a: int, b: int, size: int, iters: int, check: bool = False,
                  repeats: int = 1) -> tuple[list[float], int | None]:
        """Seconds per bidirectional send/recv between ranks a and b only (the others wait) for each of
        `repeats` timings, and the wrong elements both ends received (None unless `check`)."""
        count = max(1, size // self.elsize)
        result = torch.zeros(1 + repeats, dtype=torch.float64, device=self.device)  # wrong elements, seconds
        launch = None
        if self.rank in (a, b):
            peer = b if self.rank == a else a
            contrib = {q: (q + 1) * _pattern(count, self.device, self.dtype).double() for q in (a, b)}
            send = contrib[self.rank].to(self.dtype)
            recv = torch.empty(count, dtype=self.dtype, device=self.device)

            def launch():
                return self._exchange(send, peer, recv, peer)
            for _ in range(max(self.cfg.warmup, 1)):
                self._wait(launch())
            self._sync()
        for i in range(repeats):
            dist.barrier(group=self.group)  # both ends start their timers together
            if launch is not None:
                t0 = time.perf_counter()
                for w in [launch() for _ in range(iters)]:
                    self._wait(w)
                self._sync()
                result[1 + i] = (time.perf_counter() - t0) / iters / 2  # both ranks report: average them
        if launch is not None and check:
            result[0] = _wrong(recv, contrib[peer].to(recv.device))
        dist.all_reduce(result, group=self.group)  # one reduction carries every number
        dist.barrier(group=self.group)
        return [float(v) for v in result[1:].tolist()], (int(result[0].item()) if check else None)

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
        times, wrong = self.pair_time(pair[0], pair[1], count * self.elsize, self.cfg.iters,
                                      check=bool(self.cfg.check), repeats=self.cfg.repeats)
        return {"size": count * self.elsize, "count": count, "ranks": list(pair),
                "out_of_place": _timed_block(times, count * self.elsize, 1.0, wrong, self.cfg.repeat_stat),
                "in_place": None}


def _timed_block(times: list[float], size: int, factor: float, wrong: int | None, stat: str = "median") -> dict:
    """One block of a row: the median (or the shortest, `best`) of the repeated timings, and their spread
    when there were several."""
    t = min(times) if stat == "best" else statistics.median(times)
    block = {"time_us": t * 1e6, "algbw_GBps": algbw_GBps(size, t), "busbw_GBps": algbw_GBps(size, t) * factor,
             "wrong": wrong}
    if len(times) > 1:
        bws = [algbw_GBps(size, x) * factor for x in times]
        block["spread"] = {"repeats": len(times), "time_us": [x * 1e6 for x in times],
                           "busbw_min_GBps": min(bws), "busbw_max_GBps": max(bws)}
    return block


# ---------------------------------------------------------------- tables

# The layout nccl-tests prints (its src/util.cu): 5 leading columns, then two blocks of 4.
_PREFIX_W = (12, 12, 8, 6, 6)
_BLOCK_W = (7, 6, 6, 6)
_TEST_OF = {"all_reduce": "all_reduce_perf", "reduce_scatter": "reduce_scatter_perf",
            "all_gather": "all_gather_perf", "all_to_all": "alltoall_perf", "sendrecv": "sendrecv_perf",
            "broadcast": "broadcast_perf"}
# Why a block is null: torch has no such form of the collective.
MISSING = {("all_reduce", "out_of_place"): "torch's all_reduce exists only in place",
           ("broadcast", "out_of_place"): "torch's broadcast exists only in place",
           ("all_to_all", "in_place"): "all_to_all_single needs distinct input and output buffers",
           ("sendrecv", "in_place"): "send/recv uses separate send and receive buffers"}
BLOCKS_ALL = ("out_of_place", "in_place")
NA = "N/A"  # nccl-tests' mark for a value it did not measure (its #wrong without -c)


def _cells(values, widths) -> str:
    return "  ".join(f"{v:>{w}}" for v, w in zip(values, widths))


def _header_line(prefix, block) -> str:
    # '#' takes the first character of the 12-wide size column, as in nccl-tests
    line = _cells(prefix, _PREFIX_W) + "".join("  " + _cells(block, _BLOCK_W) for _ in range(2))
    return "#" + line[1:]


HEADER = "\n".join([
    "#" + " " * (sum(_PREFIX_W) + 2 * (len(_PREFIX_W) - 1) - 1 + 11) + "out-of-place" + " " * 23 + "in-place",
    _header_line(("size", "count", "type", "redop", "root"), ("time", "algbw", "busbw", "#wrong")),
    _header_line(("(B)", "(elements)", "", "", ""), ("(us)", "(GB/s)", "(GB/s)", "")).rstrip(),
])


def fit(value: float, width: int) -> str:
    """A number in `width` characters: two decimals, fewer when it is wide (as nccl-tests prints)."""
    for spec in (".2f", ".1f", ".0f"):
        text = format(value, spec)
        if len(text) <= width:
            return text
    return format(value, ".1e" if width >= 7 else ".0e")


def _block(b: dict | None) -> str:
    if b is None:
        return _cells((NA,) * 4, _BLOCK_W)
    wrong = NA if b["wrong"] is None else str(b["wrong"])
    return _cells((fit(b["time_us"], 7), fit(b["algbw_GBps"], 6), fit(b["busbw_GBps"], 6), wrong), _BLOCK_W)


def format_row(row: dict, type_name: str, redop: str, root: int) -> str:
    """One row of 13 whitespace-separated columns."""
    return (_cells((row["size"], row["count"], type_name, redop, root), _PREFIX_W)
            + f"  {_block(row.get('out_of_place'))}  {_block(row.get('in_place'))}")


def avg_busbw(rows: list[dict]) -> float | None:
    """nccl-tests' '# Avg bus bandwidth': the mean busbw over every measured block of every size."""
    vals = [b["busbw_GBps"] for r in rows for b in (r.get("out_of_place"), r.get("in_place")) if b]
    return sum(vals) / len(vals) if vals else None


def device_info(device: torch.device) -> dict:
    """This rank's device as nccl-tests' '#  Rank' line names it; CPU ranks are device -1 (none)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        ids = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        bus = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}" if None not in ids else "unknown"
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {"device": index, "bus_id": bus, "name": props.name}
    return {"device": -1, "bus_id": "cpu", "name": f"CPU {platform.machine()}".strip()}


def preamble(cfg, lo: int, hi: int, ranks: list[int], hosts: list[dict], devices: list[dict]) -> list[str]:
    """The parameters line and '# Using devices' of one nccl-tests run (one process and GPU per rank)."""
    lines = [f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: {cfg.factor}(factor) warmup iters: "
             f"{cfg.warmup} iters: {cfg.iters} agg iters: 1 validation: {int(bool(cfg.check))} graph: 0 unalign: 0",
             "#", "# Using devices"]
    for r in ranks:
        h, d = hosts[r], devices[r]
        lines.append(f"#  Rank {r:2d} Group {0:2d} Pid {h.get('pid', -1):6d} on {h['hostname']:>10} device "
                     f"{d['device']:2d} [{d['bus_id']}] {d['name']}")
    return lines + ["#"]


def footer(wrong: int | None, avg: float | None) -> list[str]:
    oob = f"{wrong} {'OK' if wrong == 0 else 'FAILED'}" if wrong is not None else f"{NA} (results not checked)"
    return [f"# {'Out of bounds values':<20} : {oob}",
            f"# {'Avg bus bandwidth':<20} : " + (f"{avg:g}" if avg is not None else NA), "#"]


def spread_line(rows: list[dict], repeats: int, stat: str = "median") -> str:
    """A comment line (nccl-tests readers skip it): busbw min-max over the repeats, per size."""
    parts = []
    for r in rows:
        for b in (r.get("out_of_place"), r.get("in_place")):
            if b and b.get("spread"):
                # three significant digits: a slow link's busbw reads 0.01 in the table's two decimals
                parts.append(f"{r['size']} {b['spread']['busbw_min_GBps']:.3g}-{b['spread']['busbw_max_GBps']:.3g}")
                break
    what = "the best" if stat == "best" else "the median"
    return f"# fabric-harness: rows are {what} of {repeats} repeats; busbw min-max (GB/s): " + ", ".join(parts)


def run_sweep(cfg, device: torch.device, hosts: list[dict], say, marks: list | None = None) -> dict:
    """Run every op over every size; `say` prints on rank 0. Returns the JSON-ready result. `marks`, when
    given, gets (op, bytes, start, end) on time.monotonic() for each row: server power per size."""
    from trainer.config import parse_size

    sw = Sweep(cfg, device, hosts)
    problems: list[str] = []
    lo, hi = parse_size(cfg.min_bytes, "sweep.min_bytes", problems), parse_size(cfg.max_bytes, "sweep.max_bytes", problems)
    if cfg.root >= sw.world:
        raise ValueError(f"sweep.root: got {cfg.root}; allowed: 0..{sw.world - 1} at world size {sw.world}")
    devices: list = [None] * sw.world
    dist.all_gather_object(devices, device_info(device))
    type_name = TYPE_NAMES[cfg.dtype]
    result = {"source": "fabric-harness", "world_size": sw.world, "dtype": cfg.dtype, "redop": cfg.redop,
              "iters": cfg.iters, "warmup": cfg.warmup, "repeats": cfg.repeats,
              "repeat_stat": cfg.repeat_stat, "time_reduction": cfg.time_reduction, "ops": {}}
    say(f"# fabric-harness collective sweep: {sw.world} ranks on {len(set(sw.hosts))} host(s), {cfg.dtype}, "
        f"{lo} to {hi} bytes x{cfg.factor}, warm-up {cfg.warmup}, iters {cfg.iters}, time {cfg.time_reduction}"
        + (f", {cfg.repeat_stat} of {cfg.repeats} repeats" if cfg.repeats > 1 else ""))
    jobs = [(op, None) for op in cfg.ops]
    if cfg.pairs and "sendrecv" in cfg.ops:
        jobs += [(f"sendrecv_{name}", pair) for name, pair in sw.pairs().items() if pair is not None]
    backend = dist.get_backend()
    for op, pair in jobs:
        sw.new_groups(backend)  # fresh connections: no state left by the previous test
        rows = []
        base = "sendrecv" if pair else op
        root = cfg.root if op == "broadcast" else -1
        redop = cfg.redop if op in ("all_reduce", "reduce_scatter") else "none"
        test = _TEST_OF[base]
        ranks = list(pair) if pair else list(range(sw.world))
        say(f"#\n# Collective test starting: {test}")
        say(f"# fabric-harness test: {op}" + (f" (ranks {pair[0]} and {pair[1]}: send/recv between this pair only)"
                                              if pair else ""))
        say("\n".join(preamble(cfg, lo, hi, ranks, hosts, devices)))
        say(HEADER)
        for size in sizes(lo, hi, cfg.factor):
            t0 = time.monotonic()
            row = sw.measure_pair(pair, size) if pair else sw.measure(op, size)
            if marks is not None:
                marks.append((op, size, t0, time.monotonic()))
            row.update(type=type_name, redop=redop, root=root)
            rows.append(row)
            say(format_row(row, type_name, redop, root))
        checked = [b["wrong"] for r in rows for b in (r.get("out_of_place"), r.get("in_place"))
                   if b and b["wrong"] is not None]
        # wrong elements the checks found; `checked` false says no check ran (the footer then reads N/A)
        wrong = sum(w for w in checked if w > 0)
        avg = avg_busbw(rows)
        say("\n".join(footer(wrong if checked else None, avg)))
        if cfg.repeats > 1:
            say(spread_line(rows, cfg.repeats, cfg.repeat_stat))
        say(f"# Collective test concluded: {test}")
        missing = {b: MISSING.get((base, b)) or f"not measured: sweep.in_place is {cfg.in_place}"
                   for b in BLOCKS_ALL if all(r.get(b) is None for r in rows)}
        notes = [] if checked else ["wrong per block: null, results not checked (sweep.check false)"]
        result["ops"][op] = {"test": test, "rows": rows, "avg_busbw_GBps": avg, "wrong": wrong,
                             "checked": bool(checked),
                             "ranks": list(pair) if pair else None, "world_size": len(ranks),
                             "devices": [{"rank": r, "host": hosts[r]["hostname"], "pid": hosts[r].get("pid"),
                                          **devices[r]} for r in ranks],
                             "missing": missing, "notes": notes}
    if cfg.latency_table:
        sw.new_groups(backend)
        lat = {}
        if "all_reduce" in cfg.ops or not cfg.ops:
            case = sw.case("all_reduce", 4, True)
            lat["all_reduce_4B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0][0]) * 1e6
        if sw.world > 1:
            case = sw.case("sendrecv", 48, False)
            lat["sendrecv_48B_us"] = sw.combine(sw.time_case(case, cfg.latency_iters, cfg.warmup)[0][0]) * 1e6
            for name, pair in sw.pairs().items():
                if pair is not None:
                    lat[f"sendrecv_48B_{name}_us"] = sw.pair_time(pair[0], pair[1], 48, cfg.latency_iters)[0][0] * 1e6
        result["latency_us"] = lat
        say("#\n# fabric-harness latency (us): "
            + ", ".join(f"{k.removesuffix('_us')} {v:.2f}" for k, v in lat.items()))
    return result

