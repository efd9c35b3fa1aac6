"""bench.lab_groups' wire accounting against known bytes: each frame on the lab's links carries 66 bytes of
headers (Ethernet 14, IPv4 20, TCP 20, the timestamp option 12), so what the interface counters count beyond
the groups' bytes and those headers is traffic the collectives do not count."""
from __future__ import annotations

import pytest

from bench.lab_groups import FRAME_HEADER_BYTES, wire_accounting
from telemetry.analysis.runs import Run


def node_counters(step: int, tx: int, frames: int) -> dict:
    return {"step": step, "host": {"counters": {"net:fab0": {"tx_bytes": tx, "tx_packets": frames}}}}


def test_headers_are_66_bytes_a_frame():
    # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12 (RFC 7323: kind, length, two 4-byte values, 2 NOPs)
    assert FRAME_HEADER_BYTES == 14 + 20 + 20 + 12


def test_payload_and_uncounted_traffic_per_node_and_step():
    # 100,000 B of a group's payload in 1448-byte segments (1500 MTU - 52 of IP and TCP) is 70 frames, plus
    # 35 pure ACKs (one per two segments) for the other direction's data, plus 1,000 B the harness sent in
    # 5 frames: 110 frames, 100,000 + 1,000 + 110 x 66 bytes. Step 1 (warm-up, connection set-up) is left out
    step = (100_000 + 1_000 + 110 * 66, 110)
    # a step whose sampler took no new sample passes its traffic to the next one's window: counted once, over
    # the steps it spans
    ranks = {0: [node_counters(1, 999_999, 999), node_counters(2, *step), node_counters(3, *step),
                 {"step": 4, "host": {"counters": {}}}, node_counters(5, 2 * step[0], 2 * step[1])],
             1: [{"step": 2, "host": {}}, {"step": 3}],  # a node's second rank reads no counters
             2: [node_counters(2, *step), node_counters(3, *step)]}
    run = Run(path="x", info={}, metrics=[], ranks=ranks)
    got = wire_accounting(run, link_bytes_per_node=100_000)
    assert got["frames"] == 110 and got["header_bytes"] == 7_260
    assert got["payload_bytes"] == 101_000 and got["uncounted_payload_bytes"] == 1_000
    assert got["tx_over_group_bytes"] == pytest.approx((101_000 + 7_260) / 100_000, abs=1e-3)


def test_a_window_edge_is_spread_over_the_run_not_one_step():
    # a window edge 60 kB off the step's (the burst counted in the step before): that step reads 40% low, the
    # run of ten steps 6% low, and a longer run less
    steps = [node_counters(2, 40_000, 1)] + [node_counters(k, 100_000, 1) for k in range(3, 12)]
    got = wire_accounting(Run(path="x", info={}, metrics=[], ranks={0: steps}), link_bytes_per_node=100_000)
    assert got["tx_bytes"] == 94_000


def test_a_run_without_counters_gives_nothing():
    assert wire_accounting(Run(path="x", info={}, metrics=[], ranks={0: [{"step": 2}]}), 1.0) == {}
