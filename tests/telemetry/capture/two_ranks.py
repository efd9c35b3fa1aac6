"""A worker script of this directory under torchrun on 2 gloo ranks, each rank writing OUT/rankN.json."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ...conftest import REPO


def run_worker(script: str, out, timeout: int) -> list[dict]:
    """Run tests/telemetry/capture/SCRIPT OUT on 2 ranks; each rank's JSON, rank 0 first."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(REPO / "tests" / "telemetry" / "capture" / script), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
