"""bench/ is a package of modules: every script is in its index, none imports tests/, none patches sys.path."""
from __future__ import annotations

import ast
import re

from tests.conftest import REPO

BENCH = REPO / "bench"


def scripts() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if p.name != "__init__.py")


def test_every_script_is_in_the_index():
    index = (BENCH / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(\w+\.py)` \|", index, re.M))
    assert set(scripts()) - listed == set(), "bench/README.md does not list them"
    assert listed - set(scripts()) == set(), "bench/README.md lists scripts that do not exist"


def test_no_script_imports_tests_or_patches_sys_path():
    wrong = []
    for path in sorted(BENCH.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
                wrong.append(f"{path.name}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tests" for a in node.names):
                wrong.append(f"{path.name}:{node.lineno} imports tests")
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.path.insert"
                    and "package_dir" not in ast.unparse(node)):  # retained_tensors measures another checkout
                wrong.append(f"{path.name}:{node.lineno} patches sys.path")
    assert not wrong, "\n".join(wrong)
