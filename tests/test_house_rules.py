"""The house rules (docs/architecture.md), in the fast tier: no import circle, no private name imported
across modules, no file over 800 lines, no module basename used twice in trainer/, telemetry/ and launch/,
the run directory's names through telemetry/rundir.py's constants.
Each failure lists the offenders; `python tools/house_rules.py` prints the same numbers."""
from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("house_rules", REPO / "tools" / "house_rules.py")
rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules)


def _say(what: str, items: list[str], fix: str) -> str:
    return f"{len(items)} {what} ({fix}):\n  " + "\n  ".join(items)


def test_no_import_circle():
    graph, _ = rules.import_graph()
    found = [" <-> ".join(c) for c in rules.circles(graph)]
    assert not found, _say("import circle(s)", found, "move what both need to the module they share, or lower")


def test_no_private_name_imported_across_modules():
    _, private = rules.import_graph()
    assert not private, _say("private name(s) imported from another module", private,
                             "make the name public, or move it to where it is used")


def test_no_file_over_the_size_limit():
    found = rules.long_files()
    assert not found, _say("file(s) over the limit", found, "split the module by concern")


def test_no_module_basename_twice():
    found = rules.twin_basenames()
    assert not found, _say("module basename(s) used twice", found, "name each module after its own concern")


@pytest.mark.parametrize("source,expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_circle_finder(source, expected):
    assert rules.circles(source) == expected


def test_the_scan_sees_private_and_relative_imports(tmp_path):
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _hidden():\n    pass\n")
    (pkg / "b.py").write_text("from .a import _hidden\n")
    graph, private = rules.import_graph(tmp_path)
    assert graph["trainer.b"] == {"trainer.a"} and private == ["trainer/b.py:1 imports trainer.a._hidden"]


# Field names with an underscore still written as literals: each is another format's key that shares the name
# (nccl-tests JSON and iperf3 start/end/duration, an engine's own metric name, the sweep's own per-rank energy, the recipe's recipe_path, an
# evaluation cell's exit code and duration, a traced call's duration), none a run-directory record. 375 before
# the constants came (42 modules).
FIELD_LITERALS_HELD = 38


def test_run_directory_names_go_through_the_schema_constants():
    fields, files = rules.rundir_literals()
    assert not files, _say("run-directory file name(s) as literals", files,
                           "use telemetry.rundir's RUN_JSON, METRICS, RANK_TELEMETRY, RANKS, LOGS, ... and rank_files")
    assert len(fields) <= FIELD_LITERALS_HELD, _say(
        f"run-directory field name literal(s), more than the {FIELD_LITERALS_HELD} held", fields,
        "read and write the run directory's fields through telemetry.rundir.StepKey / RunKey")


def test_the_literal_scan_sees_fields_files_and_folders(tmp_path):
    (tmp_path / "telemetry").mkdir()
    (tmp_path / "telemetry" / "rundir.py").write_text(
        'RUN_JSON, METRICS = "run.json", "metrics.jsonl"\nRANKS, LOGS = "ranks", "logs"\n'
        'RANK_TELEMETRY = "telemetry.jsonl"\n'
        'STEP_FIELDS: tuple = (Field(("step",), "s"), Field(("step_time_s", "comm_time_s"), "t"))\n'
        'RUN_FIELDS: tuple = (Field(("exit_code",), "e"),)\n')
    (tmp_path / "telemetry" / "reader.py").write_text(
        '"""Reads step_time_s from run.json."""\nimport os\n'
        'def f(r, d):\n'
        '    x = r["step"], r["step_time_s"], os.path.join(d, "run.json"), os.path.join(d, "logs")\n'
        '    y = f"{d}/rank{0:05d}.telemetry.jsonl", "logs", f"no run.json in {d}"\n'
        '    return r.get("exit_code")\n')
    fields, files = rules.rundir_literals(tmp_path)
    assert fields == ["telemetry/reader.py:4 'step_time_s'", "telemetry/reader.py:6 'exit_code'"]
    assert sorted(files) == ["telemetry/reader.py:4 'logs'", "telemetry/reader.py:4 'run.json'",
                             "telemetry/reader.py:5 '.telemetry.jsonl'"]
