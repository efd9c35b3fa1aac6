"""The training step reads device values into Python once (on a GPU each read waits for the queue)."""
from __future__ import annotations

import pytest

import json
import subprocess
import sys

from ..conftest import REPO


@pytest.mark.integration
def test_one_host_read_per_step_from_the_loop():
    res = subprocess.run([sys.executable, "-m", "bench.host_syncs"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    steps = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("JSON "))[5:])
    assert len(steps) == 3
    for where in steps:
        # losses, item counts and the gradient norm come back in one transfer; counts and clipping stay
        # on the device; transformers' packed-sequence check no longer reads (trainer/positions.py)
        assert len(where) == 1 and where[0].startswith("tolist at loop.py"), where
    forward = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("FORWARD "))[8:])
    given_arange = forward["transformers given torch.arange positions"]  # what the harness no longer does
    assert len(given_arange) == 1 and "masking_utils" in given_arange[0], given_arange
    assert forward["the harness's positions (llm_lora)"] == []
    assert forward["pipeline stage 0"] == [] and forward["pipeline stage 1"] == []
