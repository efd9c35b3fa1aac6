"""Fixtures shared by the trainer tests that run DeepSpeed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import REPO


@pytest.fixture(scope="session")
def ds_op_built():
    """Build DeepSpeed's CPU communication op once (the session's TORCH_EXTENSIONS_DIR, tests/conftest.py)
    in one bounded process, so the runs that use it neither race for the build nor pay for it in their
    timeouts."""
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra: pip install -e .[test]")
    code = ("import os; os.environ.setdefault('DS_ACCELERATOR', 'cpu'); "
            "from deepspeed.comm.torch import build_shm_op; build_shm_op()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
