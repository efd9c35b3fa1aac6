"""The ninth round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others (`--round 9` runs only these). Aimed at what the eight
earlier rounds did not try: recipe keys of the wrong type where none was tried (`model.kernels`, `train.compile`,
`data.packing` as `y`/`'yes'`), model sizes a layout cannot split (tp over the vocabulary, KV heads above the
heads, LoRA ranks above the hidden size, pipeline stages over an odd layer count), YAML tags and anchors
(`!!str`, `!!float`, an `x-common: &c` holder as docker-compose files have), launcher variables that disagree
(`LOCAL_WORLD_SIZE` above `WORLD_SIZE`), ports out of range, paths over the kernel's name limits, run directories
half-written in new ways (steps twice, steps going backwards, `ranks` a symlink loop, metrics.jsonl a link to
/dev/zero or /dev/urandom, a folder of someone else's files), rates as vendors write them (`12.5GB/s`, `100Gb/s`,
`100Gbps`), the lab asked for more ranks than the host holds, evaluation files with names that collide on disk,
nemo and torchrun flags not tried, and bench/gpu/run.sh's options (none was tried)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.support import bad_inputs_round8 as round8
from bench.support.recorded_runs import write_run

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
DRY = ["--dry-run"]
P = ["telemetry", "project", "{good}"]
R = ["telemetry", "report"]
W = ["telemetry", "watch"]
C = ["telemetry", "compare"]
LAB = ["launch.lab", "--nodes", "2", "--rate", "1gbit"]
E = ["launch.evaluate"]
NEMO = ["launch.nemo", "recipes/llama70b_lora.yaml", "--engine", "nemo2"]
GPU = ["bash", "bench/gpu/run.sh", "--no-install", "--only", "report", "--out", "{root}/r9gpu"]
SBATCH = ["bash", "launch/slurm/train.sbatch"]
SLURM_ENV = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_SUBMIT_DIR": "/tmp"}
DIST = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}
SECRET = "s3cr3tR9value"
LONG = "x" * 300  # one name over NAME_MAX (255)


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory."""
    return ["max_steps=1", f"output_dir={{root}}/t9-{name}"]


def leak_check(directory: str, *argv: str) -> list[str]:
    """Round 8's check with this round's SECRET."""
    return round8.leak_check(directory, *argv, secret=SECRET)


def _recipes(root: Path, repo: Path) -> None:
    text = round8.tiny_text(repo)
    bodies = {
        "str-tag": text.replace("max_steps: 60", "max_steps: !!str 60"),
        "float-tag": text.replace("max_steps: 60", "max_steps: !!float 60"),
        "compose-anchor-holder": "x-common: &c\n  lr: 0.01\n" + text.replace("  lr: 1.0e-2\n", "  <<: *c\n"),
        "anchor-section-reused": text.replace("lora:\n  r: 8\n", "lora: &l\n  r: 8\n").replace(
            "parallel:\n  dp: -1\n", "parallel:\n  <<: *l\n  dp: -1\n"),
        "merge-overrides-later": text.replace("train:\n", "base: &b {lr: 0.5}\ntrain:\n  <<: *b\n", 1),
        "global-batch-float": text.replace("global_batch_size: 16", "global_batch_size: 16.0"),
        "packing-capital-yes": text.replace("packing: false", "packing: Yes"),
        "format-case-in-file": text.replace("format: dolly", "format: Dolly"),
        "family-case": text.replace("family: llama", "family: Llama"),
        "target-modules-dup": text.replace("[q_proj, k_proj", "[q_proj, q_proj, k_proj"),
        "json-recipe": text,  # replaced below: the tiny recipe as JSON, max_steps a string
        "flow-map-unclosed": text.replace("target_modules: [q_proj", "target_modules: {q_proj"),
    }
    import yaml

    bodies["json-recipe"] = json.dumps({**yaml.safe_load(text), "max_steps": "3"})
    for name, body in bodies.items():
        (root / f"r9-{name}.yaml").write_text(body)


def _lines(p: Path) -> list[dict]:
    return [json.loads(x) for x in (p / "metrics.jsonl").read_text().splitlines()]


def _write_lines(p: Path, rows: list[dict]) -> None:
    (p / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _edit_run(p: Path, **fields) -> None:
    (p / "run.json").write_text(json.dumps({**json.loads((p / "run.json").read_text()), **fields}))


def _runs(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    damage = {
        "r9dupsteps": lambda p: _write_lines(p, [r for r in _lines(p) for _ in (0, 1)]),
        "r9backwards": lambda p: _write_lines(p, list(reversed(_lines(p)))),
        "r9zerotime": lambda p: _write_lines(p, [{**r, "step_time_s": 0.0} for r in _lines(p)]),
        "r9ranksloop": lambda p: (p / "ranks").symlink_to("ranks"),
        "r9metricszero": lambda p: ((p / "metrics.jsonl").unlink(), (p / "metrics.jsonl").symlink_to("/dev/zero")),
        "r9metricsrandom": lambda p: ((p / "metrics.jsonl").unlink(),
                                      (p / "metrics.jsonl").symlink_to("/dev/urandom")),
        "r9runzero": lambda p: ((p / "run.json").unlink(), (p / "run.json").symlink_to("/dev/zero")),
        "r9emptyobj": lambda p: (p / "run.json").write_text("{}"),
        "r9running": lambda p: (_edit_run(p, status="running"), (p / "metrics.jsonl").write_text("")),
        "r9worldhuge": lambda p: _edit_run(p, layout={"world_size": 10**6, "dp": 10**6, "tp": 1, "pp": 1}),
        "r9nolayout": lambda p: _edit_run(p, layout=None),
        "r9workloadunknown": lambda p: _edit_run(p, recipe={"name": "a", "workload": "gpt", "max_steps": 6}),
        "r9telemetrylist": lambda p: _edit_run(p, telemetry=[1, 2]),
        "r9longline": lambda p: (p / "metrics.jsonl").write_text('{"step": 1, "pad": "' + "x" * (64 << 20) + '"}\n'),
    }
    for name, hurt in damage.items():
        write_run(root / name, name="a")
        hurt(root / name)
        out[name] = str(root / name)
    write_run(root / "r9world4", name="a")
    _edit_run(root / "r9world4", layout={"world_size": 4, "dp": 4, "tp": 1, "pp": 1, "data_parallel": "ddp",
                                         "global_batch_size": 8})
    out["r9world4"] = str(root / "r9world4")
    foreign = root / "r9foreign"
    foreign.mkdir()
    (foreign / "IMG_0001.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)
    (foreign / "notes.txt").write_text("holiday\n")
    out["r9foreign"] = str(foreign)
    return out


def _files(root: Path) -> None:
    (root / "r9-out-file").write_text("x")
    (root / "r9 space").mkdir()


def _evaluations(root: Path, repo: Path) -> None:
    import yaml

    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    doc["out"] = str(root / "eval9-out")
    v0, v1 = doc["variants"]
    w0, w1 = doc["workloads"]
    specs = {
        "variant-name-trailing-space": {"variants": [{**v0, "name": "a"}, {**v1, "name": "a "}]},
        "variant-name-dot": {"variants": [{**v0, "name": "."}, v1]},
        "variant-name-dotdot": {"variants": [{**v0, "name": ".."}, v1]},
        "variant-name-too-long": {"variants": [{**v0, "name": LONG}, v1]},
        "workload-name-space": {"workloads": [{**w0, "name": "my sweep"}, w1]},
        "repeats-exponent-string": {"repeats": "1e3"},
        "slurm-without-section": {"launcher": "slurm",
                                  "variants": [{k: v for k, v in x.items() if k != "lab"} for x in (v0, v1)]},
        "lab-null": {"lab": None},
        "top-level-rate": {"rate": "1gbit"},
        "rate-gb-per-s": {"variants": [{**v0, "lab": {"rate": "12.5GB/s"}}, v1]},
        "rate-gbps": {"variants": [{**v0, "lab": {"rate": "100Gbps"}}, v1]},
        "lab-too-many-ranks": {"lab": {**doc["lab"], "nodes": 64, "nproc_per_node": 16}},
        "overrides-dp-mismatch": {"workloads": [{**w0, "overrides": [*w0["overrides"], "parallel.dp=3"]}, w1]},
        "secret-env": {"variants": [{**v0, "env": {"HF_TOKEN": SECRET}}, v1]},
        "out-too-long": {"out": str(root / LONG)},
    }
    for name, change in specs.items():
        (root / f"eval9-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}, allow_unicode=True))
    (root / "eval9-anchor-dup.yaml").write_text(
        yaml.safe_dump({k: v for k, v in doc.items() if k != "variants"})
        + "variants:\n  - &v\n    name: fast\n    expect_transport: tcp\n    lab: {rate: 1gbit}\n"
        "  - <<: *v\n    lab: {rate: 10mbit}\n")  # the merge keeps the name: two variants 'fast'


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import sys

    _recipes(root, repo)
    out = _runs(root)
    _files(root)
    _evaluations(root, repo)
    return {**out, "python": sys.executable, "long": LONG}


CASES: list[tuple[str, str, list[str], dict]] = [
    # recipe keys of the wrong type where none was tried
    ("trainer", "kernels-list", [*T, "model.kernels=[liger]", *DRY], {}),
    ("trainer", "kernels-bool", [*T, "model.kernels=true", *DRY], {}),
    ("trainer", "kernels-int", [*T, "model.kernels=1", *DRY], {}),
    ("trainer", "compile-yes", [*T, "train.compile=yes", *DRY], {}),
    ("trainer", "compile-list", [*T, "train.compile=[blocks]", *DRY], {}),
    ("trainer", "compile-quoted-on", [*T, "train.compile='on'", *DRY], {}),
    ("trainer", "packing-quoted-yes", [*T, "data.packing='yes'", *DRY], {}),
    ("trainer", "packing-y", [*T, "data.packing=y", *DRY], {}),
    ("trainer", "packing-off", [*T, "data.packing=off", *DRY], {}),
    ("trainer", "save-final-on", [*T, "train.save_final=on", *DRY], {}),
    ("trainer", "betas-comma-string", [*T, "train.betas=0.9,0.999", *DRY], {}),
    ("trainer", "grad-clip-negative", [*T, "train.grad_clip=-1", *DRY], {}),
    ("trainer", "seed-negative", [*T, "seed=-1", *DRY], {}),
    ("trainer", "seed-word", [*T, "seed=abc", *DRY], {}),
    ("trainer", "max-steps-fraction", [*T, "max_steps=3.5", *DRY], {}),
    ("trainer", "max-steps-float-whole", [*T, "max_steps=3.0", *DRY], {}),
    ("trainer", "lr-quoted-exponent", [*T, "train.lr='1e-4'", *DRY], {}),
    ("trainer", "micro-batch-zero", [*T, "train.micro_batch_size=0", *DRY], {}),
    ("trainer", "global-batch-negative", [*T, "train.global_batch_size=-16", *DRY], {}),
    ("trainer", "log-every-negative", [*T, "train.log_every=-1", *DRY], {}),
    ("trainer", "eval-every-not-batch-multiple", [*T, "train.eval_every_samples=7", *DRY], {}),
    ("trainer", "dataset-empty", [*T, "data.dataset=''", *DRY], {}),
    ("trainer", "tokenizer-empty", [*T, "model.tokenizer=''", *DRY], {}),
    ("trainer", "format-case", [*T, "data.format=Dolly", *DRY], {}),
    ("trainer", "dtype-near-miss", [*T, "model.dtype=bfloat", *DRY], {}),
    ("trainer", "seq-len-zero", [*T, "data.seq_len=0", *DRY], {}),
    ("trainer", "seq-len-4k", [*T, "data.seq_len=4k", *DRY], {}),
    # model sizes a layout cannot split
    ("trainer", "tp-not-dividing-vocab", [*T, "model.config.vocab_size=259", "parallel.tp=2", "--world-size", "2", *DRY],
     {}),
    ("trainer", "kv-heads-not-dividing-heads", [*T, "model.config.num_key_value_heads=3", *DRY], {}),
    ("trainer", "kv-heads-above-heads", [*T, "model.config.num_key_value_heads=8", *DRY], {}),
    ("trainer", "tp-above-kv-heads-one", [*T, "model.config.num_key_value_heads=1", "parallel.tp=2", "--world-size",
                                          "2", *DRY], {}),
    ("trainer", "intermediate-zero", [*T, "model.config.intermediate_size=0", *DRY], {}),
    ("trainer", "positions-below-seq-len", [*T, "model.config.max_position_embeddings=64", *DRY], {}),
    ("trainer", "pp2-odd-layers", [*T, "model.config.num_hidden_layers=3", "parallel.pp=2", "--world-size", "2", *DRY],
     {}),
    ("trainer", "pp-stages-per-rank-zero", [*T, "parallel.pp_stages_per_rank=0", *DRY], {}),
    ("trainer", "lora-r-above-hidden", [*T, "lora.r=1024", *DRY], {}),
    ("trainer", "lora-r-fraction", [*T, "lora.r=8.5", *DRY], {}),
    ("trainer", "target-module-lm-head", [*T, "lora.target_modules=[lm_head]", *DRY], {}),
    ("trainer", "dp-tp-pp-over-world", [*T, "parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "--world-size", "4",
                                        *DRY], {}),
    # recipe files: tags, anchors, other formats
    *[("trainer", name, ["trainer", "{root}/r9-" + name + ".yaml", *DRY], {}) for name in (
        "str-tag", "float-tag", "compose-anchor-holder", "anchor-section-reused", "merge-overrides-later",
        "global-batch-float", "packing-capital-yes", "format-case-in-file", "family-case", "target-modules-dup", "json-recipe",
        "flow-map-unclosed")],
    # flags, paths and launcher variables
    ("trainer", "recipe-stdin-dash", ["trainer", "-", *DRY], {}),
    ("trainer", "dry-run-with-value", [*T, "--dry-run=yes"], {}),
    ("trainer", "world-size-float-flag", [*T, *DRY, "--world-size", "2.0"], {}),
    ("trainer", "world-size-ten-million", [*T, *DRY, "--world-size", "10000000"], {}),
    ("trainer", "local-world-above-world", [*T, *DRY], {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "4"}),
    ("trainer", "local-world-not-dividing", [*T, *DRY], {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "3"}),
    ("trainer", "master-port-65536", [*T, *RUN("mp-65536")], {**DIST, "MASTER_PORT": "65536"}),
    ("trainer", "master-port-word", [*T, *RUN("mp-word")], {**DIST, "MASTER_PORT": "http"}),
    ("trainer", "load-digests-word", [*T, *RUN("digests")], {"FABRIC_HARNESS_LOAD_DIGESTS": "maybe"}),
    ("trainer", "nccl-debug-file-missing-dir", [*T, *DRY], {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/proc/nope/x"}),
    ("trainer", "output-dir-name-too-long", [*T, "output_dir={root}/{long}/run", "max_steps=1"], {}),
    ("trainer", "output-dir-path-too-long", [*T, "output_dir={root}/" + "/".join(["y" * 200] * 25), "max_steps=1"], {}),
    ("trainer", "output-dir-name-too-long-dry", [*T, "output_dir={root}/{long}", *DRY], {}),
    ("trainer", "output-dir-with-space", [*T, "output_dir={root}/r9 space/run", *DRY], {}),
    ("trainer", "output-dir-is-file", [*T, "output_dir={root}/r9-out-file", *DRY], {}),
    ("trainer", "name-with-slash", [*T, "name=a/b", *DRY], {}),
    ("trainer", "name-unicode", [*T, "name=\u0440\u0435\u0446\u0435\u043f\u0442", *DRY], {}),
    ("trainer", "secret-model-path-url", leak_check("{root}/t9-secret-url", *T, "model.config=null",
                                                    "model.path=https://u:" + SECRET + "@hub.example/m",
                                                    *RUN("secret-url")), {}),
    # telemetry report of run directories half-written in new ways
    *[("telemetry report", name, [*R, "{" + key + "}", "--out", "{root}/r9r-" + name], {}) for name, key in (
        ("steps-twice", "r9dupsteps"), ("steps-backwards", "r9backwards"), ("step-time-zero", "r9zerotime"),
        ("ranks-symlink-loop", "r9ranksloop"), ("metrics-dev-zero", "r9metricszero"),
        ("metrics-dev-urandom", "r9metricsrandom"), ("run-json-dev-zero", "r9runzero"),
        ("run-json-empty-object", "r9emptyobj"), ("running-no-steps", "r9running"),
        ("world-size-million", "r9worldhuge"), ("layout-null", "r9nolayout"), ("workload-unknown", "r9workloadunknown"),
        ("telemetry-list", "r9telemetrylist"), ("metrics-64mb-line", "r9longline"), ("foreign-dir", "r9foreign"))],
    ("telemetry report", "root-dir", [*R, "/", "--out", "{root}/r9r-root"], {}),
    ("telemetry report", "proc-self", [*R, "/proc/self", "--out", "{root}/r9r-proc"], {}),
    ("telemetry report", "ranks-subdir", [*R, "{good}/ranks", "--out", "{root}/r9r-sub"], {}),
    ("telemetry report", "out-name-too-long", [*R, "{good}", "--out", "{root}/{long}"], {}),
    ("telemetry report", "path-too-long", [*R, "{root}/" + "/".join(["z" * 200] * 25)], {}),
    ("telemetry report", "out-is-run-itself", [*R, "{good}", "--out", "{good}"], {}),
    # telemetry compare
    ("telemetry compare", "world-sizes-differ", [*C, "a={good}", "b={r9world4}", "--out", "{root}/r9c1"], {}),
    ("telemetry compare", "same-run-two-spellings", [*C, "{good}", "{good}/", "--out", "{root}/r9c2"], {}),
    ("telemetry compare", "label-with-slash", [*C, "a/b={good}", "c={good2}", "--out", "{root}/r9c3"], {}),
    ("telemetry compare", "label-too-long", [*C, "{long}={good}", "c={good2}", "--out", "{root}/r9c4"], {}),
    ("telemetry compare", "label-spaces", [*C, " a ={good}", "c={good2}", "--out", "{root}/r9c5"], {}),
    ("telemetry compare", "line-rate-gb-per-s", [*C, "a={good}", "b={good2}", "--out", "{root}/r9c6", "--line-rate",
                                                 "a=12.5GB/s"], {}),
    ("telemetry compare", "line-rate-gbps", [*C, "a={good}", "b={good2}", "--out", "{root}/r9c7", "--line-rate",
                                             "a=100Gbps"], {}),
    ("telemetry compare", "line-rate-gb-slash-s", [*C, "a={good}", "b={good2}", "--out", "{root}/r9c8", "--line-rate",
                                                   "a=100Gb/s"], {}),
    ("telemetry compare", "expect-transport-empty", [*C, "a={good}", "b={good2}", "--out", "{root}/r9c9",
                                                     "--expect-transport", "a="], {}),
    ("telemetry compare", "busbw-axis-empty", [*C, "{good}", "{good2}", "--out", "{root}/r9c10", "--busbw-axis", ""],
     {}),
    ("telemetry compare", "steps-backwards", [*C, "{good}", "{r9backwards}", "--out", "{root}/r9c11"], {}),
    ("telemetry compare", "foreign-dir", [*C, "{good}", "{r9foreign}", "--out", "{root}/r9c12"], {}),
    ("telemetry compare", "metrics-dev-zero", [*C, "{good}", "{r9metricszero}", "--out", "{root}/r9c13"], {}),
    ("telemetry compare", "workload-unknown", [*C, "{good}", "{r9workloadunknown}", "--out", "{root}/r9c14"], {}),
    # telemetry project: rates as vendors write them, impossible targets
    ("telemetry project", "rate-gb-per-s", [*P, "--rate", "12.5GB/s"], {}),
    ("telemetry project", "rate-gb-slash-s", [*P, "--rate", "100Gb/s"], {}),
    ("telemetry project", "rate-gbps", [*P, "--rate", "100Gbps"], {}),
    ("telemetry project", "rate-gib", [*P, "--rate", "100Gib"], {}),
    ("telemetry project", "rate-gibit", [*P, "--rate", "100gibit"], {}),
    ("telemetry project", "rate-leading-space", [*P, "--rate", " 1gbit"], {}),
    ("telemetry project", "rate-trailing-comma", [*P, "--rate", "1gbit,"], {}),
    ("telemetry project", "rate-hex", [*P, "--rate", "0x10gbit"], {}),
    ("telemetry project", "intra-rate-gb-per-s", [*P, "--rate", "1gbit", "--intra-rate", "300GB/s"], {}),
    ("telemetry project", "ranks-per-node-multi-node", [*P, "--rate", "1gbit", "--ranks-per-node", "3"], {}),
    ("telemetry project", "busbw-table-run-json", [*P, "--busbw-table", "{good}/run.json"], {}),
    ("telemetry project", "steps-twice", ["telemetry", "project", "{r9dupsteps}", "--rate", "1gbit"], {}),
    ("telemetry project", "step-time-zero", ["telemetry", "project", "{r9zerotime}", "--rate", "1gbit"], {}),
    ("telemetry project", "metrics-dev-zero", ["telemetry", "project", "{r9metricszero}", "--rate", "1gbit"], {}),
    ("telemetry project", "foreign-dir", ["telemetry", "project", "{r9foreign}", "--rate", "1gbit"], {}),
    ("telemetry project", "world-size-million", ["telemetry", "project", "{r9worldhuge}", "--rate", "1gbit"], {}),
    # telemetry watch
    ("telemetry watch", "missing-dir-no-once", [*W, "{root}/nope-r9"], {}),
    ("telemetry watch", "interval-hex", [*W, "{good}", "--once", "--interval", "0x10"], {}),
    ("telemetry watch", "interval-empty", [*W, "{good}", "--once", "--interval", ""], {}),
    ("telemetry watch", "metrics-dev-zero", [*W, "{r9metricszero}", "--once"], {}),
    ("telemetry watch", "ranks-symlink-loop", [*W, "{r9ranksloop}", "--once"], {}),
    ("telemetry watch", "run-json-empty-object", [*W, "{r9emptyobj}", "--once"], {}),
    ("telemetry watch", "run-json-dev-zero", [*W, "{r9runzero}", "--once"], {}),
    ("telemetry watch", "telemetry-list", [*W, "{r9telemetrylist}", "--once"], {}),
    ("telemetry watch", "foreign-dir", [*W, "{r9foreign}", "--once"], {}),
    # telemetry export
    ("telemetry export", "metrics-dev-zero", ["telemetry", "export", "{r9metricszero}", "--to", "parquet", "--out",
                                              "{root}/r9x1"], {}),
    ("telemetry export", "out-name-too-long", ["telemetry", "export", "{good}", "--to", "parquet", "--out",
                                               "{root}/{long}"], {}),
    ("telemetry export", "foreign-dir", ["telemetry", "export", "{r9foreign}", "--to", "parquet", "--out",
                                         "{root}/r9x2"], {}),
    # launch.lab: more ranks than the host holds, tc sizes, ordering
    ("launch.lab", "ranks-above-host", ["launch.lab", "--nodes", "2", "--nproc-per-node", "64", "--rate", "1gbit", "--",
                                        TINY], {}),
    ("launch.lab", "nodes-times-nproc-10000", ["launch.lab", "--nodes", "100", "--nproc-per-node", "100", "--rate",
                                               "1gbit", "--", TINY], {}),
    ("launch.lab", "burst-negative", [*LAB, "--burst", "-1", "--", TINY], {}),
    ("launch.lab", "burst-word", [*LAB, "--burst", "big", "--", TINY], {}),
    ("launch.lab", "burst-bits", [*LAB, "--burst", "64kbit", "--", TINY], {}),
    ("launch.lab", "limit-zero", [*LAB, "--limit", "0", "--", TINY], {}),
    ("launch.lab", "limit-exponent", [*LAB, "--limit", "1e9", "--", TINY], {}),
    ("launch.lab", "mtu-fraction", [*LAB, "--mtu", "9000.5", "--", TINY], {}),
    ("launch.lab", "timeout-zero", [*LAB, "--timeout", "0", "--", TINY], {}),
    ("launch.lab", "nproc-negative", ["launch.lab", "--nodes", "2", "--nproc-per-node", "-1", "--rate", "1gbit", "--",
                                      TINY], {}),
    ("launch.lab", "rate-gb-slash-s", ["launch.lab", "--nodes", "2", "--rate", "100Gb/s", "--", TINY], {}),
    ("launch.lab", "no-double-dash", [*LAB, TINY], {}),
    ("launch.lab", "slow-rate-zero", [*LAB, "--slow-node", "1", "--slow-rate", "0kbit", "--", TINY], {}),
    ("launch.lab", "recipe-path-too-long", [*LAB, "--", "{root}/" + "/".join(["w" * 200] * 25) + ".yaml"], {}),
    # launch.evaluate
    *[("launch.evaluate", name, [*E, "{root}/eval9-" + name + ".yaml", "--dry-run"], {}) for name in (
        "variant-name-trailing-space", "variant-name-dot", "variant-name-dotdot", "variant-name-too-long",
        "workload-name-space", "repeats-exponent-string", "slurm-without-section",
        "lab-null", "top-level-rate", "rate-gb-per-s", "rate-gbps", "lab-too-many-ranks", "overrides-dp-mismatch",
        "out-too-long", "anchor-dup")],
    ("launch.evaluate", "secret-env-dry-run", leak_check("{root}/eval9-out", *E, "{root}/eval9-secret-env.yaml",
                                                         "--dry-run"), {}),
    ("launch.evaluate", "spec-path-with-space", [*E, "{root}/r9 space/eval.yaml", "--dry-run"], {}),
    ("launch.evaluate", "out-flag-too-long", [*E, "recipes/evaluations/lab_two_rates.yaml", "--out", "{root}/{long}",
                                              "--dry-run"], {}),
    # launch.torchrun flags not tried
    ("launch.torchrun", "master-port-fraction", ["launch.torchrun", "--nnodes", "2", "--node-rank", "1",
                                                 "--master-addr", "node0", "--master-port", "29500.5", "-m", "trainer",
                                                 TINY], {}),
    ("launch.torchrun", "rdzv-endpoint-no-host", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                                  "--rdzv-endpoint", ":29400", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "nnodes-negative", ["launch.torchrun", "--nnodes", "-1", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "node-rank-word", ["launch.torchrun", "--nnodes", "2", "--node-rank", "x", "-m", "trainer",
                                           TINY], {}),
    ("launch.torchrun", "standalone-node-rank-one", ["launch.torchrun", "--standalone", "--node-rank", "1", "-m",
                                                     "trainer", TINY], {}),
    ("launch.torchrun", "log-dir-unwritable", ["launch.torchrun", "--standalone", "--log-dir", "/proc/nope", "-m",
                                               "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "pet-node-rank-word", ["launch.torchrun", "-m", "trainer", TINY, "--dry-run"],
     {"PET_NNODES": "2", "PET_NODE_RANK": "x"}),
    ("launch.torchrun", "worker-world-size-flag", ["launch.torchrun", "--standalone", "--nproc-per-node", "1", "-m",
                                                   "trainer", TINY, "--world-size", "8", "max_steps=1"], {}),
    # launch.nemo
    ("launch.nemo", "engine-case", ["launch.nemo", "recipes/llama70b_lora.yaml", "--engine", "NeMo2"], {}),
    ("launch.nemo", "print-and-json", [*NEMO, "--print", "--json"], {}),
    ("launch.nemo", "nodes-fraction", [*NEMO, "--nodes", "1.5"], {}),
    ("launch.nemo", "gpus-per-node-word", [*NEMO, "--gpus-per-node", "two"], {}),
    ("launch.nemo", "run-without-gpu", [*NEMO, "--run"], {}),
    ("launch.nemo", "gpus-not-fitting-tp", [*NEMO, "--nodes", "1", "--gpus-per-node", "3"], {}),
    ("launch.nemo", "collectives-recipe", ["launch.nemo", "recipes/collectives.yaml", "--engine", "nemo2"], {}),
    ("launch.nemo", "local-world-zero", [*NEMO], {"LOCAL_WORLD_SIZE": "0", "WORLD_SIZE": "8"}),
    ("launch.nemo", "slurm-gpus-on-node-word", [*NEMO], {"SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "abc"}),
    # train.sbatch
    ("sbatch", "nnodes-above-nodelist", [*SBATCH, TINY], {**SLURM_ENV, "SLURM_NNODES": "3"}),
    ("sbatch", "rdzv-port-zero", [*SBATCH, TINY], {**SLURM_ENV, "RDZV_PORT": "0"}),
    ("sbatch", "nproc-fraction", [*SBATCH, TINY], {**SLURM_ENV, "NPROC_PER_NODE": "1.5"}),
    ("sbatch", "job-id-empty", [*SBATCH, TINY], {**SLURM_ENV, "SLURM_JOB_ID": ""}),
    # bench/gpu/run.sh options (on a host without CUDA every step is skipped: the options are what is checked)
    ("bench/gpu/run.sh", "layers-word", [*GPU, "--layers", "abc"], {}),
    ("bench/gpu/run.sh", "layers-zero", [*GPU, "--layers", "0"], {}),
    ("bench/gpu/run.sh", "layers-above-model", [*GPU, "--layers", "33"], {}),
    ("bench/gpu/run.sh", "steps-negative", [*GPU, "--steps", "-1"], {}),
    ("bench/gpu/run.sh", "steps-unit", [*GPU, "--steps", "10x"], {}),
    ("bench/gpu/run.sh", "layers-no-value", [*GPU, "--layers"], {}),
    ("bench/gpu/run.sh", "out-no-value", ["bash", "bench/gpu/run.sh", "--no-install", "--only", "report", "--out"], {}),
    ("bench/gpu/run.sh", "out-empty", ["bash", "bench/gpu/run.sh", "--no-install", "--only", "report", "--out", ""],
     {}),
    ("bench/gpu/run.sh", "out-is-file", ["bash", "bench/gpu/run.sh", "--no-install", "--only", "report", "--out",
                                         "{root}/r9-out-file"], {}),
    ("bench/gpu/run.sh", "out-unwritable", ["bash", "bench/gpu/run.sh", "--no-install", "--only", "report", "--out",
                                            "/proc/nope"], {}),
    ("bench/gpu/run.sh", "budget-zero", [*GPU, "--budget", "0"], {}),
    ("bench/gpu/run.sh", "budget-fraction", [*GPU, "--budget", "1.5"], {}),
    ("bench/gpu/run.sh", "only-comma", ["bash", "bench/gpu/run.sh", "--no-install", "--only", ",", "--out",
                                        "{root}/r9gpu2"], {}),
    ("bench/gpu/run.sh", "only-no-value", ["bash", "bench/gpu/run.sh", "--no-install", "--only"], {}),
    ("bench/gpu/run.sh", "save-unwritable", [*GPU, "--save", "/proc/nope"], {}),
    ("bench/gpu/run.sh", "equals-form", ["bash", "bench/gpu/run.sh", "--no-install", "--layers=2", "--only", "report",
                                         "--out", "{root}/r9gpu3"], {}),
    # other commands
    ("launch.p2p_bandwidth", "num-elems-zero", ["launch.p2p_bandwidth", "--out", "{root}/r9p1", "--num-elems", "0"], {}),
    ("launch.p2p_bandwidth", "num-elems-negative", ["launch.p2p_bandwidth", "--out", "{root}/r9p2", "--num-elems",
                                                    "-1"], {}),
    ("launch.stage", "to-name-too-long", ["launch.stage", TINY, "--to", "{root}/{long}"], {}),
    ("launch.stage", "jobs-fraction", ["launch.stage", TINY, "--to", "{root}/r9s1", "--jobs", "1.5"], {}),
    ("attach", "run-dir-empty", ["telemetry.integrations.attach", "--run-dir", "", "--", "true"], {}),
    ("attach", "run-dir-name-too-long", ["telemetry.integrations.attach", "--run-dir", "{root}/{long}", "--", "true"],
     {}),
    ("tools", "demo-data-name-too-long", ["tools.make_demo_data", "{root}/{long}.jsonl"], {}),
]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN: dict[tuple[str, str], str] = {
    ("trainer", "packing-off"): "YAML 1.1 reads off as false (a quoted 'off' is refused), as `yes` in earlier rounds",
    ("trainer", "save-final-on"): "YAML 1.1 reads on as true, as meant",
    ("trainer", "packing-capital-yes"): "YAML 1.1 reads Yes as true, as meant",
    ("trainer", "eval-every-not-batch-multiple"): "evaluation runs at the first step boundary past each multiple of "
                                                  "the samples (as MLPerf's eval every N samples): any count is a "
                                                  "schedule",
    ("trainer", "tp-not-dividing-vocab"): "the vocabulary layers stay whole on every rank where tp does not divide "
                                          "the vocabulary (trainer/parallelize.py); only the heads and MLP split",
    ("trainer", "pp2-odd-layers"): "stages take layers as evenly as they go (2 and 1 of 3: trainer/pipeline.py)",
    ("trainer", "lora-r-above-hidden"): "PEFT builds it: a rank above the layer's width adds parameters, not an "
                                        "error (as peft and torchtune accept it)",
    ("trainer", "target-module-lm-head"): "lm_head is a Linear PEFT adapts; a valid target",
    ("trainer", "target-modules-dup"): "PEFT matches target modules as a set: a name twice adapts it once",
    ("trainer", "anchor-section-reused"): "four keys of lora merged into parallel: four unknown keys, one line each "
                                          "(one per problem), each naming lora as the key's section",
    ("trainer", "local-world-not-dividing"): "hosts may hold different rank counts (torchrun allows it); the host "
                                             "count is then unknown (None), no longer WORLD_SIZE // LOCAL_WORLD_SIZE",
    ("trainer", "load-digests-word"): "a test hook: only FABRIC_HARNESS_LOAD_DIGESTS=1 turns it on",
    ("trainer", "nccl-debug-file-missing-dir"): "torch's NCCL dump path, written only on an NCCL watchdog timeout; "
                                                "a CPU run never reads it (as NCCL_DEBUG_FILE in round 4)",
    ("trainer", "output-dir-with-space"): "a directory with a space is a directory",
    ("trainer", "name-unicode"): "a name labels the run; any printable text",
    ("trainer", "name-with-slash"): "a name labels the run (run.json, reports, compare); no path is made of it",
    ("telemetry report", "steps-twice"): "a step written again (an engine's own resume appends from its checkpoint; "
                                         "two runs' lines in one file) counts once, its last line kept, the steps "
                                         "named in the report (it counted every step twice: steps 12)",
    ("telemetry report", "steps-backwards"): "a step going back is a restart from there (a resume): the earlier "
                                             "lines at or past it are left out and named (reversed: step 1 kept)",
    ("telemetry report", "ranks-symlink-loop"): "a ranks entry that is no directory holds no rank's files (round 8's "
                                                "ranks-is-file)",
    ("telemetry report", "run-json-empty-object"): "run.json without fields: each field unknown, said so",
    ("telemetry report", "running-no-steps"): "a run that has started and written no step yet: steps 0, the values "
                                              "unknown",
    ("telemetry report", "world-size-million"): "run.json's layout as recorded (a report shows it; it computes nothing "
                                                "per rank from it)",
    ("telemetry report", "layout-null"): "the layout unknown, said so",
    ("telemetry report", "workload-unknown"): "the report reads steps, not the workload; the name is shown as recorded",
    ("telemetry report", "metrics-64mb-line"): "one long line is read (a bounded follower is watch's; the report "
                                               "reads the file once)",
    ("telemetry report", "out-is-run-itself"): "report.md and its figures beside the record; no record file replaced "
                                               "(as compare --out into a run directory)",
    ("telemetry compare", "label-with-slash"): "a label names a column and figure legends, no file",
    ("telemetry compare", "label-too-long"): "as label-with-slash",
    ("telemetry compare", "label-spaces"): "as label-with-slash",
    ("telemetry compare", "line-rate-gbps"): "tc's gbps is gigabytes per second: read as tc reads it, with a warning "
                                             "saying it is 800 Gbit/s and how to write 100 Gbit/s (none before)",
    ("telemetry compare", "steps-backwards"): "as report steps-backwards",
    ("telemetry project", "rate-gbps"): "as compare line-rate-gbps: tc's meaning, with its warning",
    ("telemetry project", "rate-gibit"): "gibit is a tc unit (2**30 bit/s)",
    ("telemetry project", "rate-leading-space"): "surrounding spaces are stripped",
    ("telemetry project", "steps-twice"): "as report steps-twice",
    ("telemetry project", "world-size-million"): "projection of the recorded layout: arithmetic, as round 7's 10**11 "
                                                 "nodes",
    ("telemetry watch", "missing-dir-no-once"): "a queued job has not made its output_dir yet: watch says it waits "
                                                "for it to be created (Ctrl-C to stop)",
    ("telemetry watch", "ranks-symlink-loop"): "as report ranks-symlink-loop",
    ("telemetry watch", "run-json-empty-object"): "as report run-json-empty-object",
    ("launch.lab", "burst-bits"): "tc writes sizes in bits too (64kbit = 8 KiB); the lab checks the size it makes",
    ("launch.evaluate", "slurm-without-section"): "slurm's settings all have defaults (nodes from the job)",
    ("launch.evaluate", "lab-null"): "the lab's settings all have defaults (2 nodes, 1 rank each)",
    ("launch.evaluate", "rate-gbps"): "tc's meaning, with a warning at load (none before this round)",
    ("launch.evaluate", "secret-env-dry-run"): "exit 0 and the token is in no file the dry run writes",
}
