"""Mutation fuzzing of the TUNING reader (parse_lines, tuning_table), seeded from the real TUNING logs: records
and tables of any log are read without an exception."""
from __future__ import annotations

from pathlib import Path

from telemetry.analysis.nccl_algorithms import choices, enabled, label, parse_lines, tuning_table

from ..mutations import cases

CORPUS = Path(__file__).parent.parent / "nccl_tuning"


def test_mutated_real_tuning_logs_read_without_an_exception():
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(CORPUS.glob("*.log"))]
    for i, kind, text in cases(texts, 600, seed=20261129):
        lines = text.splitlines(keepends=True)
        records = parse_lines(lines)
        assert isinstance(records, list), (i, kind)
        assert all(isinstance(r["bytes"], int) and isinstance(label(r), str) for r in records), (i, kind)
        choices(records)
        table = tuning_table(lines)
        assert isinstance(table, dict) and isinstance(enabled(table), dict), (i, kind)
