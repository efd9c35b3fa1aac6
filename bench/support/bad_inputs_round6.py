"""The sixth round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others (`--round 6` runs only these). Aimed at the newest
surfaces (sweep.* keys as nccl-tests users spell them, a sweep's table written live and watched, nccl-log
input) and at what a torchtitan/NeMo/nccl-tests/Slurm user plausibly mistypes."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from telemetry.rundir import RUN_JSON, SWEEP_SIZES, SWEEP_TABLE

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
SW = ["trainer", "recipes/collectives.yaml"]
DRY = ["--dry-run"]
NCCL_LOG = "tests/telemetry/nccl_logs/nccl_tests_228_ib_two_hcas.log"
NL = ["telemetry", "nccl-log"]
NEMO = ["launch.nemo", TINY, "--engine", "nemo2"]
SBATCH = ["bash", "launch/slurm/train.sbatch"]
SLURM_ENV = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "6", "SLURM_NNODES": "2", "SLURM_SUBMIT_DIR": "/tmp"}
_HELD: list[socket.socket] = []  # a port kept in use while the cases run


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory (what a dry run does not open, a run does)."""
    return ["max_steps=1", f"output_dir={{root}}/t6-{name}"]


def _sweep_run(path: Path, repo: Path) -> None:
    """A real (CPU, one rank) sweep of two collectives up to 1 KiB: its tables as the sweep writes them."""
    subprocess.run([sys.executable, "-m", "trainer", "recipes/collectives.yaml", "sweep.max_bytes=1K",
                    "sweep.ops=[all_reduce,all_gather]", "sweep.iters=2", "sweep.warmup=1", "sweep.latency_iters=2",
                    f"output_dir={path}"], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                   capture_output=True, check=True, timeout=120)


def _edit_recipe(path: Path, **sweep) -> None:
    run = json.loads((path / RUN_JSON).read_text())
    run["recipe"] = {**run["recipe"], **sweep}
    (path / RUN_JSON).write_text(json.dumps(run))


def _cut(path: Path) -> None:
    """A sweep killed before its end: no collectives.json, run.json's status failed."""
    (path / "collectives.json").unlink()
    run = json.loads((path / RUN_JSON).read_text())
    (path / RUN_JSON).write_text(json.dumps({**run, "status": "failed"}))


def _sweeps(root: Path, repo: Path) -> dict[str, str]:
    base = root / "r6sweep"
    _sweep_run(base, repo)
    table = (base / SWEEP_TABLE).read_text()
    damage = {
        "r6tablefifo": lambda p: ((p / SWEEP_TABLE).unlink(), os.mkfifo(p / SWEEP_TABLE)),
        "r6tabledir": lambda p: ((p / SWEEP_TABLE).unlink(), (p / SWEEP_TABLE).mkdir()),
        "r6tablezero": lambda p: ((p / SWEEP_TABLE).unlink(), (p / SWEEP_TABLE).symlink_to("/dev/zero")),
        # half-written: the sweep was killed in the middle of a row (no footer, a torn last line)
        "r6tabletorn": lambda p: (p / SWEEP_TABLE).write_text(table[:table.index("all_gather") + 900]),
        "r6tablebinary": lambda p: (p / SWEEP_TABLE).write_bytes(b"\x00\xff" * 4096),
        "r6tablebounds": lambda p: (p / SWEEP_TABLE).write_text(
            table.replace("8 to 1024 bytes x2,", "8 to 1024 bytes x0,", 1)),
        "r6sizestorn": lambda p: (p / SWEEP_SIZES).write_text(
            (p / SWEEP_SIZES).read_text().splitlines()[0][:200]),
        "r6sizesfifo": lambda p: ((p / SWEEP_SIZES).unlink(), os.mkfifo(p / SWEEP_SIZES)),
        "r6sizesbinary": lambda p: (p / SWEEP_SIZES).write_bytes(b"\xff\xfe\x00" * 300 + b"\n"),
        "r6sizeslist": lambda p: (p / SWEEP_SIZES).write_text("[1, 2]\n{\"op\": 5, \"size\": \"x\"}\n"),
        "r6jsondamaged": lambda p: (p / "collectives.json").write_text('{"ops": {"all_reduce": '),
        "r6jsonfifo": lambda p: ((p / "collectives.json").unlink(), os.mkfifo(p / "collectives.json")),
        "r6sweepstr": lambda p: _edit_recipe(p, sweep="all_reduce"),
        "r6opsnum": lambda p: _edit_recipe(p, sweep={"ops": 5}),
        "r6notable": lambda p: (p / SWEEP_TABLE).unlink(),
        # cut short: killed in the middle of a row, before its collectives.json (the table is all there is)
        "r6cuttorn": lambda p: (_cut(p), (p / SWEEP_TABLE).write_text(table[:table.index("all_gather") + 900])),
        "r6cutfifo": lambda p: (_cut(p), (p / SWEEP_TABLE).unlink(), os.mkfifo(p / SWEEP_TABLE)),
        "r6cutempty": lambda p: (_cut(p), (p / SWEEP_TABLE).write_text("")),
        "r6cutheader": lambda p: (_cut(p), (p / SWEEP_TABLE).write_text(table[:table.index("#       size")])),
    }
    out = {"r6sweep": str(base)}
    for name, change in damage.items():
        shutil.copytree(base, root / name, symlinks=True)
        change(root / name)
        out[name] = str(root / name)
    return out


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import yaml

    out = _sweeps(root, repo)
    logs = root / "r6-logdir"  # a folder of files that are not NCCL logs
    logs.mkdir()
    (logs / "notes.txt").write_text("hello\n")
    (logs / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (root / "r6-nccl.log.gz").write_bytes(gzip.compress((repo / NCCL_LOG).read_bytes()))
    held = socket.socket()
    held.bind(("0.0.0.0", 0))
    held.listen()
    _HELD.append(held)
    out["r6port"] = str(held.getsockname()[1])
    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    doc["out"] = str(root / "eval6-out")
    v0, v1 = doc["variants"]
    w0, w1 = doc["workloads"]
    slurm = {"launcher": "slurm", "variants": [{k: v for k, v in x.items() if k != "lab"} for x in (v0, v1)]}
    specs = {
        "repeats-null": {"repeats": None},
        "repeats-string-number": {"repeats": "2"},
        "repeats-over-max": {"repeats": 1001},
        "variants-null": {"variants": None},
        "workloads-null": {"workloads": None},
        "variant-same-name-other-case": {"variants": [v0, {**v1, "name": v0["name"].upper()}]},
        "workload-sweep-size-mib": {"workloads": [{**w0, "overrides": ["sweep.max_bytes=1MiB"]}, w1]},
        "workload-sweep-dtype-bf16": {"workloads": [{**w0, "overrides": ["sweep.dtype=bf16"]}, w1]},
        "slurm-nodes-zero": {**slurm, "slurm": {"nodes": 0}},
        "slurm-nodes-string": {**slurm, "slurm": {"nodes": "2"}},
        "slurm-nproc-zero": {**slurm, "slurm": {"nodes": 2, "nproc_per_node": 0}},
        "slurm-gpus-huge": {**slurm, "slurm": {"nodes": 2, "gpus_per_node": 100000}},
        "slurm-srun-args-string": {**slurm, "slurm": {"nodes": 2, "srun_args": "--exclusive"}},
        "local-nproc-zero": {"launcher": "local", "local": {"nproc_per_node": 0},
                             "variants": slurm["variants"]},
        "lab-nodes-huge": {"lab": {**doc["lab"], "nodes": 100000}},
    }
    for name, change in specs.items():
        (root / f"eval6-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}))
    return out


def release() -> None:
    """Give back the port held for the port-in-use case."""
    while _HELD:
        _HELD.pop().close()


W = ["telemetry", "watch"]
CASES: list[tuple[str, str, list[str], dict]] = [
    # sweep.* keys as nccl-tests users write them (a dry run plans the sweep)
    ("trainer", "sweep-size-mib", [*SW, "sweep.max_bytes=1MiB", *DRY], {}),
    ("trainer", "sweep-size-exponent", [*SW, "sweep.max_bytes=1e6", *DRY], {}),
    ("trainer", "sweep-size-minus-one", [*SW, "sweep.max_bytes=-1", *DRY], {}),
    ("trainer", "sweep-size-hex-string", [*SW, "sweep.min_bytes='0x10'", *DRY], {}),
    ("trainer", "sweep-size-space", [*SW, "sweep.max_bytes=64 MB", *DRY], {}),
    ("trainer", "sweep-size-tera", [*SW, "sweep.max_bytes=1T", *DRY], {}),
    ("trainer", "sweep-step-mib", [*SW, "sweep.step_bytes=1MiB", *DRY], {}),
    ("trainer", "sweep-step-exponent", [*SW, "sweep.step_bytes=1e6", "sweep.min_bytes=1M", *DRY], {}),
    ("trainer", "sweep-step-with-factor", [*SW, "sweep.step_bytes=1M", "sweep.factor=4", "sweep.min_bytes=1M", *DRY],
     {}),
    ("trainer", "sweep-step-equals-max", [*SW, "sweep.step_bytes=64M", *DRY], {}),
    ("trainer", "sweep-step-list", [*SW, "sweep.step_bytes=[1M, 2M]", *DRY], {}),
    ("trainer", "sweep-ops-allreduce", [*SW, "sweep.ops=[allreduce]", *DRY], {}),
    ("trainer", "sweep-ops-perf-name", [*SW, "sweep.ops=[all_reduce_perf]", *DRY], {}),
    ("trainer", "sweep-ops-alltoall", [*SW, "sweep.ops=[alltoall]", *DRY], {}),
    ("trainer", "sweep-ops-string", [*SW, "sweep.ops=all_reduce", *DRY], {}),
    ("trainer", "sweep-ops-comma-string", [*SW, "sweep.ops=all_reduce,all_gather", *DRY], {}),
    ("trainer", "sweep-ops-empty", [*SW, "sweep.ops=[]", *DRY], {}),
    ("trainer", "sweep-ops-twice", [*SW, "sweep.ops=[all_reduce, all_reduce]", *DRY], {}),
    ("trainer", "sweep-ops-null-item", [*SW, "sweep.ops=[all_reduce, null]", *DRY], {}),
    ("trainer", "sweep-dtype-bf16", [*SW, "sweep.dtype=bf16", *DRY], {}),
    ("trainer", "sweep-dtype-fp8", [*SW, "sweep.dtype=fp8", *DRY], {}),
    ("trainer", "sweep-dtype-float", [*SW, "sweep.dtype=float", *DRY], {}),
    ("trainer", "sweep-dtype-half", [*SW, "sweep.dtype=half", *DRY], {}),
    ("trainer", "sweep-dtype-f8e4m3", [*SW, "sweep.dtype=f8e4m3", *DRY], {}),
    ("trainer", "sweep-redop-mean", [*SW, "sweep.redop=mean", *DRY], {}),
    ("trainer", "sweep-root-beyond-world", [*SW, "sweep.root=5", "--world-size", "2", *DRY], {}),
    ("trainer", "sweep-in-place-bool", [*SW, "sweep.in_place=true", *DRY], {}),
    ("trainer", "sweep-time-reduction-median", [*SW, "sweep.time_reduction=median", *DRY], {}),
    ("trainer", "sweep-skip-above-iters", [*SW, "sweep.per_iter_skip=50", "sweep.per_iter_timing=true", *DRY], {}),
    ("trainer", "sweep-device-memory-gb", [*SW, "sweep.device_memory=80GB", *DRY], {}),
    ("trainer", "sweep-min-seconds-negative", [*SW, "sweep.min_seconds_per_size=-1", *DRY], {}),
    ("trainer", "sweep-factor-zero", [*SW, "sweep.factor=0", *DRY], {}),
    ("trainer", "sweep-repeat-stat-mean", [*SW, "sweep.repeat_stat=mean", *DRY], {}),
    ("trainer", "sweep-key-near-miss", [*SW, "sweep.stepbytes=1M", *DRY], {}),
    ("trainer", "sweep-nccl-flag-as-key", [*SW, "sweep.b=8", *DRY], {}),
    ("trainer", "sweep-keys-on-training-recipe", [*T, "sweep.max_bytes=1M", *DRY], {}),
    ("trainer", "sweep-over-memory", [*SW, "sweep.max_bytes=60G", "--world-size", "8", *DRY], {}),
    # telemetry watch on odd paths and sweeps cut short or damaged
    ("telemetry watch", "run-is-fifo", [*W, "{root}/fifo", "--once"], {}),
    ("telemetry watch", "run-is-dev-null", [*W, "/dev/null", "--once"], {}),
    ("telemetry watch", "sweep-table-fifo", [*W, "{r6tablefifo}", "--once"], {}),
    ("telemetry watch", "sweep-table-dir", [*W, "{r6tabledir}", "--once"], {}),
    ("telemetry watch", "sweep-table-dev-zero", [*W, "{r6tablezero}", "--once"], {}),
    ("telemetry watch", "sweep-table-torn", [*W, "{r6tabletorn}", "--once"], {}),
    ("telemetry watch", "sweep-table-binary", [*W, "{r6tablebinary}", "--once"], {}),
    ("telemetry watch", "sweep-bounds-x0", [*W, "{r6tablebounds}", "--once"], {}),
    ("telemetry watch", "sweep-sizes-torn", [*W, "{r6sizestorn}", "--once"], {}),
    ("telemetry watch", "sweep-sizes-fifo", [*W, "{r6sizesfifo}", "--once"], {}),
    ("telemetry watch", "sweep-recipe-sweep-string", [*W, "{r6sweepstr}", "--once"], {}),
    ("telemetry watch", "sweep-recipe-ops-number", [*W, "{r6opsnum}", "--once"], {}),
    ("telemetry watch", "interval-tiny", [*W, "{good}", "--once", "--interval", "1e-9"], {}),
    ("telemetry watch", "cut-sweep-torn", [*W, "{r6cuttorn}", "--once"], {}),
    ("telemetry watch", "cut-sweep-fifo", [*W, "{r6cutfifo}", "--once"], {}),
    ("telemetry watch", "cut-sweep-empty-table", [*W, "{r6cutempty}", "--once"], {}),
    ("telemetry report", "cut-sweep-torn", ["telemetry", "report", "{r6cuttorn}", "--out", "{root}/s6r10"], {}),
    ("telemetry report", "cut-sweep-fifo", ["telemetry", "report", "{r6cutfifo}", "--out", "{root}/s6r11"], {}),
    ("telemetry report", "cut-sweep-header-only", ["telemetry", "report", "{r6cutheader}", "--out", "{root}/s6r12"],
     {}),
    ("telemetry compare", "cut-sweep-torn", ["telemetry", "compare", "a={r6sweep}", "b={r6cuttorn}", "--out",
                                             "{root}/s6c5"], {}),
    ("telemetry compare", "cut-sweep-fifo", ["telemetry", "compare", "a={r6sweep}", "b={r6cutfifo}", "--out",
                                             "{root}/s6c6"], {}),
    ("telemetry nccl-tests", "cut-sweep-header-only", ["telemetry", "nccl-tests", "{r6cutheader}"], {}),
    # telemetry report / compare / project / nccl-tests on damaged sweeps
    ("telemetry report", "sweep-table-fifo", ["telemetry", "report", "{r6tablefifo}", "--out", "{root}/s6r1"], {}),
    ("telemetry report", "sweep-sizes-torn", ["telemetry", "report", "{r6sizestorn}", "--out", "{root}/s6r2"], {}),
    ("telemetry report", "sweep-sizes-fifo", ["telemetry", "report", "{r6sizesfifo}", "--out", "{root}/s6r3"], {}),
    ("telemetry report", "sweep-sizes-binary", ["telemetry", "report", "{r6sizesbinary}", "--out", "{root}/s6r4"], {}),
    ("telemetry report", "sweep-sizes-wrong-shape", ["telemetry", "report", "{r6sizeslist}", "--out", "{root}/s6r5"],
     {}),
    ("telemetry report", "sweep-json-damaged", ["telemetry", "report", "{r6jsondamaged}", "--out", "{root}/s6r6"], {}),
    ("telemetry report", "sweep-json-fifo", ["telemetry", "report", "{r6jsonfifo}", "--out", "{root}/s6r7"], {}),
    ("telemetry report", "sweep-table-dev-zero", ["telemetry", "report", "{r6tablezero}", "--out", "{root}/s6r8"], {}),
    ("telemetry report", "sweep-recipe-sweep-string", ["telemetry", "report", "{r6sweepstr}", "--out", "{root}/s6r9"],
     {}),
    ("telemetry report", "run-is-fifo", ["telemetry", "report", "{root}/fifo"], {}),
    ("telemetry compare", "sweep-sizes-binary", ["telemetry", "compare", "a={r6sweep}", "b={r6sizesbinary}",
                                                 "--out", "{root}/s6c1"], {}),
    ("telemetry compare", "sweep-flag-table-fifo", ["telemetry", "compare", "a={good}", "b={good2}", "--out",
                                                    "{root}/s6c2", "--sweep", "a={r6tablefifo}"], {}),
    ("telemetry compare", "sweep-flag-torn", ["telemetry", "compare", "a={good}", "b={good2}", "--out", "{root}/s6c3",
                                              "--sweep", "a={r6tabletorn}"], {}),
    ("telemetry compare", "sweep-no-table", ["telemetry", "compare", "a={r6sweep}", "b={r6notable}", "--out",
                                             "{root}/s6c4"], {}),
    ("telemetry project", "busbw-table-sweep-fifo", ["telemetry", "project", "{good}", "--busbw-table",
                                                     "{r6tablefifo}/" + SWEEP_TABLE], {}),
    ("telemetry nccl-tests", "sweep-table-fifo", ["telemetry", "nccl-tests", "{r6tablefifo}"], {}),
    ("telemetry nccl-tests", "sweep-table-torn", ["telemetry", "nccl-tests", "{r6tabletorn}"], {}),
    ("telemetry p2p", "sweep-table-fifo", ["telemetry", "p2p", "{r6tablefifo}"], {}),
    # telemetry nccl-log
    ("telemetry nccl-log", "gzip-log", [*NL, "{root}/r6-nccl.log.gz"], {}),
    ("telemetry nccl-log", "empty-stdin", [*NL, "-"], {}),
    ("telemetry nccl-log", "dir-of-non-logs", [*NL, "{root}/r6-logdir"], {}),
    ("telemetry nccl-log", "expect-hca-with-port", [*NL, NCCL_LOG, "--expect", "mlx5_0:1"], {}),
    ("telemetry nccl-log", "expect-hca-exclusion", [*NL, NCCL_LOG, "--expect", "^mlx5_1"], {}),
    ("telemetry nccl-log", "expect-nvlink", [*NL, NCCL_LOG, "--expect", "nvlink"], {}),
    ("telemetry nccl-log", "expect-upper-ib", [*NL, NCCL_LOG, "--expect", "IB"], {}),
    ("telemetry nccl-log", "sweep-run-dir", [*NL, "{r6tablefifo}"], {}),
    ("telemetry nccl-log", "stdin-twice", [*NL, "-", "-"], {}),
    # launch.evaluate matrices
    *[("launch.evaluate", name, ["launch.evaluate", "{root}/eval6-" + name + ".yaml", "--dry-run"], {}) for name in (
        "repeats-null", "repeats-string-number", "repeats-over-max", "variants-null", "workloads-null",
        "variant-same-name-other-case", "workload-sweep-size-mib", "workload-sweep-dtype-bf16", "slurm-nodes-zero",
        "slurm-nodes-string", "slurm-nproc-zero", "slurm-gpus-huge", "slurm-srun-args-string", "local-nproc-zero",
        "lab-nodes-huge")],
    # live exporter settings
    ("trainer", "prometheus-port-in-use", [*T, "telemetry.prometheus={r6port}", *RUN("port-in-use")], {}),
    ("trainer", "prometheus-negative", [*T, "telemetry.prometheus=-1", *DRY], {}),
    ("trainer", "prometheus-float", [*T, "telemetry.prometheus=9100.5", *DRY], {}),
    ("trainer", "prometheus-host-port", [*T, "telemetry.prometheus=0.0.0.0:9100", *DRY], {}),
    ("trainer", "pushgateway-localhost-no-scheme", [*T, "telemetry.pushgateway=localhost:9091", *DRY], {}),
    ("trainer", "pushgateway-ftp", [*T, "telemetry.pushgateway=ftp://gw:9091", *DRY], {}),
    ("trainer", "otlp-no-scheme", [*T, "telemetry.otlp=collector:4318", *DRY], {}),
    ("trainer", "push-interval-zero", [*T, "telemetry.pushgateway=http://gw:9091", "telemetry.push_interval_s=0",
                                       *DRY], {}),
    # Slurm and NeMo node counts
    ("launch.nemo", "nodes-zero", [*NEMO, "--nodes", "0"], {}),
    ("launch.nemo", "nodes-word", [*NEMO, "--nodes", "two"], {}),
    ("launch.nemo", "gpus-per-node-zero", [*NEMO, "--gpus-per-node", "0"], {}),
    ("launch.nemo", "slurm-nnodes-zero", NEMO, {"SLURM_NNODES": "0"}),
    ("launch.nemo", "slurm-nnodes-word", NEMO, {"SLURM_NNODES": "two"}),
    ("launch.nemo", "slurm-tasks-zero", NEMO, {"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "0"}),
    ("launch.nemo", "world-not-multiple", NEMO, {"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"}),
    ("launch.nemo", "flags-against-launcher", [*NEMO, "--nodes", "4"],
     {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}),
    ("sbatch", "nproc-zero", [*SBATCH, TINY], {**SLURM_ENV, "NPROC_PER_NODE": "0"}),
    ("sbatch", "nproc-word", [*SBATCH, TINY], {**SLURM_ENV, "NPROC_PER_NODE": "eight"}),
    ("sbatch", "rdzv-port-huge", [*SBATCH, TINY], {**SLURM_ENV, "RDZV_PORT": "99999"}),
    ("sbatch", "recipe-missing", [*SBATCH, "{root}/nope.yaml"], SLURM_ENV),
    ("sbatch", "no-recipe", SBATCH, SLURM_ENV),
    ("sbatch", "outside-slurm", [*SBATCH, TINY], {}),
    ("sbatch", "staged-dir-missing", [*SBATCH, TINY], {**SLURM_ENV, "STAGED_DIR": "{root}/nope"}),
    # environment variables the harness reads, set to garbage
    ("trainer", "crash-after-step-word", [*T, *RUN("crash-word")], {"FABRIC_HARNESS_CRASH_AFTER_STEP": "two"}),
    ("trainer", "crash-mode-unknown", [*T, *RUN("crash-mode")], {"FABRIC_HARNESS_CRASH_AFTER_STEP": "1",
                                                                 "FABRIC_HARNESS_CRASH_MODE": "explode"}),
    ("trainer", "lab-env-not-json", [*T, *RUN("lab-env")], {"FABRIC_HARNESS_LAB": "{{rate: 1gbit"}),
    ("trainer", "nccl-ib-hca-garbage", [*T, *RUN("ib-hca")], {"NCCL_IB_HCA": "=:,^"}),
    ("trainer", "trace-buffer-negative", [*T, *RUN("trace-buf")], {"TORCH_NCCL_TRACE_BUFFER_SIZE": "-5"}),
    ("trainer", "hf-offline-word", [*T, *DRY], {"HF_HUB_OFFLINE": "maybe"}),
    ("trainer", "node-name-newline", [*T, *RUN("node-nl")], {"FABRIC_HARNESS_NODE": "a\nb"}),
    ("attach", "expect-env-unknown", ["telemetry.integrations.attach", "--run-dir", "{root}/a6", "--", "true"],
     {"FABRIC_HARNESS_FABRIC_EXPECT": "warp"}),
]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
_FINISHED = "a finished sweep is read from its collectives.json; its text table is not read"
_NO_SIZES = "the report of a sweep does not read sweep.jsonl (compare's power and congestion tables do)"
BY_DESIGN: dict[tuple[str, str], str] = {
    ("trainer", "sweep-device-memory-gb"): "80GB is 80G: K, M and G are powers of 1024 with an optional B, as "
                                           "nccl-tests reads -b/-e",
    ("trainer", "sweep-keys-on-training-recipe"): "a training recipe's sweep section is unused, as any section "
                                                  "another workload reads; the dry run prints it",
    ("trainer", "nccl-ib-hca-garbage"): "a CPU (gloo) run loads no NCCL and finds no HCA to select; NCCL reads "
                                        "NCCL_IB_HCA itself on GPUs",
    ("trainer", "hf-offline-word"): "huggingface_hub reads a value it does not know as false (online); a dry run "
                                    "opens no hub",
    ("telemetry watch", "sweep-table-torn"): "the sizes complete so far are shown; a torn row is not one",
    ("telemetry watch", "sweep-table-binary"): "no complete row: 'no size measured' (run.json says completed)",
    ("telemetry watch", "sweep-bounds-x0"): "the planned count is unknown and left out ('8 sizes', not '8/N')",
    ("telemetry watch", "sweep-sizes-torn"): "watch reads the sweep's table, not sweep.jsonl",
    ("telemetry watch", "sweep-sizes-fifo"): "watch reads the sweep's table, not sweep.jsonl (a FIFO is not opened)",
    ("telemetry watch", "sweep-recipe-sweep-string"): "the planned ops are unknown and not listed; the table's "
                                                      "tests are shown (an AttributeError traceback before)",
    ("telemetry watch", "sweep-recipe-ops-number"): "the planned ops are unknown and not listed (a TypeError "
                                                    "traceback before)",
    ("telemetry watch", "interval-tiny"): "--once prints the view once; the interval is not used",
    ("telemetry watch", "cut-sweep-torn"): "a sweep killed mid-row: the sizes complete before it are shown",
    ("telemetry watch", "cut-sweep-empty-table"): "'no size measured: the table holds no complete row' (it said "
                                                  "'yet' of a failed sweep before)",
    ("telemetry report", "sweep-table-fifo"): _FINISHED,
    ("telemetry report", "sweep-table-dev-zero"): _FINISHED,
    ("telemetry report", "sweep-recipe-sweep-string"): _FINISHED + ", nor the recipe's sweep section",
    ("telemetry report", "sweep-sizes-torn"): _NO_SIZES,
    ("telemetry report", "sweep-sizes-fifo"): _NO_SIZES,
    ("telemetry report", "sweep-sizes-binary"): _NO_SIZES,
    ("telemetry report", "sweep-sizes-wrong-shape"): _NO_SIZES,
    ("telemetry report", "cut-sweep-torn"): "the sizes the table holds are reported, the sweep said unfinished",
    ("telemetry report", "cut-sweep-fifo"): "the result row says the table is a FIFO, not read (it was 'holds no "
                                            "measured size')",
    ("telemetry report", "cut-sweep-header-only"): "the result row says the table holds no measured size",
    ("telemetry nccl-tests", "cut-sweep-header-only"): "exit 0 on main since the parameters line is read as a "
                                                       "table's start (43de6f2, before round 8): the cut table holds "
                                                       "its parameters and device lines, and output with device lines "
                                                       "but no rows converts (0 rows), as real ones do "
                                                       "(tests/telemetry/test_main_unit.py)",
    ("telemetry compare", "sweep-sizes-binary"): "damaged sweep.jsonl lines are left out of the power and "
                                                 "congestion tables (a UnicodeDecodeError traceback before)",
    ("telemetry compare", "sweep-flag-table-fifo"): _FINISHED,
    ("telemetry compare", "sweep-flag-torn"): _FINISHED,
    ("telemetry compare", "sweep-no-table"): _FINISHED,
    ("telemetry project", "busbw-table-sweep-fifo"): "a hang, kept: --busbw-table reads a FIFO as it reads "
                                                     "<(...) (process substitution); one nobody writes waits, as "
                                                     "cat does, until Ctrl-C",
    ("telemetry nccl-tests", "sweep-table-torn"): "the rows complete so far are read, as of a sweep cut short",
    ("telemetry nccl-log", "expect-hca-with-port"): "exit 3, the documented status of an unmet --expect: mlx5_0:1 "
                                                    "is read as a name (eth0:1 is an alias interface), and the log "
                                                    "used two HCAs",
    ("launch.evaluate", "variant-same-name-other-case"): "names that differ in case label different runs (file "
                                                         "systems here are case-sensitive)",
    ("attach", "expect-env-unknown"): "attach sets FABRIC_HARNESS_FABRIC_EXPECT from its own --expect (default "
                                      "any), over the environment's",
}
