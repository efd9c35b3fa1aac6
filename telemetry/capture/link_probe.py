"""The link probe: each host's first rank times a transfer from the previous host's first rank
(what it measures and why: telemetry/stragglers.py)."""
from __future__ import annotations

import time

import torch


PROBE_ROUNDS = 3  # the probe's time is the fastest of these: a scheduler stall slows one round, a slow link all


def link_probe(isend, irecv, group, rank: int, ring: list[int], nbytes: int,
               rounds: int = PROBE_ROUNDS) -> float | None:
    """Seconds this leader took to receive `nbytes` from the previous leader in `ring` (the fastest of
    `rounds` back-to-back transfers); None off the ring. Collective over the ring's ranks: each sends to
    the next and receives from the previous at once."""
    if rank not in ring or len(ring) < 2:
        return None
    i = ring.index(rank)
    nxt, prv = ring[(i + 1) % len(ring)], ring[(i - 1) % len(ring)]
    n = max(1, nbytes // 4)
    start_in, data_in = torch.empty(1), torch.empty(n)
    start_out, data_out = torch.zeros(1), torch.zeros(n)
    times = []
    for _ in range(rounds):
        receives = [irecv(start_in, prv, group=group, tag=71), irecv(data_in, prv, group=group, tag=72)]
        sends = [isend(start_out, nxt, group=group, tag=71), isend(data_out, nxt, group=group, tag=72)]
        receives[0].wait()
        t0 = time.perf_counter()
        receives[1].wait()
        times.append(time.perf_counter() - t0)
        for s in sends:
            s.wait()
    return min(times)
