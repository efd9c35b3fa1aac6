"""Progress of long work (a collective sweep's sizes, an evaluation's runs, staged files, a link test's
seconds) with an ETA: a rich bar on a terminal, and plain lines when the output is not a terminal (a log,
a pipe, a batch job's file), so logs stay free of control characters.

    with WorkProgress("evaluate", total=len(runs), unit="runs") as progress:
        for run in runs:
            ...
            progress.advance(note=f"{run.name} done")

The ETA is the mean time per completed unit times the units left (rich's estimate on a terminal). A
`WorkProgress(enabled=False)` does nothing (ranks other than 0)."""
from __future__ import annotations

import datetime
import sys
import threading
import time


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _eta(seconds: float | None) -> str:
    return "n/a" if seconds is None else str(datetime.timedelta(seconds=round(seconds)))


class WorkProgress:
    def __init__(self, what: str, total: int, unit: str = "", stream=None, enabled: bool = True,
                 plain_every_s: float = 0.0):
        """`plain_every_s`: without a terminal, at most one line per this many seconds (and the last one when
        there were others: work done within the interval prints nothing), for many short units; 0: a line
        per unit."""
        self.what, self.total, self.unit, self.enabled = what, max(int(total), 0), unit, enabled
        self.stream = stream or sys.stdout
        self.plain_every_s = plain_every_s
        self.done = 0
        self._lock = threading.Lock()  # the ticker thread (tick_every) and the caller both advance
        self._t0 = self._said = time.monotonic()
        self._bar = None
        self._ticker: threading.Thread | None = None
        self._lines = 0

    @property
    def tty(self) -> bool:
        return _is_tty(self.stream)

    def eta_s(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self._t0) / self.done * max(self.total - self.done, 0)

    def __enter__(self) -> "WorkProgress":
        return self.start()

    def start(self) -> "WorkProgress":
        if self.enabled and self.tty and self.total:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            # other output that goes to the terminal too is printed above the bar; a stream redirected to a file
            # (the sweep's nccl-tests table on stdout) is left alone
            columns = (TextColumn(f"[{self.what}]", markup=False), BarColumn(), MofNCompleteColumn(),
                       TextColumn(self.unit, markup=False), TimeElapsedColumn(), TextColumn("eta"),
                       TimeRemainingColumn(), TextColumn("{task.description}", markup=False))
            self._bar = Bar(*columns, console=Console(file=self.stream), redirect_stdout=_is_tty(sys.stdout),
                            redirect_stderr=_is_tty(sys.stderr))
            self._task = self._bar.add_task("", total=self.total)
            self._bar.start()
        return self

    def advance(self, n: int = 1, note: str = "") -> None:
        if not self.enabled:
            return
        with self._lock:
            self._advance(n, note)

    def _advance(self, n: int, note: str) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n, description=note)
        elif (time.monotonic() - self._said >= self.plain_every_s
              or (self.done >= self.total and self._lines)):  # the last line ends a log that has some
            self._lines += 1
            self._said = time.monotonic()
            unit = f" {self.unit}" if self.unit else ""
            tail = f" ({note})" if note else ""
            print(f"[{self.what}] {self.done}/{self.total}{unit} done, eta {_eta(self.eta_s())}{tail}",
                  file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def tick_every(self, period_s: float = 1.0) -> "WorkProgress":
        """Advance by one unit every `period_s` until close(), while the caller waits on something timed (a
        link test's seconds): on a terminal only; plain output gets no line per second."""
        if self._bar is not None and self._ticker is None:
            self._stop = threading.Event()

            def tick():
                while not self._stop.wait(period_s):
                    with self._lock:  # checked and advanced at once: the caller may finish the work meanwhile
                        if self.done >= self.total:
                            return
                        self._advance(1, "")
            self._ticker = threading.Thread(target=tick, daemon=True)
            self._ticker.start()
        return self
