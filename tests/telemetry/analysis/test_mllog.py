""":::MLLOG lines from a run directory, written with MLCommons' own logger (mlperf-logging), in the shape of
real MLPerf BERT logs (tests/telemetry/analysis/mllog/README.md), and passed by MLCommons' compliance checker."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from telemetry.analysis import mllog_lines as ml

from ...conftest import REPO
from ..recorded import write_run

REAL = Path(__file__).parent / "mllog" / "bert_run_pretraining_excerpt.txt"


def job(tmp_path, workload, key="eval_accuracy", values=(0.3, 0.55), reached=True):
    run = write_run(tmp_path / workload, recipe_extra={"workload": workload}, times=True,
                    info_extra={"start_time": "2023-11-14T22:12:30+00:00",
                                **({"final": {"target_reached_step": 6}} if reached else {})})
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()[:-1]]
    for r in rows:
        if r["step"] in (3, 6):
            r[key] = values[0] if r["step"] == 3 else values[1]
            r["samples_seen"] = r["step"] * 8
    (run / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    return run


def test_bert_lines_have_the_shape_of_mlperfs_own(tmp_path):
    res = ml.write(str(job(tmp_path, "bert_pretraining")))
    assert res["benchmark"] == "bert" and res["evaluations"] == 2
    ours = ml.lines(res["path"])
    real = ml.lines(str(REAL))
    for key in ("run_start", "eval_accuracy"):
        mine, theirs = next(r for r in ours if r["key"] == key), next(r for r in real if r["key"] == key)
        assert set(mine) == set(theirs) and mine["event_type"] == theirs["event_type"]
        assert set(theirs["metadata"]) <= set(mine["metadata"])
    evals = [r for r in ours if r["key"] == "eval_accuracy"]
    assert [(e["value"], e["metadata"]["epoch_num"]) for e in evals] == [(0.3, 24), (0.55, 48)]  # samples, as BERT
    stop = next(r for r in ours if r["key"] == "run_stop")
    start = next(r for r in ours if r["key"] == "run_start")
    assert stop["metadata"]["status"] == "success"
    # run_start at the first step's start (1.7e9 + 2 s step 1 end, 2 s long), run_stop at the last step's end
    assert start["time_ms"] == 1_700_000_000_000 and stop["time_ms"] == 1_700_000_007_000


def test_resnet_epochs_and_lora_loss(tmp_path):
    res = ml.write(str(job(tmp_path, "image_classification", reached=False)))
    evals = [r for r in ml.lines(res["path"]) if r["key"] == "eval_accuracy"]
    assert res["benchmark"] == "resnet" and evals[-1]["metadata"]["epoch_num"] == 1.0  # 48 of 48 samples
    assert next(r for r in ml.lines(res["path"]) if r["key"] == "run_stop")["metadata"]["status"] == "aborted"
    lora = ml.write(str(job(tmp_path, "llm_lora", key="eval_loss", values=(1.2, 0.92))))
    assert [r["value"] for r in ml.lines(lora["path"]) if r["key"] == "eval_accuracy"] == [1.2, 0.92]
    with pytest.raises(ml.MllogError, match="workload 'collectives' has no MLPerf Training benchmark"):
        ml.write(str(write_run(tmp_path / "sweep", recipe_extra={"workload": "collectives"}, times=True)))


@pytest.mark.integration
def test_mlcommons_compliance_checker_passes_all_three(tmp_path):
    for workload, key, values in (("bert_pretraining", "eval_accuracy", (0.3, 0.55)),
                                  ("image_classification", "eval_accuracy", (0.2, 0.4)),
                                  ("llm_lora", "eval_loss", (1.2, 0.92))):
        run = job(tmp_path, workload, key, values)
        proc = subprocess.run([sys.executable, "-m", "telemetry", "mllog", str(run)], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "compliance checker (training " in proc.stdout and "open division): SUCCESS" in proc.stdout
    # LoRA's quality is its eval loss: a run whose loss never went below 1.0 fails the checker's rule
    bad = job(tmp_path / "bad", "llm_lora", "eval_loss", (1.4, 1.2))
    proc = subprocess.run([sys.executable, "-m", "telemetry", "mllog", str(bad)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "FAILED" in proc.stdout


def test_no_local_path_in_the_lines(tmp_path):
    res = ml.write(str(job(tmp_path, "bert_pretraining")))
    assert {r["metadata"]["file"] for r in ml.lines(res["path"])} == {"mllog_lines.py"}


def test_out_is_a_file_path(tmp_path, capsys):
    """--out names the file the lines go to: a directory is refused in one line before anything is written,
    and an existing file is written over (it is not taken for a directory)."""
    from telemetry.__main__ import main

    run = job(tmp_path, "bert_pretraining")
    assert main(["mllog", str(run), "--out", str(tmp_path), "--no-check"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out: {str(tmp_path)!r} is a directory; allowed: a file path\n"
    old = tmp_path / "old.txt"
    old.write_text("before\n")
    assert main(["mllog", str(run), "--out", str(old), "--no-check"]) == 0
    assert old.read_text().startswith(":::MLLOG")


def test_a_damaged_record_is_an_mllog_error_naming_its_line(tmp_path):
    # found by mutation fuzzing: json.loads raised on a record cut short, and invalid UTF-8 raised on reading
    good = REAL.read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "mllog.txt"
    path.write_bytes(b"\xff\xfe other output\n" + good.encode() + b"\n" + good[:40].encode() + b"\n")
    with pytest.raises(ml.MllogError, match=r"mllog.txt:3: not a :::MLLOG record"):
        ml.lines(str(path))
    path.write_text(good + "\n:::MLLOG " + "[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(ml.MllogError, match=r":2: "):
        ml.lines(str(path))
    path.write_bytes(b"\xff\n" + good.encode() + b"\n")
    assert ml.lines(str(path))[0]["key"] == "run_start"


@pytest.mark.parametrize("field,value,line", [
    ("recipe", {"workload": "bert_pretraining", "train": {"global_batch_size": "8"}},
     "'recipe.train.global_batch_size' is \"8\"; allowed: an integer >= 1 (or null), as a run writes it"),
    ("recipe", {"workload": "bert_pretraining", "seed": "x" * 100}, "'recipe.seed' is \"xxxx"),
    ("data", {"train_samples": -5}, "'data.train_samples' is -5; allowed: an integer >= 1 (or null)"),
    ("data", {"eval_samples": "many"}, "'data.eval_samples' is \"many\"; allowed: an integer >= 0 (or null)"),
])
def test_a_count_of_the_wrong_type_is_refused_not_logged(tmp_path, field, value, line):
    """A string batch size was multiplied as a string ("8" * 6 samples) into the log, exit 0."""
    run = job(tmp_path, "bert_pretraining")
    info = json.loads((run / "run.json").read_text())
    info["layout"].pop("global_batch_size", None)
    (run / "run.json").write_text(json.dumps({**info, field: value}))
    with pytest.raises(ml.MllogError) as exc:
        ml.write(str(run), str(tmp_path / "m.txt"))
    assert line in str(exc.value)
    assert not (tmp_path / "m.txt").exists()


def test_steps_are_read_in_step_order(tmp_path):
    """Lines out of order started the log at the last step (run_stop before run_start)."""
    run = job(tmp_path, "bert_pretraining")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(reversed(lines)))
    got = ml.lines(ml.write(str(run))["path"])
    start = next(r for r in got if r["key"] == "run_start")["time_ms"]
    stop = next(r for r in got if r["key"] == "run_stop")["time_ms"]
    assert start < stop


def test_a_resumed_run_starts_at_its_first_attempt(tmp_path):
    """run.json `start_time` is the last attempt's: a finished run started again (the README's "running the same
    command again resumes") put init_start after run_stop. The first attempt's start is when the run began."""
    run = job(tmp_path, "llm_lora", key="eval_loss", values=(1.2, 0.92))
    info = json.loads((run / "run.json").read_text())
    info["attempts"] = [{"attempt": 1, "start_time": "2023-11-14T22:12:30+00:00", "status": "completed"},
                        {"attempt": 2, "start_time": "2023-11-15T09:00:00+00:00", "status": "completed"}]
    info["start_time"] = "2023-11-15T09:00:00+00:00"
    (run / "run.json").write_text(json.dumps(info))
    lines = ml.lines(ml.write(str(run))["path"])
    at = {r["key"]: r["time_ms"] for r in lines}
    assert at["init_start"] == 1_699_999_950_000 <= at["run_start"] <= at["run_stop"]
