"""The sweep comparison's size table with repeats that measured different sizes (review56: a size only some of a
fabric's repeats measured read as the fabric's mean, with no sign that it was one run of three)."""
from __future__ import annotations

from telemetry.analysis.repeats import merge_sweeps
from telemetry.analysis.sweep_comparison import size_table


def sweep(scale, sizes=(8, 1024)):
    rows = [{"size": n, "count": n // 4, "out_of_place": {"time_us": 10.0 * scale, "algbw_GBps": n / 1e4 / scale,
                                                          "busbw_GBps": n / 1e4 / scale, "wrong": 0},
             "in_place": None} for n in sizes]
    return {"ops": {"all_reduce": {"rows": rows, "avg_busbw_GBps": 1.0}}, "latency_us": {}}


def test_a_size_some_repeats_lack_says_how_many_runs_it_is():
    merged = [merge_sweeps([sweep(1.0), sweep(1.0, sizes=(8,)), sweep(1.0, sizes=(8,))]), sweep(2.0)]
    _, header, rows = size_table("all_reduce", ["a", "b"], merged, True)
    by_size = {r[0]: r for r in rows}
    assert "n=" not in by_size["8 B"][1]  # every repeat measured it
    assert by_size["1 KB"][1] == "10 us (1 of 3 repeats)", by_size["1 KB"]
    assert by_size["1 KB"][3].endswith("(1 of 3 repeats)"), by_size["1 KB"]


def test_a_latency_only_some_repeats_measured_gives_their_count():
    from telemetry.analysis.sweep_comparison import latency_table
    a, b, c = sweep(1.0), sweep(1.0), sweep(1.0)
    a["latency_us"], b["latency_us"], c["latency_us"] = {"x_us": 10.0}, {"x_us": 30.0}, {}
    merged = [merge_sweeps([a, b, c]), merge_sweeps([a, b])]
    _, _, rows = latency_table(["p", "q"], merged)
    assert rows[0][1].endswith("(n=2 of 3 repeats)"), rows
    assert "(n=2)" in rows[0][2] and "of" not in rows[0][2], rows


def test_sizes_rounded_per_rank_on_other_world_sizes_are_one_size():
    # round 9: all_gather of 64 KiB was 65,532 bytes on 3 ranks and 65,536 on 4, and the comparison of the two
    # fabrics had "common sizes: none", every size "not measured" by the other
    from telemetry.analysis.sweep_comparison import align_sizes, average_table, common_sizes
    three, four = sweep(1.0, sizes=(65532, 131064)), sweep(2.0, sizes=(65536, 131072))
    groups, notes = align_sizes([[three], [four]])
    assert common_sizes([groups[0][0], groups[1][0]], "all_reduce") == [65536, 131072]
    assert notes == ["all_reduce: sizes rounded to a whole count per rank on each world size are compared as the "
                     "size requested (65532 B as 65536 B, 131064 B as 131072 B)"]
    assert [r["size"] for r in three["ops"]["all_reduce"]["rows"]] == [65532, 131064]  # the input is left alone
    (_, _, rows), _ = average_table(["all_reduce"], ["a", "b"], groups, [None, None])
    assert rows[0][1] == "64 KB - 128 KB (2 sizes)"
    # a sweep's own neighbouring sizes (a fine linear step) stay apart, and far sizes are never joined
    fine, other = sweep(1.0, sizes=(65536, 65600)), sweep(1.0, sizes=(65536, 70000))
    groups, notes = align_sizes([[fine], [other]])
    assert [r["size"] for r in groups[0][0]["ops"]["all_reduce"]["rows"]] == [65536, 65600] and notes == []
