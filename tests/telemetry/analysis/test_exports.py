"""telemetry.export: each output read back with the library that reads it (2 gloo ranks, tiny recipe)."""
from __future__ import annotations

import glob
import json
import os
import struct
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.conftest import FAST, REPO, run_cli

ALL = "telemetry.export=[tensorboard,parquet,trace,wandb]"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "run"
    # an address nothing listens on: offline mode must never need it
    res = run_cli(out, *FAST, ALL, nproc=2, timeout=300, env={"WANDB_BASE_URL": "http://127.0.0.1:9"})
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
def test_manifest_lists_every_kind_written(run):
    manifest = json.loads((run.out / "exports" / "manifest.json").read_text())
    assert set(manifest) == {"tensorboard", "parquet", "trace", "wandb"}
    assert all(m["path"] and not m.get("error") for m in manifest.values()), manifest


@pytest.mark.integration
def test_tensorboard_scalars_read_back(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run.out / "exports" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("train/loss", "train/lr", "perf/step_time_s", "perf/samples_per_s", "perf/tokens_per_s",
                "comm/comm_time_s", "comm/all_reduce/time_s", "comm/all_reduce/bytes", "comm/all_reduce/busbw_GBps"):
        assert tag in tags, (tag, sorted(tags))
    metrics = run.metrics()
    loss = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert sorted(loss) == [m["step"] for m in metrics]
    for m in metrics:
        assert loss[m["step"]] == pytest.approx(m["loss"], rel=1e-6)
    byts = {e.step: e.value for e in acc.Scalars("comm/all_reduce/bytes")}
    assert byts[1] == metrics[0]["comm"]["all_reduce"]["bytes"] > 0
    # no GPU here: energy is unknown, so it is absent rather than written as 0
    assert all(m.get("job_gpu_energy_j") is None for m in metrics) and "energy/job_gpu_energy_j" not in tags


def _wandb_records(path):
    """The .wandb file: a 7-byte header, then LevelDB-log blocks of 32 KiB holding protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        buf += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # FULL or LAST
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


@pytest.mark.integration
def test_wandb_offline_run_read_back(run):
    files = glob.glob(str(run.out / "exports" / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, files
    records = _wandb_records(files[0])
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert runs and runs[0].project == json.loads((run.out / "run.json").read_text())["name"]
    assert runs[0].display_name == "run"
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            history[row["_step"]] = row
    metrics = run.metrics()
    assert sorted(history) == [m["step"] for m in metrics]
    for m in metrics:
        assert history[m["step"]]["train/loss"] == pytest.approx(m["loss"], rel=1e-6)
        assert history[m["step"]]["comm/all_reduce/bytes"] == m["comm"]["all_reduce"]["bytes"]


@pytest.mark.integration
def test_parquet_tables_read_back(run):
    import pyarrow.parquet as pq

    steps = pq.read_table(run.out / "exports" / "steps.parquet").to_pylist()
    metrics = run.metrics()
    assert [r["step"] for r in steps] == [m["step"] for m in metrics]
    for row, m in zip(steps, metrics):
        assert row["loss"] == pytest.approx(m["loss"]) and row["run"] == "run"
        assert row["job_gpu_energy_j"] is None  # unknown stays null
        assert row["exposed_comm_s"] == pytest.approx(m["exposed_comm_s"]) and row["exposed_comm_s"] <= row["comm_time_s"]
        assert row["step_time_s_max_rank"] in (0, 1)
    coll = pq.read_table(run.out / "exports" / "collectives.parquet").to_pylist()
    assert {r["rank"] for r in coll} == {0, 1}
    per_rank = defaultdict(int)
    for r in coll:
        if r["op"] == "all_reduce":
            per_rank[(r["rank"], r["step"])] += r["bytes"]
    assert per_rank[(0, 1)] == metrics[0]["comm"]["all_reduce"]["bytes"]
    calls = pq.read_table(run.out / "exports" / "calls.parquet")
    assert calls.num_rows > 0 and set(calls.column("rank").to_pylist()) == {0, 1}


# The trace-event format (Chrome's "Trace Event Format" document): the subset the exporter writes.
TRACE_SCHEMA = {
    "type": "object", "required": ["traceEvents"],
    "properties": {"displayTimeUnit": {"enum": ["ms", "ns"]}, "traceEvents": {"type": "array", "items": {
        "type": "object", "required": ["ph", "name", "pid", "tid"],
        "properties": {"ph": {"enum": ["X", "i", "M"]}, "name": {"type": "string"},
                       "pid": {"type": "integer"}, "tid": {"type": "integer"}, "cat": {"type": "string"},
                       "ts": {"type": "number"}, "dur": {"type": "number", "minimum": 0},
                       "s": {"enum": ["g", "p", "t"]}, "args": {"type": "object"}},
        "allOf": [{"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur"]}},
                  {"if": {"properties": {"ph": {"const": "i"}}}, "then": {"required": ["ts"]}},
                  {"if": {"properties": {"ph": {"const": "M"}}},
                   "then": {"properties": {"name": {"enum": ["process_name", "process_sort_index", "thread_name"]}},
                            "required": ["args"]}}]}}}}


@pytest.mark.integration
def test_trace_is_valid_and_shows_ranks_phases_and_collectives(run):
    import jsonschema

    trace = json.loads((run.out / "exports" / "trace.json").read_text())
    jsonschema.validate(trace, TRACE_SCHEMA)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}  # one process (track group) per rank
    for rank in (0, 1):
        mine = [e for e in slices if e["pid"] == rank]
        assert {e["name"] for e in mine if e["cat"] == "step"} == {f"step {s}" for s in range(1, 7)}
        assert {"forward", "backward", "optimizer"} <= {e["name"] for e in mine if e["cat"] == "phase"}
        coll = [e for e in mine if e["cat"] == "collective"]
        assert coll and all(e["args"]["bytes"] >= 0 and "busbw_GBps" in e["args"] for e in coll)
        assert any(e["name"] == "all_reduce" and e["args"]["busbw_GBps"] for e in coll)
    # slices on one thread must nest (viewers drop or mis-draw the rest)
    by_thread = defaultdict(list)
    for e in slices:
        by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():
        stack = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            # times are microseconds at nanosecond resolution: an end and a start within 1 ns are one instant
            # (a phase ending at 32115.221000000005 as its sum ts + dur, the next starting at 32115.221)
            while stack and stack[-1] <= e["ts"] + 1e-3:
                stack.pop()
            assert not stack or e["ts"] + e["dur"] <= stack[-1] + 1e-3, e
            stack.append(e["ts"] + e["dur"])


@pytest.mark.integration
def test_trace_collectives_match_the_step_records(run):
    """Every call in the trace is one the step records counted: same bytes per rank and step."""
    trace = json.loads((run.out / "exports" / "trace.json").read_text())
    traced = defaultdict(int)
    for e in trace["traceEvents"]:
        if e.get("cat") == "collective":
            traced[(e["pid"], e["args"]["step"], e["name"])] += e["args"]["bytes"]
    for path in sorted(glob.glob(str(run.out / "ranks" / "rank*.telemetry.jsonl"))):
        rank = int(os.path.basename(path)[4:9])
        for line in open(path):
            rec = json.loads(line)
            for op, s in rec["comm"].items():
                assert traced[(rank, rec["step"], op)] == s["bytes"], (rank, rec["step"], op)


@pytest.mark.integration
def test_cli_export_of_an_existing_run(run, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "telemetry", "export", str(run.out), "--to", "parquet,trace",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "steps.parquet").exists() and (tmp_path / "trace.json").exists()
    bad = subprocess.run([sys.executable, "-m", "telemetry", "export", str(run.out), "--to", "csv"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "allowed: tensorboard, wandb, parquet, trace" in bad.stderr


def test_events_file_only_when_trace_is_exported(tmp_path):
    from telemetry.capture.session import Telemetry, TelemetrySettings

    for export, expected in ((None, False), (["parquet"], False), (["trace"], True)):
        d = tmp_path / str(export)
        tel = Telemetry(TelemetrySettings(export=export, cross_rank_every=0), str(d))
        tel.start()
        tel.start_step(1)
        tel.mark("backward_begin")
        tel.end_step(1, 0.01)
        tel.close()
        assert (d / "ranks" / "rank00000.events.jsonl").exists() is expected, export


def test_recipe_rejects_an_unknown_export():
    from trainer.config import RecipeError, load_recipe

    with pytest.raises(RecipeError, match=r"telemetry.export: got csv; allowed: tensorboard, wandb, parquet, trace"):
        load_recipe(os.path.join(REPO, "recipes", "tiny_llama_lora.yaml"), ["telemetry.export=[parquet,csv]"])


def test_docs_list_every_parquet_column():
    """docs/telemetry.md's Parquet tables name exactly the columns the files have."""
    import re

    from telemetry.analysis.exports.parquet import _group_schema, _schemas

    text = open(os.path.join(REPO, "docs", "telemetry.md"), encoding="utf-8").read()
    section = text.split("### Parquet exports", 1)[1]
    for name, schema in zip(("steps", "collectives", "calls", "groups"), (*_schemas(), _group_schema())):
        table = section.split(f"`{name}.parquet`", 1)[1].split("\n\n", 2)[1]
        documented = {"run", "run_name"} | set(re.findall(r"`([A-Za-z_]+)`", table))  # _GBps: a unit
        assert set(schema.names) <= documented, (name, set(schema.names) - documented)


def test_trace_puts_overlapping_calls_on_separate_lanes():
    """Async calls overlap (DDP buckets during backward); slices on one thread must nest, so the second
    goes to another lane. An untimed call is a mark, not a slice of made-up length."""
    import jsonschema

    from telemetry.analysis.exports.trace import build

    line = {"step": 1, "t0": 100.0, "t1": 101.0,
            "marks": [["backward_begin", 100.2], ["backward_end", 100.4], ["backward_begin", 100.5],
                      ["backward_end", 100.7], ["optimizer_begin", 100.8], ["optimizer_end", 100.9]],
            "calls": [["all_reduce", 100.3, 0.3, 1000, 2, "ddp"], ["all_reduce", 100.35, 0.1, 1000, 2, "ddp"],
                      ["all_reduce", 100.65, 0.05, 1000, 2, "ddp"], ["broadcast", 100.95, None, 8, 2, "dist"]]}
    trace = build({0: [line]}, "t")
    jsonschema.validate(trace, TRACE_SCHEMA)
    ev = trace["traceEvents"]
    phases = [(e["name"], e["ts"], e["dur"]) for e in ev if e.get("cat") == "phase"]
    assert [p[0] for p in phases] == ["forward", "backward", "forward", "backward", "optimizer"]
    assert phases[0][1] == 0 and phases[0][2] == pytest.approx(0.2e6)  # from the step's start
    assert phases[2][1] == pytest.approx(0.4e6)  # the second micro-batch's forward starts at the backward's end
    coll = [e for e in ev if e.get("cat") == "collective" and e["ph"] == "X"]
    assert [e["tid"] for e in coll] == [1, 2, 1]  # the third fits back on the first lane
    assert coll[0]["args"]["busbw_GBps"] == pytest.approx(1000 * 1.0 / 0.3 / 1e9)  # all_reduce, n=2: 2(n-1)/n
    untimed = [e for e in ev if e.get("cat") == "collective" and e["ph"] == "i"]
    assert len(untimed) == 1 and untimed[0]["args"]["untimed"] and untimed[0]["args"]["busbw_GBps"] is None
