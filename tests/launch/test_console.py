"""launch/console.py: a node's output keeps going to its log when the terminal's reader has gone."""
from __future__ import annotations

import io
import os

from launch import console


class GoneReader(io.StringIO):
    """A console whose reader has gone (`| head` exited): every write is a broken pipe."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_broken_console_does_not_stop_the_log(tmp_path):
    """Round 6 of the lab: `python -m launch.lab ... | head -1` left a completed run's lab with exit 1 and a
    BrokenPipeError traceback; a long run's node 0 would have blocked on its full output pipe."""
    log = io.StringIO()
    console.pump(io.StringIO("step 1\nstep 2\nstep 3\n"), [log, GoneReader()])
    assert log.getvalue() == "step 1\nstep 2\nstep 3\n"


def test_a_line_to_a_gone_reader_sends_the_rest_to_devnull(tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    stream = os.fdopen(write, "w")
    console.say("[lab] torn down", stream)  # no BrokenPipeError
    console.say("[lab] and again", stream)
    assert os.readlink(f"/proc/self/fd/{stream.fileno()}") == os.devnull
    stream.close()


def test_the_labs_stderr_lines_survive_a_reader_gone_behind_2_and_1(tmp_path, monkeypatch):
    """`python -m launch.lab ... 2>&1 | head`: when head has gone before node 0 writes again, the next line is one
    of the lab's own on stderr (a run.json closed, the queues' drops, 'torn down'); printed plainly it raised
    BrokenPipeError, and the lab ended with a traceback and exit 1 instead of the job's exit code."""
    import json
    import sys

    from launch import lab

    (tmp_path / "run.json").write_text(json.dumps({"status": "running"}))
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    stream = os.fdopen(write, "w", buffering=1)  # line-buffered, as Python's stderr is on a pipe
    monkeypatch.setattr(sys, "stderr", stream)
    lab._close_abandoned_record(str(tmp_path))  # no BrokenPipeError
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "interrupted"
    assert os.readlink(f"/proc/self/fd/{stream.fileno()}") == os.devnull
    monkeypatch.undo()
    stream.close()
