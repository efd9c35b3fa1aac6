"""launch/slurm/train.sbatch with stand-ins for Slurm's scontrol and srun and for the job's Python: what the script
hands torchrun for a cluster this machine cannot be (here: nodes reached at IPv6 addresses)."""
from __future__ import annotations

import os
import subprocess

import pytest

from ..conftest import REPO, TINY

SBATCH = str(REPO / "launch" / "slurm" / "train.sbatch")
SCONTROL = """#!/bin/bash
if [[ $2 == hostnames ]]; then printf 'gpu001\\ngpu002\\n'; exit 0; fi
echo "NodeName=gpu001 Arch=x86_64 CoresPerSocket=32 NodeAddr=$STUB_NODE_ADDR NodeHostName=gpu001 Version=23.11"
"""
SRUN = """#!/bin/bash
while [[ $1 == --* ]]; do shift; done  # srun's own options; then the task, run here as node 0's
exec "$@"
"""
PYTHON = """#!/bin/bash
[[ $1 == -c ]] && exit 0  # the dependency check: nothing missing
printf '%s\\n' "$@" > "$STUB_OUT"
"""


def _stubs(tmp_path, addr: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN), ("python", PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_NODE_ADDR": addr,
            "STUB_OUT": str(tmp_path / "argv"), "SLURM_JOB_ID": "7", "SLURM_NODEID": "0"}


def _endpoint(tmp_path, proc) -> str:
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:2] == ["-m", "launch.torchrun"], argv
    return argv[argv.index("--rdzv-endpoint") + 1]


ADDRESSES = [("10.1.0.11", "10.1.0.11:29500"), ("fd00:1::11", "[fd00:1::11]:29500")]


@pytest.mark.integration
@pytest.mark.parametrize("addr, endpoint", ADDRESSES)
def test_the_rendezvous_endpoint_torchrun_gets_from_a_nodes_address(tmp_path, addr, endpoint):
    """An IPv6 NodeAddr (Slurm's EnableIPv6) went to torchrun as fd00:1::11:29500, which it cannot split into
    address and port: every node stopped with `error: --rdzv-endpoint: ... an IPv6 address without brackets`."""
    env = {**_stubs(tmp_path, addr), "SLURM_JOB_NODELIST": "gpu[001-002]", "SLURM_NNODES": "2",
           "SLURM_SUBMIT_DIR": str(REPO), "NPROC_PER_NODE": "8", "SLURM_JOB_CPUS_PER_NODE": "64(x2)"}
    proc = subprocess.run(["bash", SBATCH, TINY], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert _endpoint(tmp_path, proc) == endpoint


@pytest.mark.integration
@pytest.mark.parametrize("addr, endpoint", ADDRESSES)
def test_an_evaluations_slurm_step_brackets_an_ipv6_node_address_too(tmp_path, addr, endpoint):
    from launch.evaluate.runner import SLURM_STEP_BODY

    env = {**_stubs(tmp_path, addr), "SLURM_STEP_NODELIST": "gpu[001-002]", "SLURM_STEP_NUM_NODES": "2",
           "SLURM_STEP_ID": "3", "FH_NPROC": "8", "FH_RDZV_PORT": "29500"}
    proc = subprocess.run(["bash", "-c", SLURM_STEP_BODY, "fabric-harness", TINY], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)
    assert _endpoint(tmp_path, proc) == endpoint
