"""bench/gpu/run.sh without a GPU: every step says `skipped: <reason>`, the script exits 0 and leaves
RESULTS.md alone; its report writer turns a run's output directory into RESULTS.md. Runs on CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ..conftest import REPO

STEPS = ["install", "data", "harness_telemetry_on", "harness_telemetry_off", "plain_lora", "plain_lora_compile",
         "harness_compile", "plain_lora_eager", "bert_harness", "bert_plain", "resnet_harness", "resnet_plain",
         "profile", "pytest", "report"]


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
    assert lines[STEPS.index("pytest")].startswith("[pytest] skipped: --tests not given")
    for line in lines[1:]:
        if not line.startswith("[pytest]"):
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
        "error: unknown argument '--layer'; allowed: --no-install, --tests, --layers N, --steps N, --out DIR, "
        "--only STEP[,STEP...], --budget SECONDS, --save DIR"]


@pytest.mark.integration
@pytest.mark.parametrize("args,line", [
    (["--only", "pytets"], "error: --only: unknown step 'pytets'; allowed: " + ",".join(STEPS)),
    (["--only", ""], "error: --only: no step named; allowed: " + ",".join(STEPS)),
    (["--budget", "9m"], "error: --budget: '9m' is not a whole number of seconds; allowed: 1 or more"),
    (["--only", ","], "error: --only: no step named; allowed: " + ",".join(STEPS)),
    (["--layers", "abc"], "error: --layers: got 'abc'; allowed: a whole number of decoder layers (Llama-3-8B has "
                          "32) from 1 to 32"),
    (["--layers", "33"], "error: --layers: got '33'; allowed: a whole number of decoder layers (Llama-3-8B has "
                         "32) from 1 to 32"),
    (["--steps", "-1"], "error: --steps: got '-1'; allowed: a whole number of measured steps from 1 to 100000"),
    (["--layers"], "error: --layers: no value given; allowed: --layers N"),
    (["--layers=2"], "error: '--layers=2': an option and its value are two arguments here; allowed: --layers 2"),
    (["--save", "/proc/nope"], "error: --save: '/proc/nope' is not a directory this user can write (No such file "
                               "or directory); allowed: a writable directory path"),
])
def test_bad_only_and_budget_are_one_error_line(tmp_path, args, line):
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--out", str(tmp_path), *args], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [line]


@pytest.mark.integration
def test_an_out_that_is_a_file_or_empty_is_one_error_line_before_any_step(tmp_path):
    (tmp_path / "f").write_text("x")
    for out, line in ((str(tmp_path / "f"), f"error: --out: '{tmp_path / 'f'}' is not a directory this user can write "
                       "(it exists and is not a directory); allowed: a writable directory path"),
                      ("", "error: --out: got ''; allowed: a directory path")):
        res = subprocess.run(["bash", "bench/gpu/run.sh", "--out", out], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 2 and res.stderr.strip().splitlines() == [line] and not res.stdout


@pytest.mark.integration
def test_only_runs_the_named_steps_and_keeps_an_earlier_calls_rows(tmp_path):
    # a device allowing 10 minutes a command: the benchmark in one call, `--only pytest` in the next
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    first = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(tmp_path)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr[-2000:]
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(tmp_path), "--only", "pytest"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [line for line in res.stdout.splitlines() if line.startswith("[")]
    ran = [line.split("]")[0][1:] for line in lines if "not in --only" not in line]
    assert ran == ["pytest", "report"], res.stdout  # --only pytest means --tests; the report always
    assert lines[STEPS.index("pytest")].startswith("[pytest] skipped: no CUDA GPU")
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert sorted(r[0] for r in rows) == sorted(STEPS)  # the first call's rows kept, the re-run ones replaced
    assert [r[3] for r in rows if r[0] == "pytest"] == ["no CUDA GPU (torch.cuda.is_available() is False)"]


@pytest.mark.integration
def test_save_copies_what_a_device_machine_returns(tmp_path):
    # a lent device machine returns only what is under its $OUT (at most 8 files): steps.tsv, summary.md and one
    # tarball of the output directory's small files, rewritten after every step; the token rows stay behind
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    out, save = tmp_path / "out", tmp_path / "save"
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(out), "--save", str(save),
                          "--only", "pytest"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in save.iterdir()) == ["out.tar.gz", "steps.tsv"]  # no summary: no step ran
    assert (save / "steps.tsv").read_text() == (out / "steps.tsv").read_text()
    (out / "tokens.jsonl").write_text("{}\n")
    (out / "pytest.log").write_text("tests/gpu/test_energy.py::test_a PASSED\n")
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(out), "--save", str(save),
                          "--only", "pytest"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    with tarfile.open(save / "out.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["./pytest.log", "./steps.tsv"]
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--save"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["error: --save: no value given; allowed: --save DIR"]


SHAPE = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _harness_dir(path: Path, tokens_per_s: float) -> None:
    (path / "ranks").mkdir(parents=True)
    rows = [{"step": s, "loss": 12.0 - s / 10, "step_time_s": 8192 / tokens_per_s, "tokens_per_s": tokens_per_s,
             "samples_per_s": 4 * tokens_per_s / 8192, "mfu": 0.3, "compile_s": 0.0} for s in range(1, 11)]
    rows[0].update(tokens_per_s=1.0, compile_s=30.0)  # a slow, compiling first step is left out of the median
    rows[4]["compile_s"] = 2.0  # so is a later recompile
    rows[4]["tokens_per_s"] = 2.0
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 11, "lo')
    (path / "run.json").write_text(json.dumps({
        "status": "completed", "software": {"torch": "2.11.0"}, "throughput": {"peak_tflops_per_device": 989.0},
        "model": {"kernels": {"used": "liger"}}, "compile": {"compile_s": 32.0},
        "recipe": {"workload": "llm_lora", "model": {"config": SHAPE}, "lora": {"r": 16, "target_modules": TARGETS}}}))
    (path / "ranks" / "rank00000.final.json").write_text(json.dumps({"peak_memory_bytes": 40 << 30}))


@pytest.mark.integration
def test_report_writes_each_step_test_and_throughput(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # rows of a second call (--only) come after the first call's: the report puts them in run.sh's order
    (out / "steps.tsv").write_text("install\tok\t40\t\nreport\tok\t1\t\npytest\tfailed\t300\texit 1, log x\n")
    (out / "pytest.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_nccl" name="test_a"/>'
        '<testcase classname="tests.gpu.test_energy" name="test_b"><failure message="assert 0 &gt; 1"/></testcase>'
        '</testsuite></testsuites>')
    _harness_dir(out / "harness_telemetry_on", 9000.0)
    _harness_dir(out / "harness_telemetry_off", 10000.0)
    (out / "plain_lora.json").write_text(json.dumps({
        "tokens_per_s": 8000.0, "median_step_s": 1.024, "spread_pct": 2.5, "mfu": 0.28, "mfu_automodel": 0.26,
        "micro_batch": 4, "peak_memory_GiB": 38.0, "last_loss": 11.9, "steps_timed": 10}))
    (out / "bert_plain.json").write_text(json.dumps({"samples_per_s": 100.0, "median_step_s": 0.32,
                                                     "spread_pct": 1.0, "peak_memory_GiB": 20.0}))
    results = tmp_path / "RESULTS.md"
    res = subprocess.run([sys.executable, "bench/gpu/report.py", str(out), str(results), "--layers", "16"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    text = results.read_text()
    assert "| pytest | failed | 300 | exit 1, log x |\n| report | ok | 1 |  |" in text
    assert "| test_nccl::test_a | passed |  |" in text and "| test_energy::test_b | failed | assert 0 > 1 |" in text
    assert "16 of 32 layers" in text
    assert "\n- project: " in text and "unknown" not in text.split("- project: ")[1].splitlines()[0]  # a checkout
    # AutoModel's convention: 9,000 tokens/s x 32.2 GFLOP per token / 989 TFLOP/s
    assert "| harness, liger, telemetry on | 4 | 9,000 | 0.300 | 0.293 | 40.0 | 0.910 | 0.0% | 11.000 |" in text
    assert "| plain loop, liger | 4 | 8,000 | 0.280 | 0.260 | 38.0 | 1.024 | 2.5% | 11.900 |" in text
    assert "| plain loop, eager | 2 | not measured |" in text
    assert "- telemetry on / off: 0.900 (tokens/s)" in text and "- harness / plain loop (liger): 1.125 (tokens/s)" in text
    assert "| BERT-Large, plain loop (AdamW) | 32 | 100.0 | 20.0 | 0.320 | 1.0% |" in text
    assert "| ResNet-50, harness (SGD, channels_last) | 256 | not measured |" in text


@pytest.mark.integration
def test_an_absolute_out_dir_reaches_the_harness_as_the_token_rows_path(tmp_path):
    """`--out /abs/dir` (a device machine's $OUT, a scratch disk): the harness steps got
    data.dataset=$PWD//abs/dir/tokens.jsonl, a path that does not exist, and every Llama step would fail on the
    GPU. A stand-in for Python that says the GPU is there and records each command shows what the steps run."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> {calls}\ncat > /dev/null\nexit 0\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    results = REPO / "bench" / "gpu" / "RESULTS.md"
    before = results.read_text()
    env = {**os.environ, "PYTHON": str(fake)}
    res = subprocess.run(["bash", "bench/gpu/run.sh", "--no-install", "--out", str(out), "--only",
                          "harness_telemetry_on,plain_lora"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    ran = calls.read_text().splitlines()
    harness = next(c for c in ran if "llama3_8b_shapes.yaml" in c)
    plain = next(c for c in ran if "plain_lora.py --data" in c)
    assert f"data.dataset={out}/tokens.jsonl" in harness.split(), harness
    assert f"--data {out}/tokens.jsonl" in plain, plain
    assert results.read_text() == before  # the stand-in wrote no report
