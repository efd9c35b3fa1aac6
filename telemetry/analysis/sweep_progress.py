"""A collective sweep's progress, read from its text table (collectives.txt, which the sweep writes line by line
as each size is measured): what `python -m telemetry watch` shows for a sweep, a job without steps.

The table is read with the nccl-tests parser the report uses (telemetry/analysis/nccl_tests.py), so a size is
shown once its row is complete; a torn last line waits for the next read. The file is read again only when it
has grown or changed, and then from the end of the last concluded test: a linear sweep of 4,096 sizes per test
writes MBs, and parsing all of it at every read made each read cost more as the sweep went on. A file written
again from the start (shorter than what was read, or another file) is read again from its start.
"""
from __future__ import annotations

import os
import re
import stat

from telemetry.analysis import nccl_tests
from telemetry.analysis.compare_figures import rate_text, size_text
from telemetry.formulas import count_sweep_sizes
from telemetry.input_files import not_a_file
from telemetry.rundir import SWEEP_TABLE

MAX_READ = 8 << 20  # bytes read at once from where the last read settled: one test's table is under 1 MiB
_CONCLUDED = b"# Collective test concluded:"
# the sweep's first line: "... float32, 8 to 67108864 bytes x2, warm-up 5, ..." (trainer/sweep/measure.py)
# (or "+1048576," for a sweep that adds sweep.step_bytes each step)
_BOUNDS = re.compile(r"collective sweep: .*?, (\d+) to (\d+) bytes (?:x(\d+)|\+(\d+)),")
# a test the sweep will not run: "# fabric-harness: sendrecv skipped: it needs at least 2 ranks (this world has 1)"
_RANKS = re.compile(r"collective sweep: (\d+) ranks")
_SKIPPED = re.compile(r"^# fabric-harness: (\w+) skipped: (.*)$", re.M)


def _busbw(key: str, row: dict, ranks: int | None) -> tuple[float | None, str | None]:
    """The row's busbw and its block (the out-of-place one where measured); under the table's two decimals of GB/s
    (a slow link), from the row's time (nccl_tests.block_busbw)."""
    for block in ("out_of_place", "in_place"):
        b = row.get(block)
        if isinstance(b, dict) and isinstance(b.get("busbw_GBps"), (int, float)):
            return nccl_tests.block_busbw(key, row, b, ranks), block.replace("_", "-")
    return None, None


class SweepProgress:
    """The tests of a sweep's table so far; `poll()` re-reads the table when it changed."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, SWEEP_TABLE)
        self._seen: tuple[int, int, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self._offset = 0  # bytes read and settled: the sweep's first lines and its concluded tests
        self._settled: dict[str, dict] = {}  # the concluded tests, read once
        self.tests: list[dict] = []
        self.sizes_per_test: int | None = None
        self.ranks: int | None = None  # the sweep's world, from its first line (a test's device list says more)
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
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen:
            return False
        if self._seen is None or st.st_ino != self._seen[0] or st.st_size < self._offset:
            self._reset()  # written again from the start, or replaced
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(MAX_READ)
        except OSError:
            return False
        self._seen = seen
        data = data[:data.rfind(b"\n") + 1]  # a line being written waits for the next read
        if self._offset == 0:  # the sweep's first lines: its sizes, and the tests it skips
            head = data[:1 << 16].decode("utf-8", errors="replace")
            if (m := _BOUNDS.search(head[:4096])) is not None:
                lo, hi, factor, step = (int(g) if g is not None else None for g in m.groups())
                self.sizes_per_test = count_sweep_sizes(lo, hi, factor, step)
            self.ranks = int(m.group(1)) if (m := _RANKS.search(head[:4096])) else None
            self.skipped = {m.group(1): m.group(2).strip() for m in _SKIPPED.finditer(head)}
        end = data.rfind(_CONCLUDED)
        end = data.find(b"\n", end) + 1 if end >= 0 else 0
        if end:  # tests concluded since the last read: parsed once, kept
            for key, op in self._parse(data[:end])["ops"].items():
                self._settled[self._unique(key)] = self._test(key, op)
            self._offset += end
        parsed = self._parse(data[end:])  # the test in progress (and the latency table at the end)
        self.latency = parsed.get("latency_us") or self.latency
        self.tests = list(self._settled.values()) + [self._test(self._unique(key), op)
                                                     for key, op in parsed["ops"].items()]
        return True

    @staticmethod
    def _parse(data: bytes) -> dict:
        return nccl_tests.parse(data.decode("utf-8", errors="replace"))

    def _unique(self, key: str) -> str:
        """The parser's own rule for a second table of one op (all_reduce_2), across the reads."""
        unique, n = key, 2
        while unique in self._settled:
            unique, n = f"{key}_{n}", n + 1
        return unique

    def _test(self, key: str, op: dict) -> dict:
        rows = op.get("rows") or []
        last = rows[-1] if rows else None
        busbw, block = _busbw(key, last, op.get("world_size") or self.ranks) if last else (None, None)
        return {"op": key, "test": op.get("test"), "sizes_done": len(rows), "sizes_planned": self.sizes_per_test,
                "last_size": last.get("size") if last else None, "last_busbw_GBps": busbw, "last_block": block,
                "avg_busbw_GBps": op.get("avg_busbw_GBps"), "wrong": op.get("wrong"),
                # done once its footer is written; without one the parser's average is of the rows so far
                "failed": bool(op.get("failed")), "done": op.get("avg_busbw_source") == "footer"}

    def snapshot(self) -> dict:
        return {"tests": self.tests, "sizes_done": sum(t["sizes_done"] for t in self.tests),
                "sizes_per_test": self.sizes_per_test, "latency_us": self.latency, "skipped": self.skipped,
                "unreadable": self.unreadable}


def _bw(gbps: float | None) -> str:
    """GB/s as the table prints it (two decimals), below 0.01 GB/s in MB/s or kB/s (a 5 Mbit/s link's 0.000575
    GB/s is 575 kB/s, where the table's rows read 0.00)."""
    return "n/a" if gbps is None else f"{gbps:g} GB/s" if gbps >= 0.01 or gbps == 0 else rate_text(gbps)


def lines(progress: dict, planned_ops: list[str] | None, running: bool = True) -> list[str]:
    """The sweep's part of the plain view: a line per test, and the planned tests not started yet."""
    tests = progress["tests"]
    if progress.get("unreadable"):
        return [f"  the sweep's table cannot be read: {progress['unreadable']} (the sweep writes it as a file)"]
    if not tests and planned_ops is not None and not planned_ops:  # sweep.ops=[p2p_matrix]: no test to wait for
        return ["  no collective test: sweep.ops holds p2p_matrix only (python -m telemetry p2p RUN shows it once "
                "the sweep is done)"]
    if not tests:  # a sweep that stopped will measure nothing more: 'yet' is for one still running
        return ["  no size measured yet (the table is written as each size is measured)" if running else
                f"  no size measured: the table ({SWEEP_TABLE}) holds no complete row"]
    out = []
    for t in tests:
        of = f"/{t['sizes_planned']}" if t["sizes_planned"] else ""
        head = f"  {t['op']}: {t['sizes_done']}{of} sizes"
        if t["done"]:
            wrong = f", {t['wrong']} wrong" if t["wrong"] else ""
            out.append(f"{head}, done: avg bus bandwidth {_bw(t['avg_busbw_GBps'])}{wrong}")
        elif t["sizes_done"]:
            bw = "n/a" if t["last_busbw_GBps"] is None else f"{_bw(t['last_busbw_GBps'])} ({t['last_block']})"
            out.append(f"{head}, last {size_text(t['last_size'])}: busbw {bw}")
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
