"""The published tool outputs in evidence_fixtures/ (sources in its README) and a stand-in for
subprocess.run that answers known command lines with them, for the capture and analysis tests."""
from __future__ import annotations

import os
import subprocess

FIX = os.path.join(os.path.dirname(__file__), "evidence_fixtures")


def fixture(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


class Tools:
    """subprocess.run for the collectors: each known command line (joined by spaces) prints its answer;
    any other command is not installed (FileNotFoundError, as subprocess raises it)."""

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def __call__(self, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        key = " ".join(cmd)
        if key not in self.answers:
            raise FileNotFoundError(cmd[0])
        return subprocess.CompletedProcess(cmd, 0, self.answers[key], "")
