"""Jobs a lab killed with `kill -9` left running in its namespaces still write into their run directory: a
resume of that directory is refused until they are stopped (round 9: ranks 1 and 2 of a killed 3-node lab ran
on 80 s, and a resume started meanwhile shared the directory with them; run.lock went with rank 0)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from launch import lab, lab_leftovers


def test_a_process_without_output_dir_writes_nowhere():
    assert lab_leftovers.output_dir_of(str(os.getpid())) is None
    assert lab_leftovers.output_dir_of("4194304") is None  # no such process


def test_the_line_names_the_namespaces_pids_and_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(lab_leftovers, "namespaces", lambda: ["fh7n0", "fh7n1", "fh8n0", "other"])
    monkeypatch.setattr(lab_leftovers, "writers_of",
                        lambda out, names: {ns: ["101", "102"] for ns in names if ns == "fh7n1"})
    monkeypatch.setattr(lab_leftovers, "running_owner", lambda ns: None)  # lab 7 is gone
    assert lab_leftovers.output_dir_problem(str(tmp_path), "fh", ["fh8n0"]) == (
        f"output_dir: {str(tmp_path)!r} is still written by 2 process(es) of a lab that is gone (fh7n1: 101 102; "
        "the ranks its nodes ran, left when it was killed without its teardown); allowed: stop them (kill 101 "
        "102) and rerun: the next lab removes their namespaces, or another output_dir")
    # its lab still runs (launch.evaluate killed with kill -9 leaves its lab running): that lab is named
    monkeypatch.setattr(lab_leftovers, "running_owner", lambda ns: "7")
    assert lab_leftovers.output_dir_problem(str(tmp_path), "fh", ["fh8n0"]) == (
        f"output_dir: {str(tmp_path)!r} is written by the job of a fabric lab that is still running (process 7; its "
        "ranks fh7n1: 101 102); allowed: wait for it to end, stop it (kill 7: it tears down), or another output_dir")
    monkeypatch.setattr(lab_leftovers, "writers_of", lambda out, names: {})
    assert lab_leftovers.output_dir_problem(str(tmp_path), "fh", []) is None


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                    reason="the fabric lab needs root and iproute2")
def test_a_resume_beside_a_killed_labs_ranks_is_refused_before_any_namespace(tmp_path, capsys):
    ns, out = f"fh{os.getpid() % 100000}9n1", tmp_path / "run"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", "import time; time.sleep(120)",
                               f"output_dir={out}"])
    try:
        for _ in range(100):  # until the process in the namespace is the sleeper itself
            if lab_leftovers.writers_of(str(out), [ns]):
                break
            time.sleep(0.1)
        before = set(lab.leftover_namespaces())
        assert lab.main(["--nodes", "2", "--rate", "10mbit", "--", "recipes/collectives.yaml",
                         f"output_dir={out}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: output_dir: {str(out)!r} is still written by 1 "
                                                   f"process(es) of a lab that is gone ({ns}: "), err
        assert set(lab.leftover_namespaces()) == before and not out.exists()
    finally:
        orphan.kill()
        orphan.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)


CHILD = """
import os, signal, sys, time
from launch import lab_leftovers
signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], "w").write("SIGTERM"), sys.exit(143)))
lab_leftovers.stop_with_parent()
open(sys.argv[1] + ".ready", "w").write(str(os.getpid()))
time.sleep(60)
"""
PARENT = """
import os, subprocess, sys, time
from launch.lab_leftovers import STOP_WITH
subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]], env={**os.environ, STOP_WITH: str(os.getpid())})
time.sleep(60)
"""


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_lab_started_by_an_evaluation_is_stopped_when_the_evaluation_is_killed(tmp_path):
    """Round 9: kill -9 of launch.evaluate left its lab running with no one to read it; a rerun then moved the live
    run aside and started a second lab on its path. The lab now gets SIGTERM (and tears down) when its parent dies."""
    mark = tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(mark), CHILD], cwd=os.getcwd())
    try:
        for _ in range(300):
            if (tmp_path / "child.ready").exists():
                break
            time.sleep(0.1)
        parent.kill()  # SIGKILL: no handler of the parent's runs
        parent.wait()
        for _ in range(100):
            if mark.exists():
                break
            time.sleep(0.1)
        assert mark.read_text() == "SIGTERM"
    finally:
        parent.kill()


class _Prctl:
    def __init__(self):
        self.calls = []

    def prctl(self, *args):
        self.calls.append(args)
        return 0


def _stop_with(monkeypatch, parent: str, alive: bool):
    import ctypes
    import signal

    libc, kills = _Prctl(), []
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: libc)
    monkeypatch.setattr(lab_leftovers.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setattr(lab_leftovers, "pid_alive", lambda pid: alive)
    monkeypatch.setenv(lab_leftovers.STOP_WITH, parent)
    lab_leftovers.stop_with_parent()
    return libc.calls, kills, signal.SIGTERM


def test_a_stop_with_pid_inherited_from_elsewhere_is_not_followed(monkeypatch):
    """FABRIC_HARNESS_STOP_WITH inherited from an outer environment (a shell under a lab's node or an evaluation, a
    script an evaluation runs) names a live process that is not this one's parent: the lab SIGTERMed itself at start
    with an Interrupted traceback, and bound itself to its real parent (a shell it should outlive, nohup)."""
    prctl, kills, _ = _stop_with(monkeypatch, str(os.getpid()), alive=True)  # alive, and not the parent
    assert prctl == [] and kills == []


def test_a_parent_gone_before_prctl_still_stops_the_lab(monkeypatch):
    prctl, kills, sigterm = _stop_with(monkeypatch, "4194304", alive=False)  # it died before the lab could follow it
    assert prctl == [(1, int(sigterm))] and kills == [(os.getpid(), sigterm)]


def test_the_parent_named_is_followed(monkeypatch):
    prctl, kills, sigterm = _stop_with(monkeypatch, str(os.getppid()), alive=True)
    assert prctl == [(1, int(sigterm))] and kills == []


@pytest.mark.integration
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_stop_with_pid_of_a_live_grandparent_leaves_the_process_running(tmp_path):
    """The variable inherited (this test's process is alive and not the child's parent): the child SIGTERMed itself."""
    mark = tmp_path / "child"
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                              sys.executable, "-c", CHILD, str(mark)], cwd=os.getcwd(),
                             env={**os.environ, lab_leftovers.STOP_WITH: str(os.getpid())})
    try:
        for _ in range(300):
            if (tmp_path / "child.ready").exists() or mark.exists():
                break
            time.sleep(0.1)
        assert (tmp_path / "child.ready").exists() and not mark.exists()
    finally:
        child.kill()
        child.wait()
        grandchild = (tmp_path / "child.ready").read_text() if (tmp_path / "child.ready").exists() else ""
        if grandchild.isdigit():
            os.kill(int(grandchild), 9)
