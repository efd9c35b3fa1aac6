"""Who is slow, in the fabric lab: one node's link shaped slow, or one rank's compute delayed; the run
names the rank, the host and the kind (network or compute) within 20 steps, and a healthy run names
nobody. Needs root and iproute2 (skipped elsewhere, with the reason)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from launch.lab import Lab, LabError, leftover_namespaces

from ..conftest import REPO, TINY

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                reason="the fabric lab needs root and iproute2")

RUN = ["data.seq_len=128", "train.eval_every_samples=null", "train.save_final=false", "train.resume=never",
       "train.log_every=5", "distributed.timeout_s=60"]


def lab_run(out, steps: int, lab_args: list[str], overrides: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", "1gbit", "--timeout", "240",
                           *lab_args, "--", TINY, f"output_dir={out}", f"max_steps={steps}", *RUN, *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((out / "run.json").read_text())


def test_slow_node_arguments():
    with pytest.raises(LabError, match="--slow-node: got 2; allowed: a node from 0 to 1"):
        Lab(2, "1gbit", slow_node=2, slow_rate="10mbit")
    with pytest.raises(LabError, match="go together"):
        Lab(2, "1gbit", slow_node=1)
    with pytest.raises(LabError, match="--slow-rate: got 'slow'"):
        Lab(2, "1gbit", slow_node=1, slow_rate="slow")
    assert Lab(3, "none", slow_node=0, slow_rate="5mbit").describe()["slow_rate_bps"] == 5e6


@pytest.mark.integration
@needs_root
def test_only_the_slow_nodes_egress_is_shaped():
    with Lab(2, "1gbit", lab_id="fhtestslow", slow_node=1, slow_rate="10mbit") as lab:
        shown = [subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "fab0"], capture_output=True,
                                text=True, timeout=30).stdout for ns in lab.namespaces]
        assert "rate 1Gbit" in shown[0] and "rate 10Mbit" in shown[1]
    assert not [ns for ns in leftover_namespaces() if ns.startswith("fhtestslow")]


@pytest.mark.integration
@needs_root
def test_slow_link_is_named_network_with_its_host(tmp_path):
    # probes at steps 5, 10, 15 and 20: the network rule needs 3 of the last 4 flagged, so one may miss
    proc, info = lab_run(tmp_path / "link", 21, ["--slow-node", "1", "--slow-rate", "10mbit"], [])
    s = info["telemetry"]["stragglers"]
    assert (s["verdict"], s["rank"], s["host"]) == ("network", 1, "lab-node1"), s
    assert s["detected_at_step"] <= 20 and [f["verdict"] for f in s["findings"]] == ["network"]
    assert "[telemetry] straggler rank 1 on lab-node1: network" in proc.stdout  # node 0's output, as it ran
    # the report says it too (replayed from metrics.jsonl when run.json has no findings; here it has)
    rep = subprocess.run([sys.executable, "-m", "telemetry", "report", str(tmp_path / "link")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "link" / "report" / "report.md").read_text()
    assert "| verdict | network |" in md and "| host | lab-node1 |" in md


@pytest.mark.integration
@needs_root
def test_slow_compute_rank_is_named_compute_with_its_host(tmp_path):
    proc, info = lab_run(tmp_path / "compute", 12, [], ["debug.delay_rank=1", "debug.delay_s=1.0"])
    s = info["telemetry"]["stragglers"]
    assert (s["verdict"], s["rank"], s["host"]) == ("compute", 1, "lab-node1"), s
    assert s["detected_at_step"] <= 20 and [f["verdict"] for f in s["findings"]] == ["compute"]
    assert "[telemetry] straggler rank 1 on lab-node1: compute" in proc.stdout


@pytest.mark.integration
@needs_root
def test_healthy_run_names_nobody(tmp_path):
    """The short CI version; bench/stragglers.py runs 500 healthy steps (bench/results/stragglers.md)."""
    _, info = lab_run(tmp_path / "healthy", 30, [], [])
    s = info["telemetry"]["stragglers"]
    assert s["verdict"] == "none" and s["findings"] == [] and s["steps_checked"] == 30 and s["probes"] == 6, s
