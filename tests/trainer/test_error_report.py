"""trainer.error_report in-process: the rank that claims the run's `error:` line prints it, even when a
signal comes between the claim and the line."""
from __future__ import annotations

import os
import signal

from trainer import error_report


def test_a_signal_between_the_claim_and_the_line_waits_for_the_line(monkeypatch, capsys):
    """Under torchrun the rank that finds bad input second exits at once (the first claimed the line), and
    torchrun SIGTERMs the first: with the default action it died before printing and no rank said why."""
    events = []
    real_print = error_report.print_errors

    def print_after_a_sigterm(*messages):
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, after the other rank exited
        events.append("printed")
        return real_print(*messages)

    monkeypatch.setattr(error_report, "print_errors", print_after_a_sigterm)
    monkeypatch.setattr(error_report, "first_to_report", lambda: True)
    old = signal.signal(signal.SIGTERM, lambda *_: events.append("SIGTERM"))  # stands in for the default action
    try:
        error_report.report("train.lr: got 'nan'")
        assert events == ["printed", "SIGTERM"]  # held until the line is out, then taken as it came
    finally:
        signal.signal(signal.SIGTERM, old)
    assert capsys.readouterr().err == "error: train.lr: got 'nan'\n"


def test_a_full_or_read_only_filesystem_is_one_line_naming_output_dir():
    import errno

    assert error_report.no_room(OSError(errno.ENOSPC, "No space left on device"))
    assert error_report.no_room(OSError(errno.EROFS, "Read-only file system"))
    assert error_report.no_room(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not error_report.no_room(OSError(errno.EACCES, "Permission denied"))
    assert not error_report.no_room(ValueError("No space left on device"))
    line = error_report.no_room_line("runs/a", OSError(errno.ENOSPC, "No space left on device", "runs/a/run.json"))
    assert line == ("output_dir: 'runs/a/run.json' could not be written (No space left on device); what was "
                    "recorded before is kept; allowed: an output_dir on a writable filesystem with free space")
