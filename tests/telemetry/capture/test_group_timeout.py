"""Groups made after the default one carry the job's timeout, not torch's default (30 minutes for gloo):
telemetry's side group, the trainer's stop vote, DeviceMesh's dimension groups and a sweep's groups."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

from telemetry.capture.gloo_lazy import lazy_gloo_group
from telemetry.capture.group_timeout import carry_job_timeout, group_timeout, job_timeout
from tests.conftest import REPO

SCRIPT = str(REPO / "tests" / "trainer" / "scripts" / "group_timeouts.py")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_process_group_no_job_timeout():
    assert not dist.is_initialized() and job_timeout() is None


def test_a_group_of_one_takes_the_jobs_timeout(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    seventeen = datetime.timedelta(seconds=17)
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=seventeen)
    try:
        assert job_timeout() == seventeen
        assert group_timeout(lazy_gloo_group()) == seventeen
        assert group_timeout(lazy_gloo_group(timeout=datetime.timedelta(seconds=5))).total_seconds() == 5
        plain = dist.new_group(backend="gloo")
        assert group_timeout(plain) == datetime.timedelta(minutes=30)  # torch's own default: the reason for this
        carry_job_timeout(plain)
        assert group_timeout(plain) == seventeen
        carry_job_timeout(None)  # nothing to carry it to: no error
    finally:
        dist.destroy_process_group()


@pytest.mark.integration
def test_mesh_sweep_vote_and_deepspeed_groups_at_world_4(tmp_path):
    out = tmp_path / "timeouts.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", SCRIPT, str(out)]
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra: pip install -e .[test]")
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    # dp and tp of a 2 x 2 mesh are real subgroups (pp of size 1 may be the default group itself)
    assert got == {"default": 97.0, "pp": 97.0, "dp": 97.0, "tp": 97.0, "sweep": 97.0, "sweep_reverse": 97.0,
                   "stop_vote": 97.0, "deepspeed_dp_made": 1800.0, "deepspeed_dp": 97.0}, got


@pytest.mark.integration
def test_a_timeout_carried_after_the_group_was_used_holds(tmp_path):
    worker = str(REPO / "tests" / "telemetry" / "capture" / "late_timeout_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", worker, str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((tmp_path / "waited.json").read_text())
    assert got["error"] and "imed out" in got["error"], got
    assert got["waited_s"] < 120, got  # the job's 10 s, not the 30 minutes the group was made with
