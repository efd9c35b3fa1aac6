"""A private, throw-away Slurm cluster on this machine, for tests: munged, slurmctld and one slurmd per node.

Everything lives under one state directory (key, sockets, spool, state, pid and log files) and listens on
free ports, so it neither needs nor touches the host's own Slurm or munge configuration. Nodes can be plain
(all on 127.0.0.1) or each in a network namespace of the fabric lab (its own address, shaped link).
Every process the cluster starts carries a tag in its environment; `stop` kills by pid exactly the
processes carrying this cluster's tag (daemons, job steps, the training ranks) and nothing else.

    with SlurmCluster(tmp_path / "slurm") as cluster:
        cluster.run(["sbatch", "--wait", ...])
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
TAG = "FABRIC_HARNESS_SLURM_TEST"  # environment variable marking every process of one test cluster


def missing_tools() -> list[str]:
    """Slurm and munge programs that are not installed (sbin included: apt puts the daemons there)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [t for t in (*DAEMONS, "mungekey", *CLIENTS) if shutil.which(t, path=path) is None]


def module_marks() -> list:
    """pytestmark of a module whose tests run jobs on a private cluster: integration tests, skipped with
    the reason where Slurm/munge are not installed or this is not root."""
    missing = missing_tools()
    return [pytest.mark.integration,
            pytest.mark.skipif(bool(missing), reason=f"Slurm/munge not installed (missing: {', '.join(missing)}); "
                               "apt-get install slurmctld slurmd slurm-client munge"),
            pytest.mark.skipif(os.geteuid() != 0, reason="the private Slurm cluster runs its daemons as root")]


@contextmanager
def checked_cluster(root: Path, nodes: list[Node] | None = None) -> Iterator[SlurmCluster]:
    """A running cluster (one plain node unless `nodes`); on leaving, fails if a process of it outlived its
    teardown."""
    cluster = SlurmCluster(root, nodes)
    with cluster:
        yield cluster
    assert not cluster.tagged_pids(), "processes of the test cluster outlived its teardown"


def _which(tool: str) -> str:
    found = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if found is None:
        raise RuntimeError(f"{tool} is not installed")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    addr: str = "127.0.0.1"
    netns: str | None = None  # run this node's slurmd inside a network namespace
    gpus: int = 0  # GPUs as a gres of character devices (GPU_FILES): Slurm's GPU variables, no GPU behind them


# Stand-ins for /dev/nvidia*: Slurm only needs a device file per GPU (no cgroup plugin constrains them here)
GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


class SlurmCluster:
    def __init__(self, root: Path, nodes: list[Node] | None = None,
                 controller_netns: str | None = None, controller_addr: str = "127.0.0.1"):
        self.root = Path(root)
        self.nodes = nodes or [Node("fhnode0")]
        self.controller_netns, self.controller_addr = controller_netns, controller_addr
        self.tag = f"{os.getpid()}-{time.monotonic_ns()}"
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}

    # --- environment for daemons and clients ---
    def env(self, extra: dict | None = None) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf), TAG: self.tag, **(extra or {})}

    def _netns(self, ns: str | None, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *cmd] if ns else cmd

    def run(self, cmd: list[str], timeout: float = 60, netns: str | None = "controller",
            env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (in the controller's namespace by default)."""
        ns = self.controller_netns if netns == "controller" else netns
        return subprocess.run(self._netns(ns, cmd), env=self.env(env), capture_output=True, text=True,
                              timeout=timeout, **kw)

    # --- bring-up ---
    def write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        ctld_port, slurmd_port = free_port(), free_port()
        lines = [
            "ClusterName=fabricharness",
            f"SlurmctldHost={host}({self.controller_addr})",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}/%n",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.%n.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd.%n.log'}",
            # no cgroups: this may itself run inside a container
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to scontrol for the test's checks
            "KillWait=5",
            "InactiveLimit=0",
            "SlurmdTimeout=60",
            "SlurmctldTimeout=60",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for n in self.nodes:
            gres = f" Gres=gpu:{n.gpus}" if n.gpus else ""
            lines.append(f"NodeName={n.name} NodeAddr={n.addr} NodeHostname={host} {self.hardware()}{gres} "
                         "State=UNKNOWN")
        if any(n.gpus for n in self.nodes):  # gres.conf is read from slurm.conf's directory
            lines.append("GresTypes=gpu")
            (self.root / "gres.conf").write_text("AutoDetect=off\n" + "".join(
                f"NodeName={n.name} Name=gpu File={f}\n" for n in self.nodes for f in GPU_FILES[:n.gpus]))
        lines.append(f"PartitionName=debug Nodes={','.join(n.name for n in self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def hardware(self) -> str:
        """This machine's CPU layout as slurmd detects it (`slurmd -C`), so the node never registers as
        invalid; every emulated node claims the same CPUs (they share them)."""
        proc = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30)
        first = proc.stdout.splitlines()[0] if proc.returncode == 0 and proc.stdout else ""
        keep = ("CPUs=", "Boards=", "SocketsPerBoard=", "CoresPerSocket=", "ThreadsPerCore=")
        fields = [f for f in first.split() if f.startswith(keep)]
        return " ".join(fields) if any(f.startswith("CPUs=") for f in fields) else f"CPUs={os.cpu_count() or 1}"

    def _spawn(self, name: str, cmd: list[str], netns: str | None = None) -> None:
        out = open(self.root / f"{name}.stdout", "w")
        # own session: a stuck daemon is killed with its whole group
        self.procs[name] = subprocess.Popen(self._netns(netns, cmd), env=self.env(), stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}:\n"
                                       + self.logs(name))
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}:\n" + self.logs())

    def logs(self, only: str | None = None, tail: int = 3000) -> str:
        parts = []
        for p in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.stdout")):
            if only is None or p.name.startswith(only):
                parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    def start(self) -> "SlurmCluster":
        for d in ("munge", "state", *(f"spool/{n.name}" for n in self.nodes)):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o755)  # clients reach the socket through it; the key itself is 0600
        key = self.root / "munge" / "munge.key"
        subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)], check=True, capture_output=True,
                       timeout=30)
        os.chmod(key, 0o600)
        # --force: munged refuses directories it thinks are insecure (pytest's tmp path is under /tmp)
        self._spawn("munged", [_which("munged"), "--foreground", "--force", f"--socket={self.socket}",
                               f"--key-file={key}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--log-file={self.root / 'munged.log'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        self._wait("munged's socket", self.socket.exists, 30)
        self.write_config()
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)],
                    self.controller_netns)
        self._wait("slurmctld", lambda: self.run(["scontrol", "ping"], timeout=10).stdout.count("UP") > 0, 60)
        for n in self.nodes:
            # slurmd 22.05 will not start without a cgroup file system it recognises, even when no plugin
            # uses it, and `ip netns exec` mounts a fresh /sys without one. Each slurmd gets a private
            # mount namespace with an empty tmpfs and a named v1 hierarchy there: the same on every host
            # (cgroup v1, v2 or none), and the host's own cgroup tree is never written to.
            private = [] if n.netns else [_which("unshare"), "--mount", "--propagation", "private"]
            cmd = [*private, "sh", "-c", "mount -t tmpfs fh-cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd"
                   " && mount -t cgroup -o none,name=systemd fh-systemd /sys/fs/cgroup/systemd && exec \"$@\"",
                   "slurmd", _which("slurmd"), "-D", "-N", n.name, "-f", str(self.conf)]
            self._spawn(f"slurmd.{n.name}", cmd, n.netns)
        self._wait("every node idle", self._all_idle, 60)
        return self

    def _all_idle(self) -> bool:
        out = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=10).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        return all(states.get(n.name) == "idle" for n in self.nodes)

    # --- teardown ---
    def tagged_pids(self) -> list[int]:
        """Processes whose environment carries this cluster's tag: what it started, and what those started."""
        needle = f"{TAG}={self.tag}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
        return found

    def stop(self) -> list[int]:
        """Cancel jobs, stop the daemons, then kill anything left with the tag; returns pids that survived."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                self.run(["scancel", "--full", "--quiet", "--user=root"], timeout=10)
            except (subprocess.SubprocessError, OSError):
                pass
        for name in reversed(list(self.procs)):  # slurmd first, munged last
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
        for _ in range(50):
            pids = self.tagged_pids()
            if not pids:
                return []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return self.tagged_pids()

    def __enter__(self) -> "SlurmCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False
