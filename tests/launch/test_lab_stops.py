"""The lab stopped in ways a user stops it: Ctrl-C pressed again while it is stopping.

An impatient second Ctrl-C came while the lab waited for the stopped agents' workers to record their end:
it cut that wait and the teardown short, and the lab returned with every worker still running (in
namespaces already deleted) and run.json still 'running'.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import REPO, TINY
from .test_lab import own_namespaces_left

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                 reason="the fabric lab needs root and iproute2")]


def processes_writing_to(out) -> list[int]:
    """Processes whose command line names the run directory (a trainer left behind)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f"output_dir={out}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_ctrl_c_pressed_again_while_stopping_still_stops_every_worker(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", "none", "--timeout", "200",
                             "--", TINY, f"output_dir={out}", "max_steps=400", "data.seq_len=64",
                             "train.log_every=1", "train.eval_every_samples=null", "distributed.timeout_s=60"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 240
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and metrics.read_text().count("\n") >= 2:
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the run ended before the signal"
        for _ in range(5):  # Ctrl-C, then again and again while the lab stops
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    left = processes_writing_to(out)
    for pid in left:  # not this test's to leave behind either
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert not left, f"workers left running after the lab returned: {left}"
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    assert "[lab] interrupted by SIGINT; every node was stopped" in stderr
    assert not own_namespaces_left(out)


# rank 0 writes run.json 'running' as the trainer does; every rank then hangs (a collective at start-up over a
# slow link: 1.9 MB at 1mbit) and never records its end; the lab's --timeout stops the agents
STUCK = """
import json, os, sys, time
out, rank = sys.argv[1], os.environ["RANK"]
if rank == "0":
    with open(os.path.join(out, "run.json"), "w") as f:
        json.dump({"status": "running", "exit_code": None}, f)
while True:
    time.sleep(0.2)
"""


def test_workers_the_lab_had_to_kill_leave_run_json_interrupted_not_running(tmp_path, monkeypatch, capsys):
    """Ctrl-C 6 s into a 2-node run at 1mbit: the ranks were in the start-up broadcast, did not record their end
    in the 30 s the lab gives, and were killed; run.json said 'running' of a job that was gone."""
    from launch import lab as lab_module
    monkeypatch.setattr(lab_module, "WORKER_GRACE_S", 2)
    script = tmp_path / "prog.py"
    script.write_text(STUCK)
    with lab_module.Lab(2, "none") as lab:
        code = lab_module.run_in_lab(lab, 1, [], str(tmp_path), 8, 29447, program=[str(script), str(tmp_path)])
    assert code == lab_module.TIMED_OUT
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["end_time"]
    assert info["error"].startswith("stopped by the lab: its workers had not recorded their end 2 s after")
    assert "run.json closed as interrupted" in capsys.readouterr().err
    assert not processes_running(str(script))


def processes_running(needle: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
