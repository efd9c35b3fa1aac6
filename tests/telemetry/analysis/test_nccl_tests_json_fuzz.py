"""Mutation fuzzing of the nccl-tests JSON reader (parse_json, and read on the file's text), seeded from the real
-J outputs: a value of any JSON type anywhere, or damaged text, gives a result or NcclTestsError, never another
exception."""
from __future__ import annotations

import copy
import json
import random

from telemetry.analysis.nccl_tests import NcclTestsError, read, to_csv
from telemetry.analysis.nccl_tests_json import is_nccl_tests_json, parse_json

from ...conftest import REPO
from ..mutations import cases

FIXTURES = REPO / "tests" / "telemetry" / "analysis" / "nccl_tests_json"
VALUES = [None, True, False, 0, -1, 1e308, float("nan"), float("inf"), "", "x", "nan", "1e999", "true", [], {}, [1],
          {"a": 1}, 99999999999999999999, 10 ** 400]


def _paths(doc, at=()):
    yield at
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _paths(v, at + (k,))


def test_values_of_any_type_anywhere_and_damaged_text_read_without_an_exception(tmp_path):
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*.json"))]
    rng = random.Random(20261129)
    for i in range(1500):
        doc = copy.deepcopy(rng.choice(docs))
        for _ in range(rng.randint(1, 4)):
            at = rng.choice([p for p in _paths(doc) if p])
            parent = doc
            for k in at[:-1]:
                parent = parent[k]
            parent[at[-1]] = copy.deepcopy(rng.choice(VALUES))
        if is_nccl_tests_json(doc):
            result = parse_json(doc, name_hint="all_reduce_perf.json")
            assert isinstance(result["ops"], dict), (i, at)
            to_csv(result)
    texts = [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.json"))]
    for i, kind, text in cases(texts, 150, seed=20261129):
        path = tmp_path / f"{i}.json"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            assert isinstance(read(str(path))["ops"], dict), (i, kind)
        except NcclTestsError:
            pass
