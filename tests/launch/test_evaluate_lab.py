"""launch.evaluate in the fabric lab, for real: recipes/evaluations/lab_two_rates.yaml (two link rates x a
sweep and a training recipe x 2 repeats), then the same file with a wrong transport claim, which must be
flagged (exit 3, red marker) while every run is kept. Needs root and iproute2; skipped with the reason
elsewhere."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from launch.lab import leftover_namespaces

from ..conftest import REPO

EVAL = REPO / "recipes" / "evaluations" / "lab_two_rates.yaml"

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                 reason="the fabric lab needs root and iproute2")]


def evaluate(path, out, timeout=1500):
    return subprocess.run([sys.executable, "-m", "launch.evaluate", str(path), "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_two_rates_in_the_lab_then_a_wrong_claim_is_flagged(tmp_path):
    out = tmp_path / "out"
    proc = evaluate(EVAL, out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "[evaluate] round 2/2: variant 10mbit x workload sweep (run 5/8) ..." in proc.stdout
    assert proc.stdout.count("transport tcp over fab0") == 8
    record = json.loads((out / "evaluation.json").read_text())
    assert [r["status"] for r in record["runs"]] == ["completed"] * 8
    assert {v: d["verdict"] for v, d in record["verdicts"].items()} == {"1gbit": "ok", "10mbit": "ok"}
    assert record["exit_code"] == 0 and record["mismatched_variants"] == []
    # each run in its own lab at its variant's rate, torn down
    for r in record["runs"]:
        info = json.loads((tmp_path / r["dir"] / "run.json").read_text())
        assert info["fabric"]["lab"]["rate"] == r["variant"] and info["fabric"]["gloo"]["interface"] == "fab0"
        lab = json.loads((tmp_path / r["dir"] / "lab.json").read_text())
        assert not set(lab["namespaces"]) & set(leftover_namespaces())
    # one comparison: the training runs labelled by variant, the sweeps attached
    (report,) = record["reports"]
    assert report["error"] is None and report["sweep"] == "sweep"
    compare = json.loads((out / "compare" / "train" / "compare.json").read_text())
    assert compare["labels"] == ["1gbit", "10mbit"] and len(compare["groups"]["10mbit"]) == 2
    assert compare["sweeps"] and set(compare["sweeps"]) == {"1gbit", "10mbit"}
    page = (out / "evaluation.html").read_text()
    assert "Transport check passed" in page and "compare/train/compare.html" in page
    assert "banner bad" not in page
    # the same runs, a claim the lab cannot meet: every run kept, the variant flagged
    doc = yaml.safe_load(EVAL.read_text())
    doc["variants"][1]["expect_transport"] = "roce"
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(doc))
    proc = evaluate(wrong, out, timeout=600)
    assert proc.returncode == 3, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert proc.stdout.count("kept (completed earlier)") == 8
    assert "TRANSPORT MISMATCH: variant 10mbit claims roce" in proc.stdout
    page = (out / "evaluation.html").read_text()
    assert "<div class='banner bad'>TRANSPORT MISMATCH: variant 10mbit claims roce but did not use it" in page
    assert "<td class='bad'>MISMATCH: expected roce, the run used tcp over fab0</td>" in page
    record = json.loads((out / "evaluation.json").read_text())
    assert record["mismatched_variants"] == ["10mbit"] and record["exit_code"] == 3
    # the compare report, read on its own, says so too
    compared = (out / "compare" / "train" / "compare.md").read_text()
    assert "TRANSPORT MISMATCH 10mbit: expected roce, the run used tcp over fab0" in compared
    assert "roce: MISMATCH (expected roce, the run used tcp over fab0)" in compared
