"""`python -m telemetry compare` on recorded runs: training and sweep tables, parity, the refusal."""
from __future__ import annotations

import json
import subprocess
import sys

from telemetry.compare import loss_parity
from telemetry.runs import load_run

from ..conftest import REPO
from .recorded import sweep_result, write_run


def cli(*args):
    return subprocess.run([sys.executable, "-m", "telemetry", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_training_comparison_tables_parity_and_projection(tmp_path):
    a = write_run(tmp_path / "fast", rate_bps=1e9, step_time=1.0, comm_time=0.25)
    b = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0, comm_time=1.25)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| iteration time, median | 1 s | 2 s (+100.0%) |" in md
    assert "| samples/s | 8 | 4 (-50.0%) |" in md
    assert "| verdict | identical |" in md
    assert "Projection from 1000mbit lab" in md and "100mbit lab" in md
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["kind"] == "training" and result["parity"]["verdict"] == "identical"
    for name in ("loss.png", "step_time.png", "comm.png", "projection.png"):
        assert (tmp_path / "cmp" / name).stat().st_size > 1000


def test_loss_parity_finds_divergence(tmp_path):
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", losses=[3.0, 2.9, 2.8, 2.75, 2.6, 2.5])
    parity = loss_parity([load_run(str(a)), load_run(str(b))])
    assert parity["verdict"].startswith("DIFFERENT") and parity["at_step"] == 4


def test_refuses_different_recipes_and_says_why(tmp_path):
    a = write_run(tmp_path / "a", lr=0.01)
    b = write_run(tmp_path / "b", lr=0.001)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 2
    assert "refusing to compare runs of different recipes" in proc.stderr
    assert "train.lr (0.01 vs 0.001)" in proc.stderr and "--allow-mismatch" in proc.stderr
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--allow-mismatch")
    assert proc.returncode == 0
    assert "compared despite different recipes" in (tmp_path / "cmp" / "compare.md").read_text()


def test_sweep_comparison_with_latency_reduction(tmp_path):
    tcp = write_run(tmp_path / "tcp", sweep=sweep_result(scale=3.0))
    roce = write_run(tmp_path / "roce", transport="roce", sweep=sweep_result(scale=1.0))
    proc = cli("compare", str(tcp), str(roce), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| all_reduce_4B | 120 | 40 (-67%) |" in md  # 120 us -> 40 us: -67%, as in the RoCE report
    assert "Average bus bandwidth" in md
    assert (tmp_path / "cmp" / "sweep_all_reduce.png").exists()
    training = write_run(tmp_path / "train")
    proc = cli("compare", str(tcp), str(training), "--out", str(tmp_path / "x"), "--allow-mismatch")
    assert proc.returncode == 2 and "cannot compare a collective sweep with a training run" in proc.stderr


def test_partial_communication_is_marked_in_the_comparison(tmp_path):
    untimed = {"all_gather": {"count": 2, "bytes": 4096, "time_s": None, "untimed": 2, "untimed_bytes": 4096,
                              "busbw_gbps": None, "untimed_reason": "functional collectives are timed on NCCL only"}}
    a = write_run(tmp_path / "fast", rate_bps=1e9, extra_comm=untimed)
    b = write_run(tmp_path / "slow", rate_bps=1e8, step_time=2.0, comm_time=1.25)
    proc = cli("compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert ("| communication share | 25.0% (partial: 4.1 kB per step untimed: functional collectives are timed "
            "on NCCL only) | 62.5% |") in md
    assert "| all_gather | n/a / n/a (partial) | n/a / n/a |" in md
    assert "; partial: the baseline has 4.1 kB per step untimed" in md
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["projection"][0]["partial"] is True
