"""Tracer health in the report and the comparison (telemetry/coverage.py), from recorded run directories."""
from __future__ import annotations

from telemetry import coverage
from telemetry.analysis.compare import compare
from telemetry.analysis.report import write_report

from .recorded import write_run


def health(calls: int, timed: int, late: int = 0, nbytes: int = 1000, group: str = "dp") -> dict:
    g = {**coverage.empty(), "timing": "completion_hook", "calls": calls, "timed": timed, "late": late,
         "bytes": nbytes, "timed_bytes": nbytes * timed // calls}
    h = coverage.add(coverage.empty(), {"by_group": {group: g}})
    for k in coverage.COUNTS:
        h[k] = g[k]
    return coverage.finish(h)


def test_verdicts_say_what_is_missing_by_group():
    assert health(10, 10)["verdict"] == coverage.FULL
    h = health(3, 2, late=1, nbytes=300)
    assert (h["calls_pct"], h["bytes_pct"]) == (66.6, 66.6)  # never rounded up
    assert h["verdict"] == ("timing covers 66.6% of calls and 66.6% of bytes; missing: dp: 1 not reported when the "
                            "step closed")
    total = coverage.add(coverage.add(coverage.empty(), health(3, 2, late=1)), health(10, 10, group="tp"))
    assert coverage.finish(total)["by_group"]["tp"]["timed"] == 10 and total["calls"] == 13
    assert coverage.share(999_999, 1_000_000) == 99.9 and coverage.share(0, 0) is None


def test_a_comparison_of_variants_with_different_coverage_says_so(tmp_path):
    full, partial = health(7, 7), health(7, 5, late=2)
    a = write_run(tmp_path / "a", info_extra={"telemetry": {"counters": {"verdict": "clean"}, "comm_health": full}})
    b = write_run(tmp_path / "b", info_extra={"telemetry": {"counters": {"verdict": "clean"}, "comm_health": partial}})
    result = compare([str(a), str(b)], str(tmp_path / "cmp"))
    note = next(w for w in result["warnings"] if "collective timing covers different shares" in w)
    assert "tcp #1: 100% of calls, 100% of bytes; tcp #2: 71.4% of calls, 71.4% of bytes" in note
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| collective timing coverage (calls / bytes timed) | 100% / 100% | 71.4% / 71.4% (timing covers" in md
    c = write_run(tmp_path / "c", info_extra={"telemetry": {"counters": {"verdict": "clean"}, "comm_health": full}})
    same = compare([str(a), str(c)], str(tmp_path / "cmp2"))
    assert not any("different shares" in w for w in same["warnings"])


def test_the_report_shows_the_runs_health_and_warns_when_partial(tmp_path):
    run = write_run(tmp_path / "r", info_extra={"telemetry": {"counters": {"verdict": "clean"},
                                                              "comm_health": health(7, 5, late=2)}})
    write_report(str(run))
    md = (run / "report" / "report.md").read_text()
    assert "## Collective timing coverage (tracer health)" in md
    assert "> **collective timing covers 71.4% of calls and 71.4% of bytes; missing: dp: 2 not reported" in md
    old = write_run(tmp_path / "old")  # recorded before the health: said so, no warning
    write_report(str(old))
    md = (old / "report" / "report.md").read_text()
    assert "not recorded (a run from before the tracer health)" in md and "collective timing covers" not in md
