"""launch/slurm/train.sbatch under a real Slurm: a private slurmctld, slurmd and munged on this machine.

CI installs Debian's slurmctld, slurmd, slurm-client and munge (.ci/run); where they are missing, or
without root (the daemons run as root), these tests are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.lab import Lab, leftover_namespaces

from ..conftest import REPO, TINY
from .slurm_cluster import Node, SlurmCluster, checked_cluster, free_port, module_marks

SBATCH = str(REPO / "launch" / "slurm" / "train.sbatch")
# The tiny recipe, 3 short steps (tests/conftest.py FAST, shorter still)
QUICK = ["max_steps=3", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
         "distributed.timeout_s=60"]
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED"}

pytestmark = module_marks()  # a private Slurm cluster runs real jobs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with checked_cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def job_env() -> dict:
    """What sbatch exports to the job: this interpreter first on PATH (its python runs launch.torchrun), one thread per rank."""
    return {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "NPROC_PER_NODE": "2",
            "RDZV_PORT": str(free_port())}


def submit(cluster: SlurmCluster, logs: Path, *args: str, cwd: Path | None = None, nodes: int = 1,
           timeout: float = 180, netns: str | None = "controller", env: dict | None = None,
           sbatch: tuple[str, ...] = ()) -> dict:
    """sbatch the script as a user would on CPU nodes, from `cwd` (default: the job's log directory); wait
    for the job to finish; returns its scontrol fields, its id and its output."""
    proc = cluster.run(["sbatch", "--parsable", f"--nodes={nodes}", "--gpus-per-node=0", *sbatch,
                        f"--output={logs / 'job-%j.out'}", SBATCH, *args], env={**job_env(), **(env or {})},
                       cwd=cwd or logs, netns=netns)
    assert proc.returncode == 0, proc.stderr + cluster.logs()
    return wait_job(cluster, logs, proc.stdout.strip().split(";")[0], timeout, netns)


def wait_job(cluster: SlurmCluster, logs: Path, job_id: str, timeout: float = 180,
             netns: str | None = "controller") -> dict:
    """The job's scontrol fields, id and output once it has finished."""
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
    assert "fabric-harness: 1 nodes x 2 ranks, rendezvous 127.0.0.1:" in log
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
    expected = "error: data.dataset: path '/no/such/data.jsonl' does not exist; allowed: "
    errors = [line for line in job["output"].splitlines() if line.startswith("error:")]
    assert job["JobState"] == "FAILED", job["output"][-4000:]
    assert len(errors) == 1 and errors[0].startswith(expected), job["output"][-4000:]
    assert "given 2 times" not in job["output"]  # the script's default output_dir yields to the user's
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 2
    assert info["error"] == errors[0].removeprefix("error: ")


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
    # summed over the steps: a step's counters are the sampler's window (0.1 s), which may hand a step's burst
    # to the next one; the windows are back to back, so the sum holds it
    assert sum(r["job_net_tx_bytes"] or 0 for r in rows) >= sum(r["comm_bytes"] for r in rows) > 0, rows


# ---------------------------------------------------------------- the job's Python, staged data, a wheelhouse

def test_job_whose_python_lacks_the_dependencies_stops_with_one_line_naming_them(cluster, tmp_path):
    """A plain image (here: a bare venv's python first on PATH) without the project's dependencies: each node
    says what is missing and how to get it, before torchrun starts."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{job_env()['PATH']}"}
    job = submit(cluster, tmp_path, TINY, f"output_dir={tmp_path / 'run'}", *QUICK, env=env)
    errors = [line for line in job["output"].splitlines() if line.startswith("error:")]
    assert job["JobState"] == "FAILED", job["output"][-4000:]
    assert len(errors) == 1, job["output"][-4000:]
    assert "lacks torch transformers peft datasets nvidia-ml-py pyyaml numpy matplotlib" in errors[0]
    assert "WHEELHOUSE" in errors[0] and "Dockerfile" in errors[0]
    assert not (tmp_path / "run").exists()  # torchrun never started


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The tiny recipe staged by launch.stage from a loopback hub (model and data set repositories)."""
    from launch import stage

    from .hub_server import HubServer, Repo, tiny_llama_files
    from .test_stage import STAGE_TINY, use_hub

    work = tmp_path_factory.mktemp("slurm-stage")
    repos = [Repo("fabric/tiny-llama", "model", tiny_llama_files(work / "ckpt")),
             Repo("fabric/dolly-mini", "dataset", {"fabric_dolly_mini.jsonl":
                                                   (REPO / "recipes/assets/fabric_dolly_mini.jsonl").read_bytes()})]
    with HubServer(repos) as hub, pytest.MonkeyPatch.context() as mp:
        use_hub(hub, mp, work)
        assert stage.main([TINY, *[o.replace("@v1", "") for o in STAGE_TINY], "--to", str(work / "staged")]) == 0
    return work / "staged"


def test_staged_recipe_runs_offline_after_installing_from_a_wheelhouse(cluster, tmp_path, staged):
    """STAGED_DIR and WHEELHOUSE as the sbatch header documents them: the node installs the wheelhouse's
    pinned distributions into the job's Python (a venv over this machine's packages, standing in for an NGC
    image), then trains from the staged recipe with HF_HUB_OFFLINE=1."""
    from .test_container import stand_in_wheel

    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    stand_in_wheel(wheelhouse, "fh-wheelhouse-probe", "1.0")
    (wheelhouse / "requirements.txt").write_text("fh-wheelhouse-probe==1.0\n")
    venv = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{job_env()['PATH']}", "STAGED_DIR": str(staged),
           "WHEELHOUSE": str(wheelhouse), "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    out = tmp_path / "run"
    job = submit(cluster, tmp_path, str(staged / "recipes" / "tiny_llama_lora.yaml"), f"output_dir={out}", *QUICK,
                 env=env)
    log = job["output"]
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log[-4000:]
    assert "installed 1 distributions from" in log and "[trainer] done: 3 steps" in log
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import importlib.metadata as m, sys; print(m.distribution('fh-wheelhouse-probe').locate_file(''))"],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0 and str(venv) in probe.stdout, probe.stderr  # into the job's Python, not ours
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["environment"]["HF_HUB_OFFLINE"] == "1"
    assert info["recipe"]["model"]["path"].startswith(str(staged)), info["recipe"]["model"]


@pytest.mark.parametrize("args,env,expected", [
    (["no/such/recipe.yaml"], {}, "error: recipe: 'no/such/recipe.yaml' is not a file (paths are relative to the "
                                  "submission directory {cwd}); allowed: a recipe YAML file, relative to that "
                                  "directory or absolute"),
    ([TINY], {"RDZV_PORT": "99999"}, "error: RDZV_PORT: got '99999'; expected a TCP port from 1 to 65535, without a leading 0"),
    ([TINY], {"NPROC_PER_NODE": "two"}, "error: NPROC_PER_NODE: got 'two'; expected an integer >= 1 (ranks per node), without a leading 0"),
    # a leading zero was bash's own 'value too great for base' line (octal) before this one
    ([TINY], {"RDZV_PORT": "08"}, "error: RDZV_PORT: got '08'; expected a TCP port from 1 to 65535, without a leading 0"),
    ([TINY], {"NPROC_PER_NODE": "09"}, "error: NPROC_PER_NODE: got '09'; expected an integer >= 1 (ranks per node), without a leading 0"),
])
def test_bad_submission_is_one_line_before_any_node_starts(cluster, tmp_path, args, env, expected):
    job = submit(cluster, tmp_path, *args, env=env)
    errors = [line for line in job["output"].splitlines() if line.startswith("error:")]
    assert job["JobState"] == "FAILED" and job["ExitCode"] == "2:0", job["output"][-3000:]
    assert errors == [expected.format(cwd=tmp_path)] and "fabric-harness:" not in job["output"], job["output"]


def test_missing_staged_dir_is_one_line(cluster, tmp_path):
    job = submit(cluster, tmp_path, TINY, *QUICK, env={"STAGED_DIR": str(tmp_path / "nowhere")})
    errors = [line for line in job["output"].splitlines() if line.startswith("error:")]
    assert job["JobState"] == "FAILED" and errors == [
        f"error: {tmp_path / 'nowhere'} (STAGED_DIR or WHEELHOUSE) is not a directory on "
        + errors[0].split(" is not a directory on ")[1]], job["output"][-3000:]


# ---------------------------------------------------------------- stopping a running job: scancel, --signal=B:

def started(cluster: SlurmCluster, logs: Path, run: Path, *args: str, sbatch: tuple[str, ...] = (),
            timeout: float = 180) -> str:
    """Submits a long tiny run into `run` and returns its job id once a training step is recorded."""
    proc = cluster.run(["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", *sbatch,
                        f"--output={logs / 'job-%j.out'}", SBATCH, TINY, f"output_dir={run}", *args,
                        *[o for o in QUICK if not o.startswith("max_steps=")], "max_steps=100000",
                        "train.save_every=0"], env=job_env(), cwd=logs)
    assert proc.returncode == 0, proc.stderr + cluster.logs()
    job_id = proc.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 2):
        if time.monotonic() > deadline:
            cluster.run(["scancel", job_id])
            pytest.fail(f"job {job_id} recorded no step in {timeout:.0f}s\n" + cluster.logs())
        time.sleep(0.5)
    return job_id


@pytest.mark.parametrize("how", [["scancel"], ["scancel", "--batch", "--signal=USR1"]], ids=["scancel", "batch-USR1"])
def test_stopped_job_saves_its_step_and_records_interrupted(cluster, tmp_path, how):
    """What preemption, scancel and `sbatch --signal=B:USR1@120` do to a running job: every rank finishes its
    step, saves a checkpoint, and run.json says `interrupted` (a rerun into the directory resumes there)."""
    run = tmp_path / "run"
    job_id = started(cluster, tmp_path, run)
    assert cluster.run([*how, job_id]).returncode == 0
    job = wait_job(cluster, tmp_path, job_id)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted", (info["status"], info["error"], job["output"][-4000:])
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] >= 2, latest
    if how == ["scancel"]:  # the agents too got SIGTERM: each says so in a line (torchrun's own was a traceback)
        assert "Traceback" not in job["output"], job["output"][-4000:]
        assert "torchrun: stopped by SIGTERM; its workers were sent SIGTERM" in job["output"], job["output"][-4000:]



def test_requeued_job_resumes_in_its_run_directory(cluster, tmp_path):
    """A job requeued (preemption with PreemptMode=REQUEUE, `scontrol requeue`, a node failure with --requeue)
    starts again under the same job id, so in the same run directory: its second attempt resumes from the
    checkpoint the first saved on SIGTERM, and the job's output keeps both attempts."""
    run = tmp_path / "run"
    job_id = started(cluster, tmp_path, run)
    assert cluster.run(["scontrol", "requeue", job_id]).returncode == 0
    deadline = time.monotonic() + 400  # Slurm holds a requeued job back (BeginTime) for a while
    out = tmp_path / f"job-{job_id}.out"

    def resumed() -> bool:
        info = json.loads((run / "run.json").read_text())
        return info.get("attempt") == 2 and "resumed from" in out.read_text(errors="replace")

    while not resumed():
        if time.monotonic() > deadline:
            cluster.run(["scancel", job_id])
            pytest.fail("no second attempt resumed\n" + cluster.run(["scontrol", "show", "job", job_id]).stdout
                        + out.read_text(errors="replace")[-3000:])
        time.sleep(0.5)
    count = (run / "metrics.jsonl").read_text().count("\n")
    while (run / "metrics.jsonl").read_text().count("\n") < count + 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    cluster.run(["scancel", job_id])
    job = wait_job(cluster, tmp_path, job_id)
    info = json.loads((run / "run.json").read_text())
    assert [a["status"] for a in info["attempts"]] == ["interrupted", "interrupted"], info["attempts"]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    assert steps == list(range(1, len(steps) + 1)), steps[:5]  # one run, resumed: not restarted at step 1
    log = job["output"]
    assert log.count("fabric-harness: 1 nodes x 2 ranks") == 2, log[-4000:]  # both attempts' output kept


def test_srun_of_several_trainer_tasks_without_torchrun_is_one_line_each(cluster, tmp_path):
    """`srun -n 2 python -m trainer ...`, the usual Slurm idiom, sets no RANK/WORLD_SIZE: each task was a run of
    one process in the same output_dir (one trained on, the other failed on its lock)."""
    out = tmp_path / "run"
    proc = cluster.run(["srun", "--ntasks=2", "--kill-on-bad-exit=1", sys.executable, "-m", "trainer", TINY,
                        f"output_dir={out}", *QUICK], env=job_env(), cwd=tmp_path, timeout=180)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert all(e.startswith("error: SLURM_STEP_NUM_TASKS: got 2, but RANK and WORLD_SIZE are unset") for e in errors)
    assert not out.exists()  # refused before any run directory


def test_script_run_with_bash_inside_salloc_trains(cluster, tmp_path):
    """`salloc --nodes 1` then `bash launch/slurm/train.sbatch RECIPE`: salloc sets no SLURM_CPUS_ON_NODE, which
    the script read under `set -u` ('unbound variable' before any node started)."""
    out = tmp_path / "run"
    proc = cluster.run(["salloc", "--nodes=1", "bash", SBATCH, TINY, f"output_dir={out}", *QUICK], env=job_env(),
                       cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "unbound variable" not in proc.stderr
    assert json.loads((out / "run.json").read_text())["status"] == "completed"


def test_ranks_per_node_default_to_each_nodes_gpus_inside_salloc(tmp_path):
    """`salloc --gpus-per-node 2` then `bash launch/slurm/train.sbatch RECIPE`: salloc's shell has no
    SLURM_GPUS_ON_NODE (only its steps do), and the script started 1 rank per node instead of 2. The GPUs are
    Slurm gres of stand-in device files; with no CUDA here the ranks train on the CPU."""
    with checked_cluster(tmp_path / "slurm", [Node("fhgpu0", gpus=2)]) as cluster:
        env = {k: v for k, v in job_env().items() if k != "NPROC_PER_NODE"}
        out = tmp_path / "run"
        proc = cluster.run(["salloc", "--nodes=1", "--gpus-per-node=2", "bash", SBATCH, TINY, f"output_dir={out}",
                            *QUICK], env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["layout"]["world_size"] == 2, info["layout"]


@pytest.mark.parametrize("args,env,expected", [
    # a path typed with a newline: its line was two lines of output
    (["/tmp/no\nsuch.yaml"], {}, "error: recipe: '/tmp/no\\nsuch.yaml' is not a file"),
    # the job's environment copied by hand without SLURM_SUBMIT_DIR: bash's 'unbound variable', exit 1
    ([TINY], {"SLURM_SUBMIT_DIR": None, "SLURM_JOB_NODELIST": "node[2-1]"}, "error: SLURM_JOB_NODELIST: got 'node[2-1]'"),
])
def test_the_script_outside_sbatch_says_one_line(tmp_path, args, env, expected):
    base = {**os.environ, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2",
            "SLURM_SUBMIT_DIR": str(tmp_path)}
    proc = subprocess.run(["bash", SBATCH, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in {**base, **env}.items() if v is not None})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith(expected), proc.stderr
