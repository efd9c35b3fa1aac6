"""Import directions: launch -> trainer -> telemetry. telemetry is a library for any training loop, so it
imports neither trainer nor launch; trainer does not import launch."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

FORBIDDEN = {"telemetry": {"trainer", "launch"}, "trainer": {"launch"}}


def imported_packages(path: Path) -> set[tuple[int, str]]:
    """Top-level package of every absolute import in the file, anywhere in it (function bodies too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {(node.lineno, a.name.split(".")[0]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add((node.lineno, node.module.split(".")[0]))
    return out


def test_packages_import_only_downwards():
    wrong = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((REPO / package).rglob("*.py")):
            for line, name in sorted(imported_packages(path)):
                if name in banned:
                    wrong.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from launch.lab import parse_rate\n    import trainer.hooks\n")
    assert {n for _, n in imported_packages(f)} == {"launch", "trainer"}
