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


def test_fault_variables_that_are_not_values_are_one_line(monkeypatch):
    """A word as the crash step was a ValueError traceback; an unknown mode killed the rank as 'kill' does."""
    from trainer.error_report import InputError
    monkeypatch.setattr(os, "kill", lambda *a: pytest.fail("killed"))
    quiet = SimpleNamespace(delay_rank=None, delay_s=0.0, delay_from_step=1)
    for environ, line in (
            ({"FABRIC_HARNESS_CRASH_AFTER_STEP": "two"},
             "FABRIC_HARNESS_CRASH_AFTER_STEP: got 'two'; allowed: a step number >= 1 (0 or unset: no crash)"),
            ({"FABRIC_HARNESS_CRASH_RANK": "-1"}, "FABRIC_HARNESS_CRASH_RANK: got '-1'; allowed: a rank >= 0 (unset: 0)"),
            ({"FABRIC_HARNESS_CRASH_AFTER_STEP": "1", "FABRIC_HARNESS_CRASH_MODE": "explode"},
             "FABRIC_HARNESS_CRASH_MODE: got 'explode'; allowed: kill, hang, hang_at_step_end, input, raise, or unset (kill)")):
        with pytest.raises(InputError) as exc:
            FaultInjection.from_recipe(quiet, 0, environ=environ)
        assert str(exc.value) == line
    assert FaultInjection.from_recipe(quiet, 0, environ={"FABRIC_HARNESS_CRASH_MODE": ""}).crash_mode == "kill"
