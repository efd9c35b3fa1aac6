"""bench.loop_parity and bench.gpu.profile_step run end to end on CPU (tiny recipe, few steps): the harness
and the hand loop interleaved, a ratio, the profiler's breakdown, and (profile_step) Chrome traces and
tables under --out. No timing is asserted: numbers live in bench/results/."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

FEW = ["--steps", "9", "--warmup", "2", "--profile", "2", "data.seq_len=64", "train.global_batch_size=4",
       "train.micro_batch_size=2"]


@pytest.mark.integration
def test_loop_parity_at_two_ranks_gives_a_ratio_and_the_ops_that_differ(tmp_path):
    out = tmp_path / "parity.jsonl"
    res = subprocess.run([sys.executable, "-m", "bench.loop_parity", "--nproc", "2", "--out", str(out), *FEW],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "world 2: harness" in res.stdout and "where the difference goes" in res.stdout
    line = json.loads(out.read_text().splitlines()[-1])
    world = line["worlds"]["2"]
    assert world["world_size"] == 2 and world["ratio"] > 0 and world["hand_steps_timed"] >= 3
    assert line["machine"].startswith("2-core CPU dev VM") and line["command"].startswith("python -m bench.loop_parity")
    # wall time, the loop thread's CPU time and the process's, each with both loops' medians and a ratio
    assert set(world["clocks"]) == {"wall", "cpu", "process_cpu"} and world["clocks"]["cpu"]["ratio"] > 0
    assert world["python_calls"]["harness_per_step"] > 0 and "MainThread" in world["threads_cpu_ms_per_step"]
    assert len(line["load_average_1_5_15"]["before"]) == 3
    # the harness reduces its item counts and its loss over dp (two all-reduces the hand loop has not)
    calls = {o["op"]: (o["harness_calls"], o["hand_calls"]) for o in world["ops_calls_differ"]}
    assert calls["c10d::allreduce_"][0] > calls["c10d::allreduce_"][1]


@pytest.mark.integration
def test_profile_step_writes_traces_and_tables_on_cpu(tmp_path):
    res = subprocess.run([sys.executable, "-m", "bench.gpu.profile_step", "--out", str(tmp_path), *FEW],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    traces = tmp_path / "traces"
    for name in ("harness", "hand"):
        assert (traces / f"{name}_table.txt").read_text().startswith(f"{name} loop, step")
        assert list(traces.glob(f"{name}_step*.json"))
    result = json.loads((tmp_path / "profile_step.json").read_text())
    assert result["device"] == "cpu" and result["ratio"] > 0 and result["recipe"] == "recipes/tiny_llama_lora.yaml"
    assert "Self CPU" in res.stdout  # the profiler's own key_averages table


def test_profile_step_refuses_too_few_steps(capsys):
    from bench.gpu.profile_step import main

    assert main(["--out", "unused", "--steps", "3"]) == 2
    assert capsys.readouterr().err.startswith("error: --steps 3 leaves fewer than 3 timed steps")


@pytest.mark.parametrize("argv, start", [
    (["--steps", "6", "--profile", "0"], "error: --steps 6 leaves fewer than 5 timed steps"),
    (["--repeat", "0"], "error: --repeat 0 / --callgrind 0; allowed: --repeat >= 1"),
])
def test_loop_parity_refuses_bad_counts_with_status_2(argv, start, capsys):
    from bench.loop_parity import main

    with pytest.raises(SystemExit) as exc:
        main(["--out", "", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(start) and err.count("\n") == 1 and "Traceback" not in err
