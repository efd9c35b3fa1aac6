"""The sweep's operands and checks: every operand is a formula of (rank, index), filled on the device in
chunks, and every result is checked against the formula's value at that index, also in chunks; `Case` holds
one collective's buffers at one size and form (trainer/sweep/measure.py builds and times them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .plan import CHECK_CHUNK


# Every operand is a formula of (rank, index), filled on the device in chunks, and every result is checked
# against the formula's value at that index, also in chunks: no rank holds another rank's data, and nothing
# beyond the collective's own buffers grows with the size or the rank count (nccl-tests checks the same way).

def base_value(idx: torch.Tensor) -> torch.Tensor:
    # small integers: exact in every dtype, even summed over many ranks
    return idx % 5 + 1


def contribution(redop: str, rank: int, world: int):
    """Rank's operand of a reduction at global indices idx (int64)."""
    if redop == "prod":  # 2 at one rank per index, 1 elsewhere: the product is 2 at any rank count
        return lambda idx: (idx % world == rank).long() + 1
    return lambda idx: (rank + 1) * base_value(idx)


def reduced(redop: str, world: int):
    """The reduction over every rank's contribution at idx, in closed form (float64)."""
    if redop == "prod":
        return lambda idx: torch.full(idx.shape, 2.0, dtype=torch.float64, device=idx.device)
    factor = {"sum": world * (world + 1) / 2, "min": 1.0, "max": float(world), "avg": (world + 1) / 2}[redop]
    return lambda idx: base_value(idx).double() * factor


def a2a_value(src: int, dst: int):
    """Element e of the chunk rank src sends to rank dst (within one byte's range: exact in every dtype)."""
    return lambda e: (src * 131 + dst * 17 + e) % 251 + 1


def _chunks(n: int):
    for lo in range(0, n, CHECK_CHUNK):
        yield lo, min(n, lo + CHECK_CHUNK)


def fill(buf: torch.Tensor, fn, offset: int = 0) -> None:
    """buf[i] = fn(offset + i), chunk by chunk (integers wrap as the dtype does)."""
    for lo, hi in _chunks(buf.numel()):
        idx = torch.arange(offset + lo, offset + hi, device=buf.device)
        buf[lo:hi].copy_(fn(idx))


def _tolerance(dtype: torch.dtype, world: int) -> float | None:
    """Relative tolerance for a float dtype (rounding in partial sums), None for integers (exact)."""
    if not dtype.is_floating_point:
        return None
    return torch.finfo(dtype).eps * max(2, world)


def count_wrong(out: torch.Tensor, fn, world: int, offset: int = 0) -> int:
    """Elements of out that differ from fn(offset + i), counted on out's device chunk by chunk."""
    tol = _tolerance(out.dtype, world)
    wrong = torch.zeros((), dtype=torch.int64, device=out.device)
    for lo, hi in _chunks(out.numel()):
        idx = torch.arange(offset + lo, offset + hi, device=out.device)
        expected = fn(idx).to(out.dtype)  # what the dtype can hold (integers wrapped, floats rounded)
        got = out[lo:hi]
        if tol is None:
            wrong += (got != expected).sum()
        else:
            e = expected.double()
            wrong += ((got.double() - e).abs() > tol * e.abs().clamp(min=1)).sum()
    return int(wrong)


@dataclass
class Case:
    """Buffers and callables for one op at one size and form. launch() issues one operation (async),
    prepare() puts the operands in place, check() counts this rank's wrong elements after one operation."""
    op: str
    count: int  # elements in S
    size: int  # S in bytes
    launch: Callable
    prepare: Callable
    check: Callable
