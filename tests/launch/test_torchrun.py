"""launch.torchrun on CPU processes: two emulated nodes (one torchrun agent each) under the c10d rendezvous,
as the Kubernetes manifests run them. A node killed and started again (a restarted pod) rejoins: the other
agent sees it waiting and a new round forms with both; a node whose peers never come fails after its
join_timeout with one `error:` line."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from ..conftest import REPO, TINY, unset_env

WORKER = REPO / "tests" / "launch" / "rdzv_worker.py"
JOIN_TIMEOUT_S = 60
ROUND_DEADLINE_S = 240  # a ceiling for a round of two agents and their workers on a loaded 2-core host


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(port: int, out, is_host: bool, join_timeout: int = JOIN_TIMEOUT_S, log=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), OUT=str(out), LOGLEVEL="INFO")
    cmd = [sys.executable, "-m", "launch.torchrun", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "rejoin",
           "--rdzv-conf", f"join_timeout={join_timeout},is_host={int(is_host)}", "--max-restarts", "3",
           "--monitor-interval", "0.5", str(WORKER)]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=log or subprocess.PIPE, text=True)


def _rounds(out, since_ns: int = 0) -> set[str]:
    """The (rank, world) records written after `since_ns`."""
    return {n.split("_", 1)[1] for n in os.listdir(out) if int(n.split("_", 1)[0]) > since_ns}


def _wait_for(out, want: set[str], since_ns: int, deadline_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if want <= _rounds(out, since_ns):
            return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"no round with {sorted(want)} within {deadline_s} s: {sorted(_rounds(out, since_ns))}")


def _descendants(pid: int) -> list[int]:
    """pid's children, grandchildren, ... from /proc (torchrun starts its workers in sessions of their own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, p in parents.items() if p == parent]
        out += kids
        todo += kids
    return out


def _kill(p: subprocess.Popen) -> None:
    """The node dies whole: its agent and the workers the agent started."""
    for pid in [p.pid, *_descendants(p.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate(timeout=30)


@pytest.mark.integration
def test_a_restarted_node_rejoins_within_the_join_timeout(tmp_path):
    port = _port()
    both = {"rank0_of2", "rank1_of2"}
    a = _node(port, tmp_path, is_host=True)
    b = _node(port, tmp_path, is_host=False)
    try:
        _wait_for(tmp_path, both, 0, ROUND_DEADLINE_S)
        _kill(b)  # the pod dies with its agent and worker
        restarted = time.time_ns()
        b = _node(port, tmp_path, is_host=False)  # its restartPolicy starts it again
        _wait_for(tmp_path, both, restarted, ROUND_DEADLINE_S)  # a new round of both nodes, not a wait of 1,800 s
        assert a.poll() is None and b.poll() is None
    finally:
        _kill(a)
        _kill(b)


@pytest.mark.integration
def test_a_node_whose_peers_never_come_fails_in_one_line_after_join_timeout(tmp_path):
    t0 = time.monotonic()
    alone = _node(_port(), tmp_path, is_host=True, join_timeout=5)
    out, err = alone.communicate(timeout=120)
    assert alone.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines[-1].startswith("error: rendezvous c10d at 127.0.0.1:"), err
    assert "for 2 nodes, join_timeout 5 s: not every node joined in time" in lines[-1]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert time.monotonic() - t0 < 120 and not os.listdir(tmp_path)  # no worker ever started


@pytest.mark.parametrize("argv, off", [(["--standalone", "--nproc-per-node=2", "-m", "trainer", TINY], False),
                                       (["--nnodes", "1", "--nproc-per-node=2", "-m", "trainer", TINY], False),
                                       (["--nnodes", "2", "--rdzv-backend", "c10d", "-m", "trainer", TINY], True),
                                       (["--nnodes", "1:3", "--rdzv-backend", "c10d", "-m", "trainer", TINY], True)])
def test_store_sharing_is_turned_off_only_where_a_node_can_rejoin(monkeypatch, argv, off):
    """Unshared, rank 0's worker serves the store on every interface: only a job of several nodes needs
    that (a restarted node rejoins); on one node torch's shared store leaves the workers no listener."""
    import torch.distributed.run

    from launch import torchrun

    unset_env(monkeypatch, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "FABRIC_HARNESS_RDZV")
    seen = []
    monkeypatch.setattr(torch.distributed.run, "main",
                        lambda argv: seen.append(os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE")))
    assert torchrun.main(argv) == 0
    assert seen == (["1"] if off else [None])


@pytest.mark.parametrize("argv, named", [
    (["--standalone", "--nproc-per-node=2", "-m", "trainer", TINY], None),  # torch picks its id and port later
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29400", "-m", "trainer", TINY],
     "c10d h0:29400 none"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29400", "--rdzv-id", "77", "-m", "trainer",
      TINY], "c10d h0:29400 77"),
    (["--nnodes", "2", "--node-rank", "1", "--master-addr", "h0", "--master-port", "29511", "-m", "trainer", TINY],
     "static h0:29511 none")])
def test_the_workers_are_told_the_rendezvous_they_met_at(monkeypatch, argv, named):
    """The run directory's lock tells two jobs apart by it: MASTER_PORT changes every round of one job."""
    import torch.distributed.run

    from launch import torchrun

    unset_env(monkeypatch, "FABRIC_HARNESS_RDZV", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE")
    seen = []
    monkeypatch.setattr(torch.distributed.run, "main", lambda argv: seen.append(os.environ.get("FABRIC_HARNESS_RDZV")))
    assert torchrun.main(argv) == 0
    assert seen == [named]


@pytest.mark.parametrize("argv, expected", [
    (["--nproc-per-node", "two", "-m", "trainer"], "--nproc-per-node: got 'two'; allowed: an integer >= 1, or cpu"),
    (["--nproc-per-node", "0", "-m", "trainer"], "--nproc-per-node: got '0'"),
    (["--nnodes", "abc", "-m", "trainer"], "--nnodes: got 'abc'; allowed: N or MIN:MAX"),
    (["--nnodes", "0", "-m", "trainer"], "--nnodes: got '0'; allowed: N or MIN:MAX, whole numbers of nodes >= 1 with "
     "MIN <= MAX"),  # was torch's own words, naming min_nodes
    (["--nnodes", "3:2", "-m", "trainer"], "--nnodes: got '3:2'; allowed: N or MIN:MAX"),
    (["--nproc-per-node", "\u00b2", "-m", "trainer"], "--nproc-per-node: got '\u00b2'; allowed: an integer >= 1"),
    # checked here: torch 2.8's own check is a bare assert, an AssertionError with no message
    (["--max-restarts", "-1", "-m", "trainer"], "--max-restarts: got -1; allowed: a whole number >= 0"),
    (["--max-restarts", "abc", "-m", "trainer"], "invalid int value: 'abc'; allowed: a whole number; see python -m launch.torchrun --help"),
    (["--bogus", "-m", "trainer"], "unrecognized arguments: --bogus"),
    (["/nonexistent/train.py"], "training script: '/nonexistent/train.py' is not a file"),
    (["-m", "no_such_module.anywhere"], "-m no_such_module.anywhere: no such module"),
    (["--no-python", "no-such-command-here"], "--no-python: 'no-such-command-here' is not a command on PATH"),
    # a port out of range: a ValueError traceback from torch's rendezvous, or (0) every worker refusing it
    (["--master-port", "0", "-m", "trainer"], "--master-port: got 0; allowed: a TCP port from 1 to 65535"),
    (["--master-port", "70000", "-m", "trainer"], "--master-port: got 70000; allowed: a TCP port from 1 to 65535"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:port:x", "-m", "trainer"],
     "--rdzv-endpoint: got 'node0:port:x'; allowed: HOST or HOST:PORT, a port from 1 to 65535"),
    # a node rank the static rendezvous has no slot for: it waited forever
    (["--nnodes", "2", "--node-rank", "5", "-m", "trainer"], "--node-rank: got 5; allowed: 0 to 1"),
    # fourth round: tracebacks from the agent (ValueError, AssertionError, NotADirectoryError), and a hang
    # an empty id reached torch's agent, which waited on the endpoint before refusing it
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "--rdzv-id", " ", "-m", "trainer"],
     "--rdzv-id: got ' '; allowed: a non-empty id every node of the job gives alike"),
    (["--nnodes", "2", "--rdzv-backend", "zk", "--rdzv-endpoint", "h:29400", "-m", "trainer"],
     "--rdzv-backend: got 'zk'; allowed: c10d, etcd, etcd-v2, static"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "--rdzv-conf", "join_timeout=soon",
      "-m", "trainer"], "--rdzv-conf: join_timeout='soon'; allowed: a whole number of seconds"),
    (["--monitor-interval", "nan", "-m", "trainer"], "--monitor-interval: got nan; allowed: seconds above 0"),
    (["--monitor-interval", "-1", "-m", "trainer"], "--monitor-interval: got -1.0; allowed: seconds above 0"),
    (["--log-dir", TINY, "-m", "trainer"], f"--log-dir: {TINY!r} is a file; allowed: a directory"),
    (["--standalone", "--nnodes", "2", "-m", "trainer"],  # waited for a second node that cannot join
     "--standalone: one node, but --nnodes is 2; allowed: --standalone with --nnodes 1"),
    # eighth round: an IPv6 endpoint without brackets (a hang: torch took its last group for the port), an empty
    # --master-addr (a ValueError traceback from the rendezvous)
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "fe80::1:29400", "-m", "trainer"],
     "an IPv6 address without brackets (where it ends and the port starts is ambiguous); allowed: [ADDRESS]:PORT"),
    (["--nnodes", "2", "--node-rank", "1", "--master-addr", "", "-m", "trainer"],
     "--master-addr: got ''; allowed: the host name or address of node rank 0"),
    # the trainer's own mistakes, said once before any worker starts (each worker said it behind torch's box)
    (["--standalone", "--nproc-per-node", "2", "-m", "trainer", TINY, "max_step=3"],
     "max_step: unknown key; did you mean 'max_steps'?"),
    (["--standalone", "--nproc-per-node", "1", "-m", "trainer"],
     "the following arguments are required: recipe; see python -m trainer --help"),
    # ninth round: a node rank torch ignored (the job ran as node 0), a log directory torch could not make
    # (a FileNotFoundError traceback), a trainer flag each worker refused behind torch's failure lines
    (["--standalone", "--node-rank", "1", "-m", "trainer", TINY],
     "--node-rank: got 1 with --standalone (one node, rank 0); allowed: --node-rank 0 or none with --standalone"),
    (["--standalone", "--log-dir", "/proc/nope", "-m", "trainer", TINY],
     "--log-dir: cannot write to '/proc/nope': No such file or directory; allowed: a writable directory"),
    (["--standalone", "--nproc-per-node", "1", "-m", "trainer", TINY, "--world-size", "8"],
     "--world-size: only with --dry-run; a real run takes its world size from torchrun"),
])
def test_bad_launch_arguments_are_one_line_before_any_agent_starts(capsys, argv, expected):
    _one_line(capsys, argv, expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of gpu on a machine without CUDA")
def test_gpu_workers_without_cuda_say_what_is_allowed(capsys):
    """torch's words alone were `torchrun: Cuda is not available.`"""
    _one_line(capsys, ["--nproc-per-node", "gpu", "-m", "trainer"], "--nproc-per-node: got 'gpu', but Cuda is not "
              "available here; allowed: an integer >= 1, cpu or auto")


def test_gpu_workers_with_another_mistake_name_that_mistake(capsys):
    """torch's other refusals beside --nproc-per-node gpu were put down to gpu: "--nproc-per-node: got 'gpu', but
    max_restarts must be >= 0 here", on a machine with CUDA or without."""
    _one_line(capsys, ["--nproc-per-node", "gpu", "--max-restarts", "-1", "-m", "trainer"],
              "error: --max-restarts: got -1; allowed: a whole number >= 0")


def _one_line(capsys, argv, expected):
    """What torchrun raises as a traceback (or leaves every worker to fail on) is one line, exit 2."""
    from launch import torchrun

    try:
        code = torchrun.main(argv)
    except SystemExit as exc:  # the parser's own mistakes leave through sys.exit, as argparse's do
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err


@pytest.mark.integration
def test_a_stopped_launcher_says_so_in_one_line_not_a_traceback(tmp_path):
    """scancel, a preemption or a deleted pod sends the agent SIGTERM: it stops its workers and ends with
    128 + 15, and what it says is one line (torch's own agent raised SignalException: a traceback)."""
    worker = tmp_path / "worker.py"
    worker.write_text("import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\ntime.sleep(600)\n")
    ready = tmp_path / "ready"
    agent = subprocess.Popen([sys.executable, "-m", "launch.torchrun", "--standalone", "--nproc-per-node", "1",
                              "--monitor-interval", "0.2", str(worker), str(ready)],
                             env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + ROUND_DEADLINE_S
        while not ready.exists() and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), agent.communicate(timeout=60)
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=120)
    finally:
        _kill(agent)
    assert agent.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("torchrun: stopped by SIGTERM; its workers were sent SIGTERM"), err


@pytest.mark.parametrize("codes, expected", [({1: 2, 0: -15}, 2), ({0: 2, 1: 2}, 2), ({1: 2, 0: 1}, None),
                                             ({1: -9, 0: -15}, None)])
def test_bad_input_on_one_rank_exits_2_though_the_agent_stopped_the_others(monkeypatch, capsys, codes, expected):
    """Rank 1 alone finds bad input (a file missing on its host) and exits 2 after its `error:` line; torchrun
    then SIGTERMs rank 0, which ends by that signal (-15). Every worker that ended by itself exited 2: bad input,
    exit 2 and no torch box. It was a ChildFailedError traceback and exit 1. A worker that failed otherwise, or
    workers killed by signals alone, keep torch's report."""
    import torch.distributed.run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from launch import torchrun

    def failed(argv):
        raise ChildFailedError("trainer", {rank: ProcessFailure(rank, 100 + rank, code, "<N/A>")
                                           for rank, code in codes.items()})

    monkeypatch.setattr(torch.distributed.run, "main", failed)
    argv = ["--standalone", "--nproc-per-node", "2", "-m", "trainer", TINY]
    if expected is None:
        with pytest.raises(ChildFailedError):
            torchrun.main(argv)
    else:
        assert torchrun.main(argv) == expected
        assert capsys.readouterr().err == ""
