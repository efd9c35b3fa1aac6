"""Mutation fuzzing of the NCCL log reader (parse_lines, parse_files) and `python -m telemetry nccl-log`, seeded
from the real logs: whatever a cluster's log holds, the reader returns its reading and the command exits 0 or 2
with `error:` lines, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path

from telemetry.__main__ import main
from telemetry.capture.nccl_log import FIELDS, parse_files, parse_lines

from ..mutations import cases

CORPUS = Path(__file__).parent.parent / "nccl_logs"


def test_mutated_real_logs_read_without_an_exception(tmp_path, capsys):
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(CORPUS.glob("*.log"))]
    for i, kind, text in cases(texts, 600, seed=20261129):
        r = parse_lines(text.splitlines(keepends=True))
        assert isinstance(r, dict) and set(FIELDS) <= set(r), (i, kind)
        json.dumps(r)
        if i % 20 == 0:  # the files' way in, and the command line
            path = tmp_path / f"{i}.log"
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
            assert set(FIELDS) <= set(parse_files([str(path)])), (i, kind)
            rc = main(["nccl-log", str(path)])
            err = capsys.readouterr().err
            assert rc in (0, 2), (i, kind, rc)
            assert "Traceback" not in err and (rc == 0 or err.startswith("error: ")), (i, kind, err)
