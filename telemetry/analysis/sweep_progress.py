"""A collective sweep's progress, read from its text table (collectives.txt, which the sweep writes line by line
as each size is measured): what `python -m telemetry watch` shows for a sweep, a job without steps.

The table is read with the nccl-tests parser the report uses (telemetry/analysis/nccl_tests.py), so a size is
shown once its row is complete; a torn last line waits for the next read. The file is read again only when it
has grown or changed, and only its first MAX_READ bytes (a full sweep of every op writes well under 1 MiB).
"""
from __future__ import annotations

import os
import re
import stat

from telemetry.analysis import nccl_tests
from telemetry.input_files import not_a_file
from telemetry.rundir import SWEEP_TABLE

MAX_READ = 8 << 20
# the sweep's first line: "... float32, 8 to 67108864 bytes x2, warm-up 5, ..." (trainer/sweep/measure.py)
# (or "+1048576," for a sweep that adds sweep.step_bytes each step)
_BOUNDS = re.compile(r"collective sweep: .*?, (\d+) to (\d+) bytes (?:x(\d+)|\+(\d+)),")
# a test the sweep will not run: "# fabric-harness: sendrecv skipped: it needs at least 2 ranks (this world has 1)"
_SKIPPED = re.compile(r"^# fabric-harness: (\w+) skipped: (.*)$", re.M)


def planned_sizes(lo: int, hi: int, factor: int | None, step: int | None = None) -> int | None:
    """How many sizes each test runs: lo, lo x factor (or lo + step), ... up to hi (the sweep's own rule)."""
    if lo < 1 or hi < lo or (step is None and (factor is None or factor < 2)) or (step is not None and step < 1):
        return None
    if step is not None:
        return (hi - lo) // step + 1
    n, s = 0, lo
    while s <= hi:
        n, s = n + 1, s * factor
    return n


def _busbw(row: dict) -> tuple[float | None, str | None]:
    for block in ("out_of_place", "in_place"):
        b = row.get(block)
        if isinstance(b, dict) and isinstance(b.get("busbw_GBps"), (int, float)):
            return b["busbw_GBps"], block.replace("_", "-")
    return None, None


class SweepProgress:
    """The tests of a sweep's table so far; `poll()` re-reads the table when it changed."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, SWEEP_TABLE)
        self._seen: tuple[int, int] | None = None
        self.tests: list[dict] = []
        self.sizes_per_test: int | None = None
        self.latency: dict | None = None
        self.skipped: dict[str, str] = {}
        self.unreadable: str | None = None  # why the table cannot be read (it is not a regular file)

    def poll(self) -> bool:
        """True when the table changed since the last read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):  # a FIFO's open waited for a writer forever; a device was read as text
            was, self.unreadable = self.unreadable, f"{SWEEP_TABLE} {not_a_file(self.path)}"
            self.tests, self._seen = [], None
            return was != self.unreadable
        self.unreadable = None
        if (st.st_size, st.st_mtime_ns) == self._seen:
            return False
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                text = f.read(MAX_READ)
        except OSError:
            return False
        self._seen = (st.st_size, st.st_mtime_ns)
        text = text[:text.rfind("\n") + 1]  # a line being written waits for the next read
        if (m := _BOUNDS.search(text[:4096])) is not None:
            lo, hi, factor, step = (int(g) if g is not None else None for g in m.groups())
            self.sizes_per_test = planned_sizes(lo, hi, factor, step)
        self.skipped = {m.group(1): m.group(2).strip() for m in _SKIPPED.finditer(text[:1 << 16])}
        parsed = nccl_tests.parse(text)
        self.latency = parsed.get("latency_us")
        self.tests = [self._test(key, op) for key, op in parsed["ops"].items()]
        return True

    def _test(self, key: str, op: dict) -> dict:
        rows = op.get("rows") or []
        last = rows[-1] if rows else None
        busbw, block = _busbw(last) if last else (None, None)
        return {"op": key, "test": op.get("test"), "sizes_done": len(rows), "sizes_planned": self.sizes_per_test,
                "last_size": last.get("size") if last else None, "last_busbw_GBps": busbw, "last_block": block,
                "avg_busbw_GBps": op.get("avg_busbw_GBps"), "wrong": op.get("wrong"),
                # done once its footer is written; without one the parser's average is of the rows so far
                "failed": bool(op.get("failed")), "done": op.get("avg_busbw_source") == "footer"}

    def snapshot(self) -> dict:
        return {"tests": self.tests, "sizes_done": sum(t["sizes_done"] for t in self.tests),
                "sizes_per_test": self.sizes_per_test, "latency_us": self.latency, "skipped": self.skipped,
                "unreadable": self.unreadable}


def human_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    return f"{n} B"


def lines(progress: dict, planned_ops: list[str] | None, running: bool = True) -> list[str]:
    """The sweep's part of the plain view: a line per test, and the planned tests not started yet."""
    tests = progress["tests"]
    if progress.get("unreadable"):
        return [f"  the sweep's table cannot be read: {progress['unreadable']} (the sweep writes it as a file)"]
    if not tests:  # a sweep that stopped will measure nothing more: 'yet' is for one still running
        return ["  no size measured yet (the table is written as each size is measured)" if running else
                f"  no size measured: the table ({SWEEP_TABLE}) holds no complete row"]
    out = []
    for t in tests:
        of = f"/{t['sizes_planned']}" if t["sizes_planned"] else ""
        head = f"  {t['op']}: {t['sizes_done']}{of} sizes"
        if t["done"]:
            wrong = f", {t['wrong']} wrong" if t["wrong"] else ""
            out.append(f"{head}, done: avg bus bandwidth {t['avg_busbw_GBps']:g} GB/s{wrong}")
        elif t["sizes_done"]:
            bw = "n/a" if t["last_busbw_GBps"] is None else f"{t['last_busbw_GBps']:g} GB/s ({t['last_block']})"
            out.append(f"{head}, last {human_bytes(t['last_size'])}: busbw {bw}")
        else:
            out.append(f"{head}: starting" if running else f"{head}: none measured before the sweep stopped")
    started = {t["op"] for t in tests}
    skipped = progress.get("skipped") or {}
    waiting = [op for op in planned_ops or [] if op not in started and op not in skipped]
    if waiting:
        out.append("  not started: " + ", ".join(waiting))
    out += [f"  skipped: {op} ({why})" for op, why in skipped.items()]
    if progress.get("latency_us"):
        out.append("  latency: " + ", ".join(f"{k.removesuffix('_us')} {v:.2f} us"
                                             for k, v in progress["latency_us"].items()
                                             if isinstance(v, (int, float))))
    return out
