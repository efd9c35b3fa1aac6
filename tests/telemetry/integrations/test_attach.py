"""python -m telemetry.integrations.attach as a process: a stop request reaches the job, and attach waits for
the job to record its end (the job's run.json is written by the job, after the signal)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO

# The job: says it is ready, and on SIGINT or SIGTERM takes a moment to record its end (as a Lightning job's
# callback writes run.json), then exits with 128 + the signal.
JOB = """
import os, signal, sys, time
out = sys.argv[1]
def stop(signum, frame):
    time.sleep(1.0)  # recording the run's end
    with open(os.path.join(out, "ended"), "w") as f:
        f.write(signal.Signals(signum).name)
    os._exit(128 + signum)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
open(os.path.join(out, "ready"), "w").close()
while True:
    time.sleep(0.05)
"""


def start(tmp_path) -> subprocess.Popen:
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "telemetry.integrations.attach", "--run-dir", str(tmp_path / "run"),
                             "--", sys.executable, str(tmp_path / "job.py"), str(tmp_path)],
                            env=env, start_new_session=True)  # a process group of its own: the terminal's
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    return proc


def finish(proc) -> int:
    try:
        return proc.wait(timeout=60)
    finally:
        try:  # whatever is left of the group (a job attach left behind)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.integration
def test_ctrl_c_lets_the_job_record_its_end(tmp_path):
    """Ctrl-C reaches attach and the job together (the terminal's process group). attach used
    subprocess.call, which SIGKILLs the child a quarter second after a KeyboardInterrupt: the job died in the
    middle of recording its end (run.json left 'running')."""
    proc = start(tmp_path)
    os.killpg(proc.pid, signal.SIGINT)
    assert finish(proc) == 128 + signal.SIGINT
    assert (tmp_path / "ended").read_text() == "SIGINT"


@pytest.mark.integration
def test_sigterm_to_attach_is_passed_to_the_job(tmp_path):
    """A scheduler stopping the job it started (attach) with SIGTERM: attach passes it on and returns the job's
    exit code; before, attach died at once and the job trained on, never told."""
    proc = start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == 128 + signal.SIGTERM
    assert (tmp_path / "ended").read_text() == "SIGTERM"
