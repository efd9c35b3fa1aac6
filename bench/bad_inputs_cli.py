"""Bad inputs handled / tried, across the shipped commands: each case is one command line with one mistake
(a flag, a value, a file, a run directory), run as the user types it. Handled: exit 2, exactly one `error:`
line on stderr, no traceback, within the time limit. Everything else is listed with what it did.

    PYTHONPATH=$PWD python -m bench.bad_inputs_cli [--source DIR] [--only PREFIX] [--round 4|5|6|7|8|9]

DIR: another checkout to run the same cases against (e.g. `git archive` of an older commit).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench.support import bad_inputs_round4 as round4
from bench.support import bad_inputs_round5 as round5
from bench.support import bad_inputs_round6 as round6
from bench.support import bad_inputs_round7 as round7
from bench.support import bad_inputs_round8 as round8
from bench.support import bad_inputs_round9 as round9

REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 60
MEMORY_CAP = 8 << 30


def _fixtures(root: Path) -> dict[str, str]:
    """Recorded runs (good, and damaged in one way each), bad files and evaluation specs."""
    import yaml

    from bench.support.recorded_runs import write_run

    good = write_run(root / "good", name="a")
    good2 = write_run(root / "good2", name="a")
    # runs whose record an output path would replace (one each: the code before replaced it)
    own = write_run(root / "own", name="a", times=True)
    own2 = write_run(root / "own2", name="a", times=True)
    timed = write_run(root / "timed", name="b", workload="bert_pretraining", times=True)
    bert = write_run(root / "bert", name="b", workload="bert_pretraining")
    damaged = {}
    for name, write in {
        "emptyjson": lambda p: (p / "run.json").write_text(""),
        "truncjson": lambda p: (p / "run.json").write_text('{"name": "a", "status"'),
        "binjson": lambda p: (p / "run.json").write_bytes(b"\xff\xfe\x00\x81" * 32),
        "strjson": lambda p: (p / "run.json").write_text('"a run"'),
        "badmetrics": lambda p: (p / "metrics.jsonl").write_text(  # a damaged line between two steps
            (p / "metrics.jsonl").read_text().replace("\n", '\n{"step": 7, "loss": \n', 1)),
        "listmetrics": lambda p: (p / "metrics.jsonl").write_text("[1, 2]\n"),
        "nometrics": lambda p: (p / "metrics.jsonl").unlink(),
        "recipelist": lambda p: (p / "run.json").write_text(
            json.dumps({**json.loads((p / "run.json").read_text()), "recipe": [1]})),
        # shaped wrong inside (each was a traceback in the report or watch): the only lines, so each is one line
        "nostep": lambda p: (p / "metrics.jsonl").write_text('{"loss": 2.0, "step_time_s": 1.0}\n' * 3),
        "commlist": lambda p: (p / "metrics.jsonl").write_text('{"step": 1, "comm": [1, 2]}\n'),
        "ranksstr": lambda p: (p / "metrics.jsonl").write_text('{"step": 1, "step_time_s": 1.0, "ranks": "x"}\n'),
        "hugestep": lambda p: (p / "metrics.jsonl").write_text('{"step": %d, "step_time_s": 1.0}\n' % 10**30),
        "countersstr": lambda p: (p / "run.json").write_text(
            json.dumps({**json.loads((p / "run.json").read_text()), "telemetry": {"counters": "clean"}})),
        "hostsnum": lambda p: (p / "run.json").write_text(
            json.dumps({**json.loads((p / "run.json").read_text()), "hosts": [1, 2]})),
        "deepjson": lambda p: (p / "run.json").write_text('{"name": "a", "x": ' + "[" * 100000 + "]" * 100000 + "}"),
        "metricsdir": lambda p: ((p / "metrics.jsonl").unlink(), (p / "metrics.jsonl").mkdir()),
        "metricsfifo": lambda p: ((p / "metrics.jsonl").unlink(), os.mkfifo(p / "metrics.jsonl")),
        "nanmetrics": lambda p: (p / "metrics.jsonl").write_text('{"step": 1, "step_time_s": NaN, "loss": Infinity}\n'),
        "layoutstr": lambda p: (p / "run.json").write_text(
            json.dumps({**json.loads((p / "run.json").read_text()), "layout": {"world_size": "two"}})),
        "fabricstr": lambda p: (p / "run.json").write_text(
            json.dumps({**json.loads((p / "run.json").read_text()), "fabric": "tcp"})),
        "rundangling": lambda p: ((p / "run.json").unlink(), (p / "run.json").symlink_to(p / "gone.json")),
    }.items():
        damaged[name] = write_run(root / name, name="a")
        write(damaged[name])
    dirjson = root / "dirjson"
    (dirjson / "run.json").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "empty.yaml").write_text("")
    (root / "empty.txt").write_text("")
    (root / "binary.yaml").write_bytes(b"\x00\xff\x81" * 64)
    (root / "loop1").symlink_to("loop2")  # an output directory through a link that leads nowhere
    (root / "loop2").symlink_to("loop1")
    (root / "notes.txt").write_text("hello\n")
    evaluation = REPO / "recipes" / "evaluations" / "lab_two_rates.yaml"
    doc = yaml.safe_load(evaluation.read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(REPO / workload["recipe"])
    doc["out"] = str(root / "eval-out")
    (root / "eval-unknown.yaml").write_text(yaml.safe_dump({**doc, "repeat": 3}))
    (root / "eval-list.yaml").write_text("- a\n- b\n")
    (root / "eval-repeats-str.yaml").write_text(yaml.safe_dump({**doc, "repeats": "three"}))
    (root / "eval-variant-unknown.yaml").write_text(yaml.safe_dump(
        {**doc, "variants": [{**doc["variants"][0], "colour": "red"}, *doc["variants"][1:]]}))
    (root / "eval-no-recipe.yaml").write_text(yaml.safe_dump(
        {**doc, "workloads": [{**doc["workloads"][0], "recipe": str(root / "nope.yaml")}]}))
    (root / "eval-workload-unknown.yaml").write_text(yaml.safe_dump(
        {**doc, "workloads": [{**doc["workloads"][0], "overides": ["max_steps=3"]}, *doc["workloads"][1:]]}))
    (root / "eval-lab-unknown.yaml").write_text(yaml.safe_dump({**doc, "lab": {**(doc.get("lab") or {}), "nodez": 2}}))
    (root / "eval-launcher.yaml").write_text(yaml.safe_dump({**doc, "launcher": "kubernetes"}))
    (root / "eval-tab.yaml").write_text("name: x\n\trepeats: 2\n")
    (root / "eval-repeats-huge.yaml").write_text(yaml.safe_dump({**doc, "repeats": 10**30}))
    (root / "header-only.txt").write_text("#  size  count  type  redop  root  time  algbw  busbw  #wrong\n")
    (root / "list.json").write_text("[1, 2]")
    # round of 2026-11-29 (bad inputs, third): special files, another recipe's run, evaluation type confusion
    os.mkfifo(root / "fifo")  # no writer: whatever opens it to read waits forever
    (root / "dangling.yaml").symlink_to(root / "gone.yaml")
    (root / "merge-scalar.yaml").write_text("name: x\ntrain:\n  <<: 5\n")
    (root / "tp-list.yaml").write_text((REPO / TINY).read_text().replace("  tp: 1\n", "  tp: [2]\n"))
    write_run(root / "otherrecipe", name="b", workload="bert_pretraining")
    for name, change in {
        "dup-variant": {"variants": [doc["variants"][0], doc["variants"][0]]},
        "variant-slash": {"variants": [{**doc["variants"][0], "name": "../x"}, doc["variants"][1]]},
        "variants-map": {"variants": {"a": 1}},
        "repeats-bool": {"repeats": True},
        "repeats-float": {"repeats": 2.5},
        "rate-bad": {"variants": [{**doc["variants"][0], "lab": {"rate": "fast"}}, doc["variants"][1]]},
        "mtu-str": {"variants": [{**doc["variants"][0], "lab": {"rate": "1gbit", "mtu": "9000B"}}, doc["variants"][1]]},
        "overrides-str": {"workloads": [{**doc["workloads"][0], "overrides": "max_steps=3"}]},
        "workloads-empty": {"workloads": []},
        "out-empty": {"out": ""},
        "lab-nodes-str": {"lab": {**doc["lab"], "nodes": "two"}},
        "variant-null": {"variants": [None, doc["variants"][1]]},
        "workload-tp": {"workloads": [{**doc["workloads"][1], "overrides": ["parallel.tp=3"]}]},
    }.items():
        (root / f"eval-{name}.yaml").write_text(yaml.safe_dump({**doc, **change}))
    (root / "object.json").write_text("{}")
    return {"root": str(root), "otherrecipe": str(root / "otherrecipe"), "own": str(own), "own2": str(own2), "good": str(good), "good2": str(good2), "timed": str(timed), "bert": str(bert), "dirjson": str(dirjson),
            **{k: str(v) for k, v in damaged.items()}}


TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
DRY = ["--dry-run"]
LAB = ["launch.lab", "--nodes", "2", "--rate", "1gbit"]
LT = ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b", "--server-addr", "10.0.0.1",
      "--exec", "true {{host}}", "--output", "{root}/lt"]

# (command, id, argv after `python -m`, extra environment)
CASES: list[tuple[str, str, list[str], dict]] = [
    # trainer: recipe keys and values, flags, environment
    ("trainer", "nested-unknown-key", [*T, "train.lrr=0.1", *DRY], {}),
    ("trainer", "unknown-section", [*T, "paralel.tp=2", *DRY], {}),
    ("trainer", "data-unknown-key", [*T, "data.bogus=1", *DRY], {}),
    ("trainer", "model-unknown-key", [*T, "model.bogus=1", *DRY], {}),
    ("trainer", "lora-unknown-key", [*T, "lora.rank=8", *DRY], {}),
    ("trainer", "telemetry-unknown-key", [*T, "telemetry.bogus=1", *DRY], {}),
    ("trainer", "kernels-enum", [*T, "model.kernels=bogus", *DRY], {}),
    ("trainer", "compile-enum", [*T, "train.compile=maybe", *DRY], {}),
    ("trainer", "data-parallel-enum", [*T, "parallel.data_parallel=bogus", *DRY], {}),
    ("trainer", "workload-enum", [*T, "workload=bogus", *DRY], {}),
    ("trainer", "max-steps-negative", [*T, "max_steps=-1", *DRY], {}),
    ("trainer", "max-steps-string", [*T, "max_steps=abc", *DRY], {}),
    ("trainer", "max-steps-inf", [*T, "max_steps=.inf", *DRY], {}),
    ("trainer", "lr-string", [*T, "train.lr=fast", *DRY], {}),
    ("trainer", "pp-zero", [*T, "parallel.pp=0", *DRY], {}),
    ("trainer", "tp-not-dividing-4", [*T, "parallel.tp=3", *DRY, "--world-size", "4"], {}),
    ("trainer", "world-size-zero", [*T, *DRY, "--world-size", "0"], {}),
    ("trainer", "world-size-string", [*T, *DRY, "--world-size", "four"], {}),
    ("trainer", "unknown-flag", [*T, *DRY, "--bogus"], {}),
    ("trainer", "no-arguments", ["trainer"], {}),
    ("trainer", "empty-recipe", ["trainer", "{root}/empty.yaml", *DRY], {}),
    ("trainer", "binary-recipe", ["trainer", "{root}/binary.yaml", *DRY], {}),
    ("trainer", "output-dir-symlink-loop", [*T, "output_dir={root}/loop1", "max_steps=1"], {}),
    ("trainer", "enum-near-miss", [*T, "train.schedule=cosin", *DRY], {}),
    ("trainer", "recipe-is-dir", ["trainer", "{root}", *DRY], {}),
    ("trainer", "output-dir-unwritable", [*T, "output_dir=/proc/nope/run", "max_steps=1"], {}),
    ("trainer", "rank-env-string", [*T, *DRY], {"RANK": "x", "WORLD_SIZE": "2"}),
    ("trainer", "local-rank-beyond", [*T, *DRY], {"LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "2"}),
    ("trainer", "section-is-scalar", [*T, "parallel=3", *DRY], {}),
    ("trainer", "section-is-null", [*T, "train=null", *DRY], {}),
    ("trainer", "model-config-list", [*T, "model.config=[1]", *DRY], {}),
    ("trainer", "override-empty-key", [*T, "=3", *DRY], {}),
    ("trainer", "master-addr-empty", [*T, *DRY], {"MASTER_ADDR": ""}),
    ("trainer", "world-size-negative-env", [*T, *DRY], {"WORLD_SIZE": "-2"}),
    ("trainer", "config-size-negative", [*T, "model.config.hidden_size=-1", *DRY], {}),
    ("trainer", "config-heads-not-dividing", [*T, "model.config.num_attention_heads=3", *DRY], {}),
    # telemetry report
    ("telemetry report", "missing-path", ["telemetry", "report", "{root}/nope"], {}),
    ("telemetry report", "file-not-dir", ["telemetry", "report", TINY], {}),
    ("telemetry report", "run-json-empty", ["telemetry", "report", "{emptyjson}"], {}),
    ("telemetry report", "run-json-truncated", ["telemetry", "report", "{truncjson}"], {}),
    ("telemetry report", "run-json-binary", ["telemetry", "report", "{binjson}"], {}),
    ("telemetry report", "run-json-string", ["telemetry", "report", "{strjson}"], {}),
    ("telemetry report", "run-json-is-dir", ["telemetry", "report", "{dirjson}"], {}),
    ("telemetry report", "metrics-bad-line", ["telemetry", "report", "{badmetrics}", "--out", "{root}/r1"], {}),
    ("telemetry report", "metrics-list-line", ["telemetry", "report", "{listmetrics}", "--out", "{root}/r2"], {}),
    ("telemetry report", "recipe-is-list", ["telemetry", "report", "{recipelist}", "--out", "{root}/r3"], {}),
    ("telemetry report", "out-unwritable", ["telemetry", "report", "{good}", "--out", "/proc/nope"], {}),
    ("telemetry", "unknown-subcommand", ["telemetry", "reprot", "{good}"], {}),
    # telemetry compare
    ("telemetry compare", "missing-run", ["telemetry", "compare", "{good}", "{root}/y", "--out", "{root}/c1"], {}),
    ("telemetry compare", "empty-label", ["telemetry", "compare", "={good}", "b={good}", "--out", "{root}/c2"], {}),
    ("telemetry compare", "busbw-axis", ["telemetry", "compare", "{good}", "{good}", "--out", "{root}/c3",
                                         "--busbw-axis", "cubic"], {}),
    ("telemetry compare", "line-rate-bad", ["telemetry", "compare", "a={good}", "b={good2}", "--out", "{root}/c4",
                                            "--line-rate", "a=fast"], {}),
    ("telemetry compare", "expect-transport-bad", ["telemetry", "compare", "a={good}", "b={good2}", "--out",
                                                   "{root}/c5", "--expect-transport", "a=carrier-pigeon"], {}),
    ("telemetry compare", "sweep-no-equals", ["telemetry", "compare", "{good}", "{good2}", "--out", "{root}/c6",
                                              "--sweep", "{good}"], {}),
    ("telemetry compare", "damaged-run", ["telemetry", "compare", "{good}", "{truncjson}", "--out", "{root}/c7"], {}),
    ("telemetry compare", "no-metrics", ["telemetry", "compare", "{good}", "{nometrics}", "--out", "{root}/c8"], {}),
    # telemetry project
    ("telemetry project", "nodes-string", ["telemetry", "project", "{good}", "--rate", "1gbit", "--nodes", "two"], {}),
    ("telemetry project", "efficiency-nan", ["telemetry", "project", "{good}", "--rate", "1gbit",
                                             "--efficiency", "nan"], {}),
    ("telemetry project", "latency-inf", ["telemetry", "project", "{good}", "--rate", "1gbit", "--latency-us", "inf"], {}),
    ("telemetry project", "latency-string", ["telemetry", "project", "{good}", "--rate", "1gbit",
                                             "--latency-us", "soon"], {}),
    ("telemetry project", "busbw-table-missing", ["telemetry", "project", "{good}", "--busbw-table", "{root}/nope.txt"], {}),
    ("telemetry project", "busbw-table-empty", ["telemetry", "project", "{good}", "--busbw-table", "{root}/empty.txt"], {}),
    ("telemetry project", "no-target", ["telemetry", "project", "{good}"], {}),
    ("telemetry project", "intra-rate-bad", ["telemetry", "project", "{good}", "--rate", "1gbit",
                                             "--intra-rate", "quick"], {}),
    ("telemetry project", "run-missing", ["telemetry", "project", "{root}/nope", "--rate", "1gbit"], {}),
    ("telemetry project", "run-no-metrics", ["telemetry", "project", "{nometrics}", "--rate", "1gbit"], {}),
    # telemetry nccl-tests / export / mllog / p2p / watch
    ("telemetry nccl-tests", "missing-file", ["telemetry", "nccl-tests", "{root}/nope.txt"], {}),
    ("telemetry nccl-tests", "empty-file", ["telemetry", "nccl-tests", "{root}/empty.txt"], {}),
    ("telemetry nccl-tests", "dir-not-sweep", ["telemetry", "nccl-tests", "{root}/empty"], {}),
    ("telemetry nccl-tests", "csv-unwritable", ["telemetry", "nccl-tests", "{root}/notes.txt", "--csv", "/proc/x.csv"], {}),
    ("telemetry nccl-log", "missing-file", ["telemetry", "nccl-log", "{root}/nope.log"], {}),
    ("telemetry nccl-log", "no-nccl-line", ["telemetry", "nccl-log", "{root}/notes.txt"], {}),
    ("telemetry nccl-log", "dir-without-logs", ["telemetry", "nccl-log", "{root}/empty"], {}),
    ("telemetry nccl-log", "expect-unknown", ["telemetry", "nccl-log", "{root}/notes.txt", "--expect", "ib"], {}),
    ("telemetry nccl-log", "json-unwritable", ["telemetry", "nccl-log", "{root}/notes.txt", "--json", "/proc/x.json"], {}),
    ("telemetry export", "to-unknown", ["telemetry", "export", "{good}", "--to", "excel", "--out", "{root}/e1"], {}),
    ("telemetry export", "to-empty", ["telemetry", "export", "{good}", "--to", "", "--out", "{root}/e2"], {}),
    ("telemetry export", "run-missing", ["telemetry", "export", "{root}/nope", "--to", "parquet"], {}),
    ("telemetry export", "run-json-truncated", ["telemetry", "export", "{truncjson}", "--to", "parquet",
                                                "--out", "{root}/e3"], {}),
    ("telemetry mllog", "wrong-workload", ["telemetry", "mllog", "{good}", "--out", "{root}/m1.txt", "--no-check"], {}),
    ("telemetry mllog", "run-missing", ["telemetry", "mllog", "{root}/nope", "--no-check"], {}),
    ("telemetry mllog", "out-is-dir", ["telemetry", "mllog", "{timed}", "--out", "{root}", "--no-check"], {}),
    ("telemetry p2p", "not-a-sweep", ["telemetry", "p2p", "{good}"], {}),
    ("telemetry p2p", "reference-missing", ["telemetry", "p2p", "{good}", "--reference", "{root}/nope.txt"], {}),
    ("telemetry p2p", "run-missing", ["telemetry", "p2p", "{root}/nope"], {}),
    ("telemetry watch", "interval-nan", ["telemetry", "watch", "{good}", "--once", "--interval", "nan"], {}),
    ("telemetry watch", "interval-string", ["telemetry", "watch", "{good}", "--once", "--interval", "fast"], {}),
    ("telemetry watch", "interval-inf", ["telemetry", "watch", "{good}", "--interval", "inf"], {}),
    ("telemetry watch", "no-run-json", ["telemetry", "watch", "{root}/empty", "--once"], {}),
    ("telemetry watch", "run-json-truncated", ["telemetry", "watch", "{truncjson}", "--once"], {}),
    ("telemetry watch", "run-json-string", ["telemetry", "watch", "{strjson}", "--once"], {}),
    ("telemetry watch", "metrics-bad-line", ["telemetry", "watch", "{badmetrics}", "--once"], {}),
    ("launch.stage", "to-symlink-loop", ["launch.stage", "recipes/tiny_llama_lora.yaml", "--to", "{root}/loop1"], {}),
    ("telemetry compare", "sweep-missing-dir", ["telemetry", "compare", "a={good}", "b={good2}", "--out",
                                                "{root}/c9", "--sweep", "a={root}/nope"], {}),
    ("telemetry project", "busbw-table-dir", ["telemetry", "project", "{good}", "--busbw-table", "{root}/empty"], {}),
    ("telemetry nccl-tests", "json-unwritable", ["telemetry", "nccl-tests", "{root}/notes.txt", "--json", "/proc/x.json"], {}),
    ("telemetry export", "to-duplicate", ["telemetry", "export", "{good}", "--to", "parquet,parquet,pdf",
                                          "--out", "{root}/e4"], {}),
    ("telemetry p2p", "reference-is-dir", ["telemetry", "p2p", "{good}", "--reference", "{root}"], {}),
    ("telemetry report", "out-empty", ["telemetry", "report", "{good}", "--out", ""], {}),
    ("telemetry project", "rate-negative", ["telemetry", "project", "{good}", "--rate=-5gbit"], {}),
    ("telemetry nccl-tests", "header-only", ["telemetry", "nccl-tests", "{root}/header-only.txt"], {}),
    ("telemetry compare", "line-rate-twice", ["telemetry", "compare", "a={good}", "b={good2}", "--out", "{root}/c11",
                                              "--line-rate", "a=1gbit", "--line-rate", "a=2gbit"], {}),
    ("telemetry compare", "empty-label-second", ["telemetry", "compare", "a={good}", "={good2}", "--out", "{root}/c10"], {}),
    ("telemetry report", "out-is-file", ["telemetry", "report", "{good}", "--out", "{root}/notes.txt"], {}),
    # round of 2026-11-29 (later): shapes inside run directories, launcher variables alone, output over a record
    ("trainer", "model-config-empty", [*T, "model.config={{}}", *DRY], {}),  # {{}}: format() gives {}
    ("trainer", "world-size-env-alone", [*T, "max_steps=1", "output_dir={root}/t-ws"], {"WORLD_SIZE": "2"}),
    ("trainer", "rank-env-alone", [*T, "max_steps=1", "output_dir={root}/t-rank"], {"RANK": "3"}),
    ("telemetry report", "metrics-no-step", ["telemetry", "report", "{nostep}", "--out", "{root}/r4"], {}),
    ("telemetry report", "metrics-comm-list", ["telemetry", "report", "{commlist}", "--out", "{root}/r5"], {}),
    ("telemetry report", "metrics-ranks-string", ["telemetry", "report", "{ranksstr}", "--out", "{root}/r6"], {}),
    ("telemetry report", "metrics-step-huge", ["telemetry", "report", "{hugestep}", "--out", "{root}/r7"], {}),
    ("telemetry report", "counters-string", ["telemetry", "report", "{countersstr}", "--out", "{root}/r8"], {}),
    ("telemetry report", "hosts-numbers", ["telemetry", "report", "{hostsnum}", "--out", "{root}/r9"], {}),
    ("telemetry report", "run-json-deep", ["telemetry", "report", "{deepjson}", "--out", "{root}/r10"], {}),
    ("telemetry report", "metrics-is-dir", ["telemetry", "report", "{metricsdir}", "--out", "{root}/r11"], {}),
    ("telemetry report", "metrics-fifo", ["telemetry", "report", "{metricsfifo}", "--out", "{root}/r12"], {}),
    ("telemetry compare", "metrics-fifo", ["telemetry", "compare", "{good}", "{metricsfifo}", "--out", "{root}/c12"], {}),
    ("telemetry project", "metrics-is-dir", ["telemetry", "project", "{metricsdir}", "--rate", "1gbit"], {}),
    ("telemetry project", "json-over-run-json", ["telemetry", "project", "{own}", "--rate", "1gbit",
                                                 "--json", "{own}/run.json"], {}),
    ("telemetry mllog", "out-over-run-json", ["telemetry", "mllog", "{own2}", "--out", "{own2}/run.json", "--no-check"], {}),
    ("telemetry watch", "counters-string", ["telemetry", "watch", "{countersstr}", "--once"], {}),
    ("telemetry watch", "metrics-fifo", ["telemetry", "watch", "{metricsfifo}", "--once"], {}),
    ("telemetry watch", "metrics-ranks-string", ["telemetry", "watch", "{ranksstr}", "--once"], {}),
    ("launch.lab", "nodes-huge", ["launch.lab", "--nodes", "100000", "--rate", "1gbit", "--", TINY], {}),
    ("launch.torchrun", "master-port-zero", ["launch.torchrun", "--nproc-per-node", "1", "--master-port", "0",
                                             "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "master-port-huge", ["launch.torchrun", "--nproc-per-node", "1", "--master-port", "70000",
                                             "-m", "trainer", TINY, "--dry-run"], {}),
    ("launch.torchrun", "rdzv-endpoint-bad", ["launch.torchrun", "--nnodes", "2", "--rdzv-backend", "c10d",
                                              "--rdzv-endpoint", "node0:port:x", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "node-rank-beyond", ["launch.torchrun", "--nnodes", "2", "--node-rank", "5",
                                             "--master-addr", "127.0.0.1", "-m", "trainer", TINY], {}),
    # launch.evaluate
    ("launch.evaluate", "missing-spec", ["launch.evaluate", "{root}/nope.yaml", "--dry-run"], {}),
    ("launch.evaluate", "unknown-key", ["launch.evaluate", "{root}/eval-unknown.yaml", "--dry-run"], {}),
    ("launch.evaluate", "repeats-huge", ["launch.evaluate", "{root}/eval-repeats-huge.yaml", "--dry-run"], {}),
    ("launch.evaluate", "spec-list", ["launch.evaluate", "{root}/eval-list.yaml", "--dry-run"], {}),
    ("launch.evaluate", "spec-empty", ["launch.evaluate", "{root}/empty.yaml", "--dry-run"], {}),
    ("launch.evaluate", "spec-binary", ["launch.evaluate", "{root}/binary.yaml", "--dry-run"], {}),
    ("launch.evaluate", "repeats-string", ["launch.evaluate", "{root}/eval-repeats-str.yaml", "--dry-run"], {}),
    ("launch.evaluate", "variant-unknown-key", ["launch.evaluate", "{root}/eval-variant-unknown.yaml", "--dry-run"], {}),
    ("launch.evaluate", "workload-recipe-missing", ["launch.evaluate", "{root}/eval-no-recipe.yaml", "--dry-run"], {}),
    ("launch.evaluate", "no-arguments", ["launch.evaluate"], {}),
    ("launch.evaluate", "unknown-flag", ["launch.evaluate", "{root}/eval-unknown.yaml", "--dryrun"], {}),
    ("launch.evaluate", "workload-unknown-key", ["launch.evaluate", "{root}/eval-workload-unknown.yaml", "--dry-run"], {}),
    ("launch.evaluate", "lab-unknown-key", ["launch.evaluate", "{root}/eval-lab-unknown.yaml", "--dry-run"], {}),
    ("launch.evaluate", "launcher-enum", ["launch.evaluate", "{root}/eval-launcher.yaml", "--dry-run"], {}),
    ("launch.evaluate", "yaml-tab", ["launch.evaluate", "{root}/eval-tab.yaml", "--dry-run"], {}),
    ("launch.evaluate", "spec-is-dir", ["launch.evaluate", "{root}", "--dry-run"], {}),
    # launch.lab
    ("launch.lab", "nodes-zero", ["launch.lab", "--nodes", "0", "--rate", "1gbit", "--", TINY], {}),
    ("launch.lab", "nodes-string", ["launch.lab", "--nodes", "two", "--rate", "1gbit", "--", TINY], {}),
    ("launch.lab", "rate-bad", ["launch.lab", "--nodes", "2", "--rate", "fast", "--", TINY], {}),
    ("launch.lab", "slow-node-beyond", [*LAB, "--slow-node", "5", "--slow-rate", "10mbit", "--", TINY], {}),
    ("launch.lab", "mtu-zero", [*LAB, "--mtu", "0", "--", TINY], {}),
    ("launch.lab", "port-zero", [*LAB, "--port", "0", "--", TINY], {}),
    ("launch.lab", "no-recipe", LAB, {}),
    ("launch.lab", "recipe-missing", [*LAB, "--", "{root}/nope.yaml"], {}),
    ("launch.lab", "tp-not-dividing", [*LAB, "--", TINY, "parallel.tp=3"], {}),
    ("launch.lab", "nproc-zero", ["launch.lab", "--nodes", "2", "--nproc-per-node", "0", "--rate", "1gbit", "--", TINY], {}),
    ("launch.lab", "nproc-huge", ["launch.lab", "--nodes", "200", "--nproc-per-node", "64", "--rate", "1gbit", "--",
                                  TINY, "train.global_batch_size=51200"], {}),
    ("launch.lab", "slow-rate-without-node", [*LAB, "--slow-rate", "10mbit", "--", TINY], {}),
    # launch.linktest
    ("launch.linktest", "tool-unknown", ["launch.linktest", "--tool", "ping", "--server", "a", "--client", "b",
                                         "--server-addr", "10.0.0.1", "--output", "{root}/lt"], {}),
    ("launch.linktest", "duration-zero", [*LT, "--duration", "0"], {}),
    ("launch.linktest", "streams-negative", [*LT, "--streams", "-1"], {}),
    ("launch.linktest", "udp-rate-bad", [*LT, "--udp-rate", "lots"], {}),
    ("launch.linktest", "output-unwritable", [*LT[:-1], "/proc/lt"], {}),
    ("launch.linktest", "missing-required", ["launch.linktest", "--tool", "iperf3"], {}),
    ("launch.linktest", "devices-empty", ["launch.linktest", "--tool", "ib_write_bw", "--server", "a", "--client", "b",
                                          "--server-addr", "10.0.0.1", "--devices", ",", "--exec", "true {{host}}",
                                          "--output", "{root}/lt2"], {}),
    ("launch.linktest", "switch-metrics-bad-url", [*LT, "--switch-metrics", "switch1:9101"], {}),
    # launch.stage
    ("launch.stage", "recipe-missing", ["launch.stage", "{root}/nope.yaml", "--to", "{root}/s1"], {}),
    ("launch.stage", "verify-missing", ["launch.stage", "--verify", "{root}/nope"], {}),
    ("launch.stage", "verify-no-manifest", ["launch.stage", "--verify", "{root}/empty"], {}),
    ("launch.stage", "jobs-zero", ["launch.stage", TINY, "--to", "{root}/s2", "--jobs", "0"], {}),
    ("launch.stage", "check-layout-kind", ["launch.stage", "--check-layout", "bogus", "{root}/empty"], {}),
    ("launch.stage", "bad-override", ["launch.stage", TINY, "max_step=3", "--to", "{root}/s3"], {}),
    ("launch.stage", "no-arguments", ["launch.stage"], {}),
    ("launch.stage", "check-layout-missing-dir", ["launch.stage", "--check-layout", "imagenet", "{root}/nope"], {}),
    ("launch.stage", "two-modes", ["launch.stage", "--verify", "{root}/empty", "--check-layout", "bert", "{root}/empty"], {}),
    # launch.p2p_bandwidth, launch.nemo, launch.torchrun
    ("launch.p2p_bandwidth", "engine-unknown", ["launch.p2p_bandwidth", "--out", "{root}/p1", "--engine", "dma"], {}),
    ("launch.p2p_bandwidth", "num-elems-string", ["launch.p2p_bandwidth", "--out", "{root}/p2", "--num-elems", "lots"], {}),
    ("launch.p2p_bandwidth", "no-gpu", ["launch.p2p_bandwidth", "--out", "{root}/p3"], {}),
    ("launch.p2p_bandwidth", "reference-missing", ["launch.p2p_bandwidth", "--out", "{root}/p4",
                                                   "--reference", "{root}/nope.txt"], {}),
    ("launch.nemo", "engine-unknown", ["launch.nemo", TINY, "--engine", "nemo9"], {}),
    ("launch.nemo", "gpus-negative", ["launch.nemo", TINY, "--engine", "nemo2", "--gpus-per-node", "-1"], {}),
    ("launch.nemo", "recipe-missing", ["launch.nemo", "{root}/nope.yaml", "--engine", "nemo2"], {}),
    ("launch.nemo", "bad-override", ["launch.nemo", TINY, "max_step=3", "--engine", "nemo2"], {}),
    ("launch.torchrun", "nproc-string", ["launch.torchrun", "--nproc-per-node", "two", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "script-missing", ["launch.torchrun", "--nproc-per-node", "1", "{root}/nope.py"], {}),
    ("launch.torchrun", "nproc-zero", ["launch.torchrun", "--nproc-per-node", "0", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "nproc-huge", ["launch.torchrun", "--nproc-per-node", "100000", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "nnodes-string", ["launch.torchrun", "--nnodes", "two", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "nnodes-three-parts", ["launch.torchrun", "--nnodes", "1:2:3", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "max-restarts-negative", ["launch.torchrun", "--max-restarts", "-1", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "unknown-flag", ["launch.torchrun", "--nproc-per-gpu", "1", "-m", "trainer", TINY], {}),
    ("launch.torchrun", "module-missing", ["launch.torchrun", "--nproc-per-node", "1", "-m", "trainr", TINY], {}),
    ("launch.torchrun", "gpu-without-cuda", ["launch.torchrun", "--nproc-per-node", "gpu", "-m", "trainer", TINY], {}),
    # telemetry.integrations.attach, tools, trainer.bert_tf_convert
    ("attach", "no-command", ["telemetry.integrations.attach", "--run-dir", "{root}/a1"], {}),
    ("attach", "expect-unknown", ["telemetry.integrations.attach", "--run-dir", "{root}/a2", "--expect", "warp",
                                  "--", "true"], {}),
    ("attach", "command-missing", ["telemetry.integrations.attach", "--run-dir", "{root}/a3", "--",
                                   "/nonexistent/cmd"], {}),
    ("tools", "call-path-recipe-missing", ["tools.call_path", "{root}/nope.yaml"], {}),
    ("tools", "call-path-bad-override", ["tools.call_path", TINY, "max_step=3"], {}),
    ("tools", "demo-data-unwritable", ["tools.make_demo_data", "/proc/nope/d.jsonl"], {}),
    ("tools", "demo-data-is-dir", ["tools.make_demo_data", "{root}"], {}),
    ("tools", "demo-data-extra-arg", ["tools.make_demo_data", "{root}/d.jsonl", "800"], {}),
    ("tools", "bert-data-unwritable", ["tools.make_bert_data", "/proc/nope"], {}),
    ("tools", "byte-tokenizer-unwritable", ["tools.make_byte_tokenizer", "/proc/nope"], {}),
    ("attach", "run-dir-unwritable", ["telemetry.integrations.attach", "--run-dir", "/proc/nope", "--", "true"], {}),
    ("tools", "call-path-extra-flag", ["tools.call_path", TINY, "--bogus"], {}),
    ("tools", "house-rules-argument", ["tools.house_rules", "--fix"], {}),
    ("trainer.bert_tf_convert", "config-is-list", ["trainer.bert_tf_convert", "{root}/nope", "--config",
                                                    "{root}/list.json", "--out", "{root}/b3"], {}),
    ("trainer.bert_tf_convert", "out-is-file", ["trainer.bert_tf_convert", "{root}/nope", "--config",
                                                 "{root}/object.json", "--out", "{root}/notes.txt"], {}),
    ("trainer.bert_tf_convert", "checkpoint-missing", ["trainer.bert_tf_convert", "{root}/nope",
                                                        "--config", "{root}/nope.json", "--out", "{root}/b1"], {}),
    ("trainer.bert_tf_convert", "config-not-json", ["trainer.bert_tf_convert", "{root}/nope", "--config",
                                                     "{root}/notes.txt", "--out", "{root}/b2"], {}),
    # round of 2026-11-29 (third): YAML type confusion, override syntax, special files, world sizes, damaged
    # runs, flags out of range (each was run; the ones marked "was" broke the contract before the fix beside it)
    ("trainer", "tp-yes", [*T, "parallel.tp=yes", *DRY], {}),
    ("trainer", "tp-float", [*T, "parallel.tp=2.5", *DRY], {}),
    ("trainer", "tp-exponent", [*T, "parallel.tp=1e3", *DRY], {}),
    ("trainer", "dp-mismatch", [*T, "parallel.dp=3", *DRY, "--world-size", "4"], {}),
    ("trainer", "global-batch-16M", [*T, "train.global_batch_size=16M", *DRY], {}),
    ("trainer", "lr-map", [*T, "train.lr={{a: 1}}", *DRY], {}),
    ("trainer", "target-modules-string", [*T, "lora.target_modules=q_proj", *DRY], {}),
    ("trainer", "packing-int", [*T, "data.packing=2", *DRY], {}),
    ("trainer", "override-double-dot", [*T, "train..lr=1", *DRY], {}),
    ("trainer", "override-into-scalar", [*T, "train.lr.x=1", *DRY], {}),
    ("trainer", "override-unicode-key", [*T, "tr\u0430in.lr=1", *DRY], {}),
    ("trainer", "override-unclosed-list", [*T, "train.betas=[0.9,", *DRY], {}),
    ("trainer", "recipe-merge-scalar", ["trainer", "{root}/merge-scalar.yaml", *DRY], {}),
    ("trainer", "recipe-tp-list", ["trainer", "{root}/tp-list.yaml", *DRY], {}),
    ("trainer", "recipe-fifo", ["trainer", "{root}/fifo", *DRY], {}),
    ("trainer", "recipe-dangling-link", ["trainer", "{root}/dangling.yaml", *DRY], {}),
    ("trainer", "recipe-dev-null", ["trainer", "/dev/null", *DRY], {}),
    ("trainer", "world-size-prime", [*T, "parallel.tp=2", *DRY, "--world-size", "7"], {}),
    ("trainer", "master-port-float", [*T, *DRY], {"MASTER_PORT": "29500.0"}),
    ("trainer", "output-dir-dev-null", [*T, "output_dir=/dev/null", "max_steps=1"], {}),
    ("trainer", "dataset-fifo", [*T, "data.dataset={root}/fifo", *DRY], {}),  # was: accepted, the run hung
    ("trainer", "model-config-dev-zero", [*T, "model.config=/dev/zero", *DRY], {}),  # was: read until OOM-killed
    ("trainer", "model-config-dir", [*T, "model.config={root}", *DRY], {}),  # was: accepted
    ("trainer", "resume-is-a-file", [*T, "train.resume=" + TINY, *DRY], {}),  # was: accepted
    ("trainer", "pp-over-layers", [*T, "parallel.pp=4", *DRY, "--world-size", "4"], {}),  # was: accepted
    ("trainer", "name-empty", [*T, "name=''", *DRY], {}),  # was: accepted
    ("trainer", "world-size-flag-negative", [*T, *DRY, "--world-size", "-4"], {}),  # was: named "world size"
    ("trainer", "output-dir-other-recipe", [*T, "output_dir={otherrecipe}", "max_steps=1"], {}),  # was: exit 0
    ("trainer", "master-addr-unset", [*T, "output_dir={root}/t-ma", "max_steps=1"],  # was: torch traceback
     {"WORLD_SIZE": "1", "RANK": "0"}),
    ("telemetry report", "metrics-nan", ["telemetry", "report", "{nanmetrics}", "--out", "{root}/r13"], {}),
    ("telemetry report", "layout-wrong-type", ["telemetry", "report", "{layoutstr}", "--out", "{root}/r14"], {}),
    ("telemetry report", "fabric-string", ["telemetry", "report", "{fabricstr}", "--out", "{root}/r15"], {}),
    ("telemetry report", "run-json-dangling", ["telemetry", "report", "{rundangling}"], {}),
    ("telemetry compare", "same-label-twice", ["telemetry", "compare", "a={good}", "a={good2}", "--out", "{root}/c13"], {}),
    ("telemetry project", "nodes-zero", ["telemetry", "project", "{good}", "--rate", "1gbit", "--nodes", "0"], {}),
    ("telemetry project", "efficiency-two", ["telemetry", "project", "{good}", "--rate", "1gbit", "--efficiency", "2"], {}),
    ("telemetry project", "rate-with-space", ["telemetry", "project", "{good}", "--rate", "1 gbit"], {}),
    ("telemetry project", "ranks-per-node-superscript", ["telemetry", "project", "{good}", "--rate", "1gbit",
                                                          "--ranks-per-node", "\u00b2"], {}),  # was: traceback
    ("telemetry project", "busbw-table-dev-zero", ["telemetry", "project", "{good}", "--busbw-table", "/dev/zero"],
     {}),  # was: read until OOM-killed
    ("telemetry nccl-tests", "dev-zero", ["telemetry", "nccl-tests", "/dev/zero"], {}),  # was: OOM-killed
    ("telemetry watch", "interval-zero", ["telemetry", "watch", "{good}", "--once", "--interval", "0"], {}),
    ("telemetry watch", "layout-wrong-type", ["telemetry", "watch", "{layoutstr}", "--once"], {}),
    ("telemetry export", "out-is-file", ["telemetry", "export", "{good}", "--to", "parquet", "--out", TINY], {}),
    ("launch.lab", "nodes-1000", ["launch.lab", "--nodes", "1000", "--rate", "1gbit", "--", TINY], {}),
    ("launch.lab", "nodes-one", ["launch.lab", "--nodes", "1", "--rate", "1gbit", "--", TINY], {}),
    ("launch.lab", "mtu-100", [*LAB, "--mtu", "100", "--", TINY], {}),
    ("launch.lab", "port-70000", [*LAB, "--port", "70000", "--", TINY], {}),
    ("launch.lab", "rate-zero", ["launch.lab", "--nodes", "2", "--rate", "0mbit", "--", TINY], {}),
    ("launch.lab", "timeout-nan", [*LAB, "--timeout", "nan", "--", TINY], {}),
    ("launch.lab", "no-ip-tool", [*LAB, "--", TINY], {"PATH": "/nonexistent"}),
    ("launch.lab", "recipe-fifo", [*LAB, "--", "{root}/fifo"], {}),
    *[("launch.evaluate", name, ["launch.evaluate", "{root}/eval-" + name + ".yaml", "--dry-run"], {}) for name in (
        "dup-variant", "variant-slash", "variants-map", "repeats-bool", "repeats-float", "rate-bad", "mtu-str",
        "overrides-str", "workloads-empty", "out-empty", "lab-nodes-str", "variant-null", "workload-tp")],
    ("launch.evaluate", "spec-fifo", ["launch.evaluate", "{root}/fifo", "--dry-run"], {}),
    ("launch.torchrun", "nnodes-zero", ["launch.torchrun", "--nnodes", "0", "-m", "trainer", TINY], {}),  # was: min_nodes
    ("launch.torchrun", "nproc-superscript", ["launch.torchrun", "--nproc-per-node", "\u00b2", "-m", "trainer", TINY],
     {}),  # was: traceback
    ("launch.stage", "to-dev-null", ["launch.stage", TINY, "--to", "/dev/null"], {}),
    ("launch.stage", "dataset-fifo", ["launch.stage", TINY, "data.dataset={root}/fifo", "--to", "{root}/s4"],
     {}),  # was: shutil.SpecialFileError traceback
    ("trainer", "target-module-typo", [*T, "lora.target_modules=[q_prj]", *DRY], {}),  # was: accepted
    ("tools", "call-path-dataset-fifo", ["tools.call_path", TINY, "data.dataset={root}/fifo"], {}),
    ("trainer.bert_tf_convert", "config-dev-zero", ["trainer.bert_tf_convert", "{root}/nope", "--config", "/dev/zero",
                                                     "--out", "{root}/b4"], {}),  # was: read until OOM-killed
]


# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN = {
    ("telemetry report", "metrics-bad-line"): "a damaged line is skipped like a torn one (telemetry.rundir.read_jsonl)",
    ("telemetry compare", "no-metrics"): "a run without steps is compared with its values unknown, each with a reason",
    ("telemetry watch", "no-run-json"): "a directory the run has not written yet shows 'starting' (docs/live.md)",
    ("telemetry watch", "metrics-bad-line"): "a damaged line is skipped like a torn one",
    ("trainer", "master-addr-empty"): "one process (world size 1) never reads MASTER_ADDR",
    ("telemetry watch", "metrics-ranks-string"): "a damaged line is skipped like a torn one (a traceback before)",
    **round4.BY_DESIGN,
    **round5.BY_DESIGN,
    **round6.BY_DESIGN,
    **round7.BY_DESIGN,
    **round8.BY_DESIGN,
    **round9.BY_DESIGN,
}
ROUNDS = {4: round4.CASES, 5: round5.CASES, 6: round6.CASES, 7: round7.CASES, 8: round8.CASES, 9: round9.CASES}  # the cases of a round kept in a module of its own (--round N runs only those)


def _memory_cap() -> None:
    """Each case's address space capped (8 GiB: a dry run with torch imported needs about 3): a checkout that
    reads /dev/zero until memory runs out fails alone with MemoryError, not by the machine's OOM killer."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def classify(proc_rc: int | None, stderr: str) -> str:
    """'handled', or what the command did instead."""
    if proc_rc is None:
        return f"hang (> {LIMIT_S} s)"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if "Traceback" in stderr:
        last = lines[-1] if lines else ""
        return f"traceback, exit {proc_rc}: {last[:140]}"
    if proc_rc == 0:
        return "exit 0 (accepted)"
    if proc_rc != 2:
        return f"exit {proc_rc}: {' | '.join(lines)[:160]}"
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return f"exit 2, {len(lines)} stderr lines: {' | '.join(lines)[:160]}"
    return "handled"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=str(REPO), help="checkout whose commands are run")
    ap.add_argument("--only", default="", help="run only the commands starting with this")
    ap.add_argument("--verbose", action="store_true", help="print each handled case's line too")
    ap.add_argument("--round", type=int, choices=sorted(ROUNDS), help="run only that round's cases")
    args = ap.parse_args()
    clean = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                             "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(round4.release, Path(tmp))  # before the directory's removal, even after an error
        stack.callback(round6.release)
        stack.callback(round7.release)
        files = {**_fixtures(Path(tmp)), **round4.fixtures(Path(tmp), REPO), **round5.fixtures(Path(tmp), REPO),
                 **round6.fixtures(Path(tmp), REPO), **round7.fixtures(Path(tmp), REPO),
                 **round8.fixtures(Path(tmp), REPO), **round9.fixtures(Path(tmp), REPO)}
        for command, case, argv, env in (ROUNDS[args.round] if args.round else
                                         [*CASES, *round4.CASES, *round5.CASES, *round6.CASES,
                                          *round7.CASES, *round8.CASES, *round9.CASES]):
            if not command.startswith(args.only):
                continue
            argv = [a.format(**files) for a in argv]
            env = {k: v.format(**files) for k, v in env.items()}
            # a Python module as `python -m` runs it; a shell script (launch/slurm/train.sbatch) through bash
            command_line = argv if argv[0] == "bash" else [sys.executable, "-m", *argv]
            try:
                proc = subprocess.run(command_line, cwd=args.source, capture_output=True, text=True,
                                      errors="replace", timeout=LIMIT_S, preexec_fn=_memory_cap,
                                      stdin=subprocess.DEVNULL, env={**clean, "PYTHONPATH": args.source, **env})
                verdict = classify(proc.returncode, proc.stderr)
                line = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
            except subprocess.TimeoutExpired:
                verdict, line = classify(None, ""), ""
            if verdict != "handled" and (command, case) in BY_DESIGN:
                print(f"{command:24} {case:26} by design ({verdict}): {BY_DESIGN[command, case]}", flush=True)
                continue
            totals[command][1] += 1
            if verdict == "handled":
                totals[command][0] += 1
            if verdict != "handled" or args.verbose:
                print(f"{command:24} {case:26} {verdict if verdict != 'handled' else line[:150]}", flush=True)
    print()
    for command, (ok, n) in totals.items():
        print(f"| {command} | {ok} / {n} |")
    ok = sum(v[0] for v in totals.values())
    n = sum(v[1] for v in totals.values())
    print(f"handled {ok} / tried {n} (and {len(BY_DESIGN)} accepted by design, listed above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
