"""launch/slurm/train.sbatch under a real Slurm: a private slurmctld, slurmd and munged on this machine.

CI installs Debian's slurmctld, slurmd, slurm-client and munge (.ci/run); where they are missing, or
without root (the daemons run as root), these tests are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from launch.lab import Lab, leftover_namespaces

from ..conftest import REPO, TINY
from .slurm_cluster import Node, SlurmCluster, free_port, missing_tools

SBATCH = str(REPO / "launch" / "slurm" / "train.sbatch")
# The tiny recipe, 3 short steps (tests/conftest.py FAST, shorter still)
QUICK = ["max_steps=3", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
         "distributed.timeout_s=60"]
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED"}

_missing = missing_tools()
pytestmark = [
    pytest.mark.integration,  # a private Slurm cluster runs real jobs
    pytest.mark.skipif(bool(_missing), reason=f"Slurm/munge not installed (missing: {', '.join(_missing)}); "
                       "apt-get install slurmctld slurmd slurm-client munge"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the private Slurm cluster runs its daemons as root"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    with c:
        yield c
    assert not c.tagged_pids(), "processes of the test cluster outlived its teardown"


def job_env() -> dict:
    """What sbatch exports to the job: this interpreter's torchrun first on PATH, one thread per rank."""
    return {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "NPROC_PER_NODE": "2",
            "RDZV_PORT": str(free_port())}


def submit(cluster: SlurmCluster, logs: Path, *args: str, cwd: Path | None = None, nodes: int = 1,
           timeout: float = 180, netns: str | None = "controller", env: dict | None = None) -> dict:
    """sbatch the script as a user would on CPU nodes, from `cwd` (default: the job's log directory); wait
    for the job to finish; returns its scontrol fields, its id and its output."""
    proc = cluster.run(["sbatch", "--parsable", f"--nodes={nodes}", "--gpus-per-node=0",
                        f"--output={logs / 'job-%j.out'}", SBATCH, *args], env={**job_env(), **(env or {})},
                       cwd=cwd or logs, netns=netns)
    assert proc.returncode == 0, proc.stderr + cluster.logs()
    job_id = proc.stdout.strip().split(";")[0]
    # polling here rather than sbatch --wait, whose back-off adds up to half a minute
    deadline = time.monotonic() + timeout
    while True:
        show = cluster.run(["scontrol", "--oneliner", "show", "job", job_id], netns=netns).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", show))
        if fields.get("JobState") in FINISHED:
            break
        if time.monotonic() > deadline:
            cluster.run(["scancel", job_id], netns=netns)
            pytest.fail(f"job {job_id} still {fields.get('JobState')} after {timeout:.0f}s\n"
                        + (logs / f"job-{job_id}.out").read_text(errors="replace")[-4000:] + cluster.logs())
        time.sleep(0.5)
    fields["id"] = job_id
    fields["output"] = (logs / f"job-{job_id}.out").read_text(errors="replace")
    return fields


def test_tiny_recipe_job_completes_with_a_complete_run_directory(cluster, tmp_path):
    # submitted from outside the checkout: the run directory defaults to runs/<recipe>-<job id> there
    job = submit(cluster, tmp_path, TINY, *QUICK)
    log = job["output"]
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-4000:]
    assert f"fabric-harness: 1 nodes x 2 ranks, rendezvous 127.0.0.1:" in log
    assert "[trainer] done: 3 steps" in log and not [l for l in log.splitlines() if l.startswith("error:")]
    run = tmp_path / "runs" / f"tiny_llama_lora-{job['id']}"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["error"] is None
    assert info["layout"]["world_size"] == 2 and info["environment"]["SLURM_JOB_ID"] == job["id"]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    assert steps == [1, 2, 3]
    finals = [json.loads(p.read_text()) for p in sorted((run / "ranks").glob("rank*.final.json"))]
    assert [f["rank"] for f in finals] == [0, 1] and len(list((run / "ranks").glob("*.telemetry.jsonl"))) == 2
    assert finals[0]["trainable"]["sha256"] == finals[1]["trainable"]["sha256"]  # dp replicas agree
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 3 and (run / "checkpoints" / latest["path"]).is_dir()


def test_bad_recipe_job_fails_with_one_error_line_in_its_output_and_run_json(cluster, tmp_path):
    out = tmp_path / "bad"
    job = submit(cluster, tmp_path, TINY, f"output_dir={out}", "data.dataset=/no/such/data.jsonl", *QUICK)
    expected = "error: data.dataset: path '/no/such/data.jsonl' does not exist"
    errors = [line for line in job["output"].splitlines() if line.startswith("error:")]
    assert job["JobState"] == "FAILED", job["output"][-4000:]
    assert errors == [expected], job["output"][-4000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 2
    assert info["error"] == expected.removeprefix("error: ")


needs_lab = pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                               reason="two Slurm nodes in the fabric lab need iproute2 (ip, tc)")


@needs_lab
def test_two_slurm_nodes_in_the_fabric_lab_run_the_job_over_the_shaped_link(tmp_path):
    # each slurmd in its own network namespace, the two joined only by the lab's shaped veth pair;
    # slurmctld and the client commands live in node 0's namespace
    with Lab(2, "100mbit", lab_id="fhslurm") as lab:
        nodes = [Node(f"fhnode{i}", lab.address(i), ns) for i, ns in enumerate(lab.namespaces)]
        with SlurmCluster(tmp_path / "slurm", nodes, controller_netns=lab.namespaces[0],
                          controller_addr=lab.address(0)) as cluster:
            out = tmp_path / "run"
            job = submit(cluster, tmp_path, TINY, f"output_dir={out}", *QUICK, nodes=2,
                         env={"NPROC_PER_NODE": "1"})
            assert cluster.stop() == []
    assert not [ns for ns in leftover_namespaces() if ns.startswith("fhslurm")]
    log = job["output"]
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-4000:]
    assert f"fabric-harness: 2 nodes x 1 ranks, rendezvous {lab.address(0)}:" in log
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["layout"]["world_size"] == 2
    assert info["environment"]["MASTER_ADDR"] == lab.address(0)  # --local-addr from the route to the head
    assert info["fabric"]["gloo"]["interface"] == "fab0", info["fabric"]["gloo"]  # the lab's link, not lo
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["job_net_tx_bytes"] and r["job_net_tx_bytes"] >= r["comm_bytes"] > 0 for r in rows), rows
