"""trainer/faults.py: deliberate faults stay out of the loop and do nothing unless asked for."""
from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

import pytest

from trainer.faults import FaultInjection

DEBUG = SimpleNamespace(delay_rank=1, delay_s=0.05, delay_from_step=3)


def test_nothing_asked_nothing_done(monkeypatch):
    f = FaultInjection.from_recipe(SimpleNamespace(delay_rank=None, delay_s=0.0, delay_from_step=1), 0, environ={})
    monkeypatch.setattr(os, "kill", lambda *a: pytest.fail("killed"))
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail("slept"))
    for step in range(1, 5):
        f.before_step(step)
        f.after_step(step)


def test_the_straggler_sleeps_only_on_its_rank_from_its_step(monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    for rank in (0, 1):
        f = FaultInjection.from_recipe(DEBUG, rank, environ={})
        for step in range(1, 5):
            f.before_step(step)
    assert slept == [0.05, 0.05]  # rank 1, steps 3 and 4


@pytest.mark.parametrize("mode, expected", [("kill", ["kill"]), ("hang", ["sleep 3600", "kill"])])
def test_the_lost_rank_dies_after_its_step(monkeypatch, mode, expected):
    events = []
    monkeypatch.setattr(time, "sleep", lambda s: events.append(f"sleep {s}"))
    monkeypatch.setattr(os, "kill", lambda pid, sig: events.append("kill" if sig == signal.SIGKILL else sig))
    env = {"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
           "FABRIC_HARNESS_CRASH_MODE": mode}
    for rank in (0, 1):
        f = FaultInjection.from_recipe(DEBUG, rank, environ=env)
        for step in (1, 2, 3):
            f.after_step(step)
    assert events == expected


def test_the_rank_silent_at_its_step_end_hangs_there_only(monkeypatch):
    events = []
    monkeypatch.setattr(time, "sleep", lambda s: events.append(("sleep", s)))
    monkeypatch.setattr(os, "kill", lambda pid, sig: events.append("kill"))
    env = {"FABRIC_HARNESS_CRASH_AFTER_STEP": "2", "FABRIC_HARNESS_CRASH_RANK": "1",
           "FABRIC_HARNESS_CRASH_MODE": "hang_at_step_end"}
    for rank in (0, 1):
        f = FaultInjection.from_recipe(DEBUG, rank, environ=env)
        for step in (1, 2, 3):
            f.at_step_end(step)
            events.append((rank, step))
            f.after_step(step)  # the step-end hang is the whole fault: no kill after it
    assert events == [(0, 1), (0, 2), (0, 3), (1, 1), ("sleep", 3600), (1, 2), (1, 3)]
