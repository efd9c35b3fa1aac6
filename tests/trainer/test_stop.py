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
