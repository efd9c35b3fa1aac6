"""The evaluation's front page where a variant has no value for a workload (review56: its row read a bare
"n/a" in every column, and its difference to the baseline "n/a", with no reason: every run failed)."""
from __future__ import annotations

import json

from launch.evaluate import run_evaluation
from launch.evaluate.spec import load_evaluation

from .test_evaluate import FakeLauncher, good, write


def test_a_variant_without_a_value_says_why(tmp_path, capsys):
    doc = good(tmp_path)
    doc["workloads"] = doc["workloads"][1:]  # train only
    ev = load_evaluation(write(tmp_path, doc))
    runs = tmp_path / "out" / "runs" / "train" / "slow"
    assert run_evaluation(ev, launch=FakeLauncher(fail={str(runs / "r1"), str(runs / "r2")}), render=False) == 1
    out = capsys.readouterr().out
    md = (tmp_path / "out" / "evaluation.md").read_text()
    assert "| slow | n/a: no completed run (2 of 2 did not complete) | n/a: no completed run |" in md, md
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert record["statistics"]["train"]["variants"]["slow"]["n"] == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("train") and " slow " in ln)
    assert "0/2" in line and "n/a: no completed run" in line, line


def test_the_runs_table_gives_each_metric_its_unit(tmp_path, capsys):
    """Sweep busbw (GB/s) and training iteration time (s) share one 'metric' column: a bare 0.5 was either."""
    ev = load_evaluation(write(tmp_path, good(tmp_path, repeats=1)))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 0
    md = (tmp_path / "out" / "evaluation.md").read_text()
    runs = md[md.index("## Runs in the order they ran"):]
    assert "| sweep | slow | completed | run |" in runs and "| 0.5 GB/s | runs/sweep/slow/r1 |" in runs, runs
    assert "| 0.5 s | runs/train/slow/r1 |" in runs, runs


def test_each_workload_table_says_which_way_is_better(tmp_path):
    """A +42% busbw is a gain and a +50% iteration time a loss; the 'vs' column now says which way is better."""
    ev = load_evaluation(write(tmp_path, good(tmp_path, repeats=1)))
    assert run_evaluation(ev, launch=FakeLauncher(), render=False) == 0
    md = (tmp_path / "out" / "evaluation.md").read_text()
    assert "| vs fast (higher is better) |" in md.split("## Workload sweep")[1].split("##")[0]
    assert "| vs fast (lower is better) |" in md.split("## Workload train")[1].split("##")[0]
