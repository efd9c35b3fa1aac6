"""launch.evaluate under a real Slurm (the private cluster of tests/launch/slurm_cluster.py): one allocation
made with salloc, every run a step inside it (srun), the allocation released at the end. Skipped with the
reason without Slurm/munge or root."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ..conftest import REPO, TINY
from .slurm_cluster import checked_cluster, module_marks

QUICK = ["max_steps=3", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
         "train.save_final=false", "distributed.timeout_s=60"]

pytestmark = module_marks()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with checked_cluster(tmp_path_factory.mktemp("slurm-evaluate")) as c:
        yield c


def test_two_variants_run_as_steps_of_one_allocation(cluster, tmp_path):
    doc = {"name": "slurm_pair", "launcher": "slurm", "repeats": 1, "out": str(tmp_path / "out"),
           "slurm": {"nodes": 1, "nproc_per_node": 2, "timeout": 300},
           "variants": [{"name": "routed", "expect_transport": "intra-node"},
                        {"name": "pinned", "expect_transport": "lo", "env": {"GLOO_SOCKET_IFNAME": "lo"},
                         "hosts": ["fhnode0"]}],
           "workloads": [{"name": "train", "recipe": TINY, "overrides": QUICK}]}
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(doc))
    # this interpreter first on PATH (its python runs launch.torchrun), as a user's environment would have it
    env = cluster.env({"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                       "OMP_NUM_THREADS": "1"})
    env.pop("SLURM_JOB_ID", None)
    proc = subprocess.run([sys.executable, "-m", "launch.evaluate", str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:] + cluster.logs()
    assert "[evaluate] requesting one Slurm allocation: salloc --no-shell --nodes=1 --job-name=fh-eval-slurm_pair " \
           "--exclusive --nodelist=fhnode0" in proc.stdout
    job = re.search(r"allocation granted: job (\d+)", proc.stdout).group(1)
    assert f"[evaluate] allocation {job} released (scancel)" in proc.stdout
    record = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert [r["status"] for r in record["runs"]] == ["completed", "completed"]
    for r in record["runs"]:
        info = json.loads((tmp_path / r["dir"] / "run.json").read_text())
        assert info["environment"]["SLURM_JOB_ID"] == job  # both runs: steps of the one allocation
        assert info["layout"]["world_size"] == 2
    assert {v: d["verdict"] for v, d in record["verdicts"].items()} == {"routed": "ok", "pinned": "ok"}
    assert record["reports"][0]["error"] is None and (tmp_path / "out" / "compare" / "train" / "compare.html").exists()
    state = cluster.run(["scontrol", "--oneliner", "show", "job", job]).stdout
    assert "JobState=CANCELLED" in state or "JobState=COMPLETED" in state, state
