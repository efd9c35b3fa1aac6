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
        ours = [w for w in where if "masking_utils" not in w]
        # losses, item counts and the gradient norm come back in one transfer; counts and clipping stay
        # on the device
        assert len(ours) == 1 and ours[0].startswith("tolist at loop.py"), where
        # transformers' packed-sequence check reads once per forward (4 micro-batches at world 1); it
        # used to be twice per forward with the padding mask passed
        assert len(where) - len(ours) <= 4, where
