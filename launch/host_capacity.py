"""How many worker processes one host can start at all, so that a slip of the keyboard (--nproc-per-node
100000) is one `error:` line instead of a host brought down by forking.

Every worker imports torch before it does anything of the job: about 220 MiB resident on torch 2.13's CPU
build (measured with `python -c "import resource, torch; print(resource.getrusage(resource.RUSAGE_SELF)
.ru_maxrss)"`), of which the shared libraries' pages are shared between processes. WORKER_FLOOR_BYTES is
half of that, so only a count the host's available memory cannot hold even then is refused; whether a
smaller count fits the job is the job's own question (its --dry-run memory estimate, CUDA's OOM)."""
from __future__ import annotations

WORKER_FLOOR_BYTES = 110 << 20  # half of one torch import's resident set (docstring)


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The kernel's MemAvailable estimate, or None where there is no /proc/meminfo (not Linux)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def workers_problem(option: str, value: str, workers: int, available: int | None) -> str | None:
    """One line when `workers` processes on this host could not even import torch in `available` bytes;
    None when they could, or when the memory is unknown (then nothing is refused)."""
    if available is None:
        return None
    most = max(1, available // WORKER_FLOOR_BYTES)
    if workers <= most:
        return None
    return (f"{option}: got {value}, {workers:,} worker processes on this host; allowed: at most {most:,} here "
            f"(each imports torch, at least {WORKER_FLOOR_BYTES >> 20} MiB, and this host has "
            f"{available / (1 << 30):.1f} GiB available)")

