"""busbw/algbw against hand-computed values (nccl-tests definitions)."""
from __future__ import annotations

import pytest

from telemetry.formulas import algbw_GBps, bus_factor, busbw_GBps


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_reduce", 1, 0.0),
    ("reduce_scatter", 4, 0.75), ("all_gather", 64, 63 / 64), ("all_to_all", 2, 0.5),
    ("broadcast", 8, 1.0), ("sendrecv", 2, 1.0), ("barrier", 8, 0.0),
])
def test_bus_factors(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_bandwidths_by_hand():
    # 1 GiB all-reduce over 8 ranks in 10 ms: algbw 107.37 GB/s, busbw x 1.75 = 187.90 GB/s
    assert algbw_GBps(2**30, 0.010) == pytest.approx(107.374182, rel=1e-6)
    assert busbw_GBps("all_reduce", 2**30, 0.010, 8) == pytest.approx(187.904819, rel=1e-6)
    # not 2S/t: the mistake docs/reference.md section 2 warns about
    assert algbw_GBps(1e9, 1.0) == 1.0
    assert algbw_GBps(1e9, None) is None and algbw_GBps(1e9, 0.0) is None


def test_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        bus_factor("allreduce", 2)


def test_a_sweeps_sizes_follow_nccl_tests_rule_and_are_counted_without_a_list():
    from telemetry.formulas import count_sweep_sizes, sweep_sizes

    assert sweep_sizes(8, 64, 2) == [8, 16, 32, 64] and sweep_sizes(8, 100, 4) == [8, 32]
    assert sweep_sizes(1 << 20, 3 << 20, 2, 1 << 20) == [1 << 20, 2 << 20, 3 << 20]  # -i: step wins
    assert count_sweep_sizes(8, 64, 2) == 4 and count_sweep_sizes(8, 67108864, 2) == 24
    assert count_sweep_sizes(8, 64 << 30, 2, 8) == 8_589_934_592  # a typo's count, without its list
    # no sweep steps that way: unknown, never a loop without end
    assert count_sweep_sizes(0, 8, 2) is None and count_sweep_sizes(8, 4, 2) is None
    assert count_sweep_sizes(8, 64, 1) is None and count_sweep_sizes(8, 64, 2, 0) is None
    with pytest.raises(ValueError):
        sweep_sizes(8, 64, 1)
