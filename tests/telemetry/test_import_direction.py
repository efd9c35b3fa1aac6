"""Import directions: launch -> trainer -> telemetry. telemetry is a library for any training loop, so it
imports neither trainer nor launch; trainer does not import launch."""
from __future__ import annotations

import pytest

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
    f.write_text("def g():\n    from launch.lab import parse_rate\n    import trainer.hook_list\n")
    assert {n for _, n in imported_packages(f)} == {"launch", "trainer"}


# Inside telemetry, rooms by lifetime: capture runs in the job every step, integrations drive it from other
# loops, analysis reads run directories offline. The top-level modules (formulas, stragglers) are shared
# definitions every room may use; they import no room.
ROOMS_FORBIDDEN = {"capture": {"analysis", "integrations"}, "analysis": {"capture", "integrations"},
                   "integrations": set(), "": {"capture", "analysis", "integrations"}}


def telemetry_rooms(path: Path) -> set[tuple[int, str]]:
    """The telemetry subpackage (room) of every import of telemetry.* in the file, relative ones included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: telemetry uses absolute imports (rooms are packages)"
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "telemetry" and len(parts) > 1 and parts[1] in ROOMS_FORBIDDEN:
                out.add((node.lineno, parts[1]))
    return out


def room_of(path: Path) -> str:
    rel = path.relative_to(REPO / "telemetry").parts
    return rel[0] if len(rel) > 1 else ""


def test_telemetry_rooms_import_only_what_their_lifetime_allows():
    wrong = []
    for path in sorted((REPO / "telemetry").rglob("*.py")):
        room = room_of(path)
        if path.name == "__main__.py" and room == "":
            continue  # python -m telemetry: the command line over analysis
        for line, target in sorted(telemetry_rooms(path)):
            if target in ROOMS_FORBIDDEN[room]:
                wrong.append(f"{path.relative_to(REPO)}:{line} ({room or 'top level'}) imports telemetry.{target}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.integration
def test_analysis_imports_no_torch():
    """Reports and comparisons run on a laptop without torch: importing every analysis module (and the
    command line) must not import it."""
    import subprocess
    import sys
    modules = sorted("telemetry." + ".".join(p.relative_to(REPO / "telemetry").with_suffix("").parts)
                     for p in (REPO / "telemetry" / "analysis").rglob("*.py"))
    modules = [m.removesuffix(".__init__") for m in modules] + ["telemetry.__main__", "telemetry.stragglers",
                                                                "telemetry.formulas"]
    code = ("import sys\nimport telemetry\ntelemetry.load_run\n" + "".join(f"import {m}\n" for m in modules) +
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\nprint(bad[:3])\n"
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"an analysis module imports torch: {proc.stdout}{proc.stderr[-2000:]}"


def test_the_room_scan_sees_imports_of_rooms(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from telemetry.analysis import report\n    import telemetry.capture.session\n"
                 "from telemetry import formulas\n")
    assert {r for _, r in telemetry_rooms(f)} == {"analysis", "capture"}


def test_the_public_face_loads_its_names_lazily():
    """telemetry/__init__.py names what a loop author imports; it imports no room at module level (a room's
    torch would come with `import telemetry`), and every name it promises exists where it says."""
    import importlib

    import telemetry

    init = REPO / "telemetry" / "__init__.py"
    top = ast.parse(init.read_text(encoding="utf-8")).body
    eager = [ast.unparse(n) for n in top if isinstance(n, (ast.Import, ast.ImportFrom))
             and not (isinstance(n, ast.ImportFrom) and n.module == "__future__") and ast.unparse(n) != "import importlib"]
    assert not eager, f"telemetry/__init__.py imports at module level: {eager}"
    for name, module in telemetry.PUBLIC.items():
        assert hasattr(importlib.import_module(module), telemetry.ALIASES.get(name, name)), (name, module)
    assert telemetry.load_run is importlib.import_module("telemetry.analysis.runs").load_run
