"""Mutation fuzzing of the link test readers (perftest tables, perftest --out_json, iperf3 -J), seeded from the real
outputs in evidence_fixtures/: whatever a cluster's output holds, each reader returns its reading or raises
ParseError (an InputError: exit 2 with an `error:` line), never another exception. The mutations include lines and
runs of 200,000 characters, where a pattern that backtracks quadratically would not finish."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from telemetry.analysis import link_tests as lt

from ..mutations import cases

FIX = Path(__file__).parent.parent / "evidence_fixtures"


def _texts(pattern: str) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIX.glob(pattern))]


def _reads(reader, text):
    try:
        out = reader(text)
    except lt.ParseError as exc:
        assert str(exc), "a ParseError says what is wrong"
        return None
    json.dumps(out)
    return out


def test_mutated_perftest_tables_read_or_raise_parse_error():
    for i, kind, text in cases(_texts("perftest_*.txt"), 500, seed=20261129):
        out = _reads(lt.parse_perftest, text)
        if out is not None:
            assert out["rows"] and all(isinstance(r["bytes"], int) for r in out["rows"]), (i, kind)


@pytest.mark.parametrize("report_gbits", [True, False])
def test_mutated_perftest_out_json_reads_or_raises_parse_error(report_gbits):
    for _, _, text in cases(_texts("perftest_out_json_*.json"), 300, seed=20261130):
        _reads(lambda t: lt.parse_perftest_json(t, report_gbits), text)


def test_mutated_iperf3_reports_read_or_raise_parse_error():
    texts = _texts("iperf3_*.json") + _texts("iperf3_*.res")
    for i, kind, text in cases(texts, 500, seed=20261131):
        out = _reads(lt.parse_iperf3, text)
        if out is not None:
            assert out["received_bps"] is None or isinstance(out["received_bps"], float), (i, kind)


@pytest.mark.parametrize("text", [
    " 2  nan  1.0  1.0  1.0", " 2  inf  1.0  1.0  1.0", " " + "9" * 400 + "  5000  1.0  1.0  1.0",
    '{"end": {"sum_sent": {"bits_per_second": true}}}', '{"end": [], "start": {}}', '{"error": 5, "start": []}',
    '{"results": {"MsgSize": "64"}}', '[' * 50_000, '{"end": {"sum_received": {"bytes": "0"}}}',
])
def test_values_of_the_wrong_kind_are_parse_errors(text):
    header = "                    RDMA_Write BW Test\n #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]\n"
    for reader, t in ((lt.parse_perftest, header + text), (lt.parse_iperf3, text),
                      (lambda s: lt.parse_perftest_json(s, True), text)):
        _reads(reader, t)
