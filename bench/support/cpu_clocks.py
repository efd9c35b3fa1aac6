"""Clocks for one step on a shared machine, and instruction counts where wall time cannot settle a few %.

- wall: time.perf_counter.
- cpu: CPU time of the thread that runs the loop (time.thread_time). On a CPU-bound run this is what the
  loop's own work costs; other processes on the machine take the cores away (which wall time counts) but
  change the thread's CPU time much less. Waiting for another rank (a blocking collective) is not in it.
- process_cpu: CPU time of the whole process (time.process_time): the loop's thread plus every background
  thread (gloo's workers, telemetry's samplers). A background thread runs whatever loop is in progress, so
  its share is split by time between the two loops; `threads_cpu` names who it was.

Instruction counts: valgrind's callgrind, switched on and dumped around each step through torch's own
client requests (torch._C._valgrind_toggle / _valgrind_toggle_and_dump_stats, the ones
torch.utils.benchmark's collect_callgrind uses). Counts of executed instructions repeat from run to run
whatever else the machine does (the sampler threads' share depends on time, so the loop's thread is
counted on its own with --separate-threads=yes).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import threading
import time

CLOCKS = ("wall", "cpu", "process_cpu")


def read() -> tuple[float, float, float]:
    """(wall, cpu, process_cpu) now, in seconds; subtract two reads for an interval."""
    return time.perf_counter(), time.thread_time(), time.process_time()


def threads_cpu() -> dict[str, float]:
    """CPU seconds so far of each Python thread, by name (each thread's own CPU clock), and of the
    process's other threads together (native ones: gloo's, torch's; and threads that have ended)."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, TypeError):  # ended between enumerate and the read
            continue
        out[t.name] = out.get(t.name, 0.0) + seconds
    out["(native or ended threads)"] = max(0.0, time.process_time() - sum(out.values()))
    return out


def threads_cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


# ---------------------------------------------------------------- instruction counts (callgrind)

def under_valgrind() -> bool:
    """Only a process started with valgrind runs the client requests (elsewhere they are no-ops);
    the launcher tells the worker through this variable."""
    return os.environ.get("LOOP_PARITY_CALLGRIND") == "1"


class CallgrindSegments:
    """Dump callgrind's counts at each boundary, so that every dump holds one segment (a hand step or a
    harness iteration). Instrumentation and collection are off at start and on between `begin` and
    `end`; each `cut` dumps what was collected since the last one and carries on collecting."""

    def __init__(self) -> None:
        import torch

        self._toggle = torch._C._valgrind_toggle
        self._toggle_dump = torch._C._valgrind_toggle_and_dump_stats
        self.on = False
        self.labels: list[str] = []

    def begin(self) -> None:
        """Instrumentation on (valgrind runs the process uninstrumented until here: ~6x instead of ~50x slower
        through imports and warm-up), then collection on."""
        if self.on:
            return
        import subprocess

        ctl = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        while ctl.poll() is None:  # keep running client code: valgrind takes the command between blocks
            time.sleep(0.02)
        answer = ctl.stdout.read()
        if ctl.returncode != 0 or "OK" not in answer:
            raise RuntimeError(f"callgrind_control -i on failed (exit {ctl.returncode}): {answer.strip()}")
        self._toggle()
        self.on = True

    def cut(self, label: str) -> None:
        """Close the segment now running (named `label`) and start the next."""
        if self.on:
            self._toggle_dump()  # collection off, then dump: the hook's own bookkeeping is not counted
            self.labels.append(label)
            self._toggle()

    def end(self, label: str) -> None:
        if self.on:
            self._toggle_dump()
            self.labels.append(label)
            self.on = False


def valgrind_command(out_prefix: str) -> list[str]:
    """The valgrind command line that runs a Python process under callgrind, collection off until asked."""
    exe = shutil.which("valgrind")
    if exe is None:
        raise SystemExit("error: --callgrind needs valgrind on PATH (Debian: apt-get install valgrind); "
                         "allowed without it: the wall and CPU-time measures (no --callgrind)")
    return [exe, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--separate-threads=yes",
            f"--callgrind-out-file={out_prefix}.%p", "--dump-instr=no", "--dump-line=no", "--compress-strings=no"]


_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.M)
_DUMP = re.compile(r"\.(\d+)\.(\d+)-(\d+)$")  # <prefix>.<pid>.<dump number>-<thread number>


def read_dumps(out_prefix: str) -> list[dict[str, int]]:
    """Instructions executed (Ir) per dump, in dump order: {"main": the first thread's, "other": the rest}.
    Files: <prefix>.<pid>.<n>-<thread> (--separate-threads=yes); the final dump at exit is left out."""
    dumps: dict[int, dict[str, int]] = {}
    for path in glob.glob(out_prefix + ".*"):
        m = _DUMP.search(path)
        if not m:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            found = _TOTALS.search(f.read())
        ir = int(found.group(1)) if found else 0
        d = dumps.setdefault(int(m.group(2)), {"main": 0, "other": 0})
        d["main" if int(m.group(3)) == 1 else "other"] += ir
    return [dumps[n] for n in sorted(dumps)]
