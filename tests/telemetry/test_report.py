"""`python -m telemetry report` on a recorded run, and on bad input."""
from __future__ import annotations

import subprocess
import sys

from telemetry.report import summarize
from telemetry.runs import load_run

from ..conftest import REPO
from .recorded import write_run


def recorded_run(path, energy=True):
    return write_run(path, energy=energy, expectation={
        "expected": "roce", "detected": "tcp", "match": False,
        "warning": "FABRIC MISMATCH: the recipe expects 'roce' but this run used 'tcp'"})


def test_summary_numbers(tmp_path):
    s = summarize(load_run(str(recorded_run(tmp_path / "run"))))
    assert s["steps"] == 6  # the truncated line is skipped
    assert s["step_time_median_s"] == 1.0 and s["samples_per_s"] == 8.0  # warm-up and profiled steps left out
    assert s["comm_share"] == 0.25 and s["exposed"]["share"] == 0.2
    assert s["energy"]["per_step_j"] == 500.0 and s["energy"]["per_sample_j"] == 62.5
    assert abs(s["straggler_s"] - 0.2) < 1e-12


def test_report_writes_html_markdown_and_figures(tmp_path):
    run = recorded_run(tmp_path / "run", energy=False)
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = run / "report"
    md = (out / "report.md").read_text()
    assert "FABRIC MISMATCH" in md and "| all_reduce | 1 | 1 MB | 0.25 s |" in md
    assert "not available: NVML not available" in md
    assert "<table>" in (out / "report.html").read_text()
    for name in ("loss.png", "step_time.png", "comm.png", "energy.png", "counters.png"):
        assert (out / name).stat().st_size > 1000, name


def test_report_on_a_missing_run_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "telemetry", "report", str(tmp_path / "nope")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {tmp_path / 'nope'}: not a directory"
