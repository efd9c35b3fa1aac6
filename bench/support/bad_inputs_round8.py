"""The eighth round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others (`--round 8` runs only these). Aimed at what the earlier
rounds did not try: YAML that PyYAML reads surprisingly (recursive anchors, `on:` and `~:` keys, `1e-2` without a
dot, non-breaking spaces and smart quotes pasted from a web page, OmegaConf `${...}` interpolation), keys spelt
as torchtitan, NeMo, PEFT or another workload spell them, override spellings with spaces or list indices,
layouts that do not divide, launcher variables in non-ASCII digits or with a port in the address, Kubernetes'
PET_* variables, a run directory whose lock or record files are FIFOs or directories, files written by
PowerShell (UTF-16) or Windows editors (CRLF, Ctrl-Z), control characters in paths, outputs that are FIFOs,
a root without the capabilities a container often lacks (CAP_DAC_OVERRIDE, CAP_NET_ADMIN), a missing `tc`,
and full filesystems under the commands round 7 did not fill."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from bench.support.recorded_runs import write_run

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
DRY = ["--dry-run"]
P = ["telemetry", "project", "{good}"]
NT = ["telemetry", "nccl-tests"]
NL = ["telemetry", "nccl-log"]
LAB = ["launch.lab", "--nodes", "2", "--rate", "1gbit"]
TR = ["launch.torchrun", "--standalone", "--nproc-per-node", "1"]
SBATCH = ["bash", "launch/slurm/train.sbatch"]
SLURM_ENV = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_SUBMIT_DIR": "/tmp"}
TABLE = "tests/telemetry/nccl_tests_tables/all_gather_perf_issue1435_bfloat16_linear_steps_excerpt.txt"
LOG = "tests/telemetry/nccl_logs/aws_efa_eks_p4d_nccl2.8.3.log"
SECRET = "s3cr3tR8value"
# root without the capabilities a container commonly lacks: file modes then apply to root as to its owner
NODAC = 'exec setpriv --bounding-set=-dac_override,-dac_read_search "$0" -m "$@"'
NONET = 'exec setpriv --bounding-set=-net_admin,-sys_admin "$0" -m "$@"'


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory."""
    return ["max_steps=1", f"output_dir={{root}}/t8-{name}"]


def nodac(*argv: str) -> list[str]:
    return ["bash", "-c", NODAC, "{python}", *argv]


def leak_check(directory: str, *argv: str, secret: str = SECRET) -> list[str]:
    """Run `python -m argv...`, then fail (exit 9, one line) when `secret` reached any file under `directory`."""
    script = ('"$0" -m "$@"; rc=$?; if grep -rqs ' + secret + ' "' + directory + '"; then echo "error: the secret '
              'reached a file under ' + directory + '" >&2; exit 9; fi; exit $rc')
    return ["bash", "-c", script, "{python}", *argv]


def tiny_text(repo: Path) -> str:
    """The tiny recipe with its assets named absolutely, so a copy of it elsewhere still finds them."""
    return (repo / TINY).read_text().replace(" assets/", f" {repo}/recipes/assets/")


def _recipes(root: Path, repo: Path) -> None:
    text = tiny_text(repo)
    lines = {
        "recursive-map": text.replace("lora:\n  r: 8\n", "lora: &l\n  r: 8\n  again: *l\n"),
        "recursive-list": text.replace("  target_modules: [q_proj", "  target_modules: &t [*t, q_proj"),
        "two-documents": text + "---\nmax_steps: 3\n",
        "on-key": text + "on: 3\n",
        "null-key": text + "~: 3\n",
        "int-key": text + "1: 2\n",
        "lr-exponent-no-dot": text.replace("  lr: 1.0e-2\n", "  lr: 1e-2\n"),
        "oc-env": re.sub(r"(?m)^output_dir: .*$", "output_dir: ${oc.env:SCRATCH,/tmp}/run", text),
        "interpolation": text.replace("  min_lr: 1.0e-3\n", "  min_lr: ${train.lr}\n"),
        "key-case": text.replace("max_steps: 60", "Max_Steps: 60"),
        "section-case": text.replace("\ntrain:\n", "\nTrain:\n"),
        "tab-after-colon": text.replace("max_steps: 60", "max_steps:\t60"),
        "key-trailing-space": text.replace("max_steps: 60", '"max_steps ": 60'),
        "merge-list-scalar": text.replace("train:\n", "base: &b {lr: 0.01}\ntrain:\n  <<: [*b, 5]\n", 1),
        "alias-undefined": text.replace("  lr: 1.0e-2\n", "  lr: *nolr\n"),
        "ctrl-z-end": text + "\x1a",
        "nbsp-indent": text.replace("  micro_batch_size: 4\n", "\u00a0\u00a0micro_batch_size: 4\n"),
        "smart-quotes": text.replace("  format: dolly\n", "  format: \u201cdolly\u201d\n"),
        "section-twice-merged": text + "train:\n  lr: 0.1\n",
        "json-trailing-comma": json.dumps({"name": "x", "workload": "llm_lora", "max_steps": 3}).replace("}", ",}"),
        "percent-lr": text.replace("  lr: 1.0e-2\n", "  lr: 1%\n"),
        "key-another-workload": text.replace("  grad_clip: 1.0\n", "  grad_clip: 1.0\n  momentum: 0.9\n"),
        "lora-on-full": (repo / "recipes/tiny_llama_full.yaml").read_text().replace(" assets/", f" {repo}/recipes/assets/")
        + "lora:\n  r: 8\n",
    }
    for name, body in lines.items():
        (root / f"r8-{name}.yaml").write_text(body)
    (root / "r8-crlf-ctrl-z.yaml").write_bytes(text.replace("\n", "\r\n").encode() + b"\x1a")
    (root / "r8-utf16.yaml").write_bytes(text.encode("utf-16"))  # PowerShell's `>` writes UTF-16LE with a BOM
    (root / "r8-mode000.yaml").write_text(text)
    (root / "r8-mode000.yaml").chmod(0)


def _runs(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}

    def edit_run(p: Path, **fields) -> None:
        (p / "run.json").write_text(json.dumps({**json.loads((p / "run.json").read_text()), **fields}))

    damage = {
        "r8bom": lambda p: (p / "run.json").write_bytes(b"\xef\xbb\xbf" + (p / "run.json").read_bytes()),
        "r8utf16run": lambda p: (p / "run.json").write_bytes((p / "run.json").read_text().encode("utf-16")),
        "r8utf16metrics": lambda p: (p / "metrics.jsonl").write_bytes(
            (p / "metrics.jsonl").read_text().encode("utf-16")),
        "r8crlfmetrics": lambda p: (p / "metrics.jsonl").write_bytes(
            (p / "metrics.jsonl").read_bytes().replace(b"\n", b"\r\n")),
        "r8stepstring": lambda p: (p / "metrics.jsonl").write_text(
            "".join(json.dumps({**json.loads(x), "step": str(json.loads(x)["step"])}) + "\n"
                    for x in (p / "metrics.jsonl").read_text().splitlines())),
        "r8negtime": lambda p: (p / "metrics.jsonl").write_text(
            "".join(json.dumps({**json.loads(x), "step_time_s": -1.0}) + "\n"
                    for x in (p / "metrics.jsonl").read_text().splitlines())),
        "r8hugetime": lambda p: (p / "metrics.jsonl").write_text(
            "".join(json.dumps({**json.loads(x), "step_time_s": 1e308}) + "\n"
                    for x in (p / "metrics.jsonl").read_text().splitlines())),
        "r8lossstr": lambda p: (p / "metrics.jsonl").write_text(
            "".join(json.dumps({**json.loads(x), "loss": "nan"}) + "\n"
                    for x in (p / "metrics.jsonl").read_text().splitlines())),
        "r8ranksfile": lambda p: (p / "ranks").write_text("not a directory\n"),
        "r8worldzero": lambda p: edit_run(p, layout={"world_size": 0, "dp": 0, "tp": 1, "pp": 1}),
        "r8recipenone": lambda p: edit_run(p, recipe=None),
        "r8versionstr": lambda p: edit_run(p, version="2.0"),
        "r8mode000": lambda p: (p / "run.json").chmod(0),
        "r8dir000": lambda p: p.chmod(0),
    }
    for name, hurt in damage.items():
        write_run(root / name, name="a")
        hurt(root / name)
        out[name] = str(root / name)
    return out


def _trainer_dirs(root: Path) -> None:
    """output_dir states a real run meets: its lock or record files of the wrong kind."""
    for name, make in {
        "lock-fifo": lambda p: os.mkfifo(p / "run.lock"),
        "lock-dir": lambda p: (p / "run.lock").mkdir(),
        "lock-live": lambda p: (p / "run.lock").write_text(json.dumps({
            "owner": "pid 1 on " + os.uname().nodename, "host": os.uname().nodename, "pid": 1,
            "start_time": "2026-11-29T00:00:00Z"})),
        "runjson-truncated": lambda p: (p / "run.json").write_text('{"name": "tiny_llama_lora", "status"'),
        "runjson-dir": lambda p: (p / "run.json").mkdir(),
        "metrics-fifo": lambda p: os.mkfifo(p / "metrics.jsonl"),
        "metrics-dir": lambda p: (p / "metrics.jsonl").mkdir(),
        "checkpoints-file": lambda p: (p / "checkpoints").write_text("x"),
        "logs-file": lambda p: (p / "logs").write_text("x"),
    }.items():
        (root / f"t8d-{name}").mkdir()
        make(root / f"t8d-{name}")


def _files(root: Path, repo: Path) -> None:
    table = (repo / TABLE).read_text()
    (root / "r8-table-utf16.txt").write_bytes(table.encode("utf-16"))
    (root / "r8-table-crlf.txt").write_bytes(table.replace("\n", "\r\n").encode())
    (root / "r8-table-bom.txt").write_bytes(b"\xef\xbb\xbf" + table.encode())
    (root / "r8-table-mode000.txt").write_text(table)
    (root / "r8-table-mode000.txt").chmod(0)
    log = (repo / LOG).read_text(errors="replace")
    (root / "r8-log-utf16.log").write_bytes(log.encode("utf-16"))
    (root / "r8-log-crlf.log").write_bytes(log.replace("\n", "\r\n").encode())
    (root / "r8-log-mode000.log").write_text(log)
    (root / "r8-log-mode000.log").chmod(0)
    os.mkfifo(root / "r8-out.fifo")
    (root / "r8-reportout-fifo").mkdir()
    os.mkfifo(root / "r8-reportout-fifo" / "report.md")
    (root / "r8-reportout-dir" / "report.md").mkdir(parents=True)
    (root / "r8-exportout" / "tensorboard").parent.mkdir()
    (root / "r8-exportout" / "tensorboard").write_text("x")
    ro = root / "r8-ro555"
    ro.mkdir()
    ro.chmod(0o555)
    # a PATH with iproute2's ip but without tc
    (root / "r8-no-tc-bin").mkdir()
    for tool in ("ip",):
        found = shutil.which(tool)
        if found:
            (root / "r8-no-tc-bin" / tool).symlink_to(found)


def _evaluations(root: Path, repo: Path) -> None:
    import yaml

    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    doc["out"] = str(root / "eval8-out")
    v0, v1 = doc["variants"]
    w0, w1 = doc["workloads"]
    slurm = {"launcher": "slurm", "slurm": {"nodes": 2},
             "variants": [{k: v for k, v in x.items() if k != "lab"} for x in (v0, v1)]}
    specs = {
        "slurm-srun-args-string": {**slurm, "slurm": {"nodes": 2, "srun_args": "--exclusive"}},
        "slurm-key-near-miss": {**slurm, "slurm": {"nodes": 2, "time": "1:00:00"}},
        "local-nproc-auto": {"launcher": "local", "local": {"nproc_per_node": "auto"}, "variants": slurm["variants"]},
        "env-key-lowercase-space": {"variants": [{**v0, "env": {"nccl debug": "INFO"}}, v1]},
        "env-key-equals": {"variants": [{**v0, "env": {"NCCL_DEBUG=INFO": "1"}}, v1]},
        "env-value-list": {"variants": [{**v0, "env": {"NCCL_ALGO": ["Ring", "Tree"]}}, v1]},
        "overrides-same-key": {"workloads": [{**w0, "overrides": [*w0["overrides"], "sweep.iters=6"]}, w1]},
        "overrides-key-typo": {"workloads": [w0, {**w1, "overrides": [*w1["overrides"], "max_step=3"]}]},
        "recipe-url": {"workloads": [w0, {**w1, "recipe": "https://example.com/tiny.yaml"}]},
        "name-int": {"name": 123},
        "expect-transport-case": {"variants": [{**v0, "expect_transport": "RoCE"}, v1]},
        "repeats-2x": {"repeats": "2x"},
        "rate-with-space": {"variants": [{**v0, "lab": {"rate": "1 gbit"}}, v1]},
        "rate-per-second": {"variants": [{**v0, "lab": {"rate": "1Gbit/s"}}, v1]},
        "lab-nproc-auto": {"lab": {**doc["lab"], "nproc_per_node": "auto"}},
        "variant-key-near-miss": {"variants": [{**v0, "expect_transprot": "tcp"}, v1]},
        "workload-key-other-spec": {"workloads": [{**w0, "repeats": 3}, w1]},
        "variants-one-string": {"variants": "1gbit"},
        "out-read-only": {"out": str(root / "r8-ro555" / "out")},
        "out-full-fs": {"out": str(root / "r7-filled" / "out")},
        "nodes-float": {"lab": {**doc["lab"], "nodes": 2.0}},
        "timeout-unit": {"lab": {**doc["lab"], "timeout": "5m"}},
        "workload-name-unicode-newline": {"workloads": [{**w0, "name": "sw\u2028eep"}, w1]},
    }
    for name, change in specs.items():
        (root / f"eval8-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}, allow_unicode=True))
    (root / "eval8-mode000.yaml").write_text(yaml.safe_dump(doc))
    (root / "eval8-mode000.yaml").chmod(0)
    (root / "eval8-utf16.yaml").write_bytes(yaml.safe_dump(doc).encode("utf-16"))


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import sys

    _recipes(root, repo)
    out = _runs(root)
    _trainer_dirs(root)
    _files(root, repo)
    _evaluations(root, repo)
    return {**out, "python": sys.executable, "nl": "\n", "esc": "\x1b"}


E = ["launch.evaluate"]
CASES: list[tuple[str, str, list[str], dict]] = [
    # recipe files PyYAML reads surprisingly
    *[("trainer", name, ["trainer", "{root}/r8-" + name + ".yaml", *DRY], {}) for name in (
        "recursive-map", "recursive-list", "two-documents", "on-key", "null-key", "int-key", "lr-exponent-no-dot",
        "oc-env", "interpolation", "key-case", "section-case", "tab-after-colon", "key-trailing-space",
        "merge-list-scalar", "alias-undefined", "ctrl-z-end", "nbsp-indent", "smart-quotes", "section-twice-merged",
        "json-trailing-comma", "percent-lr", "key-another-workload", "lora-on-full", "crlf-ctrl-z", "utf16")],
    # overrides: list indices by dot, names from torchtitan / NeMo / PEFT, units, interpolation, spacing
    ("trainer", "override-dot-index", [*T, "train.betas.0=0.8", *DRY], {}),
    ("trainer", "override-dot-index-beyond", [*T, "lora.target_modules.9=q_proj", *DRY], {}),
    ("trainer", "override-dot-index-negative", [*T, "lora.target_modules.-1=q_proj", *DRY], {}),
    ("trainer", "torchtitan-learning-rate", [*T, "train.learning_rate=1e-4", *DRY], {}),
    ("trainer", "seqlen-near-miss", [*T, "data.seqlen=128", *DRY], {}),
    ("trainer", "micro-batch-near-miss", [*T, "train.micro_batch=2", *DRY], {}),
    ("trainer", "tensor-parallel-name", [*T, "parallel.tensor_parallel=2", *DRY], {}),
    ("trainer", "peft-lora-alpha", [*T, "lora.lora_alpha=32", *DRY], {}),
    ("trainer", "max-steps-in-train", [*T, "train.max_steps=3", *DRY], {}),
    ("trainer", "config-key-near-miss", [*T, "model.config.hidden_sizee=128", *DRY], {}),
    ("trainer", "config-torchtitan-n-layers", [*T, "model.config.n_layers=2", *DRY], {}),
    ("trainer", "lr-percent", [*T, "train.lr=5%", *DRY], {}),
    ("trainer", "batch-8x", [*T, "train.global_batch_size=8x", *DRY], {}),
    ("trainer", "batch-power-expression", [*T, "train.global_batch_size=2**4", *DRY], {}),
    ("trainer", "timeout-minutes", [*T, "distributed.timeout_s=10m", *DRY], {}),
    ("trainer", "warmup-percent", [*T, "train.warmup_steps=10%", *DRY], {}),
    ("trainer", "lr-exponent-override", [*T, "train.lr=1e-4", *DRY], {}),
    ("trainer", "lr-oc-env", [*T, "train.lr=${{oc.env:LR}}", *DRY], {}),
    ("trainer", "lr-null", [*T, "train.lr=~", *DRY], {}),
    ("trainer", "max-steps-null", [*T, "max_steps=null", *DRY], {}),
    ("trainer", "max-steps-empty", [*T, "max_steps=", *DRY], {}),
    ("trainer", "key-upper", [*T, "MAX_STEPS=3", *DRY], {}),
    ("trainer", "section-upper", [*T, "Train.lr=0.1", *DRY], {}),
    ("trainer", "override-spaced-equals", [*T, "train.lr", "=", "0.1", *DRY], {}),
    ("trainer", "override-space-after-equals", [*T, "train.lr=", "0.1", *DRY], {}),
    ("trainer", "override-en-dash-flag", [*T, "\u2013max_steps=3", *DRY], {}),
    ("trainer", "override-smart-quotes", [*T, "data.format=\u201cdolly\u201d", *DRY], {}),
    ("trainer", "override-key-newline", [*T, "max\nsteps=3", *DRY], {}),
    ("trainer", "override-key-escape", [*T, "max_steps\x1b[31m=3", *DRY], {}),
    ("trainer", "section-replaced", [*T, "train={{lr: 0.1}}", *DRY], {}),
    ("trainer", "lora-null-on-lora", [*T, "lora=null", *DRY], {}),
    ("trainer", "momentum-on-llm", [*T, "train.momentum=0.9", *DRY], {}),
    ("trainer", "image-size-on-llm", [*T, "data.image_size=224", *DRY], {}),
    ("trainer", "family-bert-on-llama", [*T, "model.family=bert", *DRY], {}),
    ("trainer", "workload-bert-on-llama", [*T, "workload=bert_pretraining", *DRY], {}),
    ("trainer", "workload-collectives-on-llama", [*T, "workload=collectives", *DRY], {}),
    # batches, schedules and layouts that do not divide or contradict
    ("trainer", "micro-not-dividing", [*T, "train.micro_batch_size=5", *DRY], {}),
    ("trainer", "micro-above-global", [*T, "train.micro_batch_size=32", *DRY], {}),
    ("trainer", "warmup-above-steps", [*T, "train.warmup_steps=100", *DRY], {}),
    ("trainer", "min-lr-above-lr", [*T, "train.min_lr=1", *DRY], {}),
    ("trainer", "save-every-negative", [*T, "train.save_every=-1", *DRY], {}),
    ("trainer", "eval-every-zero", [*T, "train.eval_every_samples=0", *DRY], {}),
    ("trainer", "lora-alpha-zero", [*T, "lora.alpha=0", *DRY], {}),
    ("trainer", "lora-dropout-negative", [*T, "lora.dropout=-0.1", *DRY], {}),
    ("trainer", "dp-zero", [*T, "parallel.dp=0", *DRY], {}),
    ("trainer", "dp-minus-two", [*T, "parallel.dp=-2", *DRY], {}),
    ("trainer", "tp-over-kv-heads", [*T, "parallel.tp=4", "--world-size", "4", *DRY], {}),
    ("trainer", "backend-mpi", [*T, "distributed.backend=mpi", *DRY], {}),
    ("trainer", "timeout-zero", [*T, "distributed.timeout_s=0", *DRY], {}),
    ("trainer", "tp4-world6", [*T, "parallel.tp=4", "--world-size", "6", *DRY], {}),
    ("trainer", "tp2-pp2-world2", [*T, "parallel.tp=2", "parallel.pp=2", "--world-size", "2", *DRY], {}),
    ("trainer", "global-6-world-4", [*T, "train.global_batch_size=6", "--world-size", "4", *DRY], {}),
    ("trainer", "pp2-one-micro-batch", [*T, "parallel.pp=2", "train.global_batch_size=4", "--world-size", "2",
                                        *DRY], {}),
    ("trainer", "world-size-twice", [*T, "--world-size", "2", "--world-size", "4", *DRY], {}),
    ("trainer", "world-size-empty", [*T, "--world-size=", *DRY], {}),
    # launcher variables: non-ASCII digits, spaces, a port in the address
    ("trainer", "world-size-fullwidth", [*T, *DRY], {"WORLD_SIZE": "\uff12", "RANK": "0"}),
    ("trainer", "world-size-arabic-indic", [*T, *DRY], {"WORLD_SIZE": "\u0662", "RANK": "0"}),
    ("trainer", "world-size-trailing-space", [*T, *DRY], {"WORLD_SIZE": "2 ", "RANK": "0"}),
    ("trainer", "local-rank-empty", [*T, *DRY], {"LOCAL_RANK": ""}),
    ("trainer", "master-addr-with-port", [*T, *RUN("ma-port")], {"WORLD_SIZE": "1", "RANK": "0",
                                                                   "MASTER_ADDR": "127.0.0.1:29500",
                                                                   "MASTER_PORT": "29500"}),
    ("trainer", "master-addr-url", [*T, *RUN("ma-url")], {"WORLD_SIZE": "1", "RANK": "0",
                                                            "MASTER_ADDR": "tcp://127.0.0.1", "MASTER_PORT": "29500"}),
    ("trainer", "master-port-empty", [*T, *RUN("mp-empty")], {"WORLD_SIZE": "1", "RANK": "0",
                                                                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": ""}),
    ("trainer", "job-label-newline", [*T, *RUN("job-nl")],
     {"FABRIC_HARNESS_JOB": "a\nb"}),
    # run directories in a state a run did not leave them
    *[("trainer", "output-dir-" + name, [*T, "max_steps=1", "output_dir={root}/t8d-" + name], {}) for name in (
        "lock-fifo", "lock-dir", "lock-live", "runjson-truncated", "runjson-dir", "metrics-fifo", "metrics-dir",
        "checkpoints-file", "logs-file")],
    ("trainer", "output-dir-escape", [*T, "max_steps=1", "output_dir={root}/t8-{esc}[31mred"], {}),
    # secrets: what a run records must not hold them
    ("trainer", "secret-env", leak_check("{root}/t8-secret-env", *T, *RUN("secret-env")),
     {"HF_TOKEN": "hf_" + SECRET, "WANDB_API_KEY": SECRET, "NCCL_IB_PKEY_PASSWORD": SECRET}),
    ("trainer", "secret-dataset-url", leak_check("{root}/t8-secret-url", *T, "data.dataset=https://u:" + SECRET +
                                                 "@example.invalid/d.jsonl", *RUN("secret-url")), {}),
    ("trainer", "secret-pushgateway-query", leak_check("{root}/t8-secret-push", *T,
                                                       "telemetry.pushgateway=http://127.0.0.1:9/?token=" + SECRET,
                                                       *RUN("secret-push")), {}),
    # root without CAP_DAC_OVERRIDE (a container's usual root): files its mode does not let it read or write
    ("trainer", "recipe-mode-000", nodac("trainer", "{root}/r8-mode000.yaml", *DRY), {}),
    ("trainer", "output-dir-read-only-dir", nodac(*T, "max_steps=1", "output_dir={root}/r8-ro555/run"), {}),
    ("telemetry report", "run-json-mode-000", nodac("telemetry", "report", "{r8mode000}", "--out", "{root}/r8r1"), {}),
    ("telemetry report", "run-dir-mode-000", nodac("telemetry", "report", "{r8dir000}", "--out", "{root}/r8r2"), {}),
    ("telemetry report", "out-read-only-dir", nodac("telemetry", "report", "{good}", "--out", "{root}/r8-ro555/r"), {}),
    ("telemetry watch", "run-json-mode-000", nodac("telemetry", "watch", "{r8mode000}", "--once"), {}),
    ("telemetry compare", "out-read-only-dir", nodac("telemetry", "compare", "{good}", "{good2}", "--out",
                                                     "{root}/r8-ro555/c"), {}),
    ("telemetry project", "json-read-only-dir", nodac(*P, "--rate", "1gbit", "--json", "{root}/r8-ro555/p.json"), {}),
    ("telemetry mllog", "out-read-only-dir", nodac("telemetry", "mllog", "{timed}", "--no-check", "--out",
                                                   "{root}/r8-ro555/m.txt"), {}),
    ("telemetry export", "out-read-only-dir", nodac("telemetry", "export", "{good}", "--to", "parquet", "--out",
                                                    "{root}/r8-ro555/x"), {}),
    ("telemetry nccl-tests", "mode-000", nodac(*NT, "{root}/r8-table-mode000.txt"), {}),
    ("telemetry nccl-log", "mode-000", nodac(*NL, "{root}/r8-log-mode000.log"), {}),
    ("launch.evaluate", "spec-mode-000", nodac(*E, "{root}/eval8-mode000.yaml", "--dry-run"), {}),
    ("launch.evaluate", "out-read-only-dir", nodac(*E, "{root}/eval8-out-read-only.yaml", "--dry-run"), {}),
    ("launch.stage", "to-read-only-dir", nodac("launch.stage", TINY, "--to", "{root}/r8-ro555/s"), {}),
    # telemetry inputs as Windows and PowerShell write them; damaged runs not tried before
    ("telemetry nccl-tests", "utf16", [*NT, "{root}/r8-table-utf16.txt"], {}),
    ("telemetry nccl-tests", "crlf", [*NT, "{root}/r8-table-crlf.txt", "--json", "{root}/r8nt1.json"], {}),
    ("telemetry nccl-tests", "bom", [*NT, "{root}/r8-table-bom.txt", "--json", "{root}/r8nt2.json"], {}),
    ("telemetry nccl-tests", "csv-fifo", [*NT, TABLE, "--csv", "{root}/r8-out.fifo"], {}),
    ("telemetry nccl-log", "utf16", [*NL, "{root}/r8-log-utf16.log"], {}),
    ("telemetry nccl-log", "crlf", [*NL, "{root}/r8-log-crlf.log", "--json", "{root}/r8nl1.json"], {}),
    ("telemetry report", "run-json-bom", ["telemetry", "report", "{r8bom}", "--out", "{root}/r8r3"], {}),
    ("telemetry report", "run-json-utf16", ["telemetry", "report", "{r8utf16run}", "--out", "{root}/r8r4"], {}),
    ("telemetry report", "metrics-utf16", ["telemetry", "report", "{r8utf16metrics}", "--out", "{root}/r8r5"], {}),
    ("telemetry report", "metrics-crlf", ["telemetry", "report", "{r8crlfmetrics}", "--out", "{root}/r8r6"], {}),
    ("telemetry report", "step-string", ["telemetry", "report", "{r8stepstring}", "--out", "{root}/r8r7"], {}),
    ("telemetry report", "step-time-negative", ["telemetry", "report", "{r8negtime}", "--out", "{root}/r8r8"], {}),
    ("telemetry report", "step-time-huge", ["telemetry", "report", "{r8hugetime}", "--out", "{root}/r8r9"], {}),
    ("telemetry report", "loss-string", ["telemetry", "report", "{r8lossstr}", "--out", "{root}/r8r10"], {}),
    ("telemetry report", "ranks-is-file", ["telemetry", "report", "{r8ranksfile}", "--out", "{root}/r8r11"], {}),
    ("telemetry report", "world-size-zero", ["telemetry", "report", "{r8worldzero}", "--out", "{root}/r8r12"], {}),
    ("telemetry report", "recipe-null", ["telemetry", "report", "{r8recipenone}", "--out", "{root}/r8r13"], {}),
    ("telemetry report", "version-string", ["telemetry", "report", "{r8versionstr}", "--out", "{root}/r8r14"], {}),
    ("telemetry report", "out-report-fifo", ["telemetry", "report", "{good}", "--out", "{root}/r8-reportout-fifo"], {}),
    ("telemetry report", "out-report-dir", ["telemetry", "report", "{good}", "--out", "{root}/r8-reportout-dir"], {}),
    ("telemetry report", "path-newline", ["telemetry", "report", "{root}/no{nl}such"], {}),
    ("telemetry report", "path-escape", ["telemetry", "report", "{root}/no{esc}[2Jsuch"], {}),
    ("telemetry watch", "run-json-bom", ["telemetry", "watch", "{r8bom}", "--once"], {}),
    ("telemetry watch", "interval-unit", ["telemetry", "watch", "{good}", "--once", "--interval", "5s"], {}),
    ("telemetry watch", "step-time-negative", ["telemetry", "watch", "{r8negtime}", "--once"], {}),
    ("telemetry compare", "label-newline", ["telemetry", "compare", "a{nl}b={good}", "c={good2}", "--out",
                                            "{root}/r8c1"], {}),
    ("telemetry compare", "world-size-zero", ["telemetry", "compare", "{good}", "{r8worldzero}", "--out",
                                              "{root}/r8c2"], {}),
    ("telemetry export", "tensorboard-is-file", ["telemetry", "export", "{good}", "--to", "tensorboard", "--out",
                                                 "{root}/r8-exportout"], {}),
    ("telemetry mllog", "out-fifo", ["telemetry", "mllog", "{timed}", "--no-check", "--out", "{root}/r8-out.fifo"],
     {}),
    ("telemetry project", "json-fifo", [*P, "--rate", "1gbit", "--json", "{root}/r8-out.fifo"], {}),
    ("telemetry project", "rate-per-second", [*P, "--rate", "1Gbit/s"], {}),
    ("telemetry project", "rate-spaced-unit", [*P, "--rate", "1 Gb/s"], {}),
    ("telemetry project", "rate-gbe", [*P, "--rate", "25GbE"], {}),
    ("telemetry project", "rate-decimal-comma", [*P, "--rate", "1,5gbit"], {}),
    ("telemetry project", "rate-bare-g", [*P, "--rate", "100G"], {}),
    ("telemetry project", "rate-twice", [*P, "--rate", "1gbit", "--rate", "10gbit"], {}),
    ("telemetry project", "nodes-float-whole", [*P, "--rate", "1gbit", "--nodes", "2.0"], {}),
    ("telemetry project", "nodes-hex", [*P, "--rate", "1gbit", "--nodes", "0x10"], {}),
    ("telemetry project", "efficiency-two-dots", [*P, "--rate", "1gbit", "--efficiency", "0.8.1"], {}),
    ("telemetry project", "latency-unit", [*P, "--rate", "1gbit", "--latency-us", "5us"], {}),
    ("telemetry project", "world-size-zero", ["telemetry", "project", "{r8worldzero}", "--rate", "1gbit"], {}),
    # launch.lab in a container without CAP_NET_ADMIN, without tc, with rates and times in other spellings
    ("launch.lab", "no-net-admin", ["bash", "-c", NONET, "{python}", *LAB, "--", TINY, "max_steps=1"], {}),
    ("launch.lab", "no-tc-tool", [*LAB, "--", TINY, "max_steps=1"], {"PATH": "{root}/r8-no-tc-bin"}),
    ("launch.lab", "rate-per-second", ["launch.lab", "--nodes", "2", "--rate", "1Gbit/s", "--", TINY], {}),
    ("launch.lab", "rate-gigabyte", ["launch.lab", "--nodes", "2", "--rate", "1GB", "--", TINY], {}),
    ("launch.lab", "rate-percent", ["launch.lab", "--nodes", "2", "--rate", "10%", "--", TINY], {}),
    ("launch.lab", "mtu-float", [*LAB, "--mtu", "1500.0", "--", TINY], {}),
    ("launch.lab", "timeout-unit", [*LAB, "--timeout", "5m", "--", TINY], {}),
    ("launch.lab", "override-spaced-equals", [*LAB, "--", TINY, "max_steps", "=", "3"], {}),
    # launch.evaluate files
    *[("launch.evaluate", name, [*E, "{root}/eval8-" + name + ".yaml", "--dry-run"], {}) for name in (
        "slurm-srun-args-string", "slurm-key-near-miss", "local-nproc-auto", "env-key-lowercase-space",
        "env-key-equals", "env-value-list", "overrides-same-key", "overrides-key-typo", "recipe-url", "name-int",
        "expect-transport-case", "repeats-2x", "rate-with-space", "rate-per-second", "lab-nproc-auto",
        "variant-key-near-miss", "workload-key-other-spec", "variants-one-string", "out-full-fs", "nodes-float",
        "timeout-unit", "workload-name-unicode-newline", "utf16")],
    ("launch.evaluate", "spec-path-newline", [*E, "{root}/no{nl}such.yaml", "--dry-run"], {}),
    ("launch.evaluate", "out-flag-empty", [*E, "recipes/evaluations/lab_two_rates.yaml", "--out", "", "--dry-run"], {}),
    # torchrun as a Kubernetes PyTorchJob sets it (PET_* variables), and odd addresses
    ("launch.torchrun", "pet-nnodes-word", ["launch.torchrun", "-m", "trainer", TINY, "--dry-run"], {"PET_NNODES": "two"}),
    ("launch.torchrun", "pet-nproc-word", ["launch.torchrun", "-m", "trainer", TINY, "--dry-run"],
     {"PET_NPROC_PER_NODE": "two"}),
    ("launch.torchrun", "pet-nnodes-zero", ["launch.torchrun", "-m", "trainer", TINY, "--dry-run"], {"PET_NNODES": "0"}),
    ("launch.torchrun", "pet-master-port-word", ["launch.torchrun", "-m", "trainer", TINY, "--dry-run"],
     {"PET_MASTER_PORT": "port"}),
    ("launch.torchrun", "pet-rdzv-endpoint-port-huge", ["launch.torchrun", "-m", "trainer", TINY],
     {"PET_NNODES": "2", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "node0:99999"}),
    ("launch.torchrun", "rdzv-endpoint-ipv6-unbracketed", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                                           "--rdzv-endpoint", "fe80::1:29400", "-m", "trainer", TINY],
     {}),
    ("launch.torchrun", "master-addr-empty", ["launch.torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                                              "", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "rdzv-conf-timeout-negative", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                                       "--rdzv-endpoint", "node0:29400", "--rdzv-conf", "timeout=-5",
                                                       "-m", "trainer", TINY], {}),
    ("launch.torchrun", "max-restarts-exponent", ["launch.torchrun", "--max-restarts", "1e3", "-m", "trainer", TINY],
     {}),
    ("launch.torchrun", "trainer-without-recipe", [*TR, "-m", "trainer"], {}),
    ("launch.torchrun", "worker-bad-override", ["launch.torchrun", "--standalone", "--nproc-per-node", "2", "-m",
                                                "trainer", TINY, "max_step=3"], {}),
    # sbatch with the environment half set, or set with spaces
    ("sbatch", "submit-dir-unset", [*SBATCH, TINY], {k: v for k, v in SLURM_ENV.items() if k != "SLURM_SUBMIT_DIR"}),
    ("sbatch", "nodelist-with-spaces", [*SBATCH, TINY], {**SLURM_ENV, "SLURM_JOB_NODELIST": "node1, node2"}),
    ("sbatch", "nproc-trailing-space", [*SBATCH, TINY], {**SLURM_ENV, "NPROC_PER_NODE": "8 "}),
    ("sbatch", "recipe-path-newline", [*SBATCH, "{root}/no{nl}such.yaml"], SLURM_ENV),
    # full filesystems under the commands round 7 did not fill
    ("launch.stage", "to-full-fs", ["launch.stage", TINY, "--to", "{r7filled}/s"], {}),
    ("launch.stage", "dataset-dev-zero", ["launch.stage", TINY, "data.dataset=/dev/zero", "--to", "{root}/r8s1"], {}),
    ("launch.stage", "recipe-path-newline", ["launch.stage", "{root}/no{nl}such.yaml", "--to", "{root}/r8s2"], {}),
    ("telemetry export", "tensorboard-full-fs", ["telemetry", "export", "{good}", "--to", "tensorboard", "--out",
                                                 "{r7filled}/tb"], {}),
    ("tools", "demo-data-full-fs", ["tools.make_demo_data", "{r7filled}/d.jsonl"], {}),
    ("attach", "run-dir-full-fs", ["telemetry.integrations.attach", "--run-dir", "{r7filled}/a", "--", "true"], {}),
    ("launch.linktest", "output-full-fs", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                           "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output",
                                           "{r7filled}/lt"], {}),
    ("trainer", "recipe-path-newline", ["trainer", "{root}/no{nl}such.yaml", *DRY], {}),
]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN: dict[tuple[str, str], str] = {
    ("trainer", "lr-exponent-no-dot"): "YAML 1.1 reads 1e-2 (no dot) as text; text that is plainly a number is read "
                                       "as that number where a number goes (train.lr 0.01, as meant)",
    ("trainer", "key-another-workload"): "a recipe file carrying a key this run never reads (train.momentum beside "
                                         "AdamW: a template shared by optimizers) runs, with one warning line naming "
                                         "the key at start; typed as an override it is refused (momentum-on-llm)",
    ("trainer", "lora-on-full"): "a lora section equal to the defaults changes nothing; a non-default one on llm_full "
                                 "is refused (trainer/workloads/llm_full_checks.py)",
    ("trainer", "workload-collectives-on-llama"): "the workload picks what runs (a collective sweep with its defaults); "
                                                  "other workloads' sections are unused, as sweep keys on a training "
                                                  "recipe",
    ("trainer", "warmup-above-steps"): "a warmup longer than the run is a legal schedule (a short smoke test of a long "
                                       "recipe's warmup); the learning rate never reaches its peak, as asked",
    ("trainer", "world-size-twice"): "the last of a repeated option wins, as argparse (and torchrun) read it",
    ("trainer", "world-size-fullwidth"): "Python's int, as torch reads WORLD_SIZE too, takes any Unicode decimal "
                                         "digit: the harness and torch agree on 2 (the ASCII-only rule is for flags "
                                         "whose isdigit and int disagree)",
    ("trainer", "world-size-arabic-indic"): "as world-size-fullwidth: int() reads it as 2, in the harness and in torch",
    ("trainer", "world-size-trailing-space"): "int() strips spaces, as torch's own read of WORLD_SIZE does",
    ("trainer", "output-dir-runjson-truncated"): "a damaged run.json of the same directory is set aside (logs/run."
                                                 "damaged-TIME.json) and the run starts its own (docs/run-directory.md)",
    ("trainer", "secret-env"): "exit 0 and no file under the run directory holds the secret (HF_TOKEN, "
                               "WANDB_API_KEY, a *_PASSWORD variable are not recorded)",
    ("telemetry report", "ranks-is-file"): "a ranks entry that is not a directory holds no rank's files: the per-rank "
                                           "sections say they are unknown (no cross-rank step times), as for a one-"
                                           "rank run",
    ("telemetry report", "recipe-null"): "a run.json without its recipe is reported with the recipe's fields unknown",
    ("telemetry report", "version-string"): "run.json has no version field: a key it does not know is read past",
    ("telemetry report", "metrics-crlf"): "JSON reads CRLF line ends as whitespace: the steps are read as written",
    ("telemetry watch", "step-time-negative"): "a damaged line is skipped like a torn one (the report refuses a run "
                                               "with no good line; watch shows what is good so far)",
    ("telemetry nccl-tests", "crlf"): "a table saved with CRLF line ends is read as written",
    ("telemetry nccl-tests", "bom"): "a UTF-8 byte-order mark is skipped",
    ("telemetry nccl-tests", "utf16"): "a table saved as UTF-16 (PowerShell's > and Out-File) is read as such "
                                       "(it was 'no nccl-tests table found')",
    ("telemetry nccl-log", "crlf"): "a log saved with CRLF line ends is read as written",
    ("telemetry nccl-log", "utf16"): "a log saved as UTF-16 is read as such (it was 'no line names NCCL')",
    ("telemetry project", "rate-twice"): "--rate is repeatable: one projection per rate",
    ("launch.evaluate", "out-full-fs"): "a dry run writes nothing: its probe file (no data blocks) fits a full "
                                        "filesystem; the runs' own writes meet it (each run's one line, exit 1)",
    ("attach", "run-dir-full-fs"): "attach writes the run directory from inside the framework's process; `true` "
                                   "starts none, so nothing is written",
}
