"""trainer.stop in-process: SIGTERM handling and the end-of-step agreement in a gloo group of one."""
from __future__ import annotations

import os
import signal

import pytest
import torch.distributed as dist

from trainer.stop import Interrupted, StopRequests, under_torchrun


@pytest.fixture
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_under_torchrun_follows_the_agent_variable(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not under_torchrun() and StopRequests(True).agent_pid is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert under_torchrun() and StopRequests(True).agent_pid == os.getppid()


def test_sigterm_outside_the_loop_stops_at_once():
    stops = StopRequests(save_on_signal=True).install()
    try:
        with pytest.raises(Interrupted, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
        assert stops.code == 1
    finally:
        stops.remove()
    assert signal.getsignal(signal.SIGTERM) is not stops._on_signal  # the previous handler is back


def test_a_signal_while_the_run_closes_is_noted_not_obeyed(monkeypatch):
    """torchrun SIGTERMs the survivors as soon as one rank dies: the default action would end a rank between
    its error line and run.json's final status (the run stayed `running`)."""
    stops = StopRequests(save_on_signal=True).install()
    try:
        stops.closing()
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's: ignored, the close goes on
        os.kill(os.getpid(), signal.SIGINT)  # within REPEAT_S: the same request's copy
        assert stops._closing_signal_at is not None
        monkeypatch.setattr("trainer.stop.REPEAT_S", 0.0)
        with pytest.raises(Interrupted, match=r"SIGINT \(again, while the run was closing\)"):
            os.kill(os.getpid(), signal.SIGINT)  # a deliberate second request still stops it
    finally:
        stops.remove()
    assert signal.getsignal(signal.SIGTERM) not in (stops._on_signal, stops._on_signal_while_closing)


def test_sigterm_in_the_loop_waits_for_the_step_end(group_of_one):
    stops = StopRequests(save_on_signal=True).install()
    try:
        stops.start_loop()
        assert stops.deferring and stops._group is None  # one rank: no vote group
        assert stops.agree() is None  # nothing asked yet
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised: the step finishes first
        assert stops.code == 1
        assert stops.agree() == "SIGTERM"
        assert not stops.deferring
        os.kill(os.getpid(), signal.SIGTERM)  # within REPEAT_S: the launcher's copy of the same request
        with pytest.raises(Interrupted, match="SIGINT"):  # another request (Ctrl-C during the save) stops at once
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        stops.remove()


def test_a_lost_peer_does_not_wait_for_the_step(group_of_one):
    stops = StopRequests(save_on_signal=True, peers_gone=lambda: "rank 1 (host h) is gone").install()
    try:
        stops.start_loop()
        with pytest.raises(Interrupted, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        stops.remove()


def test_no_peer_gone_the_step_is_finished_first(group_of_one):
    asked = []
    stops = StopRequests(save_on_signal=True, peers_gone=lambda: asked.append(1)).install()  # None: nobody gone
    try:
        stops.start_loop()
        os.kill(os.getpid(), signal.SIGTERM)  # deferred: no exception here
        assert asked == [1] and stops.code == 1 and stops.agree() == "SIGTERM"
    finally:
        stops.remove()


def test_without_save_on_signal_there_is_no_agreement(group_of_one):
    stops = StopRequests(save_on_signal=False)
    stops.start_loop()
    assert not stops.deferring and stops.agree() is None


def test_a_gone_agent_is_named():
    stops = StopRequests(save_on_signal=True)
    stops.agent_pid = 4242
    assert stops.agent_gone() == "the torchrun agent (pid 4242) is gone"
