"""Requests to stop a run early: SIGTERM (preemption, torchrun tearing down), SIGINT (Ctrl-C) and a lost
torchrun agent.

Inside the step loop, with `train.save_on_signal` (default on), a request does not interrupt the step:
it is noted, the ranks agree at the end of the step (one 1-element all-reduce over a gloo group of
their own, so no device sync and no traced collective), every rank saves the checkpoint of that step,
and the run stops with status `interrupted`. Outside the loop, or without save_on_signal, or on a
second signal, the run stops at once, as before.

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

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

POLL_S = 0.5
REPEAT_S = 5.0  # a copy of the first signal arriving within this is the same request (see above)
SIGTERM, SIGINT, AGENT_GONE = 1, 2, 3  # request codes; the ranks agree on the largest
_REASONS = {SIGTERM: "SIGTERM", SIGINT: "SIGINT", AGENT_GONE: "the torchrun agent is gone"}
_CODES = {signal.SIGTERM: SIGTERM, signal.SIGINT: SIGINT}


class Interrupted(BaseException):
    """SIGTERM (scheduler preemption, torchrun tearing down), a lost agent, or Ctrl-C: record it, then leave."""


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


class StopRequests:
    def __init__(self, save_on_signal: bool):
        self.save_on_signal = save_on_signal
        self.code = 0  # the first request's reason (a key of _REASONS)
        self._first_at = 0.0  # when it came (time.monotonic)
        self.deferring = False  # True while the loop can finish the step first
        self.agent_pid = os.getppid() if under_torchrun() else None
        self._group = None
        self._old: dict = {}
        self._stop = threading.Event()
        self._agent_lost = False
        self.lost = None  # set by the run: a callable naming ranks on this host whose process is gone
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- install / remove

    def install(self) -> "StopRequests":
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._old[signum] = signal.signal(signum, self._on_signal)
        if self.agent_pid is not None:
            self._thread = threading.Thread(target=self._watch_agent, name="agent-watch", daemon=True)
            self._thread.start()
        return self

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
        if not (self.deferring and first) or (self.lost is not None and self.lost()):
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

    def start_loop(self) -> None:
        """The loop is ready to finish steps before stopping; a world of several ranks gets its vote group."""
        if not self.save_on_signal:
            return
        if dist.get_world_size() > 1 and self._group is None:
            self._group = dist.new_group(backend="gloo", group_desc="stop_vote")
        self.deferring = True

    def agree(self) -> str | None:
        """At a step's end: why every rank should stop now (the same answer on all ranks), or None."""
        if not self.deferring:
            return None
        code = self.code
        if self._group is not None:
            flag = torch.tensor([code], dtype=torch.int32)
            c10d.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)  # untraced: not the job's traffic
            code = int(flag.item())
        if code == 0:
            return None
        self.deferring = False  # a further SIGTERM (during the save) stops at once
        if code == AGENT_GONE:
            return self.agent_gone() if self.agent_pid is not None and os.getppid() != self.agent_pid \
                else "a torchrun agent is gone"
        return f"{_REASONS[code]}" + ("" if self.code else " (on another rank)")
