"""The launchers' console: copying a child's output to its log and the terminal, and lines that survive a
terminal whose reader has gone (`python -m launch.lab ... | head`)."""
from __future__ import annotations

import os
import sys


def console_gone(stream) -> None:
    """The reader of `stream` went away (`python -m launch.lab ... | head`): what is written there from now on
    goes to /dev/null, so the lab still drains its nodes' output, keeps their logs, tears down and returns the
    job's own exit code (it died of BrokenPipeError, exit 1, after a run that completed)."""
    try:
        gone = os.fstat(stream.fileno())
        devnull = os.open(os.devnull, os.O_WRONLY)
        for other in {stream, sys.stdout, sys.stderr}:  # `2>&1 | head`: stderr is the same pipe
            try:
                same = os.fstat(other.fileno())
            except (OSError, ValueError, AttributeError):
                continue
            if (same.st_dev, same.st_ino) == (gone.st_dev, gone.st_ino):
                os.dup2(devnull, other.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): nothing to redirect
        pass


def say(text: str, stream=None) -> None:
    """print() of one of the lab's own lines that survives a console whose reader has gone."""
    stream = stream or sys.stdout
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        console_gone(stream)


def pump(stream, sinks) -> None:
    """Copy a child's output, line by line, to every sink (a log file, the console) as it comes."""
    for line in iter(stream.readline, ""):
        for sink in sinks:
            try:
                sink.write(line)
                sink.flush()
            except ValueError:  # the node's log was closed: a process still holding the pipe outlived the run
                pass
            except BrokenPipeError:  # the console's reader has gone: keep draining the node (its log goes on)
                console_gone(sink)
