"""Requests to stop a run early: SIGTERM (preemption, torchrun tearing down), SIGINT (Ctrl-C) and a lost
torchrun agent.

Inside the step loop, with `train.save_on_signal` (default on), a request does not interrupt the step:
it is noted, the ranks agree at the end of a step, every rank saves the checkpoint of that step, and the
run stops with status `interrupted`. Outside the loop, or without save_on_signal, or on a second signal,
the run stops at once, as before.

The vote. A world of N ranks agrees with a MAX over a binomial tree - up to rank 0 in ceil(log2 N)
rounds, back down the same edges - of one 16-byte message per rank and direction, point to point on a
gloo group of its own made with lazy connections: no connection at start-up (only a listening socket);
at the first vote each rank connects to its tree parent and children (at most ceil(log2 N) + 1 peers,
not N - 1). The
vote is not held every step: rank 0 sets the step of the next vote from its own step times, so that a
vote comes about every VOTE_INTERVAL_S seconds of training (every step when steps are that long), and
sends it down with the result. Every rank therefore votes at the same steps (the first after the
loop's first step; each later one named by the previous result, which every rank receives the same),
every vote returns the same answer on every rank, and so every rank stops after the same step. A
request waits at most VOTE_INTERVAL_S plus a step (for a ~30 s preemption grace period, far within it).

Ctrl-C in a terminal sends SIGINT to the whole foreground process group, torchrun's agent and its
workers alike, and the agent then forwards its own SIGINT to every worker: each worker sees the signal
twice within moments. Slurm does the same with SIGTERM (to every task, and torchrun forwards it). So a
repeat of the first signal within REPEAT_S is the launcher's copy of the same request, not a second one.

The agent watch: torchrun's agent is each worker's parent. SIGKILL the agent and its workers would
train on as orphans (and a rerun in the same directory would run beside them); so a daemon thread
polls the parent pid, and when it changes the worker treats it as a stop request.
"""
from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from typing import Callable

import torch
import torch.distributed as dist

from telemetry.capture.gloo_lazy import lazy_gloo_group
from telemetry.capture.group_timeout import wait_naming

POLL_S = 0.5
VOTE_INTERVAL_S = 1.0  # the stop vote's target spacing in training time (module docstring)
MAX_VOTE_EVERY = 1000  # steps between votes at most, however short the steps
REPEAT_S = 5.0  # a copy of the first signal arriving within this is the same request (see above)
SIGTERM, SIGINT, AGENT_GONE = 1, 2, 3  # request codes; the ranks agree on the largest
_REASONS = {SIGTERM: "SIGTERM", SIGINT: "SIGINT", AGENT_GONE: "the torchrun agent is gone"}
_CODES = {signal.SIGTERM: SIGTERM, signal.SIGINT: SIGINT}


class Interrupted(BaseException):
    """SIGTERM (scheduler preemption, torchrun tearing down), a lost agent, or Ctrl-C: record it, then leave."""


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


class StopRequests:
    def __init__(self, save_on_signal: bool, peers_gone: Callable[[], str | None] | None = None):
        """`peers_gone`: asked when a request comes during a step the loop would finish first; it names the
        peers already gone (a non-empty string), whose collectives would never finish, so the step is not
        waited for."""
        self.save_on_signal = save_on_signal
        self.code = 0  # the first request's reason (a key of _REASONS)
        self._first_at = 0.0  # when it came (time.monotonic)
        self.deferring = False  # True while the loop can finish the step first
        self.agent_pid = os.getppid() if under_torchrun() else None
        self._group = None
        self._next_vote = 0  # the step of the next vote (0: the next call votes)
        self._last_vote = (0, 0.0)  # rank 0: (step, perf_counter) of the last vote
        self.votes = 0  # votes held since the loop started
        self._old: dict = {}
        self._stop = threading.Event()
        self._agent_lost = False
        self._peers_gone = peers_gone
        self._thread: threading.Thread | None = None
        self._closing_signal_at: float | None = None  # a signal while the run closes (closing())

    # -------------------------------------------------------------- install / remove

    def install(self) -> "StopRequests":
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._old[signum] = signal.signal(signum, self._on_signal)
        if self.agent_pid is not None:
            self._thread = threading.Thread(target=self._watch_agent, name="agent-watch", daemon=True)
            self._thread.start()
        return self

    def closing(self) -> None:
        """The run is ending (its record not yet written): a signal now must not cut that short. torchrun
        SIGTERMs every worker as soon as one fails, and the default action would end this one between its
        `error:` line and run.json's final status, leaving the run `running`. So a signal is noted and
        ignored while the run closes (torchrun allows 30 s before its SIGKILL); only a deliberate second
        request, more than REPEAT_S after the first, stops the close at once."""
        self._stop.set()
        self.deferring = False
        for signum in self._old:
            signal.signal(signum, self._on_signal_while_closing)

    def _on_signal_while_closing(self, signum, _frame):
        now = time.monotonic()
        if self._closing_signal_at is None or now - self._closing_signal_at < REPEAT_S:
            self._closing_signal_at = self._closing_signal_at or now
            return
        raise Interrupted(f"{_REASONS[_CODES.get(signum, SIGTERM)]} (again, while the run was closing)")

    def remove(self) -> None:
        self._stop.set()
        self.deferring = False
        for signum, old in self._old.items():
            signal.signal(signum, old)
        self._old = {}

    # -------------------------------------------------------------- requests

    def _request(self, code: int) -> None:
        first = self.code == 0
        if first:
            self.code, self._first_at = code, time.monotonic()
        elif code == self.code and time.monotonic() - self._first_at < REPEAT_S:
            return  # the launcher's copy of the first signal (module docstring): already being handled
        # a peer already dead: its collectives will not finish, so the step and the save would not either
        if not (self.deferring and first) or (self._peers_gone is not None and self._peers_gone()):
            raise Interrupted(_REASONS[code] if code != AGENT_GONE else self.agent_gone())

    def _on_signal(self, signum, _frame):
        code = _CODES.get(signum, SIGTERM)
        self._request(AGENT_GONE if code == SIGTERM and self._agent_lost else code)

    def agent_gone(self) -> str:
        return f"the torchrun agent (pid {self.agent_pid}) is gone"

    def _watch_agent(self) -> None:
        while not self._stop.wait(POLL_S):
            if os.getppid() != self.agent_pid:
                if self.code == 0:
                    self._agent_lost = True
                    _thread.interrupt_main(signal.SIGTERM)  # runs the SIGTERM handler in the main thread
                return

    # -------------------------------------------------------------- agreement at a step's end

    def start_loop(self, start_step: int = 0) -> None:
        """The loop is ready to finish steps before stopping; a world of several ranks gets its vote group
        (lazily connected: no connection until the first vote), and the first vote follows the first step."""
        if not self.save_on_signal:
            return
        if dist.get_world_size() > 1 and self._group is None:
            self._group = lazy_gloo_group(group_desc="stop_vote")
        self._next_vote = start_step + 1
        self._last_vote = (start_step, time.perf_counter())
        self.votes = 0
        self.deferring = True

    def agree(self, step: int | None = None) -> str | None:
        """At the end of `step`: why every rank should stop now (the same answer on all ranks), or None.
        In a world of several ranks only the steps that rank 0 scheduled hold a vote (module docstring);
        `step` None votes now (every rank must then call it at the same points)."""
        if not self.deferring:
            return None
        code = self.code
        if self._group is not None:
            if step is not None and step < self._next_vote:
                return None
            code, self._next_vote = self._vote(code, step)
        if code == 0:
            return None
        self.deferring = False  # a further SIGTERM (during the save) stops at once
        if code == AGENT_GONE:
            return self.agent_gone() if self.agent_pid is not None and os.getppid() != self.agent_pid \
                else "a torchrun agent is gone"
        return f"{_REASONS[code]}" + ("" if self.code else " (on another rank)")

    def _vote(self, code: int, step: int | None) -> tuple[int, int]:
        """(the largest request code of any rank, the step of the next vote): rank 0's schedule."""
        rank, world = self._group.rank(), self._group.size()
        msg = torch.tensor([code, 0], dtype=torch.int64)
        msg = tree_max(self._group, rank, world, msg, on_root=lambda m: m.__setitem__(1, self._schedule(step)))
        self.votes += 1
        return int(msg[0]), int(msg[1])

    def _schedule(self, step: int | None) -> int:
        """Rank 0: the step of the next vote, about VOTE_INTERVAL_S of training from now."""
        if step is None:
            return 0
        last_step, last_t = self._last_vote
        now = time.perf_counter()
        self._last_vote = (step, now)
        per_step = (now - last_t) / max(step - last_step, 1)
        every = 1 if per_step <= 0 else max(1, min(MAX_VOTE_EVERY, int(VOTE_INTERVAL_S / per_step)))
        return step + every


def tree_peers(rank: int, world: int) -> tuple[int | None, list[int]]:
    """(parent, children) of `rank` in the binomial tree rooted at 0: the parent clears the rank's lowest
    set bit; the children add each lower power of two (largest subtree first)."""
    low = rank & -rank if rank else 1 << max(world - 1, 1).bit_length()
    parent = rank - low if rank else None
    children = []
    d = low >> 1
    while d:
        if rank + d < world:
            children.append(rank + d)
        d >>= 1
    return parent, children


_TAG = 7301  # the vote's own tag on its own group
# a failed wait names this (the flight recorder does not see the vote's messages)
VOTE = "the stop vote (process group stop_vote)"


def tree_max(group, rank: int, world: int, msg: torch.Tensor, on_root=None) -> torch.Tensor:
    """Element-wise MAX of every rank's `msg` up the binomial tree, then rank 0's result (after
    `on_root(msg)`) back down the same edges to every rank: 2 x ceil(log2 world) rounds deep, each rank
    sends and receives at most once per child and once from its parent. The process group's own
    send/recv: untraced, this is the harness's traffic, not the job's."""
    parent, children = tree_peers(rank, world)
    incoming = torch.empty_like(msg)
    for child in reversed(children):  # smallest subtree first: it is ready soonest
        wait_naming(group.recv([incoming], child, _TAG), VOTE, child)
        torch.maximum(msg, incoming, out=msg)
    if parent is not None:
        wait_naming(group.send([msg], parent, _TAG), VOTE, parent)
        wait_naming(group.recv([msg], parent, _TAG), VOTE, parent)
    elif on_root is not None:
        on_root(msg)
    for child in children:
        wait_naming(group.send([msg], child, _TAG), VOTE, child)
    return msg

