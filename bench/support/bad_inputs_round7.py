"""The seventh round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others (`--round 7` runs only these). Aimed at surfaces the
earlier rounds covered thinly: YAML type confusion in the telemetry and parallel sections, Hydra/NeMo and
torchtitan override spellings, unicode look-alike keys, a run directory on a read-only or full filesystem,
launcher variables that disagree with each other, live exporters' URLs (credentials among them), mllog of
damaged runs, watch of what is not a run directory, and evaluation files whose variants conflict."""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

from bench.support.recorded_runs import write_run

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
SW = ["trainer", "recipes/collectives.yaml"]
DRY = ["--dry-run"]
P = ["telemetry", "project", "{good}"]
W = ["telemetry", "watch"]
ML = ["telemetry", "mllog"]
LAB = ["launch.lab", "--nodes", "2", "--rate", "1gbit"]
SBATCH = ["bash", "launch/slurm/train.sbatch"]
SLURM_ENV = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_SUBMIT_DIR": "/tmp"}
_MOUNTS: list[Path] = []  # tmpfs mounts made for the read-only and full-disk cases, unmounted by release()


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory (what a dry run does not open, a run does)."""
    return ["max_steps=1", f"output_dir={{root}}/t7-{name}"]


def _mount(path: Path, options: str) -> bool:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode == 0:
        _MOUNTS.append(path)
    return done.returncode == 0


def _edit(path: Path, **fields) -> None:
    run = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**run, **fields}))


def _edit_metrics(path: Path, **fields) -> None:
    lines = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    (path / "metrics.jsonl").write_text("".join(json.dumps({**r, **fields}) + "\n" for r in lines))


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import yaml

    out: dict[str, str] = {}
    # a read-only filesystem, and one with 64 KiB (a run's checkpoint does not fit): each its own tmpfs
    ro = root / "r7-ro"
    if _mount(ro, "size=1m"):
        (ro / "old-run").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True)
    _mount(root / "r7-full", "size=64k")
    if _mount(root / "r7-filled", "size=16k"):  # full from the start: whatever is written there fails
        with contextlib.suppress(OSError), open(root / "r7-filled" / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    # runs an MLPerf log is written from (bert_pretraining, each step timed), damaged one way each
    for name, damage in {
        "r7mlldata": lambda p: _edit(p, data=[1, 2]),
        "r7mllfinal": lambda p: _edit(p, final="done"),
        "r7mllgbs": lambda p: (_edit(p, layout={"world_size": 2}, recipe={
            "name": "b", "workload": "bert_pretraining", "train": {"global_batch_size": "8"}})),
        "r7mllevalstr": lambda p: _edit_metrics(p, eval_accuracy="0.7"),
        "r7mlltimestr": lambda p: _edit_metrics(p, time="12:00"),
        "r7mlltimeback": lambda p: (p / "metrics.jsonl").write_text("".join(reversed(
            (p / "metrics.jsonl").read_text().splitlines(keepends=True)))),
        "r7mllstarted": lambda p: _edit(p, started_at=12345),
        "r7mllseed": lambda p: _edit(p, recipe={"name": "b", "workload": "bert_pretraining", "seed": "x" * 10000}),
        "r7mllsamples": lambda p: (_edit(p, data={"train_samples": -5, "eval_samples": "many"})),
        "r7mllstatus": lambda p: _edit(p, status=None),
    }.items():
        write_run(root / name, name="b", workload="bert_pretraining", times=True)
        damage(root / name)
        out[name] = str(root / name)
    # directories that are not a run's: an evaluation's out, a report's out, a run's logs/
    evalout = root / "r7-evalout"
    (evalout / "runs").mkdir(parents=True)
    (evalout / "evaluation.json").write_text(json.dumps({"name": "x", "variants": [], "workloads": []}))
    reportout = root / "r7-reportout"
    reportout.mkdir()
    (reportout / "report.md").write_text("# report\n")
    (reportout / "report.html").write_text("<html></html>\n")
    # a run that another recipe wrote, beside one of this one (compare refuses it unless allowed)
    write_run(root / "r7-resnet", name="c", workload="image_classification")
    (root / "r7-tab-dir.yaml").write_text(re.sub(r"(?m)^output_dir: .*$", f'output_dir: "{root}/t7-tab\\\\there"',
                                                 (repo / TINY).read_text()))
    (root / "r7 space.yaml").write_text((repo / TINY).read_text())
    (root / "r7-octal.yaml").write_text((repo / TINY).read_text().replace("max_steps:", "max_steps: 010 #"))
    (root / "r7-0o.yaml").write_text(re.sub(r"(?m)^seed: .*$", "seed: 0o17", (repo / TINY).read_text()))
    (root / "r7-lookalike.yaml").write_text((repo / TINY).read_text().replace("max_steps:", "max_st\u0435ps:"))
    (root / "r7-zwsp.yaml").write_text((repo / TINY).read_text().replace("max_steps:", "max_steps\u200b:"))
    (root / "r7-train-list.yaml").write_text((repo / TINY).read_text() + "telemetry: [enabled]\n")
    (root / "r7-include.yaml").write_text("defaults:\n  - base\n" + (repo / TINY).read_text())  # Hydra's list
    # evaluations: variants that conflict with the launcher, each other, or the runs' own variables
    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    doc["out"] = str(root / "eval7-out")
    v0, v1 = doc["variants"]
    w0, w1 = doc["workloads"]
    slurm = {"launcher": "slurm", "variants": [{k: v for k, v in x.items() if k != "lab"} for x in (v0, v1)]}
    specs = {
        "env-world-size": {"variants": [{**v0, "env": {"WORLD_SIZE": "4"}}, v1]},
        "env-master-port": {"variants": [{**v0, "env": {"MASTER_PORT": "29501"}}, v1]},
        "env-output-dir-var": {"variants": [{**v0, "env": {"RANK": "1"}}, v1]},
        "env-value-newline": {"variants": [{**v0, "env": {"NCCL_ALGO": "Ring\nTree"}}, v1]},
        "env-value-nul": {"variants": [{**v0, "env": {"NCCL_ALGO": "Ring\x00"}}, v1]},
        "env-value-nan": {"variants": [{**v0, "env": {"NCCL_BUFFSIZE": float("nan")}}, v1]},
        "hosts-on-lab": {"variants": [{**v0, "hosts": ["node1"]}, v1]},
        "slurm-hosts-duplicate": {**slurm, "slurm": {"nodes": 2}, "variants": [
            {**slurm["variants"][0], "hosts": ["n1", "n1"]}, slurm["variants"][1]]},
        "slurm-hosts-fewer-than-nodes": {**slurm, "slurm": {"nodes": 2}, "variants": [
            {**slurm["variants"][0], "hosts": ["n1"]}, slurm["variants"][1]]},
        "slurm-partition-empty": {**slurm, "slurm": {"nodes": 2, "partition": ""}},
        "slurm-srun-args-numbers": {**slurm, "slurm": {"nodes": 2, "srun_args": [1, 2]}},
        "slurm-timeout-negative": {**slurm, "slurm": {"nodes": 2, "timeout": -1}},
        "local-timeout-nan": {"launcher": "local", "local": {"timeout": float("nan")}, "variants": slurm["variants"]},
        "lab-slow-node-beyond": {"variants": [{**v0, "lab": {**v0["lab"], "slow_node": 5, "slow_rate": "10mbit"}}, v1]},
        "lab-slow-rate-alone": {"variants": [{**v0, "lab": {**v0["lab"], "slow_rate": "10mbit"}}, v1]},
        "lab-mtu-68": {"variants": [{**v0, "lab": {**v0["lab"], "mtu": 68}}, v1]},
        "lab-timeout-zero": {"lab": {**doc["lab"], "timeout": 0}},
        "name-space": {"name": "two rates"},
        "name-empty": {"name": ""},
        "workload-name-slash": {"workloads": [{**w0, "name": "a/b"}, w1]},
        "workload-same-name": {"workloads": [w0, {**w1, "name": w0["name"]}]},
        "workload-overrides-newline": {"workloads": [{**w0, "overrides": ["max_steps=3\nseed=4"]}, w1]},
        "workload-overrides-dict": {"workloads": [{**w0, "overrides": {"max_steps": 3}}, w1]},
        "workload-recipe-relative-other-cwd": {"workloads": [{**w0, "recipe": "recipes/collectives.yaml"}, w1]},
        "fabric-config-list": {"variants": [{**v0, "fabric_config": ["pfc"]}, v1]},
        "expect-transport-list": {"variants": [{**v0, "expect_transport": ["tcp"]}, v1]},
        "launcher-upper": {"launcher": "LAB"},
        "out-newline": {"out": str(root / "eval7\nout")},
    }
    for name, change in specs.items():
        (root / f"eval7-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}))
    (root / "eval7-yaml-merge-variants.yaml").write_text(
        yaml.safe_dump({k: v for k, v in doc.items() if k != "variants"})
        + "base: &b {name: a, expect_transport: tcp}\nvariants:\n- <<: *b\n- <<: *b\n  name: b\n")
    return {**out, "r7ro": str(ro), "r7full": str(root / "r7-full"), "r7filled": str(root / "r7-filled"), "r7evalout": str(evalout),
            "r7reportout": str(reportout), "r7resnet": str(root / "r7-resnet")}


def release() -> None:
    """Unmount the tmpfs mounts made for the read-only and full-disk cases."""
    while _MOUNTS:
        subprocess.run(["umount", "-l", str(_MOUNTS.pop())], capture_output=True)


E = ["launch.evaluate"]
CASES: list[tuple[str, str, list[str], dict]] = [
    # recipe values of the wrong YAML type, in the sections earlier rounds typed least
    ("trainer", "bool-as-word-on", [*T, "model.activation_checkpointing='on'", *DRY], {}),
    ("trainer", "bool-as-yes", [*T, "train.save_final=yes", *DRY], {}),
    ("trainer", "bool-as-one", [*T, "telemetry.enabled=1", *DRY], {}),
    ("trainer", "bool-as-string-false", [*T, "data.packing='false'", *DRY], {}),
    ("trainer", "octal-looking-int", [*T, "max_steps=010", *DRY], {}),
    ("trainer", "octal-looking-in-file", ["trainer", "{root}/r7-octal.yaml", *DRY], {}),
    ("trainer", "octal-0o-in-file", ["trainer", "{root}/r7-0o.yaml", *DRY], {}),
    ("trainer", "int-exponent-string", [*T, "max_steps='1e3'", *DRY], {}),
    ("trainer", "int-exponent-bare", [*T, "train.warmup_steps=1e3", *DRY], {}),
    ("trainer", "int-hex", [*T, "train.log_every=0x10", *DRY], {}),
    ("trainer", "int-sexagesimal", [*T, "train.warmup_steps=1:30", *DRY], {}),
    ("trainer", "float-with-comma", [*T, "train.lr=1,5e-4", *DRY], {}),
    ("trainer", "fullwidth-digit", [*T, "max_steps=\uff13", *DRY], {}),
    ("trainer", "map-where-list", [*T, "train.betas={{a: 0.9}}", *DRY], {}),
    ("trainer", "scalar-where-list", [*T, "data.split=0.8", *DRY], {}),
    ("trainer", "interfaces-string", [*T, "telemetry.interfaces=eth0", *DRY], {}),
    ("trainer", "interfaces-number", [*T, "telemetry.interfaces=[0]", *DRY], {}),
    ("trainer", "export-string", [*T, "telemetry.export=tensorboard", *DRY], {}),
    ("trainer", "export-near-miss", [*T, "telemetry.export=[tensorbord]", *DRY], {}),
    ("trainer", "telemetry-section-list", ["trainer", "{root}/r7-train-list.yaml", *DRY], {}),
    ("trainer", "bmc-list", [*T, "telemetry.bmc=[a, b]", *DRY], {}),
    ("trainer", "bmc-map-number", [*T, "telemetry.bmc={{node1: 5}}", *DRY], {}),
    ("trainer", "bmc-ftp", [*T, "telemetry.bmc=ftp://bmc", *DRY], {}),
    ("trainer", "sysfs-missing", [*T, "telemetry.sysfs=/nonexistent/sys", *RUN("sysfs")], {}),
    ("trainer", "switch-url-credentials", [*T, "telemetry.switch_metrics_url=http://u:pw@sw:9100/metrics", *DRY], {}),
    ("trainer", "sysfs-empty", [*T, "telemetry.sysfs=''", *DRY], {}),
    ("trainer", "switch-url-no-scheme", [*T, "telemetry.switch_metrics_url=switch1:9100", *DRY], {}),
    ("trainer", "switch-url-list", [*T, "telemetry.switch_metrics_url=[http://a]", *DRY], {}),
    ("trainer", "cross-rank-every-negative", [*T, "telemetry.cross_rank_every=-1", *DRY], {}),
    ("trainer", "profile-steps-zero", [*T, "telemetry.profile_steps=0", "telemetry.profile_every=2", *DRY], {}),
    ("trainer", "hold-reports-negative", [*T, "telemetry.hold_reports_s=-1", *DRY], {}),
    ("trainer", "link-probe-bytes-zero", [*T, "telemetry.link_probe_bytes=0", *DRY], {}),
    ("trainer", "counter-interval-zero", [*T, "telemetry.counter_sample_interval_s=0", *DRY], {}),
    ("trainer", "bmc-interval-nan", [*T, "telemetry.bmc_sample_interval_s=nan", *DRY], {}),
    ("trainer", "power-interval-zero", [*T, "telemetry.power_sample_interval_s=0", *DRY], {}),
    ("trainer", "enabled-maybe", [*T, "telemetry.enabled=maybe", *DRY], {}),
    # torchtitan / NeMo / Megatron spellings of what the recipe names otherwise
    ("trainer", "precision-fp16", [*T, "train.precision=fp16", *DRY], {}),
    ("trainer", "precision-nemo-bf16-mixed", [*T, "train.precision=bf16-mixed", *DRY], {}),
    ("trainer", "optimizer-case", [*T, "train.optimizer=AdamW", *DRY], {}),
    ("trainer", "data-parallel-upper", [*T, "parallel.data_parallel=FSDP", *DRY], {}),
    ("trainer", "backend-upper", [*T, "distributed.backend=NCCL", *DRY], {}),
    ("trainer", "zero-stage-four", [*T, "parallel.data_parallel=deepspeed", "parallel.zero_stage=4", *DRY], {}),
    ("trainer", "zero-stage-without-deepspeed", [*T, "parallel.zero_stage=2", *DRY], {}),
    ("trainer", "pp-schedule-upper", [*T, "parallel.pp_schedule=1F1B", *DRY], {}),
    ("trainer", "interleaved-one-stage", [*T, "parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b",
                                          "parallel.pp_stages_per_rank=1", "--world-size", "2", *DRY], {}),
    ("trainer", "model-dtype-float16", [*T, "model.dtype=float16", *DRY], {}),
    ("trainer", "resume-case", [*T, "train.resume=Auto", *DRY], {}),
    ("trainer", "log-every-zero", [*T, "train.log_every=0", *DRY], {}),
    ("trainer", "hydra-plus-override", [*T, "+max_steps=3", *DRY], {}),
    ("trainer", "hydra-double-plus", [*T, "++train.lr=1e-4", *DRY], {}),
    ("trainer", "hydra-delete", [*T, "~train.grad_clip", *DRY], {}),
    ("trainer", "torchtitan-flag-override", [*T, "--training.steps=10", *DRY], {}),
    ("trainer", "flag-style-override", [*T, "--max_steps=3", *DRY], {}),
    ("trainer", "nemo-trainer-section", [*T, "trainer.max_steps=3", *DRY], {}),
    ("trainer", "colon-override", [*T, "max_steps:3", *DRY], {}),
    ("trainer", "override-trailing-comma", [*T, "train.lr=1e-4,", *DRY], {}),
    ("trainer", "override-equals-in-value", [*T, "name=a=b", *DRY], {}),
    ("trainer", "defaults-list-recipe", ["trainer", "{root}/r7-include.yaml", *DRY], {}),
    # unicode look-alike key names
    ("trainer", "cyrillic-e-override", [*T, "max_st\u0435ps=3", *DRY], {}),
    ("trainer", "cyrillic-a-section", [*T, "tr\u0430in.lr=0.1", *DRY], {}),
    ("trainer", "zero-width-key", [*T, "max_steps\u200b=3", *DRY], {}),
    ("trainer", "fullwidth-key", [*T, "\uff4d\uff41\uff58_steps=3", *DRY], {}),
    ("trainer", "lookalike-key-in-file", ["trainer", "{root}/r7-lookalike.yaml", *DRY], {}),
    ("trainer", "zero-width-key-in-file", ["trainer", "{root}/r7-zwsp.yaml", *DRY], {}),
    # paths: spaces, newlines, variables, read-only and full filesystems
    ("trainer", "recipe-path-with-space", ["trainer", "{root}/r7 space.yaml", *DRY], {}),
    ("trainer", "output-dir-newline", [*T, "max_steps=1", 'output_dir="{root}/t7-a\\nb"'], {}),
    ("trainer", "output-dir-tab-in-file", ["trainer", "{root}/r7-tab-dir.yaml", *DRY], {}),
    ("trainer", "output-dir-env-var", [*T, "max_steps=1", "output_dir=$R7_NOPE/x"], {}),
    ("trainer", "output-dir-read-only-fs", [*T, "max_steps=1", "output_dir={r7ro}/run"], {}),
    ("trainer", "output-dir-read-only-existing", [*T, "max_steps=1", "output_dir={r7ro}/old-run"], {}),
    ("trainer", "output-dir-full-fs", [*T, "max_steps=1", "output_dir={r7full}/run"], {}),
    ("trainer", "dataset-tilde-user", [*T, "data.dataset=~r7nosuchuser/d.jsonl", *RUN("tilde-user")], {}),
    ("trainer", "targets-dir-read-only", [*T, "telemetry.prometheus=auto", "telemetry.prometheus_targets_dir={r7ro}",
                                          *RUN("targets-ro")], {}),
    # launcher variables that disagree with each other
    ("trainer", "local-rank-above-rank", [*T, *DRY], {"RANK": "0", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
                                                      "LOCAL_WORLD_SIZE": "2"}),
    ("trainer", "local-world-with-world-one", [*T, *RUN("lws")], {"LOCAL_WORLD_SIZE": "2"}),
    ("trainer", "master-port-spaces", [*T, *DRY], {"MASTER_PORT": "29 500"}),
    ("trainer", "master-port-hex", [*T, *DRY], {"MASTER_PORT": "0x7530"}),
    ("trainer", "cuda-visible-garbage", [*T, *DRY], {"CUDA_VISIBLE_DEVICES": "gpu0,gpu1"}),
    ("trainer", "nccl-socket-ifname-bogus", [*T, *RUN("nccl-ifname")], {"NCCL_SOCKET_IFNAME": "bogus0"}),
    ("trainer", "slurm-procid-without-rank", [*T, *RUN("slurm-procid")], {"SLURM_PROCID": "1", "SLURM_NTASKS": "2",
                                                                   "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_ID": "0",
                                                                   "SLURM_JOB_ID": "7"}),
    # live exporters: ports, URLs (a credential in one must reach no file)
    ("trainer", "prometheus-string-digits", [*T, "telemetry.prometheus='9100'", *DRY], {}),
    ("trainer", "prometheus-true", [*T, "telemetry.prometheus=true", *DRY], {}),
    ("trainer", "prometheus-list", [*T, "telemetry.prometheus=[9100]", *DRY], {}),
    ("trainer", "pushgateway-path", [*T, "telemetry.pushgateway=http://gw:9091/metrics/job/x", *DRY], {}),
    ("trainer", "pushgateway-scrape-path", [*T, "telemetry.pushgateway=http://gw:9091/metrics", *DRY], {}),
    ("trainer", "pushgateway-query", [*T, "telemetry.pushgateway=http://gw:9091/?x=1", *DRY], {}),
    ("trainer", "pushgateway-port-huge", [*T, "telemetry.pushgateway=http://gw:99999", *DRY], {}),
    ("trainer", "pushgateway-newline", [*T, "telemetry.pushgateway=http://gw:9091\nx", *DRY], {}),
    ("trainer", "pushgateway-credentials-run", [*T, "telemetry.pushgateway=http://u:s3cr3t@127.0.0.1:9",
                                                *RUN("push-cred")], {}),
    ("trainer", "otlp-grpc-scheme", [*T, "telemetry.otlp=grpc://collector:4317", *DRY], {}),
    ("trainer", "otlp-no-host", [*T, "telemetry.otlp=http://", *DRY], {}),
    ("trainer", "otlp-ipv6-unclosed", [*T, "telemetry.otlp=http://[::1:4318/v1/metrics", *DRY], {}),
    ("trainer", "push-interval-nan", [*T, "telemetry.pushgateway=http://gw:9091", "telemetry.push_interval_s=nan",
                                      *DRY], {}),
    ("trainer", "push-interval-negative", [*T, "telemetry.otlp=http://c:4318/v1/metrics",
                                           "telemetry.push_interval_s=-5", *DRY], {}),
    ("trainer", "push-interval-unit", [*T, "telemetry.pushgateway=http://gw:9091", "telemetry.push_interval_s=15s",
                                       *DRY], {}),
    # telemetry watch / report on what is not a run directory
    ("telemetry watch", "evaluation-out", [*W, "{r7evalout}", "--once"], {}),
    ("telemetry watch", "report-out", [*W, "{r7reportout}", "--once"], {}),
    ("telemetry watch", "empty-path", [*W, "", "--once"], {}),
    ("telemetry report", "evaluation-out", ["telemetry", "report", "{r7evalout}"], {}),
    ("telemetry report", "empty-path", ["telemetry", "report", ""], {}),
    ("telemetry compare", "other-workload-three", ["telemetry", "compare", "{good}", "{good2}", "{r7resnet}",
                                                   "--out", "{root}/c7a"], {}),
    ("telemetry compare", "busbw-axis-case", ["telemetry", "compare", "{good}", "{good2}", "--busbw-axis", "LOG",
                                              "--out", "{root}/c7b"], {}),
    ("telemetry compare", "out-is-a-run", ["telemetry", "compare", "{good}", "{good2}", "--out", "{good}"], {}),
    ("telemetry compare", "evaluation-out", ["telemetry", "compare", "{good}", "{r7evalout}", "--out", "{root}/c7c"],
     {}),
    # telemetry project: targets that make no sense
    ("telemetry project", "nodes-comma-list", [*P, "--rate", "1gbit", "--nodes", "2,4"], {}),
    ("telemetry project", "nodes-huge", [*P, "--rate", "1gbit", "--nodes", "100000000000"], {}),
    ("telemetry project", "ranks-per-node-huge", [*P, "--rate", "1gbit", "--ranks-per-node", "100000"], {}),
    ("telemetry project", "rate-tiny", [*P, "--rate", "1bit"], {}),
    ("telemetry project", "rate-huge", [*P, "--rate", "1000000tbit"], {}),
    ("telemetry project", "latency-negative", [*P, "--rate", "1gbit", "--latency-us", "-5"], {}),
    ("telemetry project", "latency-huge", [*P, "--rate", "1gbit", "--latency-us", "1e15"], {}),
    ("telemetry project", "efficiency-zero", [*P, "--rate", "1gbit", "--efficiency", "0"], {}),
    ("telemetry project", "json-empty", [*P, "--rate", "1gbit", "--json", ""], {}),
    ("telemetry project", "rate-comma-list", [*P, "--rate", "1gbit,10gbit"], {}),
    # telemetry mllog of damaged runs, and odd text for its fields
    ("telemetry mllog", "data-list", [*ML, "{r7mlldata}", "--no-check", "--out", "{root}/m7a.txt"], {}),
    ("telemetry mllog", "final-string", [*ML, "{r7mllfinal}", "--no-check", "--out", "{root}/m7b.txt"], {}),
    ("telemetry mllog", "batch-string", [*ML, "{r7mllgbs}", "--no-check", "--out", "{root}/m7c.txt"], {}),
    ("telemetry mllog", "eval-string", [*ML, "{r7mllevalstr}", "--no-check", "--out", "{root}/m7d.txt"], {}),
    ("telemetry mllog", "time-string", [*ML, "{r7mlltimestr}", "--no-check", "--out", "{root}/m7e.txt"], {}),
    ("telemetry mllog", "time-backwards", [*ML, "{r7mlltimeback}", "--no-check", "--out", "{root}/m7f.txt"], {}),
    ("telemetry mllog", "started-number", [*ML, "{r7mllstarted}", "--no-check", "--out", "{root}/m7g.txt"], {}),
    ("telemetry mllog", "seed-huge-string", [*ML, "{r7mllseed}", "--no-check", "--out", "{root}/m7h.txt"], {}),
    ("telemetry mllog", "samples-negative", [*ML, "{r7mllsamples}", "--no-check", "--out", "{root}/m7i.txt"], {}),
    ("telemetry mllog", "status-null", [*ML, "{r7mllstatus}", "--no-check", "--out", "{root}/m7j.txt"], {}),
    ("telemetry mllog", "org-newline", [*ML, "{timed}", "--no-check", "--org", "a\n:::MLLOG {{}}", "--out",
                                        "{root}/m7k.txt"], {}),
    ("telemetry mllog", "platform-empty", [*ML, "{timed}", "--no-check", "--platform", "", "--out",
                                           "{root}/m7l.txt"], {}),
    ("telemetry mllog", "out-read-only-fs", [*ML, "{timed}", "--no-check", "--out", "{r7ro}/m.txt"], {}),
    ("telemetry mllog", "out-full-fs", [*ML, "{timed}", "--no-check", "--out", "{r7filled}/m.txt"], {}),
    ("telemetry report", "out-read-only-fs", ["telemetry", "report", "{good}", "--out", "{r7ro}/r"], {}),
    ("telemetry report", "out-full-fs", ["telemetry", "report", "{good}", "--out", "{r7filled}/r"], {}),
    ("telemetry compare", "out-full-fs", ["telemetry", "compare", "{good}", "{good2}", "--out", "{r7filled}/c"], {}),
    ("telemetry export", "out-full-fs", ["telemetry", "export", "{good}", "--to", "parquet", "--out",
                                         "{r7filled}/x"], {}),
    ("telemetry nccl-tests", "json-read-only-fs", ["telemetry", "nccl-tests",
                                                    "tests/telemetry/nccl_tests_tables/all_reduce_perf_h100_16ranks.txt",
                                                    "--json", "{r7ro}/x.json"], {}),
    # launch.lab extremes
    ("launch.lab", "rate-comma", ["launch.lab", "--nodes", "2", "--rate", "1gbit,2gbit", "--", TINY], {}),
    ("launch.lab", "rate-tbit-huge", ["launch.lab", "--nodes", "2", "--rate", "100000tbit", "--", TINY], {}),
    ("launch.lab", "rate-none-slow-node", ["launch.lab", "--nodes", "2", "--rate", "none", "--slow-node", "1",
                                           "--slow-rate", "10mbit", "--", TINY, "max_steps=1"], {}),
    ("launch.lab", "recipe-dry-run-flag", [*LAB, "--", TINY, "--dry-run"], {}),
    ("launch.lab", "port-negative", [*LAB, "--port", "-1", "--", TINY], {}),
    ("launch.lab", "output-dir-read-only-fs", [*LAB, "--", TINY, "max_steps=1", "output_dir={r7ro}/lab"], {}),
    ("launch.lab", "recipe-world-size-flag", [*LAB, "--", TINY, "--world-size", "2"], {}),
    # launch.evaluate: variants that conflict with the launcher or each other
    *[("launch.evaluate", name, [*E, "{root}/eval7-" + name + ".yaml", "--dry-run"], {}) for name in (
        "env-world-size", "env-master-port", "env-output-dir-var", "env-value-newline", "env-value-nul",
        "env-value-nan", "hosts-on-lab", "slurm-hosts-duplicate", "slurm-hosts-fewer-than-nodes",
        "slurm-partition-empty", "slurm-srun-args-numbers", "slurm-timeout-negative", "local-timeout-nan",
        "lab-slow-node-beyond", "lab-slow-rate-alone", "lab-mtu-68", "lab-timeout-zero", "name-space", "name-empty",
        "workload-name-slash", "workload-same-name", "workload-overrides-newline", "workload-overrides-dict",
        "fabric-config-list", "expect-transport-list", "launcher-upper", "out-newline",
        "yaml-merge-variants")],
    ("launch.evaluate", "recipe-relative-other-cwd", ["bash", "-c", "cd / && exec \"$0\" -m launch.evaluate "
                                                      "{root}/eval7-workload-recipe-relative-other-cwd.yaml --dry-run",
                                                      "python3"], {}),
    # torchrun and Slurm
    ("launch.torchrun", "nnodes-min-above-max", ["launch.torchrun", "--nnodes", "3:2", "--nproc-per-node", "1",
                                                 "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "rdzv-endpoint-port-huge", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                                    "--rdzv-endpoint", "node0:99999", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "rdzv-id-empty", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                          "--rdzv-endpoint", "node0:29400", "--rdzv-id", "", "-m", "trainer", TINY], {}),
    ("sbatch", "nodelist-reversed-range", [*SBATCH, TINY], {**SLURM_ENV, "SLURM_JOB_NODELIST": "node[2-1]"}),
    ("sbatch", "nodelist-empty", [*SBATCH, TINY], {**SLURM_ENV, "SLURM_JOB_NODELIST": ""}),
    ("sbatch", "nproc-negative", [*SBATCH, TINY], {**SLURM_ENV, "NPROC_PER_NODE": "-1"}),
    ("sbatch", "rdzv-port-word", [*SBATCH, TINY], {**SLURM_ENV, "RDZV_PORT": "port"}),
    ("launch.stage", "to-empty", ["launch.stage", TINY, "--to", ""], {}),
    ("launch.stage", "to-read-only-fs", ["launch.stage", TINY, "--to", "{r7ro}/s"], {}),
]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN: dict[tuple[str, str], str] = {
    ("trainer", "bool-as-yes"): "YAML 1.1 (every PyYAML recipe reader) reads an unquoted yes as true; a quoted "
                                "'yes' or 'on' is refused as a string",
    ("trainer", "int-hex"): "0x10 is an explicit hexadecimal 16 in YAML 1.1 and 1.2 alike (a leading-zero 010, "
                            "octal in one and decimal in the other, is refused)",
    ("trainer", "override-equals-in-value"): "an override splits at its first '=': name=a=b sets name to 'a=b', "
                                             "as Hydra and torchtitan read it",
    ("trainer", "recipe-path-with-space"): "a path with a space is a path; the shell's quoting is the user's",
    ("trainer", "cuda-visible-garbage"): "a CPU (gloo) run uses no GPU; CUDA reads CUDA_VISIBLE_DEVICES itself "
                                         "(an invalid list hides every GPU, as nvidia-smi shows)",
    ("trainer", "nccl-socket-ifname-bogus"): "a CPU (gloo) run loads no NCCL; NCCL reads NCCL_SOCKET_IFNAME "
                                             "itself on GPUs (GLOO_SOCKET_IFNAME is checked)",
    ("telemetry compare", "out-is-a-run"): "compare.html and compare.md are written beside the run's own files; "
                                           "no record file is replaced (those paths are refused)",
    ("telemetry project", "rate-tiny"): "a projection is arithmetic: 1bit is the floor (--rate's 1 bit/s), the "
                                        "step time it gives says days",
    ("telemetry project", "rate-huge"): "an exabit link is projected as compute-bound (communication near 0); "
                                        "the figure says so",
    ("telemetry project", "latency-huge"): "a finite latency is projected as given",
    ("telemetry mllog", "time-backwards"): "steps are read in step order, whatever the order of the lines",
    ("telemetry mllog", "started-number"): "a start time that is not an ISO date is unknown: init_start is logged "
                                           "at the first step's start, as for a run without one",
    ("telemetry mllog", "status-null"): "an unknown status is not a reached target: run_stop says aborted",
    ("telemetry mllog", "org-newline"): "the text is a JSON string in the :::MLLOG line (the newline escaped as "
                                        "\\n): one line per event still",
    ("telemetry mllog", "platform-empty"): "an empty --platform is the default: hosts x devices from run.json",
    ("trainer", "output-dir-full-fs"): "exit 1, kept: a filesystem that fills up during the run is a fault (as a "
                                       "full disk was before), one line that now says what makes room; run.json "
                                       "records it where its last version fits (a filesystem smaller than the "
                                       "1 MiB reserve may keep the version before). Before the first record it is "
                                       "exit 2 (output_dir unusable)",
    ("launch.evaluate", "slurm-hosts-fewer-than-nodes"): "a variant's hosts pick its nodes: it runs on those "
                                                         "(slurm.nodes is the allocation's size)",
    ("launch.lab", "rate-none-slow-node"): "unshaped links with one slow node's egress shaped: the lab's "
                                           "straggler setup (docs/lab.md)",
}
