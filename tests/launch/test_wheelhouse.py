"""launch/slurm/make_wheelhouse.sh: pip's own plan against the running environment, without torch or the
project itself, as train.sbatch's WHEELHOUSE installs it."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from ..conftest import REPO


@pytest.mark.integration
def test_wheelhouse_plans_only_what_this_environment_lacks(tmp_path):
    """Here every dependency is installed: the plan holds the project alone and requirements.txt is empty
    (torch, installed, is never planned)."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(["bash", str(REPO / "launch" / "slurm" / "make_wheelhouse.sh"), str(tmp_path / "wh")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads((tmp_path / "wh" / "plan.json").read_text())
    assert [i["metadata"]["name"] for i in plan["install"]] == ["fabric-harness"]
    assert (tmp_path / "wh" / "requirements.txt").read_text() == ""
    assert "0 distributions the image lacks: none" in proc.stdout
