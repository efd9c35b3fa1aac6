"""bench/gpu's plain loops (the baselines run.sh compares the harness with) run on CPU at tiny shapes, so a
change to them fails here rather than on a lent GPU, and report.py reads what they write. Integration:
each starts a Python process."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import REPO

SMALL = ["--steps", "2", "--warmup", "1", "--device", "cpu"]


def _run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                               "CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.integration
def test_plain_lora_and_plain_models_run_on_cpu_and_feed_the_report(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tokens = out / "tokens.jsonl"
    res = _run("bench/gpu/plain_lora.py", "--make-data", str(tokens), "--seq", "32", "--rows", "8")
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line)["input_ids"] for line in tokens.read_text().splitlines()]
    assert len(rows) == 8 and all(len(r) == 32 for r in rows)
    res = _run("bench/gpu/plain_lora.py", "--data", str(tokens), "--out", str(out / "plain_lora_eager.json"),
               "--layers", "2", "--hidden", "64", "--seq", "32", "--batch", "2", "--kernels", "none", *SMALL)
    assert res.returncode == 0, res.stderr[-2000:]
    lora = json.loads((out / "plain_lora_eager.json").read_text())
    assert lora["steps_timed"] == 2 and lora["tokens_per_s"] > 0 and lora["last_loss"] > 0
    assert lora["peak_memory_GiB"] is None and lora["mfu"] is None  # no GPU: unknown, not 0
    for model in ("bert", "resnet"):
        res = _run("bench/gpu/plain_models.py", model, "--smoke", "--batch", "2",
                   "--out", str(out / f"{model}_plain.json"), *SMALL)
        assert res.returncode == 0, res.stderr[-2000:]
        result = json.loads((out / f"{model}_plain.json").read_text())
        assert result["smoke"] is True and result["samples_per_s"] > 0 and result["median_step_s"] > 0
    results = tmp_path / "RESULTS.md"
    res = _run("bench/gpu/report.py", str(out), str(results), "--layers", "2", "--steps", "2", "--warmup", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    text = results.read_text()
    assert "| plain loop, eager | 2 | " in text and "| plain loop, eager | 2 | not measured" not in text
    assert "| BERT-Large, plain loop (AdamW) | 32 | " in text and "| ResNet-50, plain loop" in text
    assert "| ResNet-50, plain loop (SGD, channels_last, compiled) | 256 | not measured" not in text
