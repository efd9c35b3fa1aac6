"""Stop requests in one process: SIGINT is a request like SIGTERM, named by its signal; the launcher's
copy of the first signal (the terminal and torchrun's agent both deliver Ctrl-C) is not a second request;
a different signal, or the same one later, stops at once."""
from __future__ import annotations

import os
import signal

import pytest

from trainer import stop
from trainer.stop import Interrupted, StopRequests


@pytest.fixture
def requests():
    r = StopRequests(save_on_signal=True).install()
    r.deferring = True  # inside the step loop (start_loop without a process group)
    yield r
    r.remove()


def test_sigint_is_noted_and_named_at_the_step_end(requests):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)  # torchrun's forwarded copy: the same request
    assert requests.agree() == "SIGINT"


def test_a_different_signal_after_the_first_stops_at_once(requests):
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(Interrupted, match="^SIGTERM$"):
        os.kill(os.getpid(), signal.SIGTERM)


def test_the_same_signal_again_after_the_window_stops_at_once(requests, monkeypatch):
    os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(stop, "REPEAT_S", 0.0)
    with pytest.raises(Interrupted, match="^SIGTERM$"):
        os.kill(os.getpid(), signal.SIGTERM)


def test_outside_the_loop_sigint_stops_at_once_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGINT)
    r = StopRequests(save_on_signal=True).install()
    try:
        with pytest.raises(Interrupted, match="^SIGINT$"):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        r.remove()
    assert signal.getsignal(signal.SIGINT) is before


# ---------------------------------------------------------------- the vote across ranks (threads, gloo)

def _thread_groups(world: int):
    """`world` gloo process groups in this process, one per simulated rank, lazily connected."""
    import datetime
    import threading

    import torch.distributed as dist

    store = dist.HashStore()
    groups = [None] * world
    os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
    try:
        def make(r):
            groups[r] = dist.ProcessGroupGloo(store, r, world, datetime.timedelta(seconds=30))
        threads = [threading.Thread(target=make, args=(r,)) for r in range(world)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    finally:
        del os.environ["TORCH_GLOO_LAZY_INIT"]
    return groups


def _on_every_rank(world: int, fn) -> list:
    import threading

    out, errors = [None] * world, []

    def run(r):
        try:
            out[r] = fn(r)
        except Exception as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join(timeout=60) for t in threads]
    assert not errors, errors
    return out


@pytest.mark.parametrize("world", [1, 2, 5, 8, 13])
def test_tree_edges_cover_every_rank_once_with_log2_peers(world):
    parents = {}
    for r in range(world):
        parent, children = stop.tree_peers(r, world)
        assert (parent is None) == (r == 0)
        for c in children:
            assert stop.tree_peers(c, world)[0] == r
        parents[r] = parent
        assert len(children) + (parent is not None) <= max(1, (world - 1).bit_length()) + 1
    assert sum(p is not None for p in parents.values()) == world - 1  # a tree: world - 1 edges


@pytest.mark.parametrize("world", [2, 5, 8])
def test_tree_max_gives_every_rank_the_max_and_rank0s_word(world):
    import torch

    groups = _thread_groups(world)

    def vote(r):
        msg = torch.tensor([3 if r == world - 1 else (1 if r == 1 else 0), 0], dtype=torch.int64)
        return stop.tree_max(groups[r], r, world, msg, on_root=lambda m: m.__setitem__(1, 77)).tolist()
    assert _on_every_rank(world, vote) == [[3, 77]] * world


def test_a_vote_wait_that_fails_names_the_vote_and_the_peer():
    import torch

    from telemetry.capture.group_timeout import GroupWaitFailed
    from trainer.distributed import is_timeout

    class SilentPeers:  # a group whose every wait times out, as gloo's does when the peer never answers
        def recv(self, tensors, peer, tag):
            return self

        send = recv

        def wait(self):
            raise RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv")

    with pytest.raises(GroupWaitFailed) as err:
        stop.tree_max(SilentPeers(), 0, 4, torch.zeros(2, dtype=torch.int64))
    assert err.value.what == "the stop vote (process group stop_vote)" and err.value.peer == 1  # smallest subtree
    assert is_timeout(err.value)  # read as the timeout it is


def test_every_rank_stops_after_the_same_step_with_votes_only_on_scheduled_steps(monkeypatch):
    """4 ranks with uneven step times; one rank is signalled mid-run. Votes are spaced by rank 0's step
    times (fewer votes than steps), and every rank returns the request at the same step."""
    import time

    monkeypatch.setattr(stop, "VOTE_INTERVAL_S", 0.03)
    world = 4
    groups = _thread_groups(world)

    def loop(r):
        req = StopRequests(save_on_signal=True)
        req._group = groups[r]  # what start_loop makes in a real world of ranks
        req.deferring, req._next_vote, req._last_vote = True, 1, (0, time.perf_counter())
        for step in range(1, 200):
            time.sleep(0.004 + 0.002 * r)  # uneven ranks: the vote waits for the slowest
            if r == 2 and step == 17:
                req.code = stop.SIGTERM  # the signal handler's note, on one rank only
            why = req.agree(step)
            if why:
                return step, why, req.votes
        return None, None, req.votes

    results = _on_every_rank(world, loop)
    stopped = {s for s, _, _ in results}
    assert len(stopped) == 1 and None not in stopped, results
    step = stopped.pop()
    assert step >= 17
    other = "SIGTERM (on another rank)"
    assert [w for _, w, _ in results] == [other, other, "SIGTERM", other]
    votes = results[0][2]
    assert all(v == votes for _, _, v in results) and votes < step  # the same votes, not one per step
