"""The shared progress helper (telemetry/work_progress.py): plain lines with an ETA when the output is not a
terminal, a rich bar when it is, nothing when disabled."""
from __future__ import annotations

import io
import time

from telemetry import work_progress as progress_mod
from telemetry.work_progress import WorkProgress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_carry_the_count_and_the_eta(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    out = io.StringIO()
    with WorkProgress("evaluate", 4, "runs", stream=out) as p:
        clock.now += 30
        p.advance(note="a x b: completed")
        clock.now += 30
        p.advance()
    assert out.getvalue().splitlines() == ["[evaluate] 1/4 runs done, eta 0:01:30 (a x b: completed)",
                                           "[evaluate] 2/4 runs done, eta 0:01:00"]
    assert "\x1b" not in out.getvalue()


def plain_output(monkeypatch, label: str, total: int, unit: str, every_s: float, step_s: float) -> str:
    """What a WorkProgress on a plain stream prints over `total` units, each `step_s` long on a fake clock."""
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "monotonic", clock)
    out = io.StringIO()
    with WorkProgress(label, total, unit, stream=out, plain_every_s=every_s) as p:
        for _ in range(total):
            clock.now += step_s
            p.advance()
    return out.getvalue()


def test_many_short_units_are_thinned_to_one_line_per_interval_and_the_last(monkeypatch):
    lines = plain_output(monkeypatch, "sweep", 100, "sizes", every_s=30, step_s=1).splitlines()
    assert [line.split()[1] for line in lines] == ["30/100", "60/100", "90/100", "100/100"]
    assert lines[-1] == "[sweep] 100/100 sizes done, eta 0:00:00"


def test_a_terminal_gets_a_bar_and_disabled_progress_prints_nothing():
    tty = Terminal()
    with WorkProgress("stage: sha256", 3, "files", stream=tty) as p:
        for _ in range(3):
            p.advance(note="[x]")
    text = tty.getvalue()
    assert "[stage: sha256]" in text and "3/3" in text and "[x]" in text and "\x1b[" in text
    quiet = io.StringIO()
    with WorkProgress("sweep", 3, stream=quiet, enabled=False) as p:
        p.advance()
    assert quiet.getvalue() == ""


def test_tick_every_advances_a_terminal_bar_until_closed():
    tty = Terminal()
    p = WorkProgress("linktest", 100, "s", stream=tty).start().tick_every(0.01)
    deadline = time.monotonic() + 10
    while p.done < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.close()
    done = p.done
    time.sleep(0.05)
    assert 3 <= done == p.done  # stopped with close()
    plain = WorkProgress("linktest", 100, "s", stream=io.StringIO()).start().tick_every(0.01)
    time.sleep(0.05)
    plain.close()
    assert plain.done == 0  # no line per second without a terminal


def test_quick_work_with_an_interval_prints_nothing(monkeypatch):
    assert plain_output(monkeypatch, "verify", 9, "files", every_s=10, step_s=0.1) == ""


def test_a_bar_on_the_terminal_leaves_a_redirected_stdout_alone(capsys):
    """The sweep draws on stderr while its nccl-tests table goes to stdout, perhaps into a file."""
    tty = Terminal()
    with WorkProgress("sweep", 2, "sizes", stream=tty) as p:
        print("#  size  count")  # stdout is pytest's capture here: not a terminal
        p.advance()
    assert capsys.readouterr().out == "#  size  count\n" and "#  size" not in tty.getvalue()


def test_the_ticker_and_the_caller_advance_under_one_lock():
    import sys
    import threading

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a lost `done += n` would show
    try:
        p = WorkProgress("work", 10**9, stream=io.StringIO(), plain_every_s=3600).start()
        workers = [threading.Thread(target=lambda: [p.advance() for _ in range(20000)]) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(before)
    assert p.done == 80000
    # the ticker stops at the total the caller reached
    t = WorkProgress("linktest", 5, "s", stream=Terminal()).start()
    t.advance(5)
    t.tick_every(0.001)
    time.sleep(0.05)
    t.close()
    assert t.done == 5
