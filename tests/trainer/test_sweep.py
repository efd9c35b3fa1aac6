"""The collective sweep: sizes, the nccl-tests table format, and a real 2-rank gloo sweep with checks whose
text output reads, row for row, as nccl-tests output."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from telemetry.__main__ import main as telemetry_main
from telemetry.analysis.nccl_tests import CSV_COLUMNS, read, to_csv
from telemetry.analysis.watch import RunWatch, plain_lines
from trainer.cli import main
from trainer.sweep.output import HEADER, avg_busbw, fit, format_row, timed_block
from trainer.sweep.plan import sizes

from ..conftest import REPO, run_cli

SWEEP = str(REPO / "recipes" / "collectives.yaml")
TABLES = REPO / "tests" / "telemetry" / "nccl_tests_tables"
OPS = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv", "broadcast", "sendrecv_intra_node"}
SIZES = [8 * 2 ** i for i in range(18)]  # 8 B to 1 MiB: 18 sizes x 7 tables = 126 rows


def test_sizes_and_size_parsing(capsys):
    assert sizes(8, 64, 2) == [8, 16, 32, 64] and sizes(8, 100, 4) == [8, 32]
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=1G", "sweep.min_bytes=4K"]) == 0
    assert main([SWEEP, "sweep.max_bytes=lots", "sweep.ops=[all_reduce,allreduce]", "sweep.factor=1"]) == 2
    err = capsys.readouterr().err
    assert "sweep.max_bytes: got 'lots'; expected bytes such as 8, 4K, 64M or 1G" in err
    assert ("sweep.ops: got ['all_reduce', 'allreduce']; did you mean 'all_reduce' for 'allreduce'? allowed: "
            "all_reduce, reduce_scatter") in err
    assert "sweep.factor: got 1; expected an integer >= 2" in err


def test_table_row_keeps_13_columns_and_average_bus_bandwidth():
    row = {"size": 1048576, "count": 262144,
           "out_of_place": None,
           "in_place": {"time_us": 1000.0, "algbw_GBps": 1.048576, "busbw_GBps": 1.835008, "wrong": 0}}
    line = format_row(row, "float", "sum", -1)
    # torch's all_reduce has no out-of-place form: a placeholder in each of its four columns
    assert line.split() == ["1048576", "262144", "float", "sum", "-1", "N/A", "N/A", "N/A", "N/A",
                            "1000.00", "1.05", "1.84", "0"]
    unchecked = dict(row, out_of_place=dict(row["in_place"], wrong=None, time_us=123456.7), in_place=None)
    assert format_row(unchecked, "float", "none", -1).split()[5:] == ["123457", "1.05", "1.84", "N/A"] + ["N/A"] * 4
    # the three header lines of nccl-tests, character for character (its current layout)
    published = (TABLES / "all_reduce_perf_2.20_unalign_excerpt.txt").read_text().splitlines()[8:11]
    assert HEADER.splitlines() == published
    assert [fit(v, 7) for v in (5.5, 123.456, 99999.9, 12345678.0)] == ["5.50", "123.46", "99999.9", "1.2e+07"]
    rows = [row, {"size": 8, "count": 2, "out_of_place": {"time_us": 1, "algbw_GBps": 0.0, "busbw_GBps": 0.5,
                                                          "wrong": 0}, "in_place": None}]
    assert avg_busbw(rows) == pytest.approx((1.835008 + 0.5) / 2)


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """One real sweep on 2 gloo ranks, 8 B to 1 MiB (the issue's command), few iterations."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    res = run_cli(out, "sweep.max_bytes=1M", "sweep.iters=2", "sweep.warmup=1", "sweep.latency_iters=5",
                  "sweep.per_iter_timing=true", recipe=SWEEP, nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
def test_two_rank_sweep_is_correct_and_recorded(sweep_run):
    out = json.loads((sweep_run.out / "collectives.json").read_text())
    csv_rows = (sweep_run.out / "collectives.csv").read_text().splitlines()
    assert len(csv_rows) > 1 + len(SIZES)  # a header, then rows of every collective
    assert set(out["ops"]) == OPS
    for op, r in out["ops"].items():
        assert r["wrong"] == 0 and r["checked"], op  # every result checked, the pair's included
        assert [row["size"] for row in r["rows"]] == SIZES, op
        for row in r["rows"]:
            block = row["in_place"] or row["out_of_place"]
            assert block["busbw_GBps"] == pytest.approx(block["algbw_GBps"] * (1.0 if op in (
                "all_reduce", "sendrecv", "broadcast", "sendrecv_intra_node") else 0.5))
            # count per rank, as nccl-tests prints it: each rank's share where S is split over the ranks
            split = op in ("reduce_scatter", "all_gather", "all_to_all")
            assert row["count"] == row["size"] // 4 // (2 if split else 1), (op, row)
            assert row["type"] == "float" and row["root"] == (0 if op == "broadcast" else -1)
    assert out["ops"]["all_reduce"]["missing"] == {"out_of_place": "torch's all_reduce exists only in place"}
    assert out["ops"]["all_to_all"]["rows"][0]["in_place"] is None and "in_place" in out["ops"]["all_to_all"]["missing"]
    assert [d["rank"] for d in out["ops"]["all_reduce"]["devices"]] == [0, 1]
    assert set(out["latency_us"]) == {"all_reduce_4B_us", "sendrecv_48B_us", "sendrecv_48B_intra_node_us"}
    assert "# Avg bus bandwidth" in sweep_run.stdout and "# Out of bounds values : 0 OK" in sweep_run.stdout
    info = sweep_run.run_json()
    assert info["status"] == "completed" and info["final"]["wrong"] == 0
    text = (sweep_run.out / "collectives.txt").read_text()
    assert text.count("# Avg bus bandwidth") == 7 and text.count("# Collective test starting:") == 7
    assert text.count("# Using devices") == 7 and text.count("# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576") == 7
    assert text == sweep_run.stdout  # the file is written line by line as stdout is: the same table
    sizes_lines = (sweep_run.out / "sweep.jsonl").read_text().splitlines()  # rewritten at the end with the transport
    assert len(sizes_lines) == 126 and all(json.loads(x)["transport"] == "loopback" for x in sizes_lines)
    # each line names its test as collectives.json does (a pair's too: the live series' op label, the power table's
    # join with the rows)
    assert {json.loads(x)["op"] for x in sizes_lines} == set(out["ops"])
    assert not (sweep_run.out / "sweep.jsonl.tmp").exists()
    # watch on the finished run: every test done, with the footer's average
    state = RunWatch(str(sweep_run.out))
    state.poll()
    tests = state.snapshot()["sweep_progress"]["tests"]
    assert [t["op"] for t in tests] == list(out["ops"]) and all(t["done"] and t["sizes_done"] == 18 for t in tests)
    assert [t["avg_busbw_GBps"] for t in tests] == [pytest.approx(r["avg_busbw_GBps"], rel=1e-3)
                                                    for r in out["ops"].values()]


@pytest.mark.integration
def test_the_table_is_written_as_measured_so_watch_follows_it_and_a_killed_sweep_keeps_it(tmp_path):
    """A sweep wrote collectives.txt only at its end: `telemetry watch` saw nothing of a sweep in progress, and
    a sweep killed at its 20th size lost the 19 it had measured."""
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "trainer",
           SWEEP, f"output_dir={out}", "sweep.ops=[all_reduce,all_gather]", "sweep.max_bytes=64K",
           "sweep.iters=2", "sweep.warmup=1", "sweep.min_seconds_per_size=0.4", "sweep.latency_table=false",
           "sweep.pairs=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = None
    try:
        deadline = time.monotonic() + 240
        state = RunWatch(str(out))
        while time.monotonic() < deadline and proc.poll() is None:
            state.poll()
            s = state.snapshot()
            progress = s.get("sweep_progress") or {}
            if s["status"] == "running" and progress.get("sizes_done", 0) >= 3:
                seen = progress
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the job killed mid-sweep (a node lost, scancel)
        _, err = proc.communicate()
    assert seen is not None, f"watch never saw 3 sizes of a running sweep:\n{err[-3000:]}"
    first = seen["tests"][0]
    assert first["op"] == "all_reduce" and first["sizes_planned"] == 14 and not first["done"]
    assert any(line.startswith("  all_reduce: ") for line in plain_lines(state.snapshot()))
    # what it measured is kept, and reads as nccl-tests output cut short
    kept = read(str(out / "collectives.txt"))
    assert len(kept["ops"]["all_reduce"]["rows"]) >= 3
    assert not (out / "collectives.json").exists()  # the numbers file is written at the end, as before
    # each size's energy, power and counters likewise, a line as each size is measured
    records = [json.loads(line) for line in (out / "sweep.jsonl").read_text().splitlines()]
    assert len(records) >= 3 and [r["size"] for r in records[:3]] == [8, 16, 32]
    assert all(r["op"] == "all_reduce" and "transport" not in r for r in records[:3])


def minimal_reader(text: str) -> list[list[str]]:
    """A reader written from nccl-tests' printed layout alone (src/util.cu): every line not starting with '#'
    that begins with a size is a row of 13 columns - size, count, type, redop, root, then time, algbw, busbw,
    #wrong out of place and the same in place; a cell is a number or N/A."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if not cells or line.lstrip().startswith("#") or not cells[0].isdigit():
            continue
        if len(cells) != 13:
            continue  # not a row this reader can place
        int(cells[0]), int(cells[1]), int(cells[4])
        for block in (cells[5:9], cells[9:13]):
            if block != ["N/A"] * 4:
                [float(c) for c in block[:3]]
                assert block[3] == "N/A" or int(block[3]) >= 0
        rows.append(cells)
    return rows


@pytest.mark.integration
def test_sweep_text_reads_completely_as_nccl_tests_output(sweep_run, tmp_path):
    text = (sweep_run.out / "collectives.txt").read_text()
    out = json.loads((sweep_run.out / "collectives.json").read_text())
    # an independent reader that knows only nccl-tests' column layout reads every row (was 36 of 126)
    assert len(minimal_reader(text)) == 126
    # the project's reader, the same one that reads real nccl-tests output, reads the same 126 rows
    parsed = read(str(sweep_run.out / "collectives.txt"))
    assert (parsed["rows_read"], parsed["rows_skipped"]) == (126, 0)
    assert list(parsed["ops"]) == list(out["ops"])
    assert parsed["world_size"] == 2 and parsed["dtype"] == "float32" and parsed["time_reduction"] == "avg"
    assert parsed["ops"]["sendrecv_intra_node"]["ranks"] == [0, 1]
    assert parsed["ops"]["all_gather"]["test"] == "all_gather_perf"
    for op, data in out["ops"].items():
        got = parsed["ops"][op]
        assert got["avg_busbw_GBps"] == pytest.approx(data["avg_busbw_GBps"], rel=1e-5) and got["wrong"] == 0
        assert got["world_size"] == data["world_size"]
        for mine, theirs in zip(data["rows"], got["rows"]):
            assert {k: theirs[k] for k in ("size", "count", "type", "redop", "root")} == \
                {k: mine[k] for k in ("size", "count", "type", "redop", "root")}
            for name in ("out_of_place", "in_place"):
                a, b = mine[name], theirs[name]
                assert (a is None) == (b is None), (op, name)
                if a:  # the text holds the JSON's numbers as printed
                    assert b["time_us"] == float(fit(a["time_us"], 7))
                    assert b["busbw_GBps"] == float(fit(a["busbw_GBps"], 6)) and b["wrong"] == a["wrong"]
    assert parsed["latency_us"] == pytest.approx(out["latency_us"], abs=0.005)
    # CSV: a header and one line per row
    lines = to_csv(out).splitlines()
    assert lines[0].split(",") == CSV_COLUMNS and len(lines) == 127
    assert lines[1].startswith("all_reduce,all_reduce_perf,2,8,2,float,sum,-1,,,,,")


@pytest.mark.integration
def test_sweep_writes_nccl_tests_json_beside_the_table(sweep_run, tmp_path, capsys):
    """nccl-tests/<op>.json per collective in nccl-tests' -J schema, with per-iteration statistics and
    per-rank times; telemetry nccl-tests and compare --sweep read it back."""
    out = json.loads((sweep_run.out / "collectives.json").read_text())
    for op in OPS:
        doc = json.loads((sweep_run.out / "nccl-tests" / f"{op}.json").read_text())
        assert doc["version"] == 3 and doc["config"]["per_iter_timing"] == "true"
        assert doc["config"]["minimum_bytes"] == 8 and doc["config"]["maximum_bytes"] == 1 << 20
        assert [r["size"] for r in doc["results"]] == SIZES and doc["out_of_bounds"] == {"count": 0, "okay": "true"}
        assert not any("SECRET" in e for e in doc["env"]) and doc["nccl_version"] is None
        for r in doc["results"]:
            for form in ("out_of_place", "in_place"):
                if r[form] is not None and op != "sendrecv_intra_node":  # pair tests time whole loops only
                    pi = r[f"{form}_per_iter"]
                    assert len(pi["times_us"]) == 2 and len(pi["per_process_max_times_us"]) == 2
                    assert pi["min_us"] <= pi["p50_us"] <= pi["p99_us"] <= pi["max_us"]
                else:
                    assert f"{form}_per_iter" not in r
        back = read(str(sweep_run.out / "nccl-tests" / f"{op}.json"))
        assert [r["size"] for r in back["ops"][op]["rows"]] == [r["size"] for r in out["ops"][op]["rows"]]
        assert back["ops"][op]["avg_busbw_GBps"] == pytest.approx(out["ops"][op]["avg_busbw_GBps"])
    assert telemetry_main(["nccl-tests", str(sweep_run.out / "nccl-tests" / "all_reduce.json")]) == 0
    assert "18 rows in 1 table(s) (all_reduce)" in capsys.readouterr().out
    vendor = str(REPO / "tests" / "telemetry" / "analysis" / "nccl_tests_json" / "all_reduce_perf_v1_2.17.8_misspelt.json")
    assert telemetry_main(["compare", str(sweep_run.out), vendor, "--out", str(tmp_path / "cmpj")]) == 0
    md = (tmp_path / "cmpj" / "compare.md").read_text()
    assert "## all_reduce: time and bus bandwidth at every size both runs have" in md and "\n| 8 B | " in md


@pytest.mark.integration
def test_compare_takes_an_nccl_tests_file_as_a_run(sweep_run, tmp_path, capsys):
    vendor = str(TABLES / "all_reduce_perf_h100_16ranks.txt")
    assert telemetry_main(["compare", str(sweep_run.out), vendor, "--out", str(tmp_path / "cmp")]) == 0
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["kind"] == "sweep" and result["figures"] == ["sweep_all_reduce.png"]
    md = (tmp_path / "cmp" / "compare.md").read_text()
    # 1 MiB: the vendor's out-of-place 203.2 us, its better block, against the sweep's time at 1 MB
    assert "\n| 1 MB | " in md and "| 203 us (" in md
    assert "world size 2 vs 16 (a text table: no recipe to compare)" in md
    # the sweep's own text is a run too; a file with no table is refused with its name
    assert telemetry_main(["compare", str(sweep_run.out), str(sweep_run.out / "collectives.txt"),
                           "--out", str(tmp_path / "self")]) == 0
    assert telemetry_main(["compare", str(sweep_run.out), str(TABLES / "README.md"),
                           "--out", str(tmp_path / "bad")]) == 2
    assert "README.md: no nccl-tests table found" in capsys.readouterr().err


@pytest.mark.integration
def test_repeats_give_the_median_and_the_spread(tmp_path):
    """sweep.repeats: each size timed several times after one warm-up; the row is their median, the JSON and a
    comment line keep the spread, and the text still reads as nccl-tests output."""
    res = run_cli(tmp_path / "rep", "sweep.ops=[all_reduce,sendrecv]", "sweep.min_bytes=1K", "sweep.max_bytes=64K",
                  "sweep.factor=8", "sweep.iters=2", "sweep.warmup=1", "sweep.repeats=3", "sweep.latency_iters=2",
                  recipe=SWEEP, nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((res.out / "collectives.json").read_text())
    assert out["repeats"] == 3
    blocks = [(op, b) for op, r in out["ops"].items() for row in r["rows"]
              for b in (row["out_of_place"], row["in_place"]) if b]
    assert {op for op, _ in blocks} == {"all_reduce", "sendrecv", "sendrecv_intra_node"}
    for op, b in blocks:
        times = b["spread"]["time_us"]
        assert len(times) == 3 and b["time_us"] == pytest.approx(sorted(times)[1]), op
        assert b["spread"]["busbw_min_GBps"] <= b["busbw_GBps"] <= b["spread"]["busbw_max_GBps"]
    text = (res.out / "collectives.txt").read_text()
    assert text.count("# fabric-harness: rows are the median of 3 repeats; busbw min-max (GB/s): 1024 ") == 3
    assert len(minimal_reader(text)) == 9 and read(str(res.out / "collectives.txt"))["rows_skipped"] == 0
    assert main([SWEEP, "--dry-run", "sweep.repeats=0"]) == 2
    assert main([SWEEP, "--dry-run", "sweep.repeat_stat=worst"]) == 2


def test_a_row_is_the_median_or_the_best_repeat():
    # 1 MB in 4, 2 and 3 ms: the median is 3 ms (333 MB/s), the best 2 ms (500 MB/s); the spread keeps all three
    times = [0.004, 0.002, 0.003]
    med = timed_block(times, 1_000_000, 1.0, 0)
    best = timed_block(times, 1_000_000, 2.0, 0, "best")
    assert med["time_us"] == pytest.approx(3000) and med["busbw_GBps"] == pytest.approx(1 / 3)
    assert best["time_us"] == pytest.approx(2000) and best["busbw_GBps"] == pytest.approx(1.0)  # x bus factor 2
    assert med["spread"] == {"repeats": 3, "time_us": pytest.approx([4000, 2000, 3000]),
                             "busbw_min_GBps": pytest.approx(0.25), "busbw_max_GBps": pytest.approx(0.5)}
    assert "spread" not in timed_block([0.002], 1_000_000, 1.0, 0)


def test_gloo_sends_each_direction_on_its_own_connection(monkeypatch):
    """With a reverse group every message from a lower to a higher rank travels on `group` and every message
    the other way on `reverse`, so no gloo connection carries both directions (ring of 3 and a pair)."""
    import torch.distributed as dist

    from trainer.sweep.measure import Sweep
    sent, received = [], []
    monkeypatch.setattr(dist, "isend", lambda t, dst, group: sent.append((t, dst, group)))
    monkeypatch.setattr(dist, "irecv", lambda t, src, group: received.append((t, src, group)))
    links: dict = {}
    for world in (2, 3):
        for rank in range(world):
            sw = object.__new__(Sweep)
            sw.rank, sw.world, sw.group, sw.reverse = rank, world, "up", "down"
            sent.clear(), received.clear()
            sw._exchange("s", (rank + 1) % world, "r", (rank - 1) % world)
            (_, dst, g_send), = sent
            (_, src, g_recv), = received
            assert g_send == ("up" if rank < dst else "down") and g_recv == ("up" if src < rank else "down")
            # the sender's and the receiver's view of one message name the same group
            links.setdefault((world, rank, dst), set()).add(g_send)
            links.setdefault((world, src, rank), set()).add(g_recv)
    assert all(len(g) == 1 for g in links.values())
    for (world, a, b), g in links.items():
        assert g == {"up" if a < b else "down"}


# ---------------------------------------------------------------- sweeps at scale (issue 25)

def test_formula_operands_reduce_to_their_closed_form():
    """The check compares against a closed form: it must equal the reduction of every rank's operand."""
    import torch

    from trainer.sweep.operands import contribution, reduced
    idx = torch.arange(1000)
    for n in (1, 2, 3, 8, 64):
        ops = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "min": torch.minimum, "max": torch.maximum}
        for redop, f in ops.items():
            acc = contribution(redop, 0, n)(idx).double()
            for q in range(1, n):
                acc = f(acc, contribution(redop, q, n)(idx).double())
            assert torch.equal(acc, reduced(redop, n)(idx)), (redop, n)
            if redop == "sum":
                assert torch.allclose(acc / n, reduced("avg", n)(idx))


def test_check_counts_wrong_elements_chunk_by_chunk():
    import torch

    from trainer.sweep.plan import CHECK_CHUNK
    from trainer.sweep.operands import a2a_value, contribution, count_wrong, fill, reduced
    n = 8
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32):
        buf = torch.empty(CHECK_CHUNK * 2 + 7, dtype=dtype)  # three chunks, the last one short
        fill(buf, reduced("sum", n))
        assert count_wrong(buf, reduced("sum", n), n) == 0, dtype
        bad = [3, CHECK_CHUNK + 1, 2 * CHECK_CHUNK + 5]  # one wrong element in each chunk, beyond any rounding
        buf[bad] = buf[bad] * 2 + 1
        assert count_wrong(buf, reduced("sum", n), n) == 3, dtype
    # int8 wraps (5 x 36 = 180 does not fit): the expected value wraps the same way
    small = torch.empty(10, dtype=torch.int8)
    fill(small, reduced("sum", n))
    assert count_wrong(small, reduced("sum", n), n) == 0 and small.min() < 0
    # an offset checks a slice of the whole (reduce_scatter's share), a2a values differ per source and target
    part = torch.empty(5)
    fill(part, contribution("sum", 2, n), offset=100)
    assert count_wrong(part, contribution("sum", 2, n), n, offset=100) == 0
    assert count_wrong(part, contribution("sum", 2, n), n, offset=101) > 0
    assert not torch.equal(a2a_value(0, 1)(torch.arange(4)), a2a_value(1, 0)(torch.arange(4)))


def test_sizes_round_as_nccl_tests_and_memory_does_not_grow_with_ranks():
    from trainer.sweep.plan import CHECK_BYTES_PER_ELEMENT, CHECK_CHUNK, buffer_bytes, counts
    # S / element size / ranks per rank for the split collectives, 0 below ranks x element size (nccl-tests
    # prints those rows with size 0); every requested size keeps its row
    assert [counts("all_gather", s, 8, 4) for s in (8, 16, 32, 64)] == [(0, 0), (0, 0), (1, 8), (2, 16)]
    assert counts("all_reduce", 8, 8, 4) == (2, 2) and counts("all_reduce", 2, 8, 4) == (0, 0)
    S = 16 << 30
    for op in ("all_reduce", "broadcast", "sendrecv", "all_to_all"):
        assert buffer_bytes(op, S, 2, 4) == buffer_bytes(op, S, 64, 4) == buffer_bytes(op, S, 512, 4)
    check = CHECK_CHUNK * CHECK_BYTES_PER_ELEMENT
    assert buffer_bytes("all_reduce", S, 64, 4) == S + check  # one buffer, in place
    assert buffer_bytes("all_to_all", S, 64, 4) == 2 * S + check  # send and receive
    assert buffer_bytes("all_gather", S, 64, 4) == S + S // 64 + check  # out of place: the share and the whole
    assert buffer_bytes("all_gather", S, 64, 4, "in_place") == S + check


def test_dry_run_checks_the_largest_size_against_device_memory(capsys):
    assert main([SWEEP, "--dry-run", "--world-size", "64", "sweep.max_bytes=16G"]) == 0
    out = capsys.readouterr().out
    assert "# sweep sizes: 32 per collective (8 to 16G, x2 each step) x 6 collectives = 192 rows" in out
    assert "# sweep memory: the largest size, 16.0 GiB, needs 32.0 GiB per rank (sendrecv" in out
    assert "checked against an assumed 80 GB GPU" in out
    assert main([SWEEP, "--dry-run", "--world-size", "64", "sweep.max_bytes=64G"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: sweep.max_bytes: 68719476736 bytes (64.0 GiB) needs ")
    assert "per rank for sendrecv at 64 ranks" in err[0] and "has 85899345920 bytes (80.0 GiB)" in err[0]
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=16G", "sweep.device_memory=24G",
                 "sweep.ops=[all_reduce]"]) == 0  # one 16 GiB buffer fits 24 GiB
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=16G", "sweep.device_memory=24G"]) == 2
    assert "but sweep.device_memory has 25769803776 bytes (24.0 GiB)" in capsys.readouterr().err
    assert main([SWEEP, "--dry-run", "sweep.device_memory=lots", "sweep.min_seconds_per_size=-1"]) == 2
    err = capsys.readouterr().err
    assert "sweep.device_memory: got 'lots'" in err and "sweep.min_seconds_per_size: got -1.0" in err


def test_dry_run_memory_of_one_rank_names_a_collective_that_runs(capsys):
    # a world of one skips sendrecv; the collectives that run need as much (all_to_all, and reduce_scatter's share
    # and whole at one rank), and the line names one of them with what it holds
    assert main([SWEEP, "--dry-run", "sweep.max_bytes=256M"]) == 0
    out = capsys.readouterr().out
    assert "(sendrecv skipped: it needs at least 2 ranks)" in out
    assert "needs 544.0 MiB per rank (reduce_scatter, its share and the whole;" in out and "(sendrecv," not in out
    assert main([SWEEP, "--dry-run", "sweep.max_bytes=256M", "sweep.ops=[all_to_all,sendrecv]"]) == 0
    assert "per rank (all_to_all, send and receive buffers;" in capsys.readouterr().out
    assert main([SWEEP, "--dry-run", "sweep.max_bytes=256M", "sweep.ops=[all_reduce]"]) == 0
    assert "per rank (all_reduce, one buffer, in place;" in capsys.readouterr().out


def test_iteration_statistics_follow_nccl_tests():
    from trainer.sweep.measure import iteration_stats
    # two ranks, 5 iterations: times_us is the slower rank's per iteration; one iteration skipped
    rows = [[5e-6, 1e-6, 2e-6, 3e-6, 4e-6], [1e-6, 2e-6, 1e-6, 6e-6, 1e-6]]
    st = iteration_stats(rows, skip=1)
    assert st["times_us"] == pytest.approx([5, 2, 2, 6, 4])
    # over [2, 2, 6, 4] sorted [2, 2, 4, 6]: p50 = sorted[n/2] = 4, p95 = p99 = nearest rank = 6
    assert (st["min_us"], st["max_us"], st["p50_us"], st["p95_us"], st["p99_us"]) == pytest.approx((2, 6, 4, 6, 6))
    assert st["avg_us"] == pytest.approx(3.5) and st["stdev_us"] == pytest.approx((2.75) ** 0.5)
    assert st["per_process_max_times_us"][1] == pytest.approx([1, 2, 1, 6, 1]) and st["skipped_iterations"] == 1
    assert "per_process_max_times_us" not in iteration_stats(rows[:1])


def test_straggler_and_slow_node_notes():
    from trainer.sweep.output import describe_straggler
    from trainer.sweep.measure import stragglers
    hosts = ["a", "a", "b", "b"]
    row = {"size": 1024, "in_place": {"per_iter": {"per_process_max_times_us": [[10, 10], [11, 11], [10, 10],
                                                                                [20, 20]]}}}
    (s,) = stragglers("all_reduce", [row], hosts, 10.0, [0, 1, 2, 3])
    assert (s["rank"], s["host"], s["slow_node"]) == (3, "b", False) and s["excess_pct"] == pytest.approx(100)
    assert describe_straggler(s).startswith("all_reduce 1024 B in-place: rank 3 (host b) is the slowest")
    row["in_place"]["per_iter"]["per_process_max_times_us"] = [[10], [10], [30], [31]]
    (s,) = stragglers("all_reduce", [row], hosts, 10.0, [0, 1, 2, 3])
    assert s["slow_node"] and "host b is a slow node" in describe_straggler(s)
    row["in_place"]["per_iter"]["per_process_max_times_us"] = [[10], [10.5], [10], [10]]
    assert stragglers("all_reduce", [row], hosts, 10.0, [0, 1, 2, 3]) == []


@pytest.mark.integration
def test_sweep_with_telemetry_hold_and_zero_count_rows(tmp_path):
    """Per size: energy/power (null with the reason on CPU) and NIC counters in sweep.jsonl, a hold long enough
    for a power reading, and a row for every requested size, also below ranks x element size."""
    res = run_cli(tmp_path / "tel", "sweep.ops=[all_reduce,all_gather]", "sweep.min_bytes=4", "sweep.max_bytes=1K",
                  "sweep.factor=4", "sweep.iters=2", "sweep.warmup=1", "sweep.latency_table=false",
                  "sweep.min_seconds_per_size=0.3", recipe=SWEEP, nproc=2,
                  env={"NCCL_IB_AUTH_TOKEN": "swordfish-1234", "NCCL_DEBUG_SUBSYS": "INIT"})
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads((res.out / "nccl-tests" / "all_reduce.json").read_text())
    assert "NCCL_IB_AUTH_TOKEN=<redacted>" in doc["env"] and "NCCL_DEBUG_SUBSYS=INIT" in doc["env"]
    assert "swordfish" not in (res.out / "nccl-tests" / "all_reduce.json").read_text()
    out = json.loads((res.out / "collectives.json").read_text())
    gather = out["ops"]["all_gather"]["rows"]
    assert [r["requested_bytes"] for r in gather] == [4, 16, 64, 256, 1024]
    assert (gather[0]["size"], gather[0]["count"], gather[0]["out_of_place"]["wrong"]) == (0, 0, 0)
    assert any("count 0" in n for n in out["ops"]["all_gather"]["notes"])
    lines = [json.loads(x) for x in (res.out / "sweep.jsonl").read_text().splitlines()]
    assert [(x["op"], x["requested_bytes"]) for x in lines] == [(op, s) for op in ("all_reduce", "all_gather")
                                                                for s in (4, 16, 64, 256, 1024)]
    for x in lines:
        assert x["hold_iterations"] > 0 and x["seconds"] >= 0.3
        assert x["gpu_energy_j"] is None and x["gpu_reason"] == "no GPU is used by this rank"
        assert x["transport"] == "loopback" and len(x["ranks"]) == 2
        assert x["tx_bytes"] is not None and x["tx_bytes"] > 0  # rank 0 reads this host's counters
    info = res.run_json()
    assert info["telemetry"]["enabled"] and info["telemetry"]["counters"]["verdict"] == "clean"
    mem = out["memory"]["per_rank"]
    assert len(mem) == 2 and all(m["peak_bytes"] is not None for m in mem)


@pytest.mark.integration
def test_rooted_collectives_at_three_ranks_from_a_root_that_is_not_zero(tmp_path):
    """reduce, gather and scatter (nccl-tests' reduce_perf, gather_perf, scatter_perf) with root 1 of 3: every
    result checked, the root in the table, the sizes and bus factors as nccl-tests computes them, and the text
    read back as those tests."""
    res = run_cli(tmp_path / "rooted", "sweep.ops=[reduce,gather,scatter]", "sweep.root=1", "sweep.redop=max",
                  "sweep.min_bytes=4", "sweep.max_bytes=48K", "sweep.factor=4", "sweep.iters=2", "sweep.warmup=1",
                  "sweep.latency_table=false", "sweep.pairs=false", recipe=SWEEP, nproc=3)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((res.out / "collectives.json").read_text())
    assert list(out["ops"]) == ["reduce", "gather", "scatter"]
    for op, doc in out["ops"].items():
        assert doc["wrong"] == 0 and doc["checked"], op
        for row in doc["rows"]:
            assert (row["root"], row["redop"]) == (1, "max" if op == "reduce" else "none")
            for form in ("out_of_place", "in_place"):
                block = row[form]
                if op == "reduce" and form == "out_of_place":
                    assert block is None  # torch's reduce exists only in place
                    continue
                assert block["wrong"] == 0, (op, row["size"], form)
                factor = 1.0 if op == "reduce" else 2 / 3
                assert block["busbw_GBps"] == pytest.approx(block["algbw_GBps"] * factor, rel=1e-6, abs=1e-9)
    assert out["ops"]["reduce"]["missing"] == {"out_of_place": "torch's reduce exists only in place"}
    gather = out["ops"]["gather"]["rows"]  # S = count per rank x 3 ranks x 4 B
    assert [(r["size"], r["count"]) for r in gather] == [(0, 0), (12, 1), (60, 5), (252, 21), (1020, 85),
                                                         (4092, 341), (16380, 1365)]
    text = read(str(res.out / "collectives.txt"))
    assert set(text["ops"]) == {"reduce", "gather", "scatter"}
    assert text["rows_read"] == sum(len(d["rows"]) for d in out["ops"].values())


@pytest.mark.integration
def test_p2p_matrix_is_refused_on_cpu(tmp_path):
    res = run_cli(tmp_path / "p2p", "sweep.ops=[p2p_matrix]", recipe=SWEEP, nproc=1)
    assert res.returncode == 2
    err = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert err == ["error: sweep.ops: p2p_matrix measures GPU pairs over NCCL and needs CUDA devices; this run is "
                   "on cpu (gloo); allowed: the other ops on CPU"]
    assert "Traceback" not in res.stderr


@pytest.mark.gpu
@pytest.mark.integration
def test_p2p_matrix_on_gpus(tmp_path):
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs CUDA and at least two GPUs")
    n = torch.cuda.device_count()
    res = run_cli(tmp_path / "gpu", "sweep.ops=[p2p_matrix]", "sweep.max_bytes=64M", "sweep.iters=5",
                  "sweep.latency_iters=20", recipe=SWEEP, nproc=n, env={"CUDA_VISIBLE_DEVICES": ",".join(
                      str(i) for i in range(n))})
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((res.out / "collectives.json").read_text())["p2p_matrix"]
    assert m["wrong"] == 0 and m["p2p_disabled"] is False
    for a in range(n):
        assert m["bandwidth_GBps"][a][a] is None
        assert all(m["bandwidth_GBps"][a][b] > 0 and m["latency_us"][a][b] > 0 for b in range(n) if b != a)


def test_a_linear_sweep_adds_step_bytes_as_nccl_tests_minus_i_does(capsys):
    """nccl-tests -i (step bytes) had no sweep key: only -f's geometric sizes could be measured."""
    assert sizes(1024, 4096, 2, 1024) == [1024, 2048, 3072, 4096] and sizes(8, 30, 2, 10) == [8, 18, 28]
    from trainer.sweep.plan import count_sizes
    assert count_sizes(1 << 20, 256 << 20, 2, 1 << 20) == 256 and count_sizes(8, 64, 2) == 4
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.min_bytes=1M", "sweep.max_bytes=256M",
                 "sweep.step_bytes=1M"]) == 0
    assert "# sweep sizes: 256 per collective (1M to 256M, +1M each step) x 6 collectives = 1536 rows" in \
        capsys.readouterr().out
    assert main([SWEEP, "--dry-run", "sweep.min_bytes=1M", "sweep.max_bytes=8M", "sweep.step_bytes=1M",
                 "sweep.factor=1"]) == 0  # nccl-tests' -f 1 -i 1M: the factor is unused
    capsys.readouterr()
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=8"]) == 2  # 8 B steps up to 64M: 8 million sizes
    assert capsys.readouterr().err.strip() == (
        "error: sweep.step_bytes: 8 to '64M' in steps of 8 is 8388608 sizes per collective; allowed: at most 4096 "
        "(a larger step_bytes, or null to multiply by sweep.factor)")
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=0", "sweep.min_bytes=1M", "sweep.max_bytes=8M",
                 "sweep.power_sizes=[2M,3.5M]", "sweep.min_seconds_per_size=1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: sweep.step_bytes: got 0; expected at least 1 byte"]
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=1M", "sweep.min_bytes=1M", "sweep.max_bytes=8M",
                 "sweep.power_sizes=[2M,3.5M]", "sweep.min_seconds_per_size=1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: sweep.power_sizes[1]: '3.5M' is not one of the sweep's sizes (1M + 1M each step up to 8M); "
        "allowed: a size the sweep measures")


@pytest.mark.integration
def test_a_linear_sweep_runs_and_reads_back_as_nccl_tests_output(tmp_path):
    res = run_cli(tmp_path / "lin", "sweep.min_bytes=1K", "sweep.max_bytes=4K", "sweep.step_bytes=1K",
                  "sweep.ops=[all_reduce]", "sweep.iters=2", "sweep.warmup=1", "sweep.latency_table=false",
                  "sweep.pairs=false", recipe=SWEEP, nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1024 to 4096 bytes +1024," in res.stdout and "step: 1024(bytes)" in res.stdout
    back = read(str(res.out / "collectives.txt"))
    assert [r["size"] for r in back["ops"]["all_reduce"]["rows"]] == [1024, 2048, 3072, 4096]
    assert back["ops"]["all_reduce"]["params"]["step_kind"] == "bytes"
    doc = json.loads((res.out / "nccl-tests" / "all_reduce.json").read_text())
    assert doc["config"]["step_bytes"] == 1024 and "step_factor" not in doc["config"]
    assert json.loads((res.out / "collectives.json").read_text())["step_bytes"] == 1024
    state = RunWatch(str(res.out))
    state.poll()
    assert state.snapshot()["sweep_progress"]["tests"][0]["sizes_planned"] == 4


def test_the_dry_runs_row_count_holds_the_pair_tables_and_leaves_out_what_one_rank_skips(capsys):
    # sweep.pairs (the recipe's default) adds a send/recv table for a pair inside a node and one across nodes,
    # where the world has them: the count said 6 tables' rows only; at one rank sendrecv is skipped (5 tables)
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=64"]) == 0
    out = capsys.readouterr().out
    assert ("# sweep sizes: 4 per collective (8 to 64, x2 each step) x 6 collectives = 24 rows, and up to 8 more "
            "in sweep.pairs' 2 send/recv tables") in out
    assert main([SWEEP, "--dry-run", "--world-size", "1", "sweep.max_bytes=64"]) == 0
    out = capsys.readouterr().out
    assert "x 5 collectives = 20 rows (sendrecv skipped: it needs at least 2 ranks)\n" in out
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=64", "sweep.pairs=false"]) == 0
    assert "x 6 collectives = 24 rows\n" in capsys.readouterr().out


def test_a_step_larger_than_the_range_is_refused_as_one_size(capsys):
    """nccl-tests -b 8 -e 1M -i 1G measures 8 bytes alone: a step past the range (a unit slip) was accepted."""
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=1G", "sweep.min_bytes=8", "sweep.max_bytes=1M"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: sweep.step_bytes: '1G' is more than the range from sweep.min_bytes 8 to sweep.max_bytes '1M': only "
        "min_bytes would be measured; allowed: a step up to max_bytes - min_bytes (1048568 bytes), or min_bytes = "
        "max_bytes for one size")
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=1G", "sweep.min_bytes=1M", "sweep.max_bytes=1M"]) == 0
    assert main([SWEEP, "--dry-run", "sweep.step_bytes=1M", "sweep.min_bytes=1M", "sweep.max_bytes=2M"]) == 0
    capsys.readouterr()
    assert main([SWEEP, "--dry-run", "sweep.min_bytes=1G", "sweep.max_bytes=1K"]) == 2
    assert "allowed: max_bytes >= min_bytes" in capsys.readouterr().err


@pytest.mark.integration
def test_a_rerun_keeps_the_earlier_sweeps_record_whole_and_does_not_mix_it_with_its_own(tmp_path):
    """A rerun into a finished sweep's directory emptied collectives.txt and sweep.jsonl at its start (they are
    written as each size is measured) but left the earlier collectives.json, .csv and nccl-tests/: a rerun that
    failed or was killed left the earlier sweep's numbers as its own (the report showed them) beside its own
    empty table, and the earlier table was lost. The earlier record now moves whole to logs/sweep.attempt-N/."""
    out = tmp_path / "sweep"
    small = ("sweep.max_bytes=64", "sweep.ops=[all_reduce]", "sweep.iters=2", "sweep.warmup=1", "sweep.latency_iters=2")
    first = run_cli(out, *small, recipe=SWEEP)
    assert first.returncode == 0, first.stderr[-3000:]
    table, numbers = (out / "collectives.txt").read_text(), (out / "collectives.json").read_text()
    again = run_cli(out, *small, "sweep.root=3", recipe=SWEEP)  # fails at its start: root 3 of 1 rank
    assert again.returncode == 2 and "sweep.root: got 3" in again.stderr
    kept = out / "logs" / "sweep.attempt-1"
    assert (kept / "collectives.txt").read_text() == table and (kept / "collectives.json").read_text() == numbers
    assert {p.name for p in kept.iterdir()} == {"collectives.txt", "collectives.json", "collectives.csv",
                                                "nccl-tests", "sweep.jsonl"}
    assert not (out / "collectives.json").exists() and not (out / "nccl-tests").exists()
    assert telemetry_main(["report", str(out)]) == 0
    md = (out / "report" / "report.md").read_text()
    assert "no collectives.json: the sweep did not finish, and its collectives.txt holds no measured size" in md


def test_the_end_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A job stopped (or a disk full) while the end's files were written left half a collectives.csv or
    nccl-tests JSON, read as whole: each is now written beside and renamed, and a failure leaves neither."""
    from trainer.sweep import output

    def full(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(output.os, "replace", full)
    with pytest.raises(OSError):
        output._write_atomic(str(tmp_path / "collectives.csv"), "a,b\n1,2\n")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .tmp


def test_a_rerun_removes_the_half_written_file_a_killed_run_left(tmp_path):
    """A SIGKILL inside _write_atomic leaves sweep.jsonl.tmp: no reader opens it, and a rerun removed nothing."""
    from trainer.sweep import output
    (tmp_path / "sweep.jsonl").write_text('{"op": "all_reduce"}\n')
    (tmp_path / "sweep.jsonl.tmp").write_text('{"op": "all_red')
    (tmp_path / "collectives.csv.tmp").write_text("a,b\n")
    kept = output.keep_earlier_record(str(tmp_path), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
    assert os.listdir(kept) == ["sweep.jsonl"]


def test_the_memory_line_names_an_op_the_world_runs():
    """At 1 rank the sweep skips sendrecv, yet the dry run's memory line named it as the largest need."""
    from trainer.sweep.plan import largest_need

    assert largest_need(["all_reduce", "sendrecv"], 64 << 20, 1, "float32", "both")[1] == "all_reduce"
    assert largest_need(["all_reduce", "sendrecv"], 64 << 20, 2, "float32", "both")[1] == "sendrecv"
    assert largest_need(["sendrecv"], 64 << 20, 1, "float32", "both")[1] == "sendrecv"  # nothing else to name


def test_a_world_of_one_needs_no_memory_for_the_p2p_matrix():
    """p2p_matrix measures each pair of ranks: at 1 rank there is none and it allocates nothing, yet the dry run (and
    the run's own check) counted its send and receive buffers as the largest need."""
    from trainer.sweep.plan import largest_need, memory_problem

    assert largest_need(["all_reduce", "p2p_matrix"], 64 << 20, 1, "float32", "both")[1] == "all_reduce"
    assert largest_need(["all_reduce", "p2p_matrix"], 64 << 20, 2, "float32", "both")[1] == "p2p_matrix"
    assert memory_problem(["all_reduce", "p2p_matrix"], 3 << 30, 1, "float32", "both", 4 << 30, "a 4 GiB GPU",
                          reserve=0) is None


def test_a_factor_beside_step_bytes_and_a_root_beyond_the_planned_world_are_refused(capsys):
    """nccl-tests' -f 4 -i 1M multiplies by 4 (a factor above 1 wins); the sweep added 1M and left the factor
    unused without a word. sweep.root 5 at --world-size 2 passed the dry run and was refused once the ranks ran."""
    assert main([SWEEP, "--dry-run", "sweep.min_bytes=1M", "sweep.max_bytes=8M", "sweep.step_bytes=1M",
                 "sweep.factor=4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: sweep.factor: got 4 beside sweep.step_bytes '1M': the sweep adds step_bytes each step and would "
        "not use the factor (nccl-tests multiplies when both -f and -i are given); allowed: sweep.step_bytes null "
        "to multiply by the factor, or sweep.factor 1 with step_bytes")
    assert main([SWEEP, "--dry-run", "sweep.min_bytes=1M", "sweep.max_bytes=8M", "sweep.step_bytes=1M",
                 "sweep.factor=2"]) == 0  # the recipe's default factor cannot be told from one given
    capsys.readouterr()
    assert main([SWEEP, "--dry-run", "--world-size", "2", "sweep.root=5"]) == 2
    assert capsys.readouterr().err.strip() == "error: sweep.root: got 5; allowed: 0..1 at world size 2"
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.root=5"]) == 0


def test_nccl_tests_spellings_of_ops_and_dtypes_get_the_sweeps_name(capsys):
    """nccl-tests' binaries and -d names (alltoall_perf, -d half) and torch's bf16 were refused with the list
    alone: the name the user meant was left to find in it."""
    assert main([SWEEP, "--dry-run", "sweep.ops=[alltoall, all_gather_perf, bogus]", "sweep.dtype=half"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: sweep.ops: got ['alltoall', 'all_gather_perf', 'bogus']; did you mean 'all_to_all' for 'alltoall', "
        "'all_gather' for 'all_gather_perf'? allowed: all_reduce, reduce_scatter, all_gather, all_to_all, sendrecv, "
        "broadcast, reduce, gather, scatter, p2p_matrix",
        "error: sweep.dtype: got 'half'; did you mean 'float16'? allowed: float32, float64, float16, bfloat16, int32, "
        "int64, int8, uint8"]
    assert main([SWEEP, "--dry-run", "sweep.dtype=fp8"]) == 2
    assert capsys.readouterr().err.strip() == ("error: sweep.dtype: got 'fp8'; allowed: float32, float64, float16, "
                                               "bfloat16, int32, int64, int8, uint8")
