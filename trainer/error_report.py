"""Who says a run's `error:` line: `report` prints it (through telemetry/errors.py's one printer) from the
first rank that finds the problem. The error classes themselves (InputError: exit 2; FaultError: exit 1, one
line) are the project's one set, telemetry/errors.py."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import tempfile

from telemetry.errors import FaultError, InputError, print_errors
from telemetry.rundir import RANK_ERROR, rank_file, rank_files, write_json_atomic
from telemetry.signals import deferred

__all__ = ["FaultError", "InputError", "first_to_report", "forget_left", "leave_for_rank0", "no_room", "no_room_line",
           "one_line", "peer_error", "report", "signals_held"]  # the errors: telemetry/errors.py


def one_line(exc: BaseException, limit: int = 500) -> str:
    """`Type: message` on one line, for run.json's `error`."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__


def no_room(exc: BaseException) -> bool:
    """A write the run directory's filesystem refused: full, over quota, or read-only. One line, not a
    traceback: exit 2 before the run has recorded anything (output_dir is unusable), 1 once it has (a fault)."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def no_room_line(output_dir: str, exc: OSError) -> str:
    where = exc.filename if isinstance(exc.filename, str) else output_dir
    return (f"output_dir: {where!r} could not be written ({exc.strerror or exc}); what was recorded before is "
            "kept; allowed: an output_dir on a writable filesystem with free space")


def _launcher_key() -> str | None:
    """The same string in every rank one launch started on this host, and in no other launch; None where
    no launcher is recognised. torchrun: its agent (the workers' parent) by pid and start time, the run id,
    and the worker group's round: its restart count (--max-restarts) and rank 0's MASTER_ADDR:MASTER_PORT (a
    new rendezvous round after a node rejoined publishes a fresh port). srun starting the ranks itself: the
    job and step ids and the job's requeue count. A later round's failure claimed the first round's file and
    its line was printed by no rank of the host."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        ppid = os.getppid()
        try:
            with open(f"/proc/{ppid}/stat", encoding="ascii") as f:
                started = f.read().rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks
        except (OSError, IndexError):
            started = "0"
        run_id, env = os.environ["TORCHELASTIC_RUN_ID"], os.environ
        rnd = f"{env.get('TORCHELASTIC_RESTART_COUNT', '0')}-{env.get('MASTER_ADDR', '')}-{env.get('MASTER_PORT', '')}"
        key = f"torchrun-{ppid}-{started}-{rnd}-{run_id}"  # run_id last: the cut at 160 keeps the round
    elif "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" in os.environ:
        key = (f"slurm-{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
               f"-{os.environ.get('SLURM_RESTART_COUNT', '0')}")
    else:
        return None
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:160]


def first_to_report() -> bool:
    """Whether this process prints the run's `error:` line. Alone: yes. Under torchrun (or srun) every rank
    that finds the problem asks; the first on this host to ask wins (an exclusive create of a claim file
    named after the launch), so the user sees one line whichever rank fails first. Rank 0 alone used to
    print: when another rank failed first, torchrun stopped rank 0 before it printed, and the line was
    lost. Several hosts: one line per host (each host's own stderr). No launcher recognised: rank 0."""
    from .launcher_env import env_world_size

    if env_world_size() <= 1:  # never fails: this is how a bad WORLD_SIZE itself gets reported
        return True
    key = _launcher_key()
    if key is None:
        return os.environ.get("RANK", "0") == "0"
    path = os.path.join(tempfile.gettempdir(), f"fabric-harness-error-{os.getuid()}-{key}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    except OSError:  # no writable temporary directory: rank 0 says it, as before
        return os.environ.get("RANK", "0") == "0"
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def signals_held():
    """SIGTERM and SIGINT wait until the block is done, then take effect as they would have."""
    return deferred((signal.SIGTERM, signal.SIGINT))


def report(*messages: object) -> None:
    """The `error:` line (one per problem), printed by the first rank to report (see first_to_report). A
    signal meanwhile waits for the line: the rank that claimed the line is the one that must print it, and
    torchrun SIGTERMs it as soon as another rank exits (that rank found the same problem, and left it to
    this one); the default action would end it between the claim and the line, and no rank would say it."""
    with signals_held():
        if first_to_report():
            print_errors(*messages)


def leave_for_rank0(run_dir: str, rank: int, error: str, step: int | None, bad_input: bool = True) -> None:
    """Why this rank stops, maybe alone (bad input: a file missing on its host; a crash: its device out of
    memory), left in its rank file for rank 0, which records run.json: rank 0 saw only a peer gone, and run.json's
    error read `rank 1 (host h, pid N) was lost after step 2; RuntimeError: ... Connection closed by peer ...`,
    not why. Written before the rank says its line and exits."""
    if rank == 0 or not run_dir:
        return
    path = os.path.join(run_dir, rank_file(rank, RANK_ERROR))
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)  # a failure before telemetry made ranks/
        write_json_atomic(path, {"rank": rank, "pid": os.getpid(), "step": step, "error": error,
                                 "bad_input": bad_input})


def forget_left(run_dir: str, rank: int) -> None:
    """At a run's start: what this rank left in an earlier attempt is not this one's. The pid told attempts apart,
    but a container restarted runs its processes under the same pids, and rank 0 named the earlier attempt's
    bad input for this attempt's lost rank."""
    with contextlib.suppress(OSError):
        os.remove(os.path.join(run_dir, rank_file(rank, RANK_ERROR)))


def peer_error(run_dir: str, hosts: list) -> tuple[str, int] | None:
    """Rank 0: (run.json's error, exit code) from what another rank of this run left (leave_for_rank0), naming
    that rank and its host: bad input first (exit 2), else a crash (1); None when no rank left one. A file of
    an earlier attempt (another pid) is not this run's."""
    known = {h.get("rank"): h for h in hosts if isinstance(h, dict)}
    found = []
    for path in rank_files(run_dir, RANK_ERROR) if run_dir else ():
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        host = known.get(data.get("rank")) if isinstance(data, dict) else None
        if host is not None and data["rank"] != 0 and host.get("pid") == data.get("pid"):
            found.append((data.get("bad_input", True) is False, data["rank"], host.get("hostname"), data.get("step"),
                          str(data.get("error"))))
    if not found:
        return None
    crash, rank, host, step, error = min(found)
    after = f" after step {step}" if isinstance(step, int) else ""
    alike = [f for f in found if f[0] == crash]
    more = f" (and {len(alike) - 1} more rank{'s' if len(alike) > 2 else ''})" if len(alike) > 1 else ""
    what = "failed" if crash else "stopped on bad input"
    return f"rank {rank} (host {host}) {what}{after}{more}: {error}", 1 if crash else 2
