"""Mutation fuzzing of the nccl-tests table reader (parse, read) and `python -m telemetry nccl-tests`, seeded
from the real tables: a result or NcclTestsError (exit 2, `error:` lines), never another exception."""
from __future__ import annotations

import json
from pathlib import Path

from telemetry.__main__ import main
from telemetry.analysis.nccl_tests import NcclTestsError, parse, read, to_csv

from ..mutations import cases

TABLES = Path(__file__).parent.parent / "nccl_tests_tables"


def test_mutated_real_tables_read_without_an_exception(tmp_path, capsys):
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(TABLES.glob("*.txt"))]
    for i, kind, text in cases(texts, 500, seed=20261129):
        result = parse(text, name_hint="all_reduce_perf.txt")
        assert isinstance(result["ops"], dict), (i, kind)
        to_csv(result)
        json.dumps(result)
        if i % 10 == 0:  # the file's way in, and the command line
            path = tmp_path / f"{i}.txt"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            try:
                assert isinstance(read(str(path))["ops"], dict)
            except NcclTestsError:
                pass
            rc = main(["nccl-tests", str(path)])
            err = capsys.readouterr().err
            assert rc in (0, 2), (i, kind, rc)
            assert "Traceback" not in err and (rc == 0 or err.startswith("error: ")), (i, kind, err)
