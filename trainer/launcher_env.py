"""The launcher's environment (torchrun, srun, or a user's own export) checked before it is used: a rank
count or port that is not a number is one `error:` line naming the variable, not a ValueError deep in
torch's rendezvous."""
from __future__ import annotations

import json
import os
import re
from typing import Mapping

PORT_MAX = 65535


def _int(environ: Mapping[str, str], name: str) -> int | str | None:
    """The variable as an integer; None when unset or empty (as if unset); the raw text when not an integer."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        return raw


def launcher_env_problems(environ: Mapping[str, str] = os.environ, dry_run: bool = False) -> list[str]:
    """One line per launcher variable that is set but unusable: WORLD_SIZE, RANK, LOCAL_WORLD_SIZE,
    LOCAL_RANK, MASTER_PORT. Unset variables are fine (a single process). A real run also needs RANK and
    WORLD_SIZE together: the process group joins torchrun's only with both, so WORLD_SIZE 2 alone built a
    group of one under a two-rank layout (a torch traceback), and RANK 3 alone a rank 3 of one process that
    recorded nothing (rank 0 writes run.json). A dry run reads WORLD_SIZE alone as the size to plan for."""
    problems, got = [], {}
    wants = {"WORLD_SIZE": (1, None), "LOCAL_WORLD_SIZE": (1, None), "RANK": (0, None), "LOCAL_RANK": (0, None),
             "MASTER_PORT": (1, PORT_MAX)}
    for name, (low, high) in wants.items():
        value = _int(environ, name)
        if value is None and name in ("RANK", "LOCAL_RANK") and name in environ:  # `export RANK=$UNSET`
            problems.append(f"{name}: set but empty; allowed: unset for one process, or an integer >= {low} as "
                            "torchrun or srun sets it")  # (the run's int('') was a ValueError traceback)
            continue
        if value is None:
            continue
        bad = isinstance(value, str) or value < low or (high is not None and value > high)
        if bad:
            allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
            problems.append(f"{name}: got {environ[name]!r}; expected {allowed} (as torchrun or srun sets it)")
        else:
            got[name] = value
    for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if rank in got and size in got and got[rank] >= got[size]:
            problems.append(f"{rank}: got {got[rank]}; expected an integer from 0 to {size} - 1 = {got[size] - 1}")
    if not dry_run and got.get("WORLD_SIZE", 1) > 1 and _int(environ, "RANK") is None:
        problems.append(f"WORLD_SIZE: got {got['WORLD_SIZE']} but RANK is unset; allowed: both set, as torchrun "
                        "sets them for each process (python -m launch.torchrun ...), or neither for one process")
    if not dry_run and got.get("RANK", 0) > 0 and _int(environ, "WORLD_SIZE") is None:
        problems.append(f"RANK: got {got['RANK']} but WORLD_SIZE is unset (one process, rank 0); allowed: both "
                        "set, as torchrun sets them for each process, or RANK unset or 0 for one process")
    if not dry_run and not problems and "RANK" in got and "WORLD_SIZE" in got:  # torch's env:// reads all four
        if missing := [name for name in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(name, "").strip()]:
            problems.append(f"{' and '.join(missing)}: unset, but RANK and WORLD_SIZE are set, so the run joins a "
                            "launcher's group at MASTER_ADDR:MASTER_PORT; allowed: all four set, as torchrun sets "
                            "them (python -m launch.torchrun ...), or RANK and WORLD_SIZE unset for one process")
    world = got.get("WORLD_SIZE", None if dry_run else 1)  # a real run without WORLD_SIZE is one process
    if "LOCAL_WORLD_SIZE" in got and world is not None and got["LOCAL_WORLD_SIZE"] > world:
        problems.append(f"LOCAL_WORLD_SIZE: got {got['LOCAL_WORLD_SIZE']}; expected at most WORLD_SIZE "
                        f"({world}{'' if 'WORLD_SIZE' in got else ', unset: one process'})")
    if "LOCAL_RANK" in got and "RANK" in got and got["LOCAL_RANK"] > got["RANK"]:
        # a node's local ranks number its ranks in order from 0, so none exceeds its global rank
        problems.append(f"LOCAL_RANK: got {got['LOCAL_RANK']} beside RANK {got['RANK']}; expected at most RANK (a "
                        "node's local ranks count its ranks from 0, as torchrun and srun set them)")
    if not dry_run and not problems and "RANK" in got and "WORLD_SIZE" in got:
        problems += _master_addr_problems(environ)
    if not dry_run and "RANK" not in got and "WORLD_SIZE" not in got:
        problems += _srun_tasks_problems(environ)
    return problems + _process_group_env_problems(environ, dry_run) + _harness_env_problems(environ)


def _srun_tasks_problems(environ: Mapping[str, str]) -> list[str]:
    """`srun -n 8 python -m trainer ...` with no torchrun: Slurm numbers its tasks (SLURM_PROCID) but sets no
    RANK or WORLD_SIZE, so each task was a run of one process, every one into the same output_dir (the first
    took it, the rest failed on its lock) and the step trained on one device."""
    tasks = _int(environ, "SLURM_STEP_NUM_TASKS")
    if not isinstance(tasks, int) or tasks <= 1:
        return []
    return [f"SLURM_STEP_NUM_TASKS: got {tasks}, but RANK and WORLD_SIZE are unset: each of srun's {tasks} tasks "
            "would be a run of one process, all in one output_dir; allowed: one task per node starting the ranks "
            "with torchrun (sbatch launch/slurm/train.sbatch RECIPE, or srun --ntasks-per-node=1 python -m "
            "launch.torchrun ... -m trainer RECIPE), or one task (srun -n 1)"]


NODE_NAME = re.compile(r"^[^\s\x00-\x1f\x7f]{1,253}$")  # a host name's length, no space or control character


def _harness_env_problems(environ: Mapping[str, str]) -> list[str]:
    """The variables launch.lab sets for each node's ranks, set by hand to garbage: a node name with a newline
    went into run.json, the live series' labels and every view; FABRIC_HARNESS_LAB that is not JSON was
    recorded as no lab at all, without a word. A job name with a newline, likewise, into the live labels."""
    problems = []
    node = environ.get("FABRIC_HARNESS_NODE", "")
    if node and not NODE_NAME.match(node):
        problems.append(f"FABRIC_HARNESS_NODE: got {node!r}; allowed: a node name without spaces or control "
                        "characters, up to 253 (launch.lab sets it), or unset for the host name")
    for name in ("FABRIC_HARNESS_JOB", "JOB_NAME", "SLURM_JOB_ID"):  # the live series' `job` label, run.json's key
        value = environ.get(name, "")
        if value and not value.isprintable():
            problems.append(f"{name}: got {value!r}, with a line break or control character; allowed: a job name "
                            "or id of printable characters (it labels the live series and names the run's attempt)")
    lab = environ.get("FABRIC_HARNESS_LAB", "").strip()
    if lab:
        try:
            doc = json.loads(lab)
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            problems.append(f"FABRIC_HARNESS_LAB: got {lab[:80]!r}; allowed: the JSON object launch.lab sets (the "
                            "emulated links' description), or unset")
    return problems


def _master_addr_problems(environ: Mapping[str, str]) -> list[str]:
    """A MASTER_ADDR no resolver knows: torch's store client retried it until distributed.timeout_s, silent."""
    import socket

    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        return []
    if "://" in addr or re.fullmatch(r"[^:\[\]]+:\d+", addr):  # tcp://host, host:29500: not a host name
        what = "a URL" if "://" in addr else "a port"
        return [f"MASTER_ADDR: got {addr!r}, which holds {what}; allowed: the host name or address of rank 0's node "
                "alone (the port goes in MASTER_PORT), as torchrun sets it"]
    try:
        socket.getaddrinfo(addr, None)
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):  # not a transient
            return [f"MASTER_ADDR: {addr!r} does not resolve on this host ({exc.strerror}); allowed: the host name "
                    "or address of rank 0's node, as torchrun sets it"]
    return []


def _process_group_env_problems(environ: Mapping[str, str], dry_run: bool) -> list[str]:
    """Variables torch's process groups read: a flight-recorder buffer size that is not a whole number made
    the gloo group's constructor wait forever; a GLOO_SOCKET_IFNAME naming no interface of this host was
    gloo's `enforce fail ... Unable to find address` traceback (a real run only: a dry run may plan for
    another host)."""
    problems = []
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        raw = environ.get(name, "").strip()
        if raw and not (raw.isascii() and raw.isdigit()):
            problems.append(f"{name}: got {environ[name]!r}; allowed: a whole number of flight-recorder entries "
                            "(the run sets 2000 when it is unset)")
    ifnames = [n.strip() for n in environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n.strip()]
    if ifnames and not dry_run:
        import socket

        here = [name for _, name in socket.if_nameindex()]
        if missing := [n for n in ifnames if n not in here]:
            problems.append(f"GLOO_SOCKET_IFNAME: {', '.join(map(repr, missing))} is no network interface of "
                            f"{socket.gethostname()}; allowed: {', '.join(here)} (comma-separated for several), or "
                            "unset")
    return problems


def env_world_size(environ: Mapping[str, str] = os.environ) -> int:
    """WORLD_SIZE as the launcher set it, 1 when unset or unusable (launcher_env_problems names the latter)."""
    value = _int(environ, "WORLD_SIZE")
    return value if isinstance(value, int) and value >= 1 else 1
