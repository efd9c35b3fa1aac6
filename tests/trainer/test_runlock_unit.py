"""trainer.runlock in-process: who may use a run directory, and when a lock is stale."""
from __future__ import annotations

import json
import os
import time

from telemetry.capture.environment import host_info
from trainer import runlock
from trainer.runlock import LOCK, RunLock, owner_key, pid_alive


def _write_lock(run_dir, **fields):
    (run_dir / LOCK).write_text(json.dumps(fields))


def test_owner_key_is_the_torchrun_job_under_torchrun(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert owner_key() == "torchrun abc at 10.0.0.1:29500"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert owner_key() == f"pid {os.getpid()} on {host_info()['hostname']}"


def test_pid_alive_for_this_process_and_not_for_an_unused_pid():
    assert pid_alive(os.getpid())
    assert not pid_alive(2 ** 22 + 12345)  # above the kernel's pid_max default: no such process


def test_acquire_writes_the_lock_and_release_removes_it(tmp_path):
    lock = RunLock(str(tmp_path), 0)
    assert lock.acquire() is None and lock.held
    data = json.loads((tmp_path / LOCK).read_text())
    assert data["pid"] == os.getpid() and data["owner"] == owner_key() and data["host"] == host_info()["hostname"]
    lock.release()
    assert not (tmp_path / LOCK).exists() and not lock.held


def test_a_live_run_of_another_owner_is_refused_with_one_line(tmp_path):
    _write_lock(tmp_path, owner="torchrun other at h:1", host=host_info()["hostname"], pid=os.getpid(),
                start_time="2026-01-01T00:00:00Z")
    for rank in (0, 1):  # rank 0 takes the lock; the others only check it
        problem = RunLock(str(tmp_path), rank).acquire()
        assert problem.startswith(f"output_dir: {str(tmp_path)!r} is in use by a live run (torchrun other at h:1")
        assert "allowed: wait for it to end, stop it, or another output_dir" in problem and "\n" not in problem


def test_a_dead_pid_on_this_host_is_stale_and_taken_over(tmp_path):
    _write_lock(tmp_path, owner="pid 1 elsewhere", host=host_info()["hostname"], pid=2 ** 22 + 12345)
    lock = RunLock(str(tmp_path), 0)
    assert lock.acquire() is None
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    lock.release()


def test_another_host_is_stale_only_after_the_heartbeat_window(tmp_path, monkeypatch):
    _write_lock(tmp_path, owner="torchrun x at y:1", host="some-other-host", pid=1)
    assert RunLock(str(tmp_path), 1).acquire() is not None  # fresh: a live run elsewhere
    old = time.time() - runlock.STALE_S - 5
    os.utime(tmp_path / LOCK, (old, old))
    assert RunLock(str(tmp_path), 1).acquire() is None  # silent past STALE_S: stale


def test_a_half_written_lock_is_stale(tmp_path):
    (tmp_path / LOCK).write_text('{"owner": "x", "pi')
    lock = RunLock(str(tmp_path), 0)
    assert lock._read() == {"stale": True}
    assert lock.acquire() is None
    lock.release()


def test_the_same_owner_takes_its_own_lock_over(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job1")
    _write_lock(tmp_path, owner=owner_key(), host=host_info()["hostname"], pid=os.getpid())
    lock = RunLock(str(tmp_path), 0)
    assert lock.acquire() is None and lock.held  # an elastic restart of the same job
    lock.release()


def test_a_lock_that_is_a_fifo_or_a_directory_is_one_line_not_a_hang_or_traceback(tmp_path):
    # a FIFO blocked the lock's open forever; a directory was an IsADirectoryError from os.replace
    fifo_dir, dir_dir = tmp_path / "fifo", tmp_path / "dir"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / LOCK)
    (dir_dir / LOCK).mkdir(parents=True)
    for run_dir, kind in ((fifo_dir, "FIFO"), (dir_dir, "directory")):
        for rank in (0, 1):
            problem = RunLock(str(run_dir), rank).acquire()
            assert problem.startswith("output_dir: ") and kind in problem and "allowed: " in problem
        assert RunLock(str(run_dir), 1).in_use() is not None


def test_a_later_rendezvous_round_of_the_same_job_is_the_same_owner(tmp_path, monkeypatch):
    """Several nodes (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, launch.torchrun): rank 0's agent publishes a fresh
    MASTER_PORT every rendezvous round, and the owner was "torchrun <id> at MASTER_ADDR:MASTER_PORT". After a
    restart (rank 0 OOM-killed, its lock left behind) the other hosts' ranks read the earlier round's lock, fresh
    and another owner's, and refused to start: exit 2, `output_dir ... is in use by a live run`. The agent names
    the rendezvous for its workers (FABRIC_HARNESS_RDZV), the same in every round; another job's is not."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # a PyTorchJob without elasticPolicy.rdzvId
    monkeypatch.setenv("FABRIC_HARNESS_RDZV", "c10d job-master-0:29400 none")
    monkeypatch.setenv("MASTER_ADDR", "job-master-0")
    monkeypatch.setenv("MASTER_PORT", "41001")
    _write_lock(tmp_path, owner=owner_key(), host="job-master-0", pid=1)
    monkeypatch.setenv("MASTER_PORT", "45113")  # the next round
    assert RunLock(str(tmp_path), 1).acquire() is None
    monkeypatch.setenv("FABRIC_HARNESS_RDZV", "c10d job-master-0:29400 other-job")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "other-job")
    assert RunLock(str(tmp_path), 1).acquire() is not None
    monkeypatch.delenv("FABRIC_HARNESS_RDZV")  # plain torchrun: as before
    assert owner_key() == "torchrun other-job at job-master-0:45113"


def test_nodes_naming_the_rendezvous_differently_are_one_job_in_one_round(tmp_path, monkeypatch):
    """The owner became the rendezvous as each node's launch.torchrun was given it: a node started with
    `--rdzv-endpoint head:29400` and one with `10.0.0.1:29400` (or `localhost:29400` on the head) are one job, but
    the second's ranks read rank 0's lock as another live job's and exited 2 when rank 0 had written it first.
    Ranks of one rendezvous round share MASTER_ADDR:MASTER_PORT (rank 0's agent publishes them): that is the job."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "4242")
    monkeypatch.setenv("MASTER_ADDR", "head")
    monkeypatch.setenv("MASTER_PORT", "41001")
    monkeypatch.setenv("FABRIC_HARNESS_RDZV", "c10d localhost:29400 4242")
    monkeypatch.setattr(runlock, "host_info", lambda: {"hostname": "head"})
    zero = RunLock(str(tmp_path), 0)
    assert zero.acquire() is None  # rank 0, on the head node
    monkeypatch.setenv("FABRIC_HARNESS_RDZV", "c10d 10.0.0.1:29400 4242")  # another node's spelling
    monkeypatch.setattr(runlock, "host_info", lambda: {"hostname": "node1"})
    assert RunLock(str(tmp_path), 1).acquire() is None
    monkeypatch.setenv("MASTER_PORT", "45113")  # another job (another round and rendezvous) stays refused
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "4343")
    assert RunLock(str(tmp_path), 1).acquire() is not None
    zero.release()
