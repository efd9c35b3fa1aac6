"""Every command line, as a user types it, with bad input: exit 2 and exactly one `error:` line on stderr
naming what is wrong (and what is allowed), no traceback. One representative mistake or two per entry
point; the in-process tables beside each module hold the rest. No row but launch.torchrun's (torch's own parser)
imports torch (--dry-run, or a check that comes before the heavy imports), so the module runs in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, TINY
from tests.telemetry.recorded import write_run

pytestmark = pytest.mark.integration

SWEEP = str(REPO / "recipes" / "collectives.yaml")
EVALUATION = REPO / "recipes" / "evaluations" / "lab_two_rates.yaml"
TABLE = str(REPO / "tests" / "telemetry" / "nccl_tests_tables" / "all_reduce_perf_h100_16ranks.txt")
PY = [sys.executable, "-m"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The inputs the rows name: recorded runs (two workloads, one damaged), bad YAML, an evaluation."""
    root = tmp_path_factory.mktemp("bad-input")
    runs = {"llm": write_run(root / "llm", name="a"),
            "bert": write_run(root / "bert", name="b", recipe_extra={"workload": "bert_pretraining"}),
            "listjson": write_run(root / "listjson", name="c")}
    (runs["listjson"] / "run.json").write_text("[1, 2]")
    (root / "list.yaml").write_text("- a\n- b\n")
    (root / "binary.txt").write_bytes(b"\x00\xff\x81" * 64)
    doc = yaml.safe_load(EVALUATION.read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(REPO / workload["recipe"])
    doc["out"] = str(root / "eval-out")
    (root / "no-variants.yaml").write_text(yaml.safe_dump({**doc, "variants": []}))
    (root / "repeats-0.yaml").write_text(yaml.safe_dump({**doc, "repeats": 0}))
    (root / "duplicate-key.yaml").write_text(yaml.safe_dump(doc) + "repeats: 3\n")
    (root / "repeats-huge.yaml").write_text(yaml.safe_dump({**doc, "repeats": 10**30}))
    (root / "header-only.txt").write_text("#  size  count  type  redop  root  time  algbw  busbw  #wrong\n")
    doc["variants"][0]["env"] = {"WORLD_SIZE": "4"}
    (root / "env-world-size.yaml").write_text(yaml.safe_dump(doc))
    os.mkfifo(root / "fifo")  # no writer: a read of it waits forever
    (root / "empty-dir").mkdir()
    (root / "lock-fifo").mkdir()  # round 8: a run directory whose lock is a FIFO (the lock's open waited forever)
    os.mkfifo(root / "lock-fifo" / "run.lock")
    (root / "out-fifo").mkdir()  # and an output whose report.md is a FIFO nobody reads
    os.mkfifo(root / "out-fifo" / "report.md")
    return {"root": str(root), **{k: str(v) for k, v in runs.items()}}


# (id, argv with {root}/{llm}/... placeholders, extra environment, text the one line must hold)
ROWS = [
    ("trainer-missing-recipe", ["trainer", "{root}/nope.yaml", "--dry-run"], {}, "recipe: '{root}/nope.yaml' is not a file"),
    ("trainer-yaml-list", ["trainer", "{root}/list.yaml", "--dry-run"], {}, "must hold a mapping at the top level, got list"),
    ("trainer-misspelt-key", ["trainer", TINY, "max_step=3", "--dry-run"], {},
     "max_step: unknown key; did you mean 'max_steps'? allowed: name,"),
    ("trainer-override-without-equals", ["trainer", TINY, "max_steps", "--dry-run"], {},
     "max_steps: an override must look like key.path=value"),
    ("trainer-world-not-divisible", ["trainer", TINY, "parallel.tp=2", "--dry-run", "--world-size", "3"], {},
     "parallel: world size 3 is not divisible by tp x pp = 2 x 1"),
    ("trainer-batch-not-divisible", ["trainer", TINY, "train.global_batch_size=15", "--dry-run", "--world-size", "2"], {},
     "train.global_batch_size: 15 is not divisible by micro_batch_size x dp = 4 x 2 = 8"),
    ("trainer-size-gib", ["trainer", SWEEP, "sweep.max_bytes=16GiB", "--dry-run"], {}, "did you mean '16G'"),
    ("trainer-world-size-env", ["trainer", TINY, "--dry-run"], {"WORLD_SIZE": "abc"},
     "WORLD_SIZE: got 'abc'; expected an integer >= 1"),
    ("trainer-master-port-env", ["trainer", TINY, "--dry-run"], {"MASTER_PORT": "99999"},
     "MASTER_PORT: got '99999'; expected an integer from 1 to 65535"),
    ("trainer-output-dir-is-a-file", ["trainer", TINY, f"output_dir={TINY}"], {}, "output_dir: '" + TINY + "' is a file"),
    ("telemetry-no-command", ["telemetry"], {}, "the following arguments are required: command; see python -m telemetry"),
    ("report-not-a-run", ["telemetry", "report", "{root}"], {}, "no run.json (is this a run directory?)"),
    ("report-run-json-list", ["telemetry", "report", "{listjson}"], {}, "run.json: holds a JSON list"),
    ("compare-one-run", ["telemetry", "compare", "{llm}", "--out", "{root}/c1"], {}, "compare needs at least two run"),
    ("compare-different-workloads", ["telemetry", "compare", "{llm}", "{bert}", "--out", "{root}/c2"], {},
     "refusing to compare runs of different recipes"),
    ("compare-out-is-a-file", ["telemetry", "compare", "{llm}", "{llm}", "--out", TINY], {}, "--out: '" + TINY + "' is a file"),
    ("nccl-tests-binary", ["telemetry", "nccl-tests", "{root}/binary.txt"], {}, "no nccl-tests table found"),
    ("nccl-tests-json-is-a-dir", ["telemetry", "nccl-tests", TABLE, "--json", "{root}"], {}, "--json: '{root}' is a directory"),
    ("project-zero-rate", ["telemetry", "project", "{llm}", "--rate", "0mbit"], {}, "--rate: got '0mbit'; expected a rate of"),
    ("project-misspelt-rate", ["telemetry", "project", "{llm}", "--rate", "10gibt"], {}, "--rate: got '10gibt'; expected a tc"),
    ("rundir-argument", ["telemetry.rundir", "docs/run-directory.md"], {}, "takes no arguments"),
    ("attach-run-dir-is-a-file", ["telemetry.integrations.attach", "--run-dir", TINY, "--", "true"], {},
     "--run-dir: '" + TINY + "' is a file"),
    ("evaluate-no-variants", ["launch.evaluate", "{root}/no-variants.yaml", "--dry-run"], {},
     "variants: got 0 item(s); expected a list of at least 2"),
    ("evaluate-repeats-0", ["launch.evaluate", "{root}/repeats-0.yaml", "--dry-run"], {}, "repeats: got 0; expected an integer from 1 to 1000"),
    ("evaluate-repeats-huge", ["launch.evaluate", "{root}/repeats-huge.yaml", "--dry-run"], {},
     "repeats: got 1000000000000000000000000000000; expected an integer from 1 to 1000"),
    ("trainer-config-size-negative", ["trainer", TINY, "model.config.hidden_size=-1", "--dry-run"], {},
     "model.config.hidden_size: got -1; expected an integer from 1 to"),
    ("report-out-empty", ["telemetry", "report", "{llm}", "--out", ""], {}, "--out: got ''; allowed: a non-empty directory"),
    ("project-negative-rate", ["telemetry", "project", "{llm}", "--rate=-5gbit"], {}, "--rate: got '-5gbit', a negative rate"),
    ("compare-empty-label", ["telemetry", "compare", "a={llm}", "={bert}", "--out", "{root}/c3"], {},
     "={bert}: no label before '='; allowed: LABEL=RUN or RUN"),
    ("nccl-tests-header-only", ["telemetry", "nccl-tests", "{root}/header-only.txt"], {}, "a table header and nothing else"),
    ("evaluate-duplicate-key", ["launch.evaluate", "{root}/duplicate-key.yaml", "--dry-run"], {}, "duplicate key 'repeats'"),
    ("stage-to-a-file", ["launch.stage", TINY, "--to", TINY], {}, "--to: '" + TINY + "' is a file"),
    ("linktest-port", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
                       "--port", "99999", "--output", "{root}/lt"], {}, "--port: got 99999; expected a TCP port from 1"),
    ("linktest-unreachable-node", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr",
                                   "10.0.0.1", "--exec", "false {{host}}", "--output", "{root}/lt"], {},
     "cannot reach a with `false a`: exit 1; allowed: a node --exec reaches"),
    ("p2p-bandwidth-num-elems", ["launch.p2p_bandwidth", "--out", "{root}/p2p", "--num-elems", "0"], {},
     "--num-elems 0: allowed 1 to 2147483647 (int32 elements per copy)"),
    ("lab-misspelt-recipe-key", ["launch.lab", "--nodes", "2", "--rate", "1gbit", "--", TINY, "max_step=3"], {},
     "max_step: unknown key; did you mean 'max_steps'?"),
    ("lab-timeout-zero", ["launch.lab", "--nodes", "2", "--rate", "1gbit", "--timeout", "0", "--", TINY], {},
     "--timeout: got 0; expected a number of seconds above 0"),
    ("nemo-nodes-zero", ["launch.nemo", TINY, "--engine", "nemo2", "--nodes", "0"], {}, "--nodes: got 0"),
    ("torchrun-nproc-string", ["launch.torchrun", "--nproc-per-node", "two", "-m", "trainer", TINY], {},
     "--nproc-per-node: got 'two'; allowed: an integer >= 1, or cpu, gpu, xpu, auto"),
    ("demo-data-unwritable", ["tools.make_demo_data", "/proc/nope/d.jsonl"], {}, "path: '/proc/nope' is not a directory"),
    # third round: each was a hang, a read until the memory ran out, a traceback or an exit 0
    ("trainer-dataset-fifo", ["trainer", TINY, "data.dataset={root}/fifo", "--dry-run"], {},
     "data.dataset: '{root}/fifo' is a FIFO (named pipe), not a regular file; allowed: a regular file or a directory"),
    ("trainer-other-recipes-run", ["trainer", TINY, "output_dir={bert}", "max_steps=1"], {},
     "output_dir: '{bert}' holds a run of another recipe ('b', workload bert_pretraining;"),
    ("trainer-rendezvous-unset", ["trainer", TINY, "output_dir={root}/ma", "max_steps=1"], {"WORLD_SIZE": "1", "RANK": "0"},
     "unset, but RANK and WORLD_SIZE are set"),
    ("nccl-tests-device", ["telemetry", "nccl-tests", "/dev/zero"], {}, "/dev/zero: holds more than 256 MiB; allowed: an"),
    ("project-superscript-digit", ["telemetry", "project", "{llm}", "--rate", "1gbit", "--ranks-per-node", "\u00b2"], {},
     "--ranks-per-node: got '\u00b2'; expected a whole number of ranks >= 1"),
    ("bert-convert-config-device", ["trainer.bert_tf_convert", "{root}/nope", "--config", "/dev/zero", "--out",
                                    "{root}/b1"], {}, "--config /dev/zero: is a character device, not a regular file"),
    # fourth round: a tokenizer that cannot load said what is allowed (the reason cut it off at 300 characters)
    # seventh round: each was an exit 0 (or, for the empty rendezvous id, a wait on the endpoint)
    ("trainer-octal-looking-int", ["trainer", TINY, "max_steps=010", "--dry-run"], {},
     "max_steps: the override's value is refused: '010' is an octal number in YAML 1.1 (8), not 10"),
    ("trainer-output-dir-variable", ["trainer", TINY, "output_dir=$SCRATCH/run", "--dry-run"], {},
     "output_dir: got '$SCRATCH/run'; $SCRATCH is not expanded"),
    ("trainer-srun-without-torchrun", ["trainer", TINY, "max_steps=1", "output_dir={root}/srun"],
     {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}, "SLURM_STEP_NUM_TASKS: got 2, but RANK and WORLD_SIZE are unset"),
    ("evaluate-env-world-size", ["launch.evaluate", "{root}/env-world-size.yaml", "--dry-run"], {},
     "variants[0].env.WORLD_SIZE: set by the launcher for each rank"),
    ("torchrun-empty-rdzv-id", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                "node0:29400", "--rdzv-id", "", "-m", "trainer", TINY], {},
     "--rdzv-id: got ''; allowed: a non-empty id"),
    # the telemetry commands recipes.md lists had no row: each refused with one line, now held to it
    ("nccl-log-missing-file", ["telemetry", "nccl-log", "{root}/nope.out"], {},
     "{root}/nope.out: does not exist; allowed: a log file (NCCL_DEBUG=INFO output)"),
    ("nccl-log-misspelt-expect", ["telemetry", "nccl-log", "{root}/nope.out", "--expect", "rocee"], {},
     "--expect: got 'rocee'; did you mean 'roce'?"),
    ("mllog-not-a-run", ["telemetry", "mllog", "{root}/nope"], {}, "{root}/nope: not a directory; allowed: a run"),
    ("p2p-no-matrix", ["telemetry", "p2p", "{llm}"], {}, "neither p2p_matrix in collectives.json nor p2p_bandwidth.json"),
    ("export-unknown-kind", ["telemetry", "export", "{llm}", "--to", "csv"], {},
     "--to: got ['csv']; allowed: tensorboard, wandb, parquet, trace"),
    ("watch-not-a-dir", ["telemetry", "watch", "{root}/nope/run", "--once"], {}, "is not a directory"),
    ("trainer-tokenizer-empty-dir", ["trainer", TINY, "model.tokenizer={root}/empty-dir", "max_steps=1",
                                     "output_dir={root}/tok"], {}, "model.tokenizer: cannot load a tokenizer from '{root}/empty-dir' ("),
    # round 8 (bench/support/bad_inputs_round8.py): hangs and torch's failure box before
    ("trainer-lock-fifo", ["trainer", TINY, "max_steps=1", "output_dir={root}/lock-fifo"], {},
     "output_dir: '{root}/lock-fifo/run.lock' is a FIFO (named pipe), not a regular file; allowed: "),
    ("report-out-report-md-fifo", ["telemetry", "report", "{llm}", "--out", "{root}/out-fifo"], {},
     "--out: '{root}/out-fifo/report.md' is a FIFO (named pipe) that no process reads"),
    ("nccl-tests-csv-fifo", ["telemetry", "nccl-tests", TABLE, "--csv", "{root}/fifo"], {},
     "--csv: '{root}/fifo' is a FIFO (named pipe) that no process reads"),
    ("torchrun-worker-bad-override", ["launch.torchrun", "--standalone", "--nproc-per-node", "2", "-m", "trainer",
                                      TINY, "max_step=3"], {}, "max_step: unknown key; did you mean 'max_steps'?"),
    # round 9 (bench/support/bad_inputs_round9.py): a traceback, an exit 0 or a line not saying where it goes
    ("export-out-name-too-long", ["telemetry", "export", "{llm}", "--to", "parquet", "--out", "{root}/" + "x" * 300],
     {}, "has a name of 300 bytes (xxxxxxxxxxxxxxxx...); allowed: names of at most 255 bytes each"),
    ("evaluate-out-name-too-long", ["launch.evaluate", str(EVALUATION), "--out", "{root}/" + "x" * 300, "--dry-run"],
     {}, "--out: '{root}/xxx"),
    ("trainer-dataset-empty", ["trainer", TINY, "data.dataset=''", "--dry-run"], {},
     "data.dataset: got ''; allowed: the path of a file or directory (an unset $VAR gives ''), or null"),
    ("lab-recipe-without-separator", ["launch.lab", "--nodes", "2", "--rate", "1gbit", TINY], {},
     f"unrecognized arguments: {TINY}; allowed: -- {TINY} [key=value ...] after the lab's options"),
    ("torchrun-log-dir-unmakeable", ["launch.torchrun", "--standalone", "--log-dir", "/proc/nope", "-m", "trainer",
                                     TINY], {}, "--log-dir: cannot write to '/proc/nope': No such file or directory"),
]

SCRIPTS = [
    ("sbatch-no-recipe", ["launch/slurm/train.sbatch"], {}, "no recipe given; usage: sbatch launch/slurm/train.sbatch"),
    ("sbatch-bad-port", ["launch/slurm/train.sbatch", TINY], {"SLURM_JOB_NODELIST": "n1", "RDZV_PORT": "0"},
     "RDZV_PORT: got '0'; expected a TCP port from 1 to 65535"),
    ("wheelhouse-no-dir", ["launch/slurm/make_wheelhouse.sh"], {}, "no output directory given"),
]


def _fill(text: str, files: dict[str, str]) -> str:
    return text.format(**files) if "{" in text else text


def _one_line(argv: list[str], env: dict[str, str], expected: str, cwd: str) -> None:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**clean, "PYTHONPATH": str(REPO), **env})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert expected in lines[0], (expected, lines[0])


@pytest.mark.parametrize("case_id,argv,env,expected", ROWS, ids=[r[0] for r in ROWS])
def test_python_entry_point(files, case_id, argv, env, expected):
    _one_line(PY + [_fill(a, files) for a in argv], env, _fill(expected, files), str(REPO))


@pytest.mark.parametrize("case_id,argv,env,expected", SCRIPTS, ids=[r[0] for r in SCRIPTS])
def test_launch_script(files, case_id, argv, env, expected):
    _one_line(["bash", str(REPO / argv[0]), *argv[1:]], env, expected, files["root"])


def test_sbatch_host_list_scontrol_cannot_expand_is_one_line(files, tmp_path):
    """scontrol's own errors and exit 1 were the job's output for a host list it could not expand."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'scontrol: error: Unable to create hostlist' >&2\nexit 1\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {"SLURM_JOB_NODELIST": "node[2-1]", "SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": str(REPO),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    _one_line(["bash", str(REPO / "launch" / "slurm" / "train.sbatch"), TINY], env,
              "SLURM_JOB_NODELIST: got 'node[2-1]'; scontrol show hostnames could not expand it (scontrol: error: "
              "Unable to create hostlist); allowed: the job's host list as Slurm sets it", str(REPO))


def test_no_row_leaves_an_output_behind(files):
    """Refused commands create nothing: no compare, evaluation or link-test directory was made."""
    for name in ("c1", "c2", "c3", "eval-out", "lt", "p2p", "ma", "b1", "srun"):
        assert not Path(files["root"], name).exists(), name
    assert json.loads(Path(files["llm"], "run.json").read_text())["status"] == "completed"
    assert sorted(p.name for p in Path(files["bert"]).iterdir()) == ["metrics.jsonl", "run.json"]  # nothing set aside
