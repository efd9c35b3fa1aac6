"""telemetry/rundir.py owns the run directory: its document is generated from it, every field a run writes
is declared there, and its writer keeps the contract (atomic run.json, the disk reserve, set-aside lines)."""
from __future__ import annotations

import json
import os

import pytest

from tests.conftest import REPO
from telemetry import rundir
from telemetry.rundir import RUN_FIELDS, STEP_FIELDS, RunDir, field_names, read_jsonl, upgrade_record


def test_the_run_directory_document_is_generated_from_the_module():
    doc = (REPO / "docs" / "run-directory.md").read_text(encoding="utf-8")
    assert doc == rundir.markdown(), "docs/run-directory.md is stale: python -m telemetry.rundir > docs/run-directory.md"


def test_every_field_is_declared_once():
    for fields in (STEP_FIELDS, RUN_FIELDS):
        names = [n for f in fields for n in f.names]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
        assert all(f.meaning for f in fields)


def test_the_key_constants_are_the_declared_fields_and_drift_fails_at_import(monkeypatch):
    assert rundir.key_names(rundir.StepKey) == field_names(STEP_FIELDS)
    assert rundir.key_names(rundir.RunKey) == field_names(RUN_FIELDS)
    assert rundir.StepKey.STEP_TIME_S == "step_time_s" and rundir.RunKey.EXIT_CODE == "exit_code"
    monkeypatch.setattr(rundir, "STEP_FIELDS", STEP_FIELDS + (rundir.Field(("new_field_s",), "added to the table only"),))
    with pytest.raises(AssertionError, match="new_field_s"):
        rundir.check_keys()
    monkeypatch.setattr(rundir, "STEP_FIELDS", STEP_FIELDS)
    monkeypatch.setattr(rundir.RunKey, "EXIT_CODE", "exit_status")  # a constant whose value left its name
    with pytest.raises(AssertionError):
        rundir.check_keys()


def test_rank_files_are_found_in_rank_order(tmp_path):
    for rank in (10, 2):
        path = tmp_path / rundir.rank_file(rank, rundir.RANK_TELEMETRY)
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
    (tmp_path / rundir.RANKS / "rank00003.final.json").write_text("{}")
    assert [os.path.basename(p) for p in rundir.rank_files(str(tmp_path), rundir.RANK_TELEMETRY)] == [
        "rank00002.telemetry.jsonl", "rank00010.telemetry.jsonl"]


def undeclared(records: list[dict], fields) -> set[str]:
    return {k for r in records for k in r} - field_names(fields)


def test_a_recorded_run_uses_only_declared_fields(tmp_path):
    """A run directory as our trainer writes it (one written by the 2-rank demo, kept as a fixture of its
    keys): every key of metrics.jsonl and run.json is in the schema, and an unknown one is caught."""
    keys = json.loads((REPO / "tests" / "telemetry" / "fixtures" / "run_keys.json").read_text())
    assert not undeclared([dict.fromkeys(keys["metrics"])], STEP_FIELDS)
    assert not undeclared([dict.fromkeys(keys["run_json"])], RUN_FIELDS)
    assert undeclared([{"step": 1, "stpe_time_s": 0.1}], STEP_FIELDS) == {"stpe_time_s"}


def test_writer_is_atomic_reserves_space_and_sets_aside_lines_past_a_resume(tmp_path):
    d = RunDir(str(tmp_path / "run"), 0)
    d.create()
    assert os.path.getsize(d.reserve_path) == rundir.RESERVE_BYTES
    d.update(status="running")
    assert json.loads(open(d.run_json).read()) == {"status": "running"}
    assert not [p for p in os.listdir(d.path) if ".tmp" in p]
    d.open_metrics(0)
    for step in (1, 2, 3):
        d.write_metrics({"step": step, "loss": 1.0})
    d.close()
    assert not os.path.exists(d.reserve_path)
    again = RunDir(d.path, 0)
    again.open_metrics(resume_step=2)
    again.close()
    assert [r["step"] for r in read_jsonl(d.metrics_path)] == [1, 2]
    assert [r["step"] for r in read_jsonl(os.path.join(d.logs, "metrics.before-resume-1.jsonl"))] == [1, 2, 3]


def test_other_ranks_never_write_run_json(tmp_path):
    d = RunDir(str(tmp_path), 1)
    d.create()
    d.update(status="running")
    d.open_metrics(0)
    d.write_metrics({"step": 1})
    assert not os.path.exists(d.run_json) and not os.path.exists(d.metrics_path)


def test_a_truncated_last_line_is_skipped_and_old_names_read_as_new(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "energy_j": 5, "comm": {"all_reduce": {"busbw_gbps": 1.5}}}\n{"step": 2, "lo')
    rows = [upgrade_record(r) for r in read_jsonl(str(p))]
    assert rows == [{"step": 1, "job_gpu_energy_j": 5, "comm": {"all_reduce": {"busbw_GBps": 1.5}}}]


def test_damaged_lines_are_counted_a_cut_last_line_is_not(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\n[1, 2]\n{"step": 2, "lo\n\n\xff\n{"step": 3}\n{"step": 4, "lo')
    damaged: list[int] = []
    assert read_jsonl(str(p), damaged) == [{"step": 1}, {"step": 3}]
    assert damaged == [2, 3, 5]  # a list, a torn line in the middle, a bad byte; not the blank line, not the end


@pytest.mark.parametrize("writer", ["trainer.run_writer", "telemetry.integrations.recorder"])
def test_every_writer_goes_through_the_owner(writer):
    """No second atomic writer or metrics stream: the trainer and the recorder use telemetry.rundir."""
    import importlib
    import inspect
    src = inspect.getsource(importlib.import_module(writer))
    assert "os.replace" not in src and "metrics.jsonl\", \"a\"" not in src and "telemetry.rundir import" in src


@pytest.mark.parametrize("damage", [b'{"name": "x", "sta', b"[1, 2]", b"\xff\xfe\x00", b'"text"'])
def test_a_damaged_run_json_is_set_aside_not_lost(tmp_path, damage, capsys):
    """An earlier attempt's run.json that is not a JSON object: the next attempt starts a new record, and
    the damaged bytes move to logs/ (a resume never overwrites what it could not read)."""
    rd = RunDir(str(tmp_path), rank=0)
    rd.create()
    (tmp_path / "run.json").write_bytes(damage)
    assert rd.load_previous() == {}
    kept = list((tmp_path / "logs").glob("run.damaged-*.json"))
    assert len(kept) == 1 and kept[0].read_bytes() == damage and not (tmp_path / "run.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and str(kept[0]) in err[0]


def test_other_ranks_leave_a_damaged_run_json_to_rank_0(tmp_path):
    rd = RunDir(str(tmp_path), rank=1)
    rd.create()
    (tmp_path / "run.json").write_text("[]")
    assert rd.load_previous() == {} and (tmp_path / "run.json").read_text() == "[]"


def test_attempts_that_are_not_a_list_of_records_are_dropped(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"status": "completed", "attempts": "three"}))
    assert RunDir(str(tmp_path), rank=0).load_previous()["attempts"] == []


def test_lines_that_are_not_objects_or_not_utf8_are_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n[1]\n\xff\xfe\n"x"\n{"step": 2}\n{"step": 3, "lo')
    assert read_jsonl(str(path)) == [{"step": 1}, {"step": 2}]


def test_the_last_attempts_record_is_kept_before_a_new_attempt_rewrites_it(tmp_path):
    """A rerun that fails at once (bad input) rewrites run.json; the completed attempt's summary stays."""
    record = {"status": "completed", "attempt": 2, "final": {"loss": 1.5}, "throughput": {"tokens_per_s": 9.0}}
    (tmp_path / "run.json").write_text(json.dumps(record))
    rd = RunDir(str(tmp_path), rank=0)
    rd.create()
    assert rd.keep_previous() == str(tmp_path / "logs" / "run.attempt-2.json")
    rd.update(status="failed", exit_code=2)
    assert json.loads((tmp_path / "logs" / "run.attempt-2.json").read_text()) == record
    # without resume every attempt is attempt 2 again here: a second failed rerun keeps its own copy and the
    # completed run's stays
    (tmp_path / "run.json").write_text(json.dumps({"status": "failed", "attempt": 2}))
    assert rd.keep_previous() == str(tmp_path / "logs" / "run.attempt-2.1.json")
    assert json.loads((tmp_path / "logs" / "run.attempt-2.json").read_text()) == record
    assert RunDir(str(tmp_path / "fresh"), rank=0).keep_previous() is None
    assert RunDir(str(tmp_path), rank=1).keep_previous() is None


def test_a_step_record_is_shaped_as_a_run_writes_it():
    """The nested fields too: the readers walk into them (comm tables, ranks spreads), so a line with another
    shape is damage, like a string where a number goes."""
    from telemetry.rundir import is_step_record
    good = {"step": 3, "step_time_s": 1.0, "profiled": True,
            "comm": {"all_reduce": {"count": 2, "bytes": 8, "time_s": None, "untimed": 0, "busbw_GBps": 0.1}},
            "comm_groups": {"dp": {"dim": "dp", "ranks": [0, 1], "bytes": 8, "by_op": {"all_reduce": {"bytes": 8}}}},
            "ranks": {"step_time_s": {"min": 0.9, "mean": 1.0, "max": 1.1, "max_rank": 1, "ranks": 2, "median": None},
                      "comm_time_s_by_op": {"all_reduce": {"min": 0.2, "max": 0.3}}},
            "exposed": {"window_s": 1.0}, "host": None}
    assert is_step_record(good)
    for damage in ({"step": None}, {"step": 1 << 63}, {"comm": [1]}, {"comm": {"all_reduce": 1}},
                   {"comm": {"all_reduce": {"bytes": -1}}}, {"comm": {"all_reduce": {"time_s": "x"}}},
                   {"comm_groups": {"dp": {"by_op": {"all_reduce": {"count": float("nan")}}}}},
                   {"ranks": "x"}, {"ranks": {"step_time_s": [1]}}, {"ranks": {"comm_time_s_by_op": {"x": {"min": "a"}}}},
                   {"exposed": 0.5}, {"comm_health": []}, {"tokens": 1 << 70}, {"step_time_s": 0.0},
                   {"step_time_s": -1.0}):
        assert not is_step_record({**good, **damage}), damage


def test_recorded_by_run_names_the_runs_own_files(tmp_path):
    from telemetry.rundir import recorded_by_run
    run = tmp_path / "run"
    for path in ("run.json", "metrics.jsonl", "ranks/rank00000.telemetry.jsonl", "checkpoints/latest.json"):
        assert recorded_by_run(str(run / path), str(run)), path
    for path in (run / "projection.json", run / "report" / "report.md", tmp_path / "run.json", run):
        assert not recorded_by_run(str(path), str(run)), path


def test_a_follower_reads_new_lines_waits_for_a_torn_one_and_rereads_a_replaced_file(tmp_path):
    from telemetry.rundir import JsonlFollower

    path = tmp_path / "sweep.jsonl"
    follower = JsonlFollower(str(path), from_end=False)
    assert follower.new() == []  # not written yet
    path.write_text('{"a": 1}\n{"a": 2}\n{"a"')
    assert follower.new() == [{"a": 1}, {"a": 2}]
    with open(path, "a") as f:
        f.write(': 3}\n')
    assert follower.new() == [{"a": 3}]
    # renamed over by a LONGER file (a sweep's end rewrites its lines with one field more): read whole from its
    # start, not from the old offset (which fell in the middle of a line and lost or garbled the lines after)
    (tmp_path / "new").write_text("".join(f'{{"a": {i}, "transport": "loopback"}}\n' for i in (1, 2, 3)))
    os.replace(tmp_path / "new", path)
    assert [x["a"] for x in follower.new()] == [1, 2, 3]
    assert follower.new() == []
    path.write_text('{"b": 1}\n')  # truncated and shorter (a resume set the file aside): read whole too
    assert follower.new() == [{"b": 1}]


def test_a_follower_reads_on_where_a_new_inode_holds_what_it_read(tmp_path):
    # a file whose inode number changed but whose content continues what was read (a FUSE mount without stable
    # inode numbers, sshfs without -o use_ino, numbers a file again once the kernel forgot it; a copy renamed over
    # with lines added): only the added lines are new. Read whole, a live exporter counted every step again and
    # watch fed every line twice
    from telemetry.rundir import JsonlFollower

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"st')
    follower = JsonlFollower(str(path), from_end=False)
    assert [x["step"] for x in follower.new()] == [1, 2]
    (tmp_path / "copy").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4}\n')
    os.replace(tmp_path / "copy", path)
    assert [x["step"] for x in follower.new()] == [3, 4]
    # a new file that does not continue it (the sweep's end rewrite, a line with one field more) is read whole
    (tmp_path / "copy").write_text('{"step": 1, "t": 0}\n{"step": 2, "t": 0}\n{"step": 3, "t": 0}\n{"step": 4}\n{"step": 5}\n')
    os.replace(tmp_path / "copy", path)
    assert [x["step"] for x in follower.new()] == [1, 2, 3, 4, 5]
