"""Mutation fuzzing of the p2pBandwidthLatencyTest reader (parse_reference), seeded from the real outputs: every
matrix it finds, never an exception."""
from __future__ import annotations

import math
from pathlib import Path

from telemetry.analysis.p2p_matrix import parse_reference

from ..mutations import cases

SAMPLES = Path(__file__).parent / "p2p"


def test_mutated_real_outputs_read_without_an_exception():
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(SAMPLES.glob("*.txt"))]
    for i, kind, text in cases(texts, 600, seed=20261129):
        ref = parse_reference(text)
        assert isinstance(ref, dict), (i, kind)
        cells = [v for m in (ref.get("unidirectional", {}), ref.get("bidirectional", {}), ref.get("latency_gpu", {}),
                             ref.get("latency_cpu", {})) for rows in m.values() for row in rows for v in row]
        assert all(v is None or math.isfinite(v) for v in cells), (i, kind)  # unknown is None, never nan
