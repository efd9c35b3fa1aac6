"""A rank lost on another host (its process killed) in the fabric lab: rank 0 cannot check that host's
process ids, so run.json names the rank and host from the address in the transport's error.

Needs root and iproute2; elsewhere skipped with the reason."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from launch.lab import Lab, leftover_namespaces, run_in_lab

from ..conftest import TINY

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="the fabric lab needs root and iproute2")


@pytest.mark.integration
@needs_root
def test_rank_lost_on_another_host_is_named_with_its_host(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.setenv("FABRIC_HARNESS_CRASH_AFTER_STEP", "2")
    monkeypatch.setenv("FABRIC_HARNESS_CRASH_RANK", "1")
    args = [TINY, "max_steps=30", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
            "distributed.timeout_s=60"]
    with Lab(2, "none") as lab:
        code = run_in_lab(lab, 1, args, str(out), 240, 29437)
        namespaces = lab.namespaces
    assert not [ns for ns in leftover_namespaces() if ns in namespaces]
    assert code != 0
    # the lab names the node whose agent failed (only node 0's output is shown: its error is the lost peer's echo)
    assert f"[lab] node 1's torchrun agent exited 1 (its log: {out / 'logs' / 'lab-node1.log'})" in capsys.readouterr().err
    info = json.loads((out / "run.json").read_text())
    peer = info["hosts"][1]
    assert peer["hostname"] == "lab-node1" and peer["address"]
    assert info["status"] == "failed", info
    assert info["error"].startswith(f"rank 1 (host lab-node1, address {peer['address']}) lost after step "), \
        info["error"]
