"""Mutation fuzzing of the :::MLLOG reader (mllog_lines.lines), seeded from a real MLPerf BERT log: its records,
or MllogError for a damaged one, never another exception."""
from __future__ import annotations

from pathlib import Path

from telemetry.analysis import mllog_lines as ml

from ..mutations import cases

REAL = Path(__file__).parent / "mllog" / "bert_run_pretraining_excerpt.txt"


def test_mutated_real_log_reads_or_is_an_mllog_error(tmp_path):
    text = REAL.read_text(encoding="utf-8")
    for i, kind, mutated in cases([text], 300, seed=20261129):
        path = tmp_path / f"{i}.txt"
        path.write_text(mutated, encoding="utf-8", errors="surrogateescape")
        try:
            records = ml.lines(str(path))
        except ml.MllogError:
            continue
        assert all(isinstance(r, dict) for r in records), (i, kind)
