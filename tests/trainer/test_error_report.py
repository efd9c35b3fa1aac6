"""trainer.error_report in-process: the rank that claims the run's `error:` line prints it, even when a
signal comes between the claim and the line."""
from __future__ import annotations

import os
import signal

from trainer import error_report


def test_a_signal_between_the_claim_and_the_line_waits_for_the_line(monkeypatch, capsys):
    """Under torchrun the rank that finds bad input second exits at once (the first claimed the line), and
    torchrun SIGTERMs the first: with the default action it died before printing and no rank said why."""
    events = []
    real_print = error_report.print_errors

    def print_after_a_sigterm(*messages):
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, after the other rank exited
        events.append("printed")
        return real_print(*messages)

    monkeypatch.setattr(error_report, "print_errors", print_after_a_sigterm)
    monkeypatch.setattr(error_report, "first_to_report", lambda: True)
    old = signal.signal(signal.SIGTERM, lambda *_: events.append("SIGTERM"))  # stands in for the default action
    try:
        error_report.report("train.lr: got 'nan'")
        assert events == ["printed", "SIGTERM"]  # held until the line is out, then taken as it came
    finally:
        signal.signal(signal.SIGTERM, old)
    assert capsys.readouterr().err == "error: train.lr: got 'nan'\n"


def test_a_full_or_read_only_filesystem_is_one_line_naming_output_dir():
    import errno

    assert error_report.no_room(OSError(errno.ENOSPC, "No space left on device"))
    assert error_report.no_room(OSError(errno.EROFS, "Read-only file system"))
    assert error_report.no_room(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not error_report.no_room(OSError(errno.EACCES, "Permission denied"))
    assert not error_report.no_room(ValueError("No space left on device"))
    line = error_report.no_room_line("runs/a", OSError(errno.ENOSPC, "No space left on device", "runs/a/run.json"))
    assert line == ("output_dir: 'runs/a/run.json' could not be written (No space left on device); what was "
                    "recorded before is kept; allowed: an output_dir on a writable filesystem with free space")


def _torchrun_rank(monkeypatch, tmp_path, rank: int, restarts: str, master_port: str = "29500") -> None:
    """The environment torchrun's agent gives a worker (torch 2.13, local_elastic_agent._start_workers)."""
    monkeypatch.setattr(error_report.tempfile, "gettempdir", lambda: str(tmp_path))
    for name, value in {"TORCHELASTIC_RUN_ID": "job7", "WORLD_SIZE": "4", "RANK": str(rank),
                        "TORCHELASTIC_RESTART_COUNT": restarts, "MASTER_ADDR": "node1",
                        "MASTER_PORT": master_port}.items():
        monkeypatch.setenv(name, value)


def test_one_claim_per_host_and_worker_group_round(monkeypatch, tmp_path):
    """torchrun --max-restarts (the PyTorchJobs' maxRestarts: 3) restarts the workers under the same agent and
    run id, and a node joining anew starts a new rendezvous round (rank 0's agent publishes a fresh
    MASTER_PORT): the claim of the first round's failure was still there, so a later round's `error:` line was
    printed by no rank of this host."""
    _torchrun_rank(monkeypatch, tmp_path, rank=1, restarts="0")
    assert error_report.first_to_report()
    _torchrun_rank(monkeypatch, tmp_path, rank=2, restarts="0")
    assert not error_report.first_to_report()  # the same round: one line per host
    _torchrun_rank(monkeypatch, tmp_path, rank=2, restarts="1")
    assert error_report.first_to_report()  # the restarted workers' failure
    _torchrun_rank(monkeypatch, tmp_path, rank=3, restarts="1", master_port="41234")
    assert error_report.first_to_report()  # a new round after a node rejoined


def test_a_requeued_slurm_job_claims_anew(monkeypatch, tmp_path):
    """srun starting the ranks itself: a requeued job keeps its job id, and its steps count from 0 again."""
    monkeypatch.setattr(error_report.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "SLURM_JOB_ID": "88", "SLURM_STEP_ID": "0"}.items():
        monkeypatch.setenv(name, value)
    assert error_report.first_to_report()
    assert not error_report.first_to_report()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert error_report.first_to_report()


def test_bad_input_or_a_crash_a_peer_found_is_what_rank_0_records(tmp_path):
    """Rank 1 alone refuses its input (or crashes): rank 0, torn down or cut off, saw only a peer gone and recorded
    run.json's error as `rank 1 ... was lost; RuntimeError: ... Connection closed by peer`. Rank 1 now leaves its
    line for rank 0, which names it with its host; a file another attempt left (another pid) is not this run's."""
    hosts = [{"rank": 0, "hostname": "a", "pid": 10}, {"rank": 1, "hostname": "b", "pid": os.getpid()},
             {"rank": 2, "hostname": "b", "pid": 99}, {"rank": 3, "hostname": "c", "pid": os.getpid()}]
    assert error_report.peer_error(str(tmp_path), hosts) is None
    error_report.leave_for_rank0(str(tmp_path), 0, "rank 0 records run.json itself", None)
    assert not (tmp_path / "ranks").exists()
    error_report.leave_for_rank0(str(tmp_path), 3, "torch.OutOfMemoryError: CUDA out of memory", 2, bad_input=False)
    assert error_report.peer_error(str(tmp_path), hosts) == (
        "rank 3 (host c) failed after step 2: torch.OutOfMemoryError: CUDA out of memory", 1)
    error_report.leave_for_rank0(str(tmp_path), 1, "data.dataset: '/d.jsonl' is not a file", 2)
    assert error_report.peer_error(str(tmp_path), hosts) == (  # bad input first: the crash may follow from it
        "rank 1 (host b) stopped on bad input after step 2: data.dataset: '/d.jsonl' is not a file", 2)
    error_report.leave_for_rank0(str(tmp_path), 2, "data.dataset: '/d.jsonl' is not a file", 2)  # pid 99's attempt
    assert error_report.peer_error(str(tmp_path), hosts)[0].startswith("rank 1 (host b) stopped on bad input after "
                                                                       "step 2: ")
    hosts[2]["pid"] = os.getpid()
    assert error_report.peer_error(str(tmp_path), hosts)[0].startswith(
        "rank 1 (host b) stopped on bad input after step 2 (and 1 more rank): ")
    assert error_report.peer_error(str(tmp_path), hosts[:1] + [dict(hosts[1], pid=5)]) is None


def test_a_rank_leaves_its_own_crash_for_rank_0_but_not_a_failed_collective(tmp_path, capsys):
    """A failed collective is a consequence (a peer gone, NCCL's error when one went): left for rank 0, it named
    this rank for another's loss."""
    from types import SimpleNamespace

    import torch.distributed as dist

    from trainer import run

    hosts = [{"rank": 0, "hostname": "a", "pid": 1}, {"rank": 1, "hostname": "b", "pid": os.getpid()}]
    st = SimpleNamespace(rank=1, rundir=SimpleNamespace(path=str(tmp_path), run_json=str(tmp_path / "run.json")),
                         hosts=hosts, trainer=None, status="failed", code=1, error=None, recipe=None)
    run.classify_failure(st, dist.DistBackendError("NCCL error: remote process exited or there was a network error"))
    assert error_report.peer_error(str(tmp_path), hosts) is None
    run.classify_failure(st, RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert error_report.peer_error(str(tmp_path), hosts) == (
        "rank 1 (host b) failed: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB", 1)
    capsys.readouterr()  # the crashes' tracebacks


def test_what_a_rank_left_in_an_earlier_attempt_is_forgotten_at_its_start(tmp_path):
    """A restarted container runs its ranks under the same pids: the pid alone took an earlier attempt's bad input
    for this attempt's."""
    hosts = [{"rank": 0, "hostname": "a", "pid": 10}, {"rank": 1, "hostname": "b", "pid": os.getpid()}]
    error_report.leave_for_rank0(str(tmp_path), 1, "data.dataset: '/d.jsonl' is not a file", 2)
    assert error_report.peer_error(str(tmp_path), hosts) is not None
    error_report.forget_left(str(tmp_path), 1)  # the next attempt's rank 1, same pid
    assert error_report.peer_error(str(tmp_path), hosts) is None
    error_report.forget_left(str(tmp_path), 1)  # nothing left: nothing to do
