"""telemetry.analysis.repeats: mean and spread of repeated runs and sweeps (pure functions)."""
from __future__ import annotations

import statistics

import pytest

from telemetry.analysis.repeats import merge_sweeps, spread


def test_spread_of_known_values():
    s = spread([1.0, None, 3.0, 2.0])
    assert s == {"mean": 2.0, "sd": statistics.stdev([1.0, 3.0, 2.0]), "n": 3, "min": 1.0, "max": 3.0}


def test_one_value_has_no_spread_and_none_known_is_none():
    assert spread([4]) == {"mean": 4.0, "sd": None, "n": 1, "min": 4.0, "max": 4.0}
    assert spread([None, None]) is None and spread([]) is None


def sweep(scale, sizes=(8, 1024), extra_op=False, wrong=0):
    def rows():
        return [{"size": n, "count": n // 4, "type": "float",
                 "out_of_place": {"time_us": 10.0 * scale, "algbw_GBps": n / 10.0 / scale / 1e3,
                                  "busbw_GBps": n / 10.0 / scale / 1e3, "wrong": wrong},
                 "in_place": None} for n in sizes]
    ops = {"all_reduce": {"rows": rows(), "avg_busbw_GBps": 1.0 * scale}}
    if extra_op:
        ops["all_gather"] = {"rows": rows(), "avg_busbw_GBps": 2.0}
    return {"ops": ops, "latency_us": {"all_reduce": 20.0 * scale}, "source": "s"}


def test_a_single_sweep_comes_back_unchanged():
    one = sweep(1.0)
    assert merge_sweeps([one]) is one


def test_two_sweeps_merge_to_means_with_spread():
    merged = merge_sweeps([sweep(1.0), sweep(3.0)])
    assert merged["merged_sweeps"] == 2 and merged["source"] == "s"
    op = merged["ops"]["all_reduce"]
    assert op["avg_busbw_GBps"] == 2.0 and op["avg_busbw_GBps_sd"] == pytest.approx(statistics.stdev([1.0, 3.0]))
    row = op["rows"][0]
    assert row["size"] == 8 and row["in_place"] is None  # no block in any repeat: none
    block = row["out_of_place"]
    assert block["time_us"] == 20.0 and block["time_us_sd"] == pytest.approx(statistics.stdev([10.0, 30.0]))
    assert block["wrong"] == 0 and block["merged_sweeps"] == 2
    assert merged["latency_us"] == {"all_reduce": 40.0}
    assert merged["latency_sd_us"]["all_reduce"] == pytest.approx(statistics.stdev([20.0, 60.0]))


def test_only_collectives_and_sizes_every_repeat_has():
    merged = merge_sweeps([sweep(1.0, extra_op=True), sweep(1.0, sizes=(8,))])
    assert set(merged["ops"]) == {"all_reduce"}  # all_gather is missing from the second
    rows = merged["ops"]["all_reduce"]["rows"]
    assert rows[0]["out_of_place"]["merged_sweeps"] == 2
    assert rows[1]["out_of_place"]["merged_sweeps"] == 1 and "time_us_sd" not in rows[1]["out_of_place"]


def test_unknown_wrong_counts_stay_unknown():
    merged = merge_sweeps([sweep(1.0, wrong=None), sweep(1.0, wrong=2)])
    assert merged["ops"]["all_reduce"]["rows"][0]["out_of_place"]["wrong"] is None


def test_a_size_or_latency_only_a_later_repeat_measured_is_kept_with_its_count():
    """A size the first repeat lacked (a sweep cut short, then a full one) was dropped from the merge, while one only
    the first had was kept: every size any repeat has is kept, in size order, with how many repeats measured it."""
    short, full = sweep(1.0, sizes=(8,)), sweep(3.0, sizes=(8, 1024))
    full["latency_us"]["all_gather"] = 30.0
    rows = merge_sweeps([short, full])["ops"]["all_reduce"]["rows"]
    assert [r["size"] for r in rows] == [8, 1024]
    assert rows[0]["out_of_place"]["merged_sweeps"] == 2 and rows[1]["out_of_place"]["merged_sweeps"] == 1
    assert rows[1]["out_of_place"]["time_us"] == 30.0 and "time_us_sd" not in rows[1]["out_of_place"]
    merged = merge_sweeps([short, full])
    assert merged["latency_us"]["all_gather"] == 30.0 and merged["latency_n"]["all_gather"] == 1
