"""The report's total energy: the sum of every step's job GPU energy, never a sum that counts a step without a
reading as 0 J (unknown values are null with a reason, never 0)."""
from __future__ import annotations

import json

from telemetry.analysis.report import summarize, tables
from telemetry.analysis.runs import load_run

from ..recorded import write_run


def _energy_row(s):
    rows = next(r for title, _, r in tables(s) if title == "Energy")
    return dict((k, v) for k, v in rows)


def test_total_energy_sums_every_step(tmp_path):
    run = load_run(str(write_run(tmp_path / "r")))
    s = summarize(run)
    assert s["energy"]["total_j"] == 6 * 500.0
    assert _energy_row(s)["total energy"] == "3,000 J"


def test_a_step_without_a_reading_leaves_the_total_unknown(tmp_path):
    d = write_run(tmp_path / "r")
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()[:6]]
    rows[3]["job_gpu_energy_j"] = None
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(load_run(str(d)))
    assert s["energy"]["per_step_j"] == 500.0
    assert s["energy"]["total_j"] is None
    assert _energy_row(s)["total energy"] == "n/a (1 of 6 steps without a reading)"
