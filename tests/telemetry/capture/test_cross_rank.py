"""The pipelined cross-rank tree (telemetry/capture/cross_rank.py) against the figures of the whole tree at once,
on a fake transport that models gloo's point-to-point matching: receives match sends per (source, tag) in
posting order, and a receive's wait checks that its message was already sent. Every rank's tree runs in
this one process, a slot (step) at a time, so the test proves the pipeline's point: in steady state no rank
ever waits on a message its peer sends in the same step."""
from __future__ import annotations

import math
from collections import defaultdict, deque

import pytest

from telemetry.capture.cross_rank import (PIPELINE_TAG, REDUCED, ROWS, PipelinedTree, combine_payloads,
                                          cross_rank_figures, height, reduction_payload)


class FakeGlooP2P:
    """Point-to-point messages between in-process ranks, matched as gloo does: per (src, dst, tag), the n-th
    receive posted takes the n-th message sent. `strict`: a receive waited for before its message was sent
    is an error (in the real job it would block on a peer still training)."""

    def __init__(self):
        self.sent = defaultdict(deque)  # (src, dst, tag) -> tensors sent, not yet received
        self.posted = defaultdict(int)  # (src, dst, tag) -> receives posted
        self.strict = True
        self.messages = 0

    def endpoint(self, rank: int):
        fake = self

        class SendWork:
            def wait(self):
                return True

        class RecvWork:
            def __init__(self, key, tensor):
                self.key, self.tensor = key, tensor

            def wait(self):
                queue = fake.sent[self.key]
                if not queue:
                    if fake.strict:
                        raise AssertionError(f"rank {rank} waits for {self.key}'s message before it was sent")
                    raise RuntimeError("no message")
                got = queue.popleft()
                assert got.shape == self.tensor.shape, (self.key, got.shape, self.tensor.shape)
                self.tensor.copy_(got)
                return True

        def isend(tensor, dst, group=None, tag=0):
            assert tag == PIPELINE_TAG
            fake.sent[(rank, dst, tag)].append(tensor.clone())
            fake.messages += 1
            return SendWork()

        def irecv(tensor, src, group=None, tag=0):
            assert tag == PIPELINE_TAG
            fake.posted[(src, rank, tag)] += 1
            return RecvWork((src, rank, tag), tensor)

        return isend, irecv


def values(rank: int, step: int) -> list[float]:
    """Multiples of 1/4 (sums exact in any order), ties across ranks, unknowns in scattered places."""
    out = []
    for i in range(len(REDUCED)):
        v = ((rank * 7 + i * 3 + step * 5) % 4) * 0.25 + i
        out.append(math.nan if (rank + i + step) % 3 == 0 or (i == 2 and step == 3) else v)
    return out


def reference(world: int, step: int, per_rank: bool) -> dict:
    acc = reduction_payload(values(0, step), 0)
    for r in range(1, world):
        combine_payloads(acc, reduction_payload(values(r, step), r))
    return cross_rank_figures(acc, [values(r, step) for r in range(world)] if per_rank else None)


def payload(rank: int, step: int, per_rank: bool) -> list[list[float]]:
    return reduction_payload(values(rank, step), rank) + ([values(rank, step)] if per_rank else [])


def same(a, b) -> bool:
    """Figures equal, NaN equal to NaN (an all-unknown median)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@pytest.mark.parametrize("world", [2, 3, 4, 5, 7, 8, 13, 16])
@pytest.mark.parametrize("steps", [1, 2, 9])
def test_pipelined_figures_equal_the_whole_tree_at_once(world, steps):
    fake = FakeGlooP2P()
    trees = [PipelinedTree(r, world, None, *fake.endpoint(r), len(REDUCED)) for r in range(world)]
    done: dict[int, tuple[int, list]] = {}
    median_every = 3
    for step in range(1, steps + 1):
        per_rank = step % median_every == 0
        # ranks reach their step's end in any order within a step: the last rank first here
        for r in reversed(range(world)):
            for owner, got in trees[r].post(payload(r, step, per_rank), per_rank, owner={"step": step}):
                assert r == 0
                done[owner["step"]] = (step, got)
        assert all(t.in_flight() <= t.height + 1 for t in trees)
    fake.strict = False  # the end of the run: each rank now waits for its children's own draining
    for r in sorted(range(world), key=lambda r: height(r, world)):  # children drain before their parents
        for owner, got in trees[r].drain():
            assert r == 0
            done[owner["step"]] = (None, got)
    assert sorted(done) == list(range(1, steps + 1))
    lag = height(0, world)
    for step, (completed_at, got) in done.items():
        per_rank = step % median_every == 0
        figures = cross_rank_figures(got[:ROWS], got[ROWS:] if per_rank else None)
        assert same(figures, reference(world, step, per_rank)), (world, step)
        # rank 0's figures of step s are in at step s + ceil(log2 world), or at the drain
        assert completed_at == (step + lag if step + lag <= steps else None)
    assert fake.messages == steps * (world - 1)  # one message per rank and step, as the whole tree sends
    assert not any(fake.sent.values())  # every message was received


def test_heights_and_children_are_the_binomial_tree():
    assert [height(r, 8) for r in range(8)] == [3, 0, 1, 0, 2, 0, 1, 0]
    assert height(0, 2) == 1 and height(0, 5) == 3 and height(0, 1024) == 10 and height(0, 1) == 0
    tree = PipelinedTree(0, 6, None, None, None, 3)
    assert tree.children == [(1, 0, 1), (2, 1, 2), (4, 2, 2)]  # (rank, height, subtree size)
    four = PipelinedTree(4, 6, None, None, None, 3)
    assert (four.parent, four.children) == (0, [(5, 0, 1)])


def test_a_rank_stopping_alone_hands_back_what_never_completed():
    fake = FakeGlooP2P()
    trees = [PipelinedTree(r, 4, None, *fake.endpoint(r), len(REDUCED)) for r in range(4)]
    for step in (1, 2, 3):
        for r in range(3, -1, -1):
            trees[r].post(payload(r, step, False), False, owner=step)
    assert trees[0].abandon() == [2, 3]  # height 2: steps 2 and 3 still on their way up
    assert trees[0].in_flight() == 0 and trees[0].drain() == []


def test_a_late_child_is_waited_for_by_name():
    """A child whose message is not there when its parent completes the slot: the wait fails naming the
    exchange and the peer (group_timeout.GroupWaitFailed), as the whole tree's wait does."""
    from telemetry.capture.group_timeout import GroupWaitFailed

    class Late:
        def wait(self):
            raise RuntimeError("Timed out waiting 10000ms for recv operation to complete")

    tree = PipelinedTree(0, 2, None, lambda *a, **k: None, lambda *a, **k: Late(), len(REDUCED))
    tree.post(payload(0, 1, False), False, owner=1)
    with pytest.raises(GroupWaitFailed) as exc:
        tree.post(payload(0, 2, False), False, owner=2)
    assert exc.value.peer == 1 and "cross-rank exchange" in exc.value.what and "Timed out" in str(exc.value)


def test_a_slot_whose_wait_failed_is_still_handed_back_by_abandon():
    """A child's message that never came: the slot stays pending, so the failing rank's abandon() still hands
    its owner back (and its held line is written, without figures)."""
    class Late:
        def wait(self):
            raise RuntimeError("Timed out waiting 10000ms for recv operation to complete")

    tree = PipelinedTree(0, 2, None, lambda *a, **k: None, lambda *a, **k: Late(), len(REDUCED))
    tree.post(payload(0, 1, False), False, owner=1)
    with pytest.raises(RuntimeError):
        tree.post(payload(0, 2, False), False, owner=2)
    assert tree.abandon() == [1, 2]


def test_a_job_gpu_sum_over_some_ranks_is_unknown_with_a_reason_not_their_sum():
    """Four ranks, rank 2's GPU energy unknown this step (its NVML read failed): the job's GPU energy and power
    are null with the reason, not three GPUs' sum presented as the job's; with every rank known, the sum."""
    def values(rank, energy):
        v = [float("nan")] * len(REDUCED)
        v[REDUCED.index("gpu_energy_j")], v[REDUCED.index("gpu_power_w")] = energy, energy * 2
        return reduction_payload(v, rank)

    payloads = [values(r, float("nan") if r == 2 else 100.0) for r in range(4)]
    acc = payloads[0]
    for p in payloads[1:]:
        combine_payloads(acc, p)
    out = cross_rank_figures(acc, None, 4)
    assert out["job_gpu_energy_j"] is None and out["job_gpu_power_w"] is None
    assert "1 of 4 ranks" in out["job_gpu_energy_reason"]
    whole = [values(r, 100.0) for r in range(4)]
    for p in whole[1:]:
        combine_payloads(whole[0], p)
    out = cross_rank_figures(whole[0], None, 4)
    assert out["job_gpu_energy_j"] == 400.0 and "job_gpu_energy_reason" not in out


def test_a_job_host_sum_over_some_hosts_is_unknown_with_a_reason_not_their_sum():
    """Two hosts of two ranks each; each host's first rank reads the host-wide sources. Host 1 has no RDMA port
    counters this step: the job's RDMA bytes are null with the reason, not host 0's bytes presented as the
    job's; its NIC bytes (both hosts read them) stay the sum."""
    def values(rank, rdma):
        v = [float("nan")] * len(REDUCED)
        if rank % 2 == 0:  # the host's first rank
            v[REDUCED.index("host_net_tx_bytes")] = 1000.0
            v[REDUCED.index("host_rdma_tx_bytes")] = rdma
        return reduction_payload(v, rank)

    def reduced(per_rank):
        acc = per_rank[0]
        for p in per_rank[1:]:
            combine_payloads(acc, p)
        return acc

    out = cross_rank_figures(reduced([values(r, float("nan") if r == 2 else 500.0) for r in range(4)]), None, 4, 2)
    assert out["job_net_tx_bytes"] == 2000.0
    assert out["job_rdma_tx_bytes"] is None
    assert "job_rdma_tx_bytes (1 of 2 hosts unknown)" in out["job_host_reason"]
    assert "job_net_tx_bytes" not in out["job_host_reason"]
    whole = cross_rank_figures(reduced([values(r, 500.0) for r in range(4)]), None, 4, 2)
    assert whole["job_rdma_tx_bytes"] == 1000.0 and "job_host_reason" not in whole
    # the host count unknown (no LOCAL_WORLD_SIZE): the sum over those that knew, as before
    assert cross_rank_figures(reduced([values(r, float("nan") if r == 2 else 500.0) for r in range(4)]),
                              None, 4)["job_rdma_tx_bytes"] == 500.0


def test_the_message_sizes_docs_telemetry_states_are_the_codes():
    """docs/telemetry.md's "Telemetry at scale" sizes the tree's message and the median steps' vectors; fields
    were added to REDUCED (28 now) while it still said 5 x 23 = 920 bytes and 160-byte vectors."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[3] / "docs" / "telemetry.md").read_text(encoding="utf-8").split())
    message, vector = ROWS * len(REDUCED) * 8, len(REDUCED) * 8
    m = re.search(r"Each rank builds a (\d+) x (\d+) float64 message \(([\d,]+) bytes", text)
    assert m and (int(m[1]), int(m[2]), int(m[3].replace(",", ""))) == (ROWS, len(REDUCED), message), m and m[0]
    assert f"binomial tree of {message:,}-byte messages" in text
    assert f"1,023 x {vector} bytes = {round(1023 * vector / 1000)} kB" in text
    assert f"from rank 512, is {round((ROWS + 512) * vector / 1000)} kB" in text
