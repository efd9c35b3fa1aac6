"""trainer.run in-process: how a run that cannot start or cannot build ends (one `error:` line, exit 2,
run.json's status), in the group of one a plain `python -m trainer` makes."""
from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from telemetry.capture.environment import host_info
from tests.conftest import TINY
from trainer.cli import main

STEPS = ["max_steps=1", "data.seq_len=64", "train.global_batch_size=4", "train.micro_batch_size=2",
         "train.eval_every_samples=null", "distributed.timeout_s=60"]


def run(capsys, *args) -> tuple[int, str]:
    saved = dict(os.environ)
    try:
        code = main([TINY, *args])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert not dist.is_initialized()
    return code, capsys.readouterr().err


def test_a_directory_held_by_a_live_run_is_refused(tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "run.lock").write_text(json.dumps({"owner": "torchrun other at h:1", "host": host_info()["hostname"],
                                              "pid": os.getpid(), "start_time": "2026-01-01T00:00:00Z"}))
    code, err = run(capsys, f"output_dir={out}", *STEPS)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: output_dir: {str(out)!r} is in use by a live run (torchrun other at h:1")
    assert not (out / "run.json").exists()  # nothing written into another run's directory


def test_an_empty_eval_split_fails_the_build_with_one_line(tmp_path, capsys):
    out = tmp_path / "noeval"
    steps = [s for s in STEPS if not s.startswith("train.eval_every_samples")]
    code, err = run(capsys, f"output_dir={out}", *steps, "train.eval_every_samples=4", "data.split=[1.0,0.0,0.0]")
    errors = [line for line in err.strip().splitlines() if line.startswith("error:")]
    info = json.loads((out / "run.json").read_text())
    assert code == 2 and len(errors) == 1 and "Traceback" not in err
    assert errors[0].startswith("error: data:") and "eval" in errors[0]
    assert info["status"] == "failed" and info["exit_code"] == 2 and info["error"] == errors[0][len("error: "):]
    assert not (out / "run.lock").exists()


def test_an_unwritable_output_dir_is_refused_before_the_run(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    code, err = run(capsys, f"output_dir={target}", *STEPS)
    assert code == 2 and err.strip() == (f"error: output_dir: {str(target)!r} is a file, not a directory; "
                                         "allowed: a new or existing directory")


def test_a_port_in_use_is_refused_before_the_device_is_picked(tmp_path, capsys, monkeypatch):
    import socket

    import trainer.run as run_mod
    picked = []
    monkeypatch.setattr(run_mod, "pick_device", lambda: picked.append(1) or torch.device("cpu"))
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = run(capsys, f"output_dir={tmp_path / 'run'}", *STEPS, f"telemetry.prometheus={port}")
    assert code == 2 and f"error: telemetry.prometheus: cannot serve on port {port}" in err
    assert picked == []  # no CUDA context made before the port was taken (docs/live.md)


def test_a_signal_that_comes_with_the_failure_does_not_replace_it(tmp_path, capsys, monkeypatch):
    """torchrun SIGTERMs the survivors as soon as one rank dies: a SIGTERM pending as the failure reaches
    run() has its handler run when closing() is entered, before closing() replaces that handler. Its
    Interrupted took the failure's place: run.json had no error and the `error:` line was never printed."""
    import trainer.run as run_mod
    from trainer.error_report import InputError
    from trainer.stop import Interrupted, StopRequests

    def fail(st):
        raise InputError("data: fault for the test; allowed: none")

    real_closing, calls = StopRequests.closing, []

    def closing_entered_by_a_signal(self):
        calls.append(1)
        if len(calls) == 1:
            raise Interrupted("SIGTERM")  # what the handler raises, on closing()'s first line
        real_closing(self)

    monkeypatch.setattr(run_mod, "set_up", fail)
    monkeypatch.setattr(StopRequests, "closing", closing_entered_by_a_signal)
    out = tmp_path / "run"
    code, err = run(capsys, f"output_dir={out}", *STEPS)
    info = json.loads((out / "run.json").read_text())
    assert code == 2 and err.strip() == "error: data: fault for the test; allowed: none", err
    assert info["status"] == "failed" and info["exit_code"] == 2 and info["error"].startswith("data: fault"), info
    assert not (out / "run.lock").exists()


def test_a_closed_connection_whose_peer_is_not_named_is_one_line(tmp_path, capsys, monkeypatch):
    """A collective failed on a closed connection and no lost peer could be named (it was still exiting after
    the wait under load, or it runs elsewhere unnamed): one line with the transport's words, no traceback."""
    import trainer.run as run_mod

    def fail(st):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.9]:26252")

    monkeypatch.setattr(run_mod, "set_up", fail)
    monkeypatch.setattr(run_mod, "PEER_EXIT_S", 0.2)
    out = tmp_path / "run"
    code, err = run(capsys, f"output_dir={out}", *STEPS)
    info = json.loads((out / "run.json").read_text())
    assert code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines() == [f"error: {info['error']}"], err
    assert info["status"] == "failed" and info["error"].startswith(
        "a peer closed its connection (its own log says why); RuntimeError: [gloo"), info


def test_a_run_that_fails_while_opening_still_ends_its_record_and_frees_the_lock(tmp_path, capsys, monkeypatch):
    """After run.json's first version ('running') and the lock, the stop requests are installed: a failure there
    (signal handlers refused off the main thread, a Ctrl-C that early) ended the call with run.json left
    'running' and run.lock held by this live process (a later run from elsewhere refused as 'in use')."""
    import trainer.run

    def refused(self):
        raise ValueError("signal only works in main thread of the main interpreter")

    monkeypatch.setattr(trainer.run.StopRequests, "install", refused)
    out = tmp_path / "run"
    try:
        run(capsys, f"output_dir={out}", *STEPS)
    except ValueError as exc:
        assert "main thread" in str(exc)
    else:
        raise AssertionError("the failure was not raised")
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 1 and "main thread" in info["error"]
    assert not (out / "run.lock").exists()


def test_a_telemetry_failure_at_the_close_of_a_failed_run_keeps_its_line_and_exit_code(tmp_path, capsys, monkeypatch):
    """A run failing with bad input (exit 2, one error: line) whose telemetry then fails while run.json's end is
    written: the run's own line, exit code and recorded error stand; the telemetry's failure is a note on stderr,
    not a traceback in their place."""
    from telemetry.capture.session import Telemetry

    def broken(self):
        raise RuntimeError("summary broke")

    monkeypatch.setattr(Telemetry, "summary", broken)
    out = tmp_path / "noeval"
    steps = [s for s in STEPS if not s.startswith("train.eval_every_samples")]
    code, err = run(capsys, f"output_dir={out}", *steps, "train.eval_every_samples=4", "data.split=[1.0,0.0,0.0]")
    errors = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: data:") and "Traceback" not in err
    assert "summary broke" in err
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 2 and info["error"] == errors[0][len("error: "):]
    assert not (out / "run.lock").exists()
