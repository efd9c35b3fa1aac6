"""bench/gpu/run.sh without a GPU: every step says `skipped: <reason>`, the script exits 0 and leaves
RESULTS.md alone; its report writer turns a run's output directory into RESULTS.md. Runs on CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

STEPS = ["install", "pytest", "data", "harness_telemetry_on", "harness_telemetry_off", "plain_lora", "report"]


@pytest.mark.integration
def test_dry_run_without_a_gpu_skips_every_step_with_its_reason(tmp_path):
    results = REPO / "bench" / "gpu" / "RESULTS.md"
    before = results.read_text()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(tmp_path)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [line for line in res.stdout.splitlines() if line.startswith("[")]
    assert [line.split("]")[0][1:] for line in lines] == STEPS, res.stdout
    assert lines[0] == "[install] skipped: --no-install given"
    for line in lines[1:]:
        assert "] skipped: " in line and "no CUDA GPU (torch.cuda.is_available() is False)" in line, line
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == STEPS and all(r[1] == "skipped" and r[3] for r in rows)
    assert results.read_text() == before


@pytest.mark.integration
def test_unknown_argument_is_one_error_line(tmp_path):
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--layer", "4"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: unknown argument '--layer'; allowed: --no-install, --layers N, --steps N, --out DIR"]


def _harness_dir(path: Path, tokens_per_s: float) -> None:
    (path / "ranks").mkdir(parents=True)
    rows = [{"step": s, "loss": 12.0 - s / 10, "step_time_s": 2048 / tokens_per_s, "tokens_per_s": tokens_per_s}
            for s in range(1, 11)]
    rows[0]["tokens_per_s"] = 1.0  # a slow first step is left out of the median
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run.json").write_text(json.dumps({"status": "completed", "software": {"torch": "2.11.0"}}))
    (path / "ranks" / "rank00000.final.json").write_text(json.dumps({"peak_memory_bytes": 40 << 30}))


@pytest.mark.integration
def test_report_writes_each_step_test_and_throughput(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.tsv").write_text("install\tok\t40\t\npytest\tfailed\t300\texit 1, log x\n")
    (out / "pytest.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_nccl" name="test_a"/>'
        '<testcase classname="tests.gpu.test_energy" name="test_b"><failure message="assert 0 &gt; 1"/></testcase>'
        '</testsuite></testsuites>')
    _harness_dir(out / "harness_telemetry_on", 9000.0)
    _harness_dir(out / "harness_telemetry_off", 10000.0)
    (out / "plain_lora.json").write_text(json.dumps({"tokens_per_s": 8000.0, "median_step_s": 0.256,
                                                     "peak_memory_GiB": 38.0, "last_loss": 11.9, "steps_timed": 20}))
    results = tmp_path / "RESULTS.md"
    res = subprocess.run([sys.executable, "bench/gpu/report.py", str(out), str(results), "--layers", "16"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = results.read_text()
    assert "| pytest | failed | 300 | exit 1, log x |" in text
    assert "| test_nccl::test_a | passed |  |" in text and "| test_energy::test_b | failed | assert 0 > 1 |" in text
    assert "16 of 32 layers" in text
    assert "| harness, telemetry on | 9,000 | 0.228 | 40.0 | 11.000 | 10 |" in text
    assert "| plain transformers + peft | 8,000 | 0.256 | 38.0 | 11.900 | 20 |" in text
    assert "Telemetry on vs off: -10.0% tokens/s." in text and "vs plain loop: +25.0% tokens/s." in text
