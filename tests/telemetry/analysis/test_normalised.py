"""The normalised table with repeats: every figure is the fabric's mean over its runs, as the Average bus
bandwidth table above it (review56: it took each fabric's first sweep alone, so a twothreads/base ratio read
1.01x there against 1.42x in the average table of the same report)."""
from __future__ import annotations

import json

from telemetry.analysis import normalised

from ..recorded import sweep_result, write_run


def _sweep_run(path, avg):
    sweep = sweep_result()
    sweep["ops"]["all_reduce"]["avg_busbw_GBps"] = avg
    return write_run(path, sweep=sweep)


def test_average_busbw_is_the_mean_of_the_repeats(tmp_path):
    dirs = [str(_sweep_run(tmp_path / f"r{i}", avg)) for i, avg in enumerate((1.0, 2.0, 6.0))]
    got = normalised.figures(dirs, None, [])
    assert got["all_reduce: average busbw (GB/s)"] == (3.0, True)


def test_profiled_step_time_is_the_mean_over_the_runs(tmp_path):
    runs = [[{"step": 1, "step_time_s": 9.0}, {"step": 2, "step_time_s": t, "profiled": True}] for t in (1.0, 3.0)]
    got = normalised.figures([], None, runs)
    assert got["profiled step time (s, median)"] == (2.0, False)


def test_compare_normalised_agrees_with_the_average_table(tmp_path):
    from telemetry.analysis.compare import compare
    paths = []
    for lab, avgs in (("ref", (1.0, 3.0)), ("other", (1.0, 5.0))):
        for i, avg in enumerate(avgs):
            paths.append(f"{lab}={_sweep_run(tmp_path / f'{lab}{i}', avg)}")
    compare(paths, str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| all_reduce: average busbw (GB/s) | 2 (1x) | 3 (1.5x) |" in md, md
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["labels"] == ["ref", "other"]
