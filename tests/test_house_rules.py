"""The house rules (docs/architecture.md), in the fast tier: no import circle, no private name imported
across modules, no file over 800 lines, no module basename used twice in trainer/, telemetry/ and launch/.
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
