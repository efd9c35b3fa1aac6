"""One live run per run directory: `run.lock` names the run holding it (host, pid, torchrun run id).

Rank 0 takes the lock before writing anything and refreshes its time stamp every HEARTBEAT_S; the
other ranks only check it. A lock is stale when its process is gone (same host: the pid is checked)
or its time stamp is older than STALE_S (another host). A rerun of the same torchrun job (an elastic
restart: same run id and rendezvous, see owner_key) takes the lock over.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time

from telemetry.capture.environment import host_info
from telemetry.input_files import not_a_file

from .run_writer import now_iso

LOCK = "run.lock"
HEARTBEAT_S = 10.0
STALE_S = 60.0


def owner_key() -> str:
    """Equal for every rank of one torchrun job, different for two live jobs (they cannot share a rendezvous).
    Under launch.torchrun the rendezvous it met at (FABRIC_HARNESS_RDZV: backend, endpoint, run id), the same in
    every round of the job: with several nodes rank 0's agent publishes a fresh MASTER_PORT each round, and a
    restarted job's ranks on other hosts took the earlier round's lock for another live job's."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        rdzv = os.environ.get("FABRIC_HARNESS_RDZV", "").split(" ")
        if len(rdzv) == 3:
            return f"torchrun {os.environ['TORCHELASTIC_RUN_ID']} at {rdzv[1]}"
        return (f"torchrun {os.environ['TORCHELASTIC_RUN_ID']} at {os.environ.get('MASTER_ADDR')}:"
                f"{os.environ.get('MASTER_PORT')}")
    return f"pid {os.getpid()} on {host_info()['hostname']}"


def round_key() -> str | None:
    """Equal for the ranks of one rendezvous round of a torchrun job (rank 0's agent publishes MASTER_ADDR:PORT to
    every node), whatever each node's launch.torchrun was told of the rendezvous: nodes given `head:29400` and
    `10.0.0.1:29400` are one job, and their owner_key differs. None outside torchrun."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    return (f"torchrun {os.environ['TORCHELASTIC_RUN_ID']} at {os.environ.get('MASTER_ADDR')}:"
            f"{os.environ.get('MASTER_PORT')}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited; its parent has not reaped it yet
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


class RunLock:
    def __init__(self, run_dir: str, rank: int):
        self.path = os.path.join(run_dir, LOCK)
        self.rank = rank
        self.key = owner_key()
        self.round = round_key()
        self.held = False
        self._stop = threading.Event()

    def _read(self, local_hosts: tuple[str, ...] = ()) -> dict | None:
        if why := not_a_file(self.path):  # a FIFO would block the open below; a directory, the replace in acquire
            return {"stale": False, "not_a_file": why}
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            age = time.time() - os.stat(self.path).st_mtime
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"stale": True}  # unreadable or half-written: not a live run's
        if not isinstance(data, dict):
            return {"stale": True}
        here = host_info()["hostname"]
        pid = data.get("pid")
        if data.get("host") in (here, *local_hosts) and isinstance(pid, int):
            data["stale"] = not pid_alive(pid)
        else:
            data["stale"] = age > STALE_S
        return data

    def _problem(self, data: dict) -> str:
        if "not_a_file" in data:
            return (f"output_dir: {self.path!r} {data['not_a_file']}; allowed: {LOCK} as a run writes it (a regular "
                    "file: remove this one), or another output_dir")
        return (f"output_dir: {os.path.dirname(self.path)!r} is in use by a live run ({data.get('owner')}, "
                f"pid {data.get('pid')} on host {data.get('host')}, since {data.get('start_time')}; {LOCK}); "
                "allowed: wait for it to end, stop it, or another output_dir")

    def in_use(self, local_hosts: tuple[str, ...] = ()) -> str | None:
        """The one-line reason when another job's live run holds the directory, else None; writes nothing (the
        fabric lab asks before it writes its lab.json there). `local_hosts`: other names of this host whose
        locks are judged by their pid (the lab's nodes, lab-nodeI, run here)."""
        data = self._read(local_hosts)
        return self._problem(data) if data is not None and not data["stale"] and not self._ours(data) else None

    def _ours(self, data: dict) -> bool:
        """This job's lock: the same owner (any round of it), or the same rendezvous round under another spelling."""
        return data.get("owner") == self.key or (self.round is not None and data.get("round") == self.round)

    def acquire(self) -> str | None:
        """None when this run may use the directory, else the one-line reason it may not."""
        data = self._read()
        if data is not None and not data["stale"] and not self._ours(data):
            return self._problem(data)
        if self.rank != 0:
            return None
        mine = {"owner": self.key, "round": self.round, "host": host_info()["hostname"], "pid": os.getpid(),
                "start_time": now_iso()}
        tmp = f"{self.path}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(mine, f)
        if data is None:
            try:
                os.link(tmp, self.path)  # atomic create-if-absent: two runs starting together cannot both win
            except FileExistsError:
                os.remove(tmp)
                data = self._read()
                if data is not None and not data["stale"] and not self._ours(data):
                    return self._problem(data)
                return self.acquire()
            os.remove(tmp)
        else:
            os.replace(tmp, self.path)  # a stale lock, or our own job's earlier attempt
        self.held = True
        threading.Thread(target=self._heartbeat, name="run-lock", daemon=True).start()
        return None

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        self._stop.set()
        if self.held:
            self.held = False
            data = self._read()
            if data is not None and data.get("pid") == os.getpid():
                with contextlib.suppress(OSError):
                    os.remove(self.path)
