"""The fifth round of the bad-input table (2026-11-29): its fixtures and cases, kept beside
bench/bad_inputs_cli.py, which runs them with the others (`--round 5` runs only these)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.support.recorded_runs import write_run

TINY = "recipes/tiny_llama_lora.yaml"
T = ["trainer", TINY]
SW = ["trainer", "recipes/collectives.yaml"]
DRY = ["--dry-run"]
NCCL_TABLE = "tests/telemetry/nccl_tests_tables/all_gather_perf_issue1435_bfloat16_linear_steps_excerpt.txt"
NCCL_LOG = "tests/telemetry/nccl_logs/nccl_tests_228_ib_two_hcas.log"
P = ["telemetry", "project", "{good}"]


def RUN(name: str) -> list[str]:  # noqa: N802 - reads as the DRY beside it
    """A real run of one step into its own directory (a dry run only warns of a path absent here)."""
    return ["max_steps=1", f"output_dir={{root}}/t5-{name}"]


def fixtures(root: Path, repo: Path) -> dict[str, str]:
    import yaml

    one = write_run(root / "r5onestep", name="a")
    lines = (one / "metrics.jsonl").read_text().splitlines(keepends=True)
    (one / "metrics.jsonl").write_text(lines[0])
    sweep = write_run(root / "r5sweep", name="sweep", workload="collective_sweep")
    odd = root / "r5 dïr ü"  # a space and non-ASCII letters in a path
    odd.mkdir()
    (odd / "d.jsonl").write_text((repo / "recipes" / "assets" / "fabric_dolly_mini.jsonl").read_text())
    (root / "r5-huge-line.log").write_bytes(b"NCCL INFO " + b"x" * (40 << 20))  # one 40 MB line, no newline
    (root / "r5-many.log").write_text("host:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via NET/IB/0\n" * 400000)
    doc = yaml.safe_load((repo / "recipes" / "evaluations" / "lab_two_rates.yaml").read_text())
    for workload in doc["workloads"]:
        workload["recipe"] = str(repo / workload["recipe"])
    # an out directory reused: a planned run's directory a file; a completed run with a damaged evaluate.json;
    # an evaluation.json of another evaluation; a runs/ that is a file
    for name, damage in {
        "run-dir-file": lambda o: ((o / "runs" / "sweep" / "1gbit").mkdir(parents=True),
                                   (o / "runs" / "sweep" / "1gbit" / "r1").write_text("x")),
        "kept-evaluate-damaged": lambda o: (write_run(o / "runs" / "sweep" / "1gbit" / "r1", name="collectives",
                                                      workload="collective_sweep"),
                                            (o / "runs" / "sweep" / "1gbit" / "r1" / "evaluate.json").write_text("{")),
        "other-evaluation": lambda o: (o.mkdir(parents=True), (o / "evaluation.json").write_text(
            json.dumps({"name": "another", "variants": [], "workloads": []}))),
        "runs-file": lambda o: (o.mkdir(parents=True), (o / "runs").write_text("x")),
        "half-written-json": lambda o: (o.mkdir(parents=True), (o / "evaluation.json").write_text('{"name": "lab_tw')),
    }.items():
        out = root / f"r5-eval-out-{name}"
        damage(out)
        (root / f"eval5-{name}.yaml").write_text(yaml.safe_dump({**doc, "out": str(out)}))
    (root / "eval5-out-tilde.yaml").write_text(yaml.safe_dump({**doc, "out": "~/r5-no-such-user-dir/x"}))
    (root / "eval5-out-unicode.yaml").write_text(yaml.safe_dump({**doc, "out": str(odd / "out")}))
    (root / "r5-not-table.csv").write_text("size,busbw\n1024,10\n")
    return {"r5onestep": str(one), "r5sweep": str(sweep), "r5odd": str(odd)}


EVAL = ("run-dir-file", "kept-evaluate-damaged", "other-evaluation", "runs-file", "half-written-json", "out-tilde",
        "out-unicode")
CASES: list[tuple[str, str, list[str], dict]] = [
    # telemetry project: odd values the earlier rounds did not try
    ("telemetry project", "rate-zero", [*P, "--rate", "0gbit"], {}),
    ("telemetry project", "rate-nan", [*P, "--rate", "nangbit"], {}),
    ("telemetry project", "rate-inf", [*P, "--rate", "infgbit"], {}),
    ("telemetry project", "rate-unit-only", [*P, "--rate", "gbit"], {}),
    ("telemetry project", "rate-exponent-huge", [*P, "--rate", "1e400gbit"], {}),
    ("telemetry project", "nodes-negative", [*P, "--rate", "1gbit", "--nodes", "-2"], {}),
    ("telemetry project", "nodes-superscript", [*P, "--rate", "1gbit", "--nodes", "²"], {}),
    ("telemetry project", "efficiency-negative", [*P, "--rate", "1gbit", "--efficiency", "-0.5"], {}),
    ("telemetry project", "efficiency-inf", [*P, "--rate", "1gbit", "--efficiency", "inf"], {}),
    ("telemetry project", "efficiency-percent", [*P, "--rate", "1gbit", "--efficiency", "80%"], {}),
    ("telemetry project", "intra-rate-zero", [*P, "--rate", "1gbit", "--intra-rate", "0gbit"], {}),
    ("telemetry project", "intra-rate-negative", [*P, "--rate", "1gbit", "--intra-rate", "-5gbit"], {}),
    ("telemetry project", "ranks-per-node-zero", [*P, "--rate", "1gbit", "--ranks-per-node", "0"], {}),
    ("telemetry project", "latency-nan", [*P, "--rate", "1gbit", "--latency-us", "nan"], {}),
    ("telemetry project", "busbw-table-csv", [*P, "--busbw-table", "{root}/r5-not-table.csv"], {}),
    ("telemetry project", "busbw-table-and-rate", [*P, "--rate", "1gbit", "--busbw-table", NCCL_TABLE, "--nodes",
                                                   "0"], {}),
    ("telemetry project", "baseline-sweep", ["telemetry", "project", "{r5sweep}", "--rate", "1gbit"], {}),
    ("telemetry project", "baseline-one-step", ["telemetry", "project", "{r5onestep}", "--rate", "1gbit"], {}),
    ("telemetry project", "json-unicode-missing-dir", [*P, "--rate", "1gbit", "--json", "{r5odd}/no dir/p.json"], {}),
    # telemetry p2p / mllog / export
    ("telemetry p2p", "run-missing", ["telemetry", "p2p", "{root}/nope"], {}),
    ("telemetry p2p", "reference-dir", ["telemetry", "p2p", "{good}", "--reference", "{root}/empty"], {}),
    ("telemetry p2p", "reference-notes", ["telemetry", "p2p", "{good}", "--reference", "{root}/notes.txt"], {}),
    ("telemetry p2p", "sweep-no-p2p", ["telemetry", "p2p", "{r5sweep}"], {}),
    ("telemetry mllog", "out-missing-dir", ["telemetry", "mllog", "{timed}", "--no-check", "--out",
                                            "{root}/no/such/m.txt"], {}),
    ("telemetry mllog", "one-step", ["telemetry", "mllog", "{r5onestep}"], {}),
    ("telemetry export", "to-case", ["telemetry", "export", "{good}", "--to", "Parquet", "--out", "{root}/x1"], {}),
    ("telemetry export", "to-space", ["telemetry", "export", "{good}", "--to", "parquet, trace", "--out",
                                      "{root}/x2"], {}),
    ("telemetry export", "to-semicolon", ["telemetry", "export", "{good}", "--to", "parquet;trace", "--out",
                                          "{root}/x3"], {}),
    ("telemetry export", "to-only-commas", ["telemetry", "export", "{good}", "--to", ",,", "--out", "{root}/x4"], {}),
    ("telemetry export", "to-all", ["telemetry", "export", "{good}", "--to", "all", "--out", "{root}/x5"], {}),
    # telemetry nccl-tests: outputs into odd places
    ("telemetry nccl-tests", "csv-dir", ["telemetry", "nccl-tests", NCCL_TABLE, "--csv", "{root}/empty"], {}),
    ("telemetry nccl-tests", "csv-dev-full", ["telemetry", "nccl-tests", NCCL_TABLE, "--csv", "/dev/full"], {}),
    ("telemetry nccl-tests", "json-dev-full", ["telemetry", "nccl-tests", NCCL_TABLE, "--json", "/dev/full"], {}),
    ("telemetry nccl-tests", "csv-missing-dir", ["telemetry", "nccl-tests", NCCL_TABLE, "--csv", "{root}/no/x.csv"],
     {}),
    ("telemetry nccl-tests", "json-over-input", ["telemetry", "nccl-tests", "{root}/notes.txt", "--json",
                                                 "{root}/notes.txt"], {}),
    ("telemetry nccl-tests", "csv-and-json-same", ["telemetry", "nccl-tests", NCCL_TABLE, "--csv", "{root}/same.out",
                                                   "--json", "{root}/same.out"], {}),
    # telemetry nccl-log: --expect spellings, huge inputs
    ("telemetry nccl-log", "expect-trailing-space", ["telemetry", "nccl-log", NCCL_LOG, "--expect", "RoCE "], {}),
    ("telemetry nccl-log", "expect-two", ["telemetry", "nccl-log", NCCL_LOG, "--expect", "ib,roce"], {}),
    ("telemetry nccl-log", "expect-blank", ["telemetry", "nccl-log", NCCL_LOG, "--expect", " "], {}),
    ("telemetry nccl-log", "huge-line", ["telemetry", "nccl-log", "{root}/r5-huge-line.log"], {}),
    ("telemetry nccl-log", "json-dev-full", ["telemetry", "nccl-log", NCCL_LOG, "--json", "/dev/full"], {}),
    ("telemetry nccl-log", "many-lines", ["telemetry", "nccl-log", "{root}/r5-many.log", "--expect", "ib"], {}),
    ("telemetry project", "json-dev-full", [*P, "--rate", "1gbit", "--json", "/dev/full"], {}),
    ("telemetry mllog", "out-dev-full", ["telemetry", "mllog", "{timed}", "--no-check", "--out", "/dev/full"], {}),
    ("telemetry nccl-log", "json-dir", ["telemetry", "nccl-log", NCCL_LOG, "--json", "{root}/empty"], {}),
    # launch.linktest / launch.stage options
    ("launch.linktest", "port-huge", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                      "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--port", "70000"], {}),
    ("launch.linktest", "exec-no-host", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                         "--server-addr", "10.0.0.1", "--exec", "ssh", "--output", "{root}/lt5"], {}),
    ("launch.linktest", "server-is-client", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "a",
                                             "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5"], {}),
    ("launch.linktest", "server-addr-bad", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                            "--server-addr", "10.0.0.300", "--exec", "true {{host}}", "--output", "{root}/lt5"], {}),
    ("launch.linktest", "size-negative", ["launch.linktest", "--tool", "ib_write_bw", "--server", "a", "--client",
                                          "b", "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--devices",
                                          "mlx5_0", "--size", "-1"], {}),
    ("launch.linktest", "qps-zero", ["launch.linktest", "--tool", "ib_write_bw", "--server", "a", "--client", "b",
                                     "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--devices", "mlx5_0",
                                     "--qps", "0"], {}),
    ("launch.linktest", "devices-empty-item", ["launch.linktest", "--tool", "ib_write_bw", "--server", "a",
                                               "--client", "b", "--server-addr", "10.0.0.1", "--exec",
                                               "true {{host}}", "--output", "{root}/lt5", "--devices",
                                               "mlx5_0,,mlx5_1"], {}),
    ("launch.linktest", "timeout-nan", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                        "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--timeout-s",
                                        "nan"], {}),
    ("launch.linktest", "duration-inf", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                         "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--duration",
                                         "inf"], {}),
    ("launch.linktest", "line-rate-bad", ["launch.linktest", "--tool", "iperf3", "--server", "a", "--client", "b",
                                          "--server-addr", "10.0.0.1", "--exec", "true {{host}}", "--output", "{root}/lt5", "--line-rate",
                                          "fast"], {}),
    ("launch.stage", "jobs-huge", ["launch.stage", TINY, "--to", "{root}/s1", "--jobs", "100000000"], {}),
    ("launch.stage", "jobs-word", ["launch.stage", TINY, "--to", "{root}/s2", "--jobs", "many"], {}),
    ("launch.stage", "verify-file", ["launch.stage", "--verify", "{root}/notes.txt"], {}),
    ("launch.stage", "check-layout-file", ["launch.stage", "--check-layout", "bert", "{root}/notes.txt"], {}),
    ("launch.stage", "recipe-unicode-missing", ["launch.stage", "{r5odd}/nope.yaml", "--to", "{root}/s3"], {}),
    # trainer: sweep keys of today, layouts that do not divide --world-size, data paths
    ("trainer", "sweep-step-min-above-max", [*SW, "sweep.step_bytes=1M", "sweep.min_bytes=1G", "sweep.max_bytes=1K",
                                             *DRY], {}),
    ("trainer", "sweep-step-above-range", [*SW, "sweep.step_bytes=1G", "sweep.min_bytes=8", "sweep.max_bytes=1M",
                                           *DRY], {}),
    ("trainer", "sweep-power-sizes-linear", [*SW, "sweep.step_bytes=1M", "sweep.min_bytes=1M", "sweep.max_bytes=8M",
                                             "sweep.power_sizes=[1536K]", "sweep.min_seconds_per_size=1", *DRY], {}),
    ("trainer", "sweep-power-sizes-word", [*SW, "sweep.power_sizes=[big]", "sweep.min_seconds_per_size=1", *DRY], {}),
    ("trainer", "sweep-power-sizes-string", [*SW, "sweep.power_sizes=1M", *DRY], {}),
    ("trainer", "sweep-step-negative", [*SW, "sweep.step_bytes=-1M", *DRY], {}),
    ("trainer", "sweep-step-float", [*SW, "sweep.step_bytes=1.5", *DRY], {}),
    ("trainer", "sweep-factor-float", [*SW, "sweep.factor=1.5", *DRY], {}),
    ("trainer", "tp-not-dividing-world", [*T, "parallel.tp=2", "--world-size", "3", *DRY], {}),
    ("trainer", "pp-not-dividing-world", [*T, "parallel.pp=2", "--world-size", "3", *DRY], {}),
    ("trainer", "dp-times-tp-not-world", [*T, "parallel.dp=2", "parallel.tp=2", "--world-size", "2", *DRY], {}),
    ("trainer", "pp-above-world", [*T, "parallel.pp=2", "--world-size", "1", *DRY], {}),
    ("trainer", "tp-above-world", [*T, "parallel.tp=4", "--world-size", "2", *DRY], {}),
    ("trainer", "dataset-tilde-missing", [*T, "data.dataset=~/r5-no-such/d.jsonl", *RUN("dataset-tilde-missing")], {}),
    ("trainer", "dataset-env-var-unset", [*T, "data.dataset=$R5_UNSET_VAR/d.jsonl", *RUN("dataset-env-var-unset")], {}),
    ("trainer", "dataset-unicode-space-missing", [*T, "data.dataset={r5odd}/nope.jsonl", *RUN("dataset-unicode-space-missing")], {}),
    ("trainer", "dataset-relative-other-cwd", [*T, "data.dataset=../recipes/assets/nope.jsonl", *RUN("dataset-relative-other-cwd")], {}),
    ("trainer", "tokenizer-tilde-missing", [*T, "model.tokenizer=~/r5-no-such-tok", *RUN("tokenizer-tilde-missing")], {}),
    ("trainer", "dataset-newline", [*T, "data.dataset={r5odd}/d.jsonl\nx", *RUN("dataset-newline")], {}),
]
CASES += [("launch.evaluate", name, ["launch.evaluate", "{root}/eval5-" + name + ".yaml", "--dry-run"], {})
          for name in EVAL]

# Cases that exit 0 on purpose, and why (counted apart: neither handled nor broken)
BY_DESIGN: dict[tuple[str, str], str] = {
    ("telemetry project", "baseline-one-step"): "projected; the line says its 10-90% spread is unknown (needs 3 "
                                                "timed steps) and the interval holds only the link's efficiency",
    ("telemetry project", "baseline-sweep"): "a run with timed steps is projected whatever its workload (a sweep "
                                             "without steps is refused: run-no-metrics)",
    ("telemetry nccl-log", "huge-line"): "one 40 MB line naming NCCL is read (no hang, no memory error); every "
                                         "field is unknown, each with its reason",
    ("telemetry nccl-log", "many-lines"): "exit 3, the documented status of an --expect the log does not "
                                          "establish (400,000 lines read; no device link layer named)",
    ("launch.stage", "jobs-huge"): "threads are started per file to hash, not per --jobs (a large value is a cap)",
    ("launch.evaluate", "run-dir-file"): "an incomplete run's place is set aside as rN.attempt-1, as for any "
                                         "unfinished attempt, and the run is redone",
    ("launch.evaluate", "half-written-json"): "evaluation.json is rewritten from the runs at the end",
    ("launch.evaluate", "out-tilde"): "~ expands to the home directory (it was a directory named '~' under the "
                                      "working directory)",
    ("launch.evaluate", "out-unicode"): "a space and non-ASCII letters are a valid path",
}
