"""The collective sweep: sizes, the nccl-tests table format, and a real 2-rank gloo sweep with checks."""
from __future__ import annotations

import json

import pytest

from trainer.cli import main
from trainer.workloads.collectives import HEADER, avg_busbw, format_row, sizes

from ..conftest import REPO, run_cli

SWEEP = str(REPO / "recipes" / "collectives.yaml")


def test_sizes_and_size_parsing(capsys):
    assert sizes(8, 64, 2) == [8, 16, 32, 64] and sizes(8, 100, 4) == [8, 32]
    assert main([SWEEP, "--dry-run", "--world-size", "8", "sweep.max_bytes=1G", "sweep.min_bytes=4K"]) == 0
    assert main([SWEEP, "sweep.max_bytes=lots", "sweep.ops=[all_reduce,allreduce]", "sweep.factor=1"]) == 2
    err = capsys.readouterr().err
    assert "sweep.max_bytes: got 'lots'; expected bytes such as 8, 4K, 64M or 1G" in err
    assert "sweep.ops: got ['all_reduce', 'allreduce']; allowed: all_reduce, reduce_scatter" in err
    assert "sweep.factor: got 1; expected an integer >= 2" in err


def test_table_row_and_average_bus_bandwidth():
    row = {"size": 1048576, "count": 262144,
           "out_of_place": None,
           "in_place": {"time_us": 1000.0, "algbw_gbps": 1.048576, "busbw_gbps": 1.835008, "wrong": 0}}
    line = format_row(row, "float", "sum", -1)
    assert line.split() == ["1048576", "262144", "float", "sum", "-1", "n/a", "1000.00", "1.049", "1.835", "0"]
    assert "out-of-place" in HEADER and "#wrong" in HEADER and "(GB/s)" in HEADER
    rows = [row, {"size": 8, "count": 2, "out_of_place": {"time_us": 1, "algbw_gbps": 0.0, "busbw_gbps": 0.5,
                                                          "wrong": 0}, "in_place": None}]
    assert avg_busbw(rows) == pytest.approx((1.835008 + 0.5) / 2)


def test_two_rank_sweep_is_correct_and_recorded(tmp_path):
    res = run_cli(tmp_path / "sweep", "sweep.max_bytes=64K", "sweep.factor=32", "sweep.iters=3",
                  "sweep.warmup=1", "sweep.latency_iters=5", recipe=SWEEP, nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((tmp_path / "sweep" / "collectives.json").read_text())
    assert set(out["ops"]) == {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv", "broadcast",
                               "sendrecv_intra_node"}
    for op, r in out["ops"].items():
        assert r["wrong"] == 0, op
        assert [row["size"] for row in r["rows"]] == [8, 256, 8192], op
        for row in r["rows"]:
            block = row["in_place"] or row["out_of_place"]
            assert block["busbw_gbps"] == pytest.approx(block["algbw_gbps"] * (1.0 if op in (
                "all_reduce", "sendrecv", "broadcast", "sendrecv_intra_node") else 0.5))
    assert set(out["latency_us"]) == {"all_reduce_4B_us", "sendrecv_48B_us", "sendrecv_48B_intra_node_us"}
    assert "# Avg bus bandwidth" in res.stdout and "# Out of bounds values : 0 OK" in res.stdout
    info = res.run_json()
    assert info["status"] == "completed" and info["final"]["wrong"] == 0
    assert (tmp_path / "sweep" / "collectives.txt").read_text().count("# Avg bus bandwidth") == 7
