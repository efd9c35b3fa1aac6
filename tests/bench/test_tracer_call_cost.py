"""bench.tracer_call_cost runs on CPU and records both figures (no timing asserted: numbers live in
bench/results/)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.integration
def test_tracer_call_cost_records_naming_and_whole_call_costs(tmp_path):
    out = tmp_path / "cost.jsonl"
    res = subprocess.run([sys.executable, "-m", "bench.tracer_call_cost", "--calls", "200", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    line = json.loads(out.read_text())
    assert line["benchmark"] == "tracer_call_cost" and line["machine"].startswith("2-core CPU dev VM")
    names = line["naming"]
    assert any(k.startswith("distributed.all_reduce") for k in names)
    assert any(k.startswith("_functional_collectives.all_reduce") for k in names)
    assert all(v["bind_us"] > 0 and v["arguments_of_us"] > 0 for v in names.values())
    whole = line["all_reduce_world1_gloo"]
    assert whole["untraced_us"] > 0 and whole["traced_us"] > whole["wrapper_own_us"] > 0


def test_too_few_calls_is_one_error_line():
    from bench.tracer_call_cost import main

    with pytest.raises(SystemExit, match=r"^error: --calls 5; allowed: >= 100$"):
        main(["--calls", "5"])
