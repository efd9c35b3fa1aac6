"""Bandwidth formulas, in one place, as nccl-tests defines them (docs/reference.md section 2).

algbw = S / t with S the collective's data size in bytes and t the time of one operation (GB/s, 1e9).
busbw = algbw x factor(n): the per-link bandwidth a ring would need, comparable with the hardware's.

| collective      | S                                        | factor    |
| all_reduce      | count x elsize                           | 2(n-1)/n  |
| reduce_scatter  | count x elsize x n (count = per-rank out) | (n-1)/n   |
| all_gather      | count x elsize x n (count = per-rank in)  | (n-1)/n   |
| all_to_all      | count x elsize x n                       | (n-1)/n   |
| gather, scatter | count x elsize x n (count = per-rank)    | (n-1)/n   |
| broadcast, reduce, send/recv | count x elsize              | 1         |
"""
from __future__ import annotations

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather", "scatter",
       "send", "recv", "barrier")
# Every op name a step's summary can hold: the collectives above plus one coalesced send/recv batch.
RECORDED_OPS = (*OPS, "sendrecv")


def bus_factor(op: str, n: int) -> float:
    if n < 1:
        raise ValueError(f"group size must be >= 1, got {n}")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send", "recv", "sendrecv"):
        return 1.0
    if op == "barrier":
        return 0.0
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}, sendrecv")


def algbw_GBps(size_bytes: float, time_s: float | None) -> float | None:
    """GB/s (1e9 bytes), None when the time is unknown or zero."""
    if time_s is None or time_s <= 0:
        return None
    return size_bytes / time_s / 1e9


def busbw_GBps(op: str, size_bytes: float, time_s: float | None, n: int) -> float | None:
    alg = algbw_GBps(size_bytes, time_s)
    return None if alg is None else alg * bus_factor(op, n)


def sweep_sizes(lo: int, hi: int, factor: int, step: int | None = None) -> list[int]:
    """The sizes a collective sweep measures, as nccl-tests steps them: lo, then x factor (-f), or + step bytes
    (-i) when a step is given, up to hi inclusive (the harness's sweep and the readers of its table share it)."""
    if step:
        return list(range(lo, hi + 1, step))
    if lo < 1 or factor < 2:
        raise ValueError(f"a geometric sweep needs lo >= 1 and factor >= 2, got lo {lo}, factor {factor}")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def count_sweep_sizes(lo: int, hi: int, factor: int | None, step: int | None = None) -> int | None:
    """How many sizes `sweep_sizes` gives, a linear sweep's without making the list (a typo can ask for
    millions); None where no sweep steps that way (lo < 1, hi < lo, a factor under 2 without a step)."""
    if lo < 1 or hi < lo or (step is not None and step < 1) or (not step and (factor is None or factor < 2)):
        return None
    if step:
        return (hi - lo) // step + 1
    return len(sweep_sizes(lo, hi, factor))  # geometric: a few dozen at most


def sweep_pairs(hosts: list[str]) -> dict[str, tuple[int, int] | None]:
    """The pairs a sweep's send/recv pair tests measure (sweep.pairs), from each rank's host: the first two ranks
    on one host (intra_node) and the first ranks of the first two hosts (inter_node); None where the world has
    no such pair. The sweep runs them as tests named sendrecv_intra_node and sendrecv_inter_node."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    intra = next(((rs[0], rs[1]) for rs in by_host.values() if len(rs) > 1), None)
    heads = [rs[0] for rs in by_host.values()]
    return {"intra_node": intra, "inter_node": (heads[0], heads[1]) if len(heads) > 1 else None}
