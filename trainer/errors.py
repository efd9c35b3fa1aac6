"""Errors that mean "the input is wrong" (exit 2, one line), as opposed to bugs or crashes (exit 1)."""
from __future__ import annotations

import os
import re
import sys
import tempfile


class InputError(Exception):
    """Bad recipe value, path, data set, model or checkpoint; str() is one line naming the key."""


class FaultError(Exception):
    """A fault the harness recognises (disk full, a lost rank or agent, a cut link): str() is one line
    naming what failed and where; exit 1, no traceback. `everywhere`: every rank raises it (rank 0 says it)."""

    def __init__(self, message: str, everywhere: bool = True):
        super().__init__(message)
        self.everywhere = everywhere


def one_line(exc: BaseException, limit: int = 500) -> str:
    """`Type: message` on one line, for run.json's `error`."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__



def _launcher_key() -> str:
    """The same string in every rank a launcher started on this host for this run, and in no other run:
    the parent's pid and start time (torchrun's agent, or slurmstepd) and torchrun's run id."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/stat", encoding="ascii") as f:
            started = f.read().rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks
    except (OSError, IndexError):
        started = "0"
    run_id = re.sub(r"[^A-Za-z0-9_.-]", "_", os.environ.get("TORCHELASTIC_RUN_ID", "none"))[:64]
    return f"{ppid}-{started}-{run_id}"


def first_to_report() -> bool:
    """Whether this process prints the run's `error:` line. Alone: yes. Under a launcher every rank that
    finds the problem asks; the first on this host to ask wins (an exclusive create of a claim file named
    after the launcher), so the user sees one line whichever rank fails first. Rank 0 alone used to print:
    when another rank failed first, torchrun stopped rank 0 before it printed, and the line was lost.
    Several hosts: one line per host (each host's own stderr)."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return True
    path = os.path.join(tempfile.gettempdir(), f"fabric-harness-error-{os.getuid()}-{_launcher_key()}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    except OSError:  # no writable temporary directory: rank 0 says it, as before
        return os.environ.get("RANK", "0") == "0"
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def report(*messages: object) -> None:
    """The `error:` line (one per problem), printed by the first rank to report (see first_to_report)."""
    if first_to_report():
        for message in messages:  # one line each, whatever the cause
            print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
