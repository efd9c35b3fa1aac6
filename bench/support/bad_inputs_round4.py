"""The fourth round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from bench.support.recorded_runs import write_run

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
DRY = ["--dry-run"]


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory (what a dry run does not open, a run does)."""
    return ["max_steps=1", f"output_dir={{root}}/t4-{name}"]


def _edit_run(path: Path, **fields) -> None:
    run = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**run, **fields}))


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import yaml

    runs = {
        "r4nanlayout": lambda p: (p / "run.json").write_text(
            (p / "run.json").read_text().replace('"world_size": 2', '"world_size": NaN')),
        "r4hugelayout": lambda p: (p / "run.json").write_text(
            (p / "run.json").read_text().replace('"world_size": 2', '"world_size": 1e400')),
        "r4bigint": lambda p: (p / "run.json").write_text(
            (p / "run.json").read_text().replace('"world_size": 2', '"world_size": ' + "9" * 5000)),
        "r4jsonnull": lambda p: (p / "run.json").write_text("null"),
        "r4jsonlist": lambda p: (p / "run.json").write_text("[]"),
        "r4future": lambda p: _edit_run(p, recipe={"name": "a", "workload": "llm_dpo_v9", "max_steps": 6},
                                        status="paused-v9", format_version=99),
        "r4statusnum": lambda p: _edit_run(p, status=3),
        "r4namenum": lambda p: _edit_run(p, name=["a"]),
        "r4devicenum": lambda p: _edit_run(p, device=5),
        "r4tornlast": lambda p: (p / "metrics.jsonl").write_text(
            (p / "metrics.jsonl").read_text() + '{"step": 7, "loss": 2.'),
        "r4halfwritten": lambda p: ((p / "run.json").rename(p / "run.json.tmp")),
        "r4ranksfile": lambda p: (p / "ranks").write_text("x"),
        "r4ranksbad": lambda p: ((p / "ranks").mkdir(), (p / "ranks" / "rank00001.telemetry.jsonl").write_text(
            '{"step": "x"}\n[]\n')),
        "r4ranksfifo": lambda p: ((p / "ranks").mkdir(), os.mkfifo(p / "ranks" / "rank00001.telemetry.jsonl")),
        "r4frfifo": lambda p: ((p / "logs" / "flight_recorder").mkdir(parents=True),
                               os.mkfifo(p / "logs" / "flight_recorder" / "rank0.json")),
        "r4frzero": lambda p: ((p / "logs" / "flight_recorder").mkdir(parents=True),
                               (p / "logs" / "flight_recorder" / "rank0.json").symlink_to("/dev/zero")),
        "r4frbad": lambda p: ((p / "logs" / "flight_recorder").mkdir(parents=True),
                              (p / "logs" / "flight_recorder" / "rank0.json").write_text("{not json")),
        "r4metricsdangling": lambda p: ((p / "metrics.jsonl").unlink(), (p / "metrics.jsonl").symlink_to(p / "gone")),
        "r4metricsbinary": lambda p: (p / "metrics.jsonl").write_bytes(b"\xff\xfe\x00" * 100 + b"\n"),
        "r4metricsnul": lambda p: (p / "metrics.jsonl").write_bytes(b"\x00" * 4096),
        "r4metricsstepneg": lambda p: (p / "metrics.jsonl").write_text('{"step": -3, "step_time_s": 1.0}\n'),
        "r4metricssteptime": lambda p: (p / "metrics.jsonl").write_text(
            '{"step": 1, "step_time_s": -1.0}\n{"step": 2, "step_time_s": "1.0"}\n'),
        "r4metricsdup": lambda p: (p / "metrics.jsonl").write_text((p / "metrics.jsonl").read_text() * 2),
        "r4recipenull": lambda p: _edit_run(p, recipe=None),
        "r4hostsdict": lambda p: _edit_run(p, hosts={"a": 1}),
        "r4layoutzero": lambda p: _edit_run(p, layout={"world_size": 0, "dp": 0, "tp": 1, "pp": 1}),
        "r4envlist": lambda p: _edit_run(p, environment=["NCCL_DEBUG=INFO"]),
        "r4bigmetric": lambda p: (p / "metrics.jsonl").write_text(
            (p / "metrics.jsonl").read_text() + '{"step": 7, "step_time_s": 1.0, "loss": ' + "9" * 5000 + "}\n"),
        "r4bigptr": lambda p: ((p / "checkpoints").mkdir(), (p / "checkpoints" / "latest.json").write_text(
            '{"step": ' + "9" * 5000 + ', "path": "step-0000003"}')),
        "r4sweep": None,
    }
    out = {}
    for name, damage in runs.items():
        if name == "r4sweep":
            path = write_run(root / name, name="sweep", workload="collective_sweep")
        else:
            path = write_run(root / name, name="a", times=name == "r4devicenum")  # mllog needs step times
            damage(path)
        out[name] = str(path)
    (root / "r4-crlf-bom.yaml").write_bytes(b"\xef\xbb\xbf" + (repo / TINY).read_bytes().replace(b"\n", b"\r\n"))
    (root / "r4-tabs.yaml").write_text((repo / TINY).read_text().replace("  tp: 1\n", "\ttp: 1\n"))
    (root / "r4-anchor.yaml").write_text((repo / TINY).read_text().replace("train:\n", "train: &t\n")
                                         + "eval_train: *t\n")
    (root / "r4-merge-unknown.yaml").write_text((repo / TINY).read_text().replace(
        "train:\n", "base: &b {lrr: 0.1}\ntrain:\n  <<: *b\n").replace("base: &b {lrr: 0.1}\n", "") if False else
        (repo / TINY).read_text().replace("train:\n", "train:\n  <<: &d {lrr: 0.1}\n"))
    (root / "r4-dupkey-deep.yaml").write_text((repo / TINY).read_text().replace("  lr: 1.0e-2\n", "  lr: 1.0e-2\n  lr: 2.0e-2\n"))
    (root / "r4-10mb.yaml").write_text((repo / TINY).read_text() + "#" + "x" * (10 << 20) + "\n")
    (root / "r4-date.yaml").write_text((repo / TINY).read_text().replace("max_steps: 60", "max_steps: 2026-11-29"))
    (root / "r4-nul-key.yaml").write_text((repo / TINY).read_text().replace("seed: 1234", '"se\\0ed": 1234'))
    (root / "r4-int5000.yaml").write_text((repo / TINY).read_text().replace("max_steps: 60", "max_steps: " + "9" * 5000))
    stage_src = root / "r4-stage-src"
    (stage_src / "assets").mkdir(parents=True)
    (stage_src / "tiny.yaml").write_text((repo / TINY).read_text())
    for name in ("fabric_dolly_mini.jsonl", "byte_tokenizer"):
        src = repo / "recipes" / "assets" / name
        os.symlink(src, stage_src / "assets" / name) if src.is_dir() else (stage_src / "assets" / name).write_bytes(
            src.read_bytes())
    (root / "r4-tokdir").mkdir()
    (root / "r4-tokbad").mkdir()
    (root / "r4-tokbad" / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    (root / "r4-tokbad" / "tokenizer_config.json").write_text("{}")
    (root / "r4-modeldir").mkdir()
    (root / "r4-modeldir" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 260}))
    (root / "r4-ckpt-run").mkdir()
    (root / "r4-ckpt-run" / "checkpoints").mkdir()
    (root / "r4-ckpt-run" / "checkpoints" / "latest.json").write_text(json.dumps({"step": 3, "path": "step-0000003"}))
    (root / "r4-data-dir").mkdir()
    (root / "r4-data-bin.jsonl").write_bytes(b"\x89PNG\r\n" + bytes(range(256)) * 8)
    (root / "r4-data-oneline.jsonl").write_text('{"instruction": "' + "a" * (2 << 20) + '", "context": "", '
                                                '"response": "b", "category": "x"}\n')
    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    doc["out"] = str(root / "eval4-out")
    v0, v1 = doc["variants"]
    w0, w1 = doc["workloads"]
    specs = {
        "repeats-zero": {"repeats": 0},
        "repeats-negative": {"repeats": -1},
        "variants-empty": {"variants": []},
        "variant-name-empty": {"variants": [{**v0, "name": ""}, v1]},
        "variant-name-int": {"variants": [{**v0, "name": 10}, v1]},
        "variant-env-list": {"variants": [{**v0, "env": ["NCCL_DEBUG=INFO"]}, v1]},
        "variant-env-bad-name": {"variants": [{**v0, "env": {"NCCL DEBUG": "INFO"}}, v1]},
        "variant-env-null-value": {"variants": [{**v0, "env": {"NCCL_DEBUG": None}}, v1]},
        "variant-lab-nodes-one": {"variants": [{**v0, "lab": {"rate": "1gbit", "nodes": 1}}, v1]},
        "variant-slow-node-beyond": {"variants": [{**v0, "lab": {"rate": "1gbit", "slow_node": 9,
                                                                 "slow_rate": "10mbit"}}, v1]},
        "variant-slow-rate-alone": {"variants": [{**v0, "lab": {"rate": "1gbit", "slow_rate": "10mbit"}}, v1]},
        "variant-hosts-on-lab": {"variants": [{**v0, "hosts": ["n1"]}, v1]},
        "variant-expect-unknown": {"variants": [{**v0, "expect_transport": "carrier-pigeon"}, v1]},
        "workload-override-no-equals": {"workloads": [{**w1, "overrides": ["max_steps"]}]},
        "workload-override-unknown": {"workloads": [{**w1, "overrides": ["train.lrr=0.1"]}]},
        "workload-output-dir": {"workloads": [{**w1, "overrides": ["output_dir=/tmp/x"]}]},
        "workload-name-dup": {"workloads": [w1, w1]},
        "workload-recipe-dir": {"workloads": [{**w1, "recipe": str(root)}]},
        "workload-recipe-fifo": {"workloads": [{**w1, "recipe": str(root / "fifo")}]},
        "lab-timeout-nan": {"lab": {**doc["lab"], "timeout": float("nan")}},
        "lab-timeout-negative": {"lab": {**doc["lab"], "timeout": -5}},
        "lab-nproc-zero": {"lab": {**doc["lab"], "nproc_per_node": 0}},
        "local-with-lab-launcher": {"local": {"nproc_per_node": 2, "timeoutt": 5}},
        "slurm-partition-list": {"launcher": "slurm", "slurm": {"partition": ["a", "b"]},
                                 "variants": [{k: v for k, v in x.items() if k != "lab"} for x in (v0, v1)]},
        "name-slash": {"name": "a/b"},
        "out-dev-null": {"out": "/dev/null"},
        "out-fifo": {"out": str(root / "fifo")},
    }
    for name, change in specs.items():
        (root / f"eval4-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}))
    (root / "eval4-crlf-bom.yaml").write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(doc).replace("\n", "\r\n").encode())
    (root / "eval4-dup-key.yaml").write_text(yaml.safe_dump(doc) + "repeats: 3\n")
    (root / "eval4-dangling.yaml").symlink_to(root / "gone-eval.yaml")
    (root / "eval4-int5000.yaml").write_text(yaml.safe_dump(doc).replace("repeats: 2", "repeats: " + "9" * 5000))
    (root / "eval4-out-immutable.yaml").write_text(yaml.safe_dump({**doc, "out": str(root / "r4-immutable" / "e")}))
    immutable = root / "r4-immutable"  # root may write anywhere but here (chattr +i: no entry added or removed)
    immutable.mkdir()
    subprocess.run(["chattr", "+i", str(immutable)], capture_output=True)
    loop = root / "r4runloop"
    loop.symlink_to(loop)
    out["r4runloop"] = str(loop)
    return out


CASES: list[tuple[str, str, list[str], dict]] = [
    ("telemetry report", "run-json-nan-size", ["telemetry", "report", "{r4nanlayout}", "--out", "{root}/q1"], {}),
    ("telemetry report", "run-json-1e400", ["telemetry", "report", "{r4hugelayout}", "--out", "{root}/q2"], {}),
    ("telemetry report", "run-json-5000-digits", ["telemetry", "report", "{r4bigint}", "--out", "{root}/q3"], {}),
    ("telemetry report", "run-json-null", ["telemetry", "report", "{r4jsonnull}", "--out", "{root}/q4"], {}),
    ("telemetry report", "run-json-list", ["telemetry", "report", "{r4jsonlist}", "--out", "{root}/q5"], {}),
    ("telemetry report", "future-version", ["telemetry", "report", "{r4future}", "--out", "{root}/q6"], {}),
    ("telemetry report", "status-number", ["telemetry", "report", "{r4statusnum}", "--out", "{root}/q7"], {}),
    ("telemetry report", "name-list", ["telemetry", "report", "{r4namenum}", "--out", "{root}/q8"], {}),
    ("telemetry report", "torn-last-line", ["telemetry", "report", "{r4tornlast}", "--out", "{root}/q9"], {}),
    ("telemetry report", "half-written", ["telemetry", "report", "{r4halfwritten}", "--out", "{root}/q10"], {}),
    ("telemetry report", "ranks-damaged", ["telemetry", "report", "{r4ranksbad}", "--out", "{root}/q12"], {}),
    ("telemetry report", "flight-recorder-fifo", ["telemetry", "report", "{r4frfifo}", "--out", "{root}/q24"], {}),
    ("telemetry report", "flight-recorder-dev-zero", ["telemetry", "report", "{r4frzero}", "--out", "{root}/q25"], {}),
    ("telemetry report", "rank-file-fifo", ["telemetry", "report", "{r4ranksfifo}", "--out", "{root}/q26"], {}),
    ("telemetry report", "flight-recorder-damaged", ["telemetry", "report", "{r4frbad}", "--out", "{root}/q13"], {}),
    ("telemetry report", "metrics-dangling", ["telemetry", "report", "{r4metricsdangling}", "--out", "{root}/q14"], {}),
    ("telemetry report", "metrics-binary", ["telemetry", "report", "{r4metricsbinary}", "--out", "{root}/q15"], {}),
    ("telemetry report", "metrics-nul", ["telemetry", "report", "{r4metricsnul}", "--out", "{root}/q16"], {}),
    ("telemetry report", "metrics-step-negative", ["telemetry", "report", "{r4metricsstepneg}", "--out", "{root}/q17"], {}),
    ("telemetry report", "metrics-step-time-bad", ["telemetry", "report", "{r4metricssteptime}", "--out", "{root}/q18"], {}),
    ("telemetry report", "hosts-dict", ["telemetry", "report", "{r4hostsdict}", "--out", "{root}/q21"], {}),
    ("telemetry report", "layout-zero", ["telemetry", "report", "{r4layoutzero}", "--out", "{root}/q22"], {}),
    ("telemetry report", "environment-list", ["telemetry", "report", "{r4envlist}", "--out", "{root}/q23"], {}),
    ("telemetry report", "run-dir-loop", ["telemetry", "report", "{r4runloop}"], {}),
    ("telemetry report", "run-json-path", ["telemetry", "report", "{good}/run.json"], {}),
    ("telemetry compare", "run-and-sweep", ["telemetry", "compare", "{good}", "{r4sweep}", "--out", "{root}/q30"], {}),
    ("telemetry compare", "future-version", ["telemetry", "compare", "{good}", "{r4future}", "--out", "{root}/q31"], {}),
    ("telemetry compare", "nan-size", ["telemetry", "compare", "{good}", "{r4nanlayout}", "--out", "{root}/q32"], {}),
    ("telemetry compare", "run-json-null", ["telemetry", "compare", "{good}", "{r4jsonnull}", "--out", "{root}/q33"], {}),
    ("telemetry project", "nan-size", ["telemetry", "project", "{r4nanlayout}", "--rate", "1gbit"], {}),
    ("telemetry project", "layout-zero", ["telemetry", "project", "{r4layoutzero}", "--rate", "1gbit"], {}),
    ("telemetry project", "step-time-bad", ["telemetry", "project", "{r4metricssteptime}", "--rate", "1gbit"], {}),
    ("telemetry watch", "run-json-null", ["telemetry", "watch", "{r4jsonnull}", "--once"], {}),
    ("telemetry watch", "nan-size", ["telemetry", "watch", "{r4nanlayout}", "--once"], {}),
    ("telemetry watch", "hosts-dict", ["telemetry", "watch", "{r4hostsdict}", "--once"], {}),
    ("telemetry watch", "interval-negative", ["telemetry", "watch", "{good}", "--once", "--interval", "-1"], {}),
    ("telemetry watch", "metrics-nul", ["telemetry", "watch", "{r4metricsnul}", "--once"], {}),
    ("telemetry watch", "run-dir-loop", ["telemetry", "watch", "{r4runloop}", "--once"], {}),
    ("telemetry watch", "run-is-file", ["telemetry", "watch", "{good}/run.json", "--once"], {}),
    ("telemetry export", "nan-size", ["telemetry", "export", "{r4nanlayout}", "--to", "parquet", "--out", "{root}/q40"], {}),
    ("telemetry export", "run-json-null", ["telemetry", "export", "{r4jsonnull}", "--to", "parquet", "--out", "{root}/q41"], {}),
    ("telemetry export", "trace-future", ["telemetry", "export", "{r4future}", "--to", "trace", "--out", "{root}/q42"], {}),
    ("telemetry export", "tensorboard-metrics-nul", ["telemetry", "export", "{r4metricsnul}", "--to", "tensorboard",
                                                     "--out", "{root}/q43"], {}),
    ("telemetry nccl-log", "dev-zero", ["telemetry", "nccl-log", "/dev/zero"], {}),
    ("telemetry nccl-log", "binary", ["telemetry", "nccl-log", "{root}/binary.yaml"], {}),
    ("telemetry nccl-log", "json-over-input", ["telemetry", "nccl-log", "{root}/notes.txt", "--json", "{root}/notes.txt"], {}),
    ("telemetry nccl-log", "json-over-run-json", ["telemetry", "nccl-log", "{root}/notes.txt", "--json", "{good}/run.json"], {}),
    ("telemetry nccl-tests", "csv-over-input", ["telemetry", "nccl-tests", "{root}/header-only.txt", "--csv",
                                                "{root}/header-only.txt"], {}),
    ("telemetry mllog", "nan-size", ["telemetry", "mllog", "{r4nanlayout}", "--no-check"], {}),
    ("telemetry p2p", "reference-dev-zero", ["telemetry", "p2p", "{good}", "--reference", "/dev/zero"], {}),
    ("telemetry p2p", "reference-fifo", ["telemetry", "p2p", "{good}", "--reference", "{root}/fifo"], {}),
]

CASES += [
    ("trainer", "max-steps-date", [*T, "max_steps=2026-11-29", *DRY], {}),
    ("trainer", "name-date", [*T, "name=2026-11-29", *DRY], {}),
    ("trainer", "name-bool", [*T, "name=yes", *DRY], {}),
    ("trainer", "name-list", [*T, "name=[a, b]", *DRY], {}),
    ("trainer", "output-dir-date", [*T, "output_dir=2026-11-29", *DRY], {}),
    ("trainer", "output-dir-int", [*T, "output_dir=5", *DRY], {}),
    ("trainer", "seed-octal-string", [*T, "seed=0x1_0000_0000", *DRY], {}),
    ("trainer", "max-steps-underscore-huge", [*T, "max_steps=1_000_000_000_000_000_000_000", *DRY], {}),
    ("trainer", "lr-nan-word", [*T, "train.lr=.NaN", *DRY], {}),
    ("trainer", "betas-one", [*T, "train.betas=[0.9]", *DRY], {}),
    ("trainer", "betas-above-one", [*T, "train.betas=[0.9, 1.5]", *DRY], {}),
    ("trainer", "target-modules-empty", [*T, "lora.target_modules=[]", *DRY], {}),
    ("trainer", "lora-r-zero", [*T, "lora.r=0", *DRY], {}),
    ("trainer", "dropout-one", [*T, "lora.dropout=1.5", *DRY], {}),
    ("trainer", "override-no-equals", [*T, "max_steps", *DRY], {}),
    ("trainer", "override-list-index", [*T, "lora.target_modules.0=q_proj", *DRY], {}),
    ("trainer", "override-bracket-index", [*T, "lora.target_modules[0]=q_proj", *DRY], {}),
    ("trainer", "recipe-crlf-bom", ["trainer", "{root}/r4-crlf-bom.yaml", *DRY], {}),
    ("trainer", "recipe-tab-indent", ["trainer", "{root}/r4-tabs.yaml", *DRY], {}),
    ("trainer", "recipe-anchor-extra-key", ["trainer", "{root}/r4-anchor.yaml", *DRY], {}),
    ("trainer", "recipe-merge-unknown", ["trainer", "{root}/r4-merge-unknown.yaml", *DRY], {}),
    ("trainer", "recipe-dup-nested", ["trainer", "{root}/r4-dupkey-deep.yaml", *DRY], {}),
    ("trainer", "recipe-10mb", ["trainer", "{root}/r4-10mb.yaml", *DRY], {}),
    ("trainer", "recipe-date", ["trainer", "{root}/r4-date.yaml", *DRY], {}),
    ("trainer", "recipe-nul-key", ["trainer", "{root}/r4-nul-key.yaml", *DRY], {}),
    ("trainer", "prometheus-zero", [*T, "telemetry.prometheus=0", *DRY], {}),
    ("trainer", "prometheus-70000", [*T, "telemetry.prometheus=70000", *DRY], {}),
    ("trainer", "prometheus-word", [*T, "telemetry.prometheus=yes", *DRY], {}),
    ("trainer", "pushgateway-no-scheme", [*T, "telemetry.pushgateway=gw:9091", *DRY], {}),
    ("trainer", "pushgateway-no-host", [*T, "telemetry.pushgateway=http://", *DRY], {}),
    ("trainer", "pushgateway-port-word", [*T, "telemetry.pushgateway=http://gw:port", *DRY], {}),
    ("trainer", "pushgateway-credentials", [*T, "telemetry.pushgateway=http://user:hunter22@gw:9091", *DRY], {}),
    ("trainer", "otlp-port-huge", [*T, "telemetry.otlp=http://collector:99999/v1/metrics", *DRY], {}),
    ("trainer", "pushgateway-port-zero", [*T, "telemetry.pushgateway=http://gw:0", *DRY], {}),
    ("trainer", "pushgateway-ipv6-unclosed", [*T, "telemetry.pushgateway=http://[::1:9091", *DRY], {}),
    ("trainer", "otlp-space", [*T, "telemetry.otlp=http://collector :4318/v1/metrics", *DRY], {}),
    ("trainer", "push-interval-inf", [*T, "telemetry.push_interval_s=.inf", *DRY], {}),
    ("trainer", "targets-dir-file", [*T, "telemetry.prometheus=auto", "telemetry.prometheus_targets_dir=" + TINY, *RUN("targets-dir-file")], {}),
    ("trainer", "tokenizer-empty-dir", [*T, "model.tokenizer={root}/r4-tokdir", *RUN("tokenizer-empty-dir")], {}),
    ("trainer", "tokenizer-damaged", [*T, "model.tokenizer={root}/r4-tokbad", *RUN("tokenizer-damaged")], {}),
    ("trainer", "tokenizer-dev-zero", [*T, "model.tokenizer=/dev/zero", *DRY], {}),
    ("trainer", "model-path-other-family", [*T, "model.path={root}/r4-modeldir", "model.config=null", *RUN("model-path-other-family")], {}),
    ("trainer", "resume-missing-step", [*T, "train.resume={root}/r4-ckpt-run/checkpoints", *RUN("resume-missing-step")], {}),
    ("trainer", "resume-run-dir", [*T, "train.resume={good}", *RUN("resume-run-dir")], {}),
    ("trainer", "dataset-dir", [*T, "data.dataset={root}/r4-data-dir", *RUN("dataset-dir")], {}),
    ("trainer", "dataset-binary", [*T, "data.dataset={root}/r4-data-bin.jsonl", *RUN("dataset-binary")], {}),
    ("trainer", "eval-dataset-fifo", [*T, "data.eval_dataset={root}/fifo", *DRY], {}),
    ("trainer", "local-rank-negative", [*T, *DRY], {"LOCAL_RANK": "-1"}),
]

EVAL_SPECS = ("repeats-zero", "repeats-negative", "variants-empty", "variant-name-empty", "variant-name-int",
              "variant-env-list", "variant-env-bad-name", "variant-env-null-value", "variant-lab-nodes-one",
              "variant-slow-node-beyond", "variant-slow-rate-alone", "variant-hosts-on-lab", "variant-expect-unknown",
              "workload-override-no-equals", "workload-override-unknown", "workload-output-dir", "workload-name-dup",
              "workload-recipe-dir", "workload-recipe-fifo", "lab-timeout-nan", "lab-timeout-negative",
              "lab-nproc-zero", "local-with-lab-launcher", "slurm-partition-list", "name-slash", "out-dev-null",
              "out-fifo", "crlf-bom", "dup-key", "dangling", "int5000")
CASES += [("launch.evaluate", name, ["launch.evaluate", "{root}/eval4-" + name + ".yaml", "--dry-run"], {})
          for name in EVAL_SPECS]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN: dict[tuple[str, str], str] = {
    ("telemetry report", "future-version"): "fields of another version (a workload or status it does not know) are "
                                            "shown as recorded",
    ("telemetry report", "torn-last-line"): "a killed job's cut last line is skipped (telemetry.rundir.read_jsonl)",
    ("telemetry report", "ranks-damaged"): "damaged rank lines are left out and named in the report",
    ("telemetry report", "flight-recorder-damaged"): "the hang table says the dump is unreadable; the rest is reported",
    ("telemetry report", "flight-recorder-fifo"): "named unreadable in the hang table (it was a hang: a FIFO read)",
    ("telemetry report", "flight-recorder-dev-zero"): "named unreadable in the hang table (it was read until memory "
                                                      "ran out)",
    ("telemetry report", "metrics-dangling"): "read as no metrics yet, like a missing metrics.jsonl (steps 0, n/a)",
    ("telemetry watch", "metrics-nul"): "a damaged line is skipped like a torn one",
    ("telemetry report", "metrics-int-5000-digits"): "a damaged line is left out and named (a ValueError traceback "
                                                     "before)",
    ("telemetry project", "metrics-int-5000-digits"): "a damaged line is left out (a ValueError traceback before)",
    ("trainer", "recipe-crlf-bom"): "valid YAML: a UTF-8 byte-order mark and CRLF line ends are read as written",
    ("launch.evaluate", "crlf-bom"): "valid YAML: a UTF-8 byte-order mark and CRLF line ends are read as written",
}

LAB = ["launch.lab", "--nodes", "2", "--rate", "1gbit"]
LT4 = ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
       "--exec", "true {{host}}"]
TR = ["launch.torchrun", "--nproc-per-node", "1"]
CASES += [
    # launch.torchrun: options the earlier rounds did not try
    ("launch.torchrun", "nproc-negative", ["launch.torchrun", "--nproc-per-node", "-1", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "nproc-float", ["launch.torchrun", "--nproc-per-node", "1.5", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "rdzv-backend-unknown", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "zk",
                                                 "--rdzv-endpoint", "127.0.0.1:29400", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "rdzv-endpoint-empty-port", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                                     "--rdzv-endpoint", "node0:", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "rdzv-conf-bad", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                          "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf", "join_timeout=soon",
                                          "-m", "trainer", TINY], {}),
    ("launch.torchrun", "monitor-interval-nan", [*TR, "--monitor-interval", "nan", "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "monitor-interval-negative", [*TR, "--monitor-interval", "-1", "-m", "trainer", TINY,
                                                      "--dry-run"], {}),
    ("launch.torchrun", "node-rank-negative", ["launch.torchrun", "--nnodes", "2", "--node-rank", "-1",
                                               "--master-addr", "127.0.0.1", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "redirects-bad", [*TR, "--redirects", "9", "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "tee-word", [*TR, "--tee", "all", "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "log-dir-file", [*TR, "--log-dir", TINY, "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "local-ranks-filter-bad", [*TR, "--local-ranks-filter", "x", "-m", "trainer", TINY,
                                                   "--dry-run"], {}),
    ("launch.torchrun", "standalone-two-nodes", ["launch.torchrun", "--standalone", "--nnodes", "2", "-m", "trainer",
                                                 TINY, "--dry-run"], {}),
    ("launch.torchrun", "script-is-dir", [*TR, "{root}"], {}),
    ("launch.torchrun", "no-script", ["launch.torchrun", "--nproc-per-node", "1"], {}),
    ("launch.torchrun", "max-restarts-huge", ["launch.torchrun", "--max-restarts", "1e9", "-m", "trainer", TINY], {}),
    # launch.lab: values the earlier rounds did not try
    ("launch.lab", "nproc-string", ["launch.lab", "--nodes", "2", "--nproc-per-node", "two", "--rate", "1gbit", "--",
                                    TINY], {}),
    ("launch.lab", "slow-node-negative", [*LAB, "--slow-node", "-1", "--slow-rate", "10mbit", "--", TINY], {}),
    ("launch.lab", "slow-rate-bad", [*LAB, "--slow-node", "1", "--slow-rate", "slow", "--", TINY], {}),
    ("launch.lab", "slow-rate-above-rate", [*LAB, "--slow-node", "1", "--slow-rate", "10gbit", "--", TINY], {}),
    ("launch.lab", "mtu-string", [*LAB, "--mtu", "jumbo", "--", TINY], {}),
    ("launch.lab", "mtu-huge", [*LAB, "--mtu", "100000", "--", TINY], {}),
    ("launch.lab", "timeout-negative", [*LAB, "--timeout", "-5", "--", TINY], {}),
    ("launch.lab", "port-privileged-string", [*LAB, "--port", "http", "--", TINY], {}),
    ("launch.lab", "rate-bytes-unit", ["launch.lab", "--nodes", "2", "--rate", "1GB", "--", TINY], {}),
    ("launch.lab", "recipe-dir", [*LAB, "--", "{root}"], {}),
    ("launch.lab", "override-unknown", [*LAB, "--", TINY, "train.lrr=1"], {}),
    ("launch.lab", "recipe-int-5000-digits", [*LAB, "--", "{root}/r4-int5000.yaml"], {}),
    ("launch.lab", "prometheus-port-zero", [*LAB, "--", TINY, "telemetry.prometheus=0"], {}),
]

CASES += [
    # environment the launcher (or a user) sets, for one process
    ("trainer", "gloo-ifname-bogus", [*T, *RUN("gloo-ifname")], {"GLOO_SOCKET_IFNAME": "bogus0"}),
    ("trainer", "master-port-huge-env", [*T, *RUN("mp-huge")],
     {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"}),
    ("trainer", "master-addr-unresolvable", [*T, *RUN("ma-bad")],
     {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "29577"}),
    ("trainer", "local-world-size-word", [*T, *DRY], {"LOCAL_WORLD_SIZE": "abc", "LOCAL_RANK": "0"}),
    ("trainer", "fr-buffer-word", [*T, *RUN("fr-buf")], {"TORCH_FR_BUFFER_SIZE": "lots"}),
    ("trainer", "world-size-env-float", [*T, *DRY], {"WORLD_SIZE": "2.0", "RANK": "0"}),
    # other subcommands: outputs over inputs, odd values
    ("telemetry export", "out-is-metrics", ["telemetry", "export", "{own2}", "--to", "parquet", "--out",
                                            "{own2}/metrics.jsonl"], {}),
    ("telemetry mllog", "out-over-metrics", ["telemetry", "mllog", "{own}", "--out", "{own}/metrics.jsonl",
                                             "--no-check"], {}),
    ("telemetry nccl-tests", "json-over-run-json", ["telemetry", "nccl-tests", "{root}/header-only.txt", "--json",
                                                    "{own}/run.json"], {}),
    ("telemetry nccl-log", "expect-empty", ["telemetry", "nccl-log", "{root}/notes.txt", "--expect", ""], {}),
    ("telemetry compare", "sweep-label-unknown", ["telemetry", "compare", "a={good}", "b={good2}", "--out",
                                                  "{root}/q51", "--sweep", "z={good}"], {}),
    ("telemetry compare", "line-rate-unknown-label", ["telemetry", "compare", "a={good}", "b={good2}", "--out",
                                                      "{root}/q52", "--line-rate", "z=1gbit"], {}),
    ("telemetry project", "nodes-float", ["telemetry", "project", "{good}", "--rate", "1gbit", "--nodes", "2.5"], {}),
    ("telemetry project", "rate-and-busbw-dir", ["telemetry", "project", "{good}", "--busbw-table", "{good}"], {}),
    ("launch.stage", "to-inside-run", ["launch.stage", TINY, "--to", "{own}/run.json"], {}),
]

CASES += [
    # an integer of more digits than int() converts (4300): each a ValueError traceback before this round
    ("trainer", "override-int-5000-digits", [*T, "max_steps=" + "9" * 5000, *DRY], {}),
    ("trainer", "recipe-int-5000-digits", ["trainer", "{root}/r4-int5000.yaml", *DRY], {}),
    ("trainer", "latest-json-int-5000-digits", [*T, "max_steps=1", "output_dir={r4bigptr}", "name=a"], {}),
    ("telemetry report", "metrics-int-5000-digits", ["telemetry", "report", "{r4bigmetric}", "--out", "{root}/q60"], {}),
    ("telemetry project", "metrics-int-5000-digits", ["telemetry", "project", "{r4bigmetric}", "--rate", "1gbit"], {}),
    ("telemetry watch", "run-json-int-5000-digits", ["telemetry", "watch", "{r4bigint}", "--once"], {}),
    ("telemetry compare", "run-json-int-5000-digits", ["telemetry", "compare", "{good}", "{r4bigint}", "--out",
                                                       "{root}/q61"], {}),
    ("telemetry export", "run-json-int-5000-digits", ["telemetry", "export", "{r4bigint}", "--to", "parquet", "--out",
                                                      "{root}/q62"], {}),
    ("telemetry mllog", "run-json-int-5000-digits", ["telemetry", "mllog", "{r4bigint}", "--no-check"], {}),
    # run.json fields of the wrong type that a command walked into
    ("telemetry export", "name-list", ["telemetry", "export", "{r4namenum}", "--to", "parquet", "--out", "{root}/q63"],
     {}),
    ("telemetry mllog", "device-number", ["telemetry", "mllog", "{r4devicenum}", "--no-check", "--out",
                                          "{root}/q64.txt"], {}),
]


def release(root: Path) -> None:
    """Undo what fixtures() made that the temporary directory's removal cannot remove (the immutable flag)."""
    subprocess.run(["chattr", "-i", str(root / "r4-immutable")], capture_output=True)


# Writing where not even root can (an immutable directory): each command's output check. Reading what root
# cannot read is not tried: root reads any file whatever its mode, and chattr has no flag against reading.
CASES += [
    ("trainer", "output-dir-immutable", [*T, "max_steps=1", "output_dir={root}/r4-immutable/run"], {}),
    ("telemetry report", "out-immutable", ["telemetry", "report", "{good}", "--out", "{root}/r4-immutable/r"], {}),
    ("telemetry export", "out-immutable", ["telemetry", "export", "{good}", "--to", "parquet", "--out",
                                           "{root}/r4-immutable/x"], {}),
    ("telemetry mllog", "out-immutable", ["telemetry", "mllog", "{timed}", "--no-check", "--out",
                                          "{root}/r4-immutable/m.txt"], {}),
    ("telemetry compare", "out-immutable", ["telemetry", "compare", "{good}", "{good2}", "--out",
                                            "{root}/r4-immutable/c"], {}),
    ("telemetry project", "json-immutable", ["telemetry", "project", "{good}", "--rate", "1gbit", "--json",
                                             "{root}/r4-immutable/p.json"], {}),
    ("launch.evaluate", "out-immutable", ["launch.evaluate", "{root}/eval4-out-immutable.yaml", "--dry-run"], {}),
    ("launch.stage", "to-immutable", ["launch.stage", TINY, "--to", "{root}/r4-immutable/s"], {}),
    ("launch.linktest", "output-immutable", [*LT4, "--output", "{root}/r4-immutable/lt"], {}),
]

SW = ["trainer", "recipes/collectives.yaml"]
CASES += [  # the collective sweep's keys (a dry run plans the sweep)
    ("trainer", "sweep-op-unknown", [*SW, "sweep.ops=[all_reduce,bogus]", *DRY], {}),
    ("trainer", "sweep-max-below-min", [*SW, "sweep.min_bytes=1G", "sweep.max_bytes=1K", *DRY], {}),
    ("trainer", "sweep-iters-zero", [*SW, "sweep.iters=0", *DRY], {}),
    ("trainer", "sweep-latency-iters-exponent", [*SW, "sweep.latency_iters=1e9", *DRY], {}),
    ("trainer", "sweep-pairs-maybe", [*SW, "sweep.pairs=maybe", *DRY], {}),
    ("trainer", "sweep-dtype-unknown", [*SW, "sweep.dtype=float128", *DRY], {}),
    ("trainer", "sweep-step-bytes-zero", [*SW, "sweep.step_bytes=0", *DRY], {}),
    ("trainer", "sweep-step-bytes-word", [*SW, "sweep.step_bytes=linear", *DRY], {}),
    ("trainer", "sweep-step-bytes-8-million-sizes", [*SW, "sweep.step_bytes=8", *DRY], {}),
]
CASES += [  # one row of 2 MiB: past the byte tokenizer's maximum (1 MiB tokens), and past any data.seq_len
    ("trainer", "dataset-one-huge-row", [*T, "data.dataset={root}/r4-data-oneline.jsonl", *RUN("huge-row")], {}),
]
