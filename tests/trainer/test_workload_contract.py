"""Every shipped workload provides every member of the contract the trainer calls (trainer/workloads/contract.py),
with the contract's parameters; the trainer reads no workload member through getattr."""
from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tests.conftest import REPO
from trainer.workloads import WORKLOADS, get_workload
from trainer.workloads.contract import Workload

MEMBERS = sorted(n for n in dir(Workload) if not n.startswith("_")) + sorted(
    n for n in Workload.__annotations__ if not n.startswith("_"))


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_has_every_member_of_the_contract(name):
    cls = get_workload(name)
    missing = [m for m in MEMBERS if not hasattr(cls, m)]
    assert not missing, f"{cls.__name__} lacks {missing}"
    for member in MEMBERS:
        want = getattr(Workload, member, None)
        if not inspect.isfunction(want):
            continue
        params = [p for p in inspect.signature(want).parameters if p != "self"]
        got = [p for p in inspect.signature(getattr(cls, member)).parameters if p != "self"]
        assert got == params, f"{cls.__name__}.{member}{tuple(got)}: the contract says {tuple(params)}"


def test_the_trainer_reads_no_workload_member_through_getattr():
    wrong = []
    for path in sorted((REPO / "trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and node.args and "workload" in ast.unparse(node.args[0]).lower()
                    or isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and node.args and ast.unparse(node.args[0]) == "wl"):
                wrong.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(node)}")
    assert not wrong, "\n".join(wrong)


def test_the_contract_module_is_what_the_loop_types_against():
    loop = importlib.import_module("trainer.loop")
    assert loop.TrainerParts.__annotations__["workload"] in ("Workload", Workload)
