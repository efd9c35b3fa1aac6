"""What a fabric lab killed without its teardown (`kill -9`, a crash) leaves: its namespaces, marked with the
lab process that made them (owner_mark), and the jobs still running in them.

Each namespace's loopback carries the mark as its alias (pid, start time, pid namespace), so a later lab can
tell a namespace left by a lab that is gone from anyone else's (leftover_of_a_gone_lab).

`kill -9` of a lab skips its teardown: its namespaces stay, and the ranks in them run on until their peers'
sockets or their own output pipe fail them (a 3-node lab killed at step 3 left ranks 1 and 2 running 80 s;
rank 0 held run.lock and ended at its next print). While they run they still write into the run directory
(their telemetry, checkpoints at a save), so a resume started then shared it with them: run.lock, rank 0's,
no longer stopped it. A lab given that directory refuses, naming the processes (and their lab, where it still
runs: `kill -9` of launch.evaluate leaves its lab going).
"""
from __future__ import annotations

import json
import os
import re
import subprocess

from trainer.runlock import pid_alive

OWNER_MARK = "fabric-harness-lab"
MARK = re.compile(rf"^{OWNER_MARK} pid=(\d+) start=(\d+) pidns=(\S+)$")


def namespaces() -> list[str]:
    """Every named network namespace on the host (`ip netns list`)."""
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22): with the pid, it names one
    process (a pid alone is reused); None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def owner_mark() -> str:
    """This process as the owner of the namespaces it makes (the alias of their loopback)."""
    return f"{OWNER_MARK} pid={os.getpid()} start={start_time(os.getpid())} pidns={pid_namespace()}"


def running_owner(ns: str) -> str | None:
    """The pid of the fabric lab that made namespace `ns` while that lab still runs (its mark: same pid, same
    start time, this pid namespace); None when it is gone or unknown."""
    proc = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "lo"], capture_output=True, text=True, timeout=30)
    try:
        m = MARK.match((json.loads(proc.stdout or "[]") or [{}])[0].get("ifalias", "") or "")
    except (json.JSONDecodeError, AttributeError):
        m = None
    if m and m.group(3) == pid_namespace() and start_time(int(m.group(1))) == m.group(2):
        return m.group(1)
    return None


def leftover_of_a_gone_lab(ns: str) -> tuple[bool, str]:
    """(True, why) when namespace `ns` was made by a fabric lab whose process is gone (seen from this pid
    namespace) and nothing runs in it: provably nobody's, safe to delete. (False, one line saying whose it is
    and what to do) otherwise."""
    proc = subprocess.run(["ip", "-n", ns, "-j", "link", "show", "lo"], capture_output=True, text=True, timeout=30)
    try:
        alias = (json.loads(proc.stdout or "[]") or [{}])[0].get("ifalias", "")
    except (json.JSONDecodeError, AttributeError):
        alias = ""
    m = MARK.match(alias or "")
    if not m:
        return False, (f"namespace {ns} exists and no fabric lab marked it as its own (a lab older than the mark, "
                       f"or not a lab's); if nothing uses it: sudo ip netns del {ns}")
    pid, start, pidns = m.groups()
    if pidns != pid_namespace():
        return False, (f"namespace {ns} belongs to a lab in another pid namespace ({pidns}), which this one cannot "
                       f"check; if that lab is gone: sudo ip netns del {ns}")
    if start_time(int(pid)) == start:
        return False, f"namespace {ns} belongs to a lab that is still running (process {pid}); let it finish"
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout.split()
    if pids:
        return False, (f"namespace {ns} was left by a lab that is gone (process {pid}), but processes "
                       f"{' '.join(pids[:8])} still run in it (its nodes' jobs): stop them (kill {' '.join(pids[:8])}) "
                       "and the next lab removes it")
    return True, f"left by a lab that is gone (process {pid}); nothing runs in it"


def output_dir_of(pid: str) -> str | None:
    """The `output_dir=` a process (a torchrun agent or a trainer) was given, resolved from its own directory."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode("utf-8", "replace").split("\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # ended meanwhile, or not ours to read
        return None
    given = [a.partition("=")[2] for a in args if a.startswith("output_dir=")]
    return os.path.realpath(os.path.join(cwd, given[-1])) if given else None


def writers_of(output_dir: str, names: list[str]) -> dict[str, list[str]]:
    """{namespace: pids} of the processes in namespaces `names` that were given `output_dir`."""
    want = os.path.realpath(output_dir)
    found: dict[str, list[str]] = {}
    for ns in names:
        proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
        pids = [pid for pid in proc.stdout.split() if output_dir_of(pid) == want]
        if pids:
            found[ns] = pids
    return found


def output_dir_problem(output_dir: str, prefix: str, ours: list[str]) -> str | None:
    """One line when jobs in namespaces of other labs (named `prefix`..., not in `ours`: a killed lab's, left
    behind) still write into `output_dir`; None otherwise."""
    found = writers_of(output_dir, [ns for ns in namespaces() if ns.startswith(prefix) and ns not in ours])
    if not found:
        return None
    pids = [pid for ns_pids in found.values() for pid in ns_pids]
    where = ", ".join(f"{ns}: {' '.join(p)}" for ns, p in found.items())
    labs = sorted({pid for ns in found if (pid := running_owner(ns))})
    if labs:  # its lab runs on (launch.evaluate killed with kill -9 leaves its lab running, directory and all)
        return (f"output_dir: {output_dir!r} is written by the job of a fabric lab that is still running (process "
                f"{', '.join(labs)}; its ranks {where}); allowed: wait for it to end, stop it (kill {' '.join(labs)}: "
                "it tears down), or another output_dir")
    return (f"output_dir: {output_dir!r} is still written by {len(pids)} process(es) of a lab that is gone "
            f"({where}; the ranks its nodes ran, left when "
            f"it was killed without its teardown); allowed: stop them (kill {' '.join(pids[:16])}) and rerun: the next "
            "lab removes their namespaces, or another output_dir")


STOP_WITH = "FABRIC_HARNESS_STOP_WITH"  # launch.evaluate's pid, set for the launcher it starts


def stop_with_parent() -> None:
    """A lab started by launch.evaluate ($FABRIC_HARNESS_STOP_WITH: its pid) gets SIGTERM when that process dies,
    even by `kill -9`, and tears down as on any SIGTERM: it used to run on with no one to read it, and a rerun of
    the evaluation moved the live run's directory aside and started a second lab on its path (Linux prctl
    PR_SET_PDEATHSIG; elsewhere nothing changes)."""
    import ctypes
    import signal

    parent = os.environ.get(STOP_WITH, "")
    if not parent.isdigit():
        return
    if os.getppid() != int(parent) and pid_alive(int(parent)):
        # inherited from an outer environment (a shell under a lab's node, a script an evaluation runs): that
        # process is not this one's parent. Following it, the lab SIGTERMed itself at start, and was bound to
        # its real parent (a shell it should outlive under nohup)
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it died before the line above: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)

