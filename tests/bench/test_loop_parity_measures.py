"""The low-noise measures of bench.loop_parity, in-process: the clocks' summaries, the callgrind dump reader
(files named as valgrind 3.19 names them with --separate-threads=yes, totals lines as callgrind writes
them), the pairing of dumps with segments, the repeats' summary and the Python call counts."""
from __future__ import annotations

import cProfile
import threading
import time
from pstats import Stats

import pytest

from bench.loop_parity import instruction_summary, repeat_summary
from bench.support.cpu_clocks import CLOCKS, read, read_dumps, threads_cpu, threads_cpu_delta
from bench.support.step_parity import clock_summary, python_calls


def test_read_gives_wall_thread_and_process_cpu_and_threads_are_named():
    t0 = read()
    x = 0
    for i in range(200_000):
        x += i
    t1 = read()
    assert len(t0) == len(CLOCKS) == 3 and all(b >= a for a, b in zip(t0, t1))
    assert t1[1] - t0[1] > 0  # the loop's own thread did the work
    stop = threading.Event()
    worker = threading.Thread(target=lambda: [sum(range(1000)) for _ in iter(lambda: stop.is_set(), True)],
                              name="spinner", daemon=True)
    before = threads_cpu()
    worker.start()
    time.sleep(0.2)
    delta = threads_cpu_delta(before, threads_cpu())
    stop.set()
    worker.join()
    assert delta["spinner"] > 0 and "MainThread" in delta and "(native or ended threads)" in delta


def test_clock_summary_ratios_and_pair_spread():
    harness, hand = [1.02, 1.04, 1.03, 1.10], [1.0, 1.0, 1.0, 1.0]
    c = clock_summary(harness, hand)
    assert c["ratio"] == pytest.approx(1.035) and c["ratio_paired_median"] == pytest.approx(1.035)
    assert c["pairs_p10"] == pytest.approx(1.02) and c["pairs_p90"] == pytest.approx(1.10)
    assert c["harness_ms"] == pytest.approx(1035.0) and clock_summary([], hand) == {}


def _dump(path, ir: int) -> None:
    path.write_text(f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: python\npart: 1\n\n"
                    f"positions: line\nevents: Ir\nsummary: {ir}\n\nfn=(1) main\n0 {ir}\n\ntotals: {ir}\n")


def test_read_dumps_orders_dumps_splits_threads_and_skips_the_exit_dump(tmp_path):
    prefix = str(tmp_path / "callgrind.out")
    for n, (main, other) in {1: (100, 5), 2: (210, 0), 10: (120, 7)}.items():
        _dump(tmp_path / f"callgrind.out.7.{n}-01", main)
        if other:
            _dump(tmp_path / f"callgrind.out.7.{n}-02", other)
    _dump(tmp_path / "callgrind.out.7-01", 999_999)  # the dump at exit: no segment
    assert read_dumps(prefix) == [{"main": 100, "other": 5}, {"main": 210, "other": 0}, {"main": 120, "other": 7}]


def test_instruction_summary_pairs_each_hand_step_with_its_harness_iteration():
    labels = ["hand 6", "harness 6", "hand 7", "harness 7"]
    dumps = [{"main": 100, "other": 1}, {"main": 102, "other": 3}, {"main": 100, "other": 1}, {"main": 104, "other": 2}]
    s = instruction_summary(labels, dumps)
    assert s["steps"] == [6, 7] and s["harness_instructions"] == [102, 104] and s["hand_other_threads"] == [1, 1]
    assert s["ratio_paired_median"] == pytest.approx(1.03) and s["pairs_min"] == pytest.approx(1.02)
    with pytest.raises(SystemExit, match="3 dumps for 4 segments"):
        instruction_summary(labels, dumps[:3])


def test_repeat_summary_takes_median_and_range_of_each_clock():
    runs = [{"clocks": {c: {"ratio_paired_median": v, "ratio": v + 0.01} for c in CLOCKS}} for v in (1.01, 1.03, 1.02)]
    s = repeat_summary(runs)
    assert s["cpu"]["median"] == pytest.approx(1.02) and (s["cpu"]["min"], s["cpu"]["max"]) == (1.01, 1.03)


def _count(fn, n: int) -> Stats:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    return Stats(prof)


def _extra() -> None:
    pass


def test_python_calls_per_step_names_the_functions_only_one_loop_calls():
    harness = _count(lambda: (_extra(), _extra()), 3)
    hand = _count(lambda: None, 3)
    calls = python_calls(harness, hand, {"harness": 3, "hand": 3})
    row = next(r for r in calls["differ"] if r["function"].endswith("(_extra)"))
    assert (row["harness_calls"], row["hand_calls"]) == (2, 0)
    assert calls["harness_per_step"] > calls["hand_per_step"]
    assert python_calls(None, hand, {"harness": 0, "hand": 3}) == {}
