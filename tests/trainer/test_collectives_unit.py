"""trainer.sweep in-process: a small sweep in a gloo group of one through trainer.cli.main,
its table read back by telemetry's nccl-tests reader. (Send/receive needs a peer: two-rank sweeps are in
tests/trainer/test_sweep.py, integration tier.)"""
from __future__ import annotations

import json
import os

import pytest
import torch.distributed as dist

from telemetry.analysis.nccl_tests import read
from tests.conftest import REPO
from trainer.cli import main

SWEEP = str(REPO / "recipes" / "collectives.yaml")
OPS = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather", "scatter"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    saved = dict(os.environ)
    try:
        code = main([SWEEP, f"output_dir={out}", "sweep.max_bytes=4K", "sweep.iters=2", "sweep.warmup=1",
                     f"sweep.ops=[{','.join(OPS + ['sendrecv'])}]", "sweep.latency_table=false", "sweep.pairs=false"])
        assert not dist.is_initialized()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out


def test_sweep_completes_with_every_op_and_size(sweep):
    code, out = sweep
    info = json.loads((out / "run.json").read_text())
    assert code == 0 and info["status"] == "completed", info.get("error")
    result = json.loads((out / "collectives.json").read_text())
    assert result["world_size"] == 1 and list(result["ops"]) == OPS
    sizes = [r["size"] for r in result["ops"]["all_reduce"]["rows"]]
    assert sizes == [8 * 2 ** k for k in range(10)]  # 8 B to 4 KiB, factor 2


def test_results_are_checked_and_bus_bandwidth_of_one_rank_is_zero(sweep):
    _, out = sweep
    result = json.loads((out / "collectives.json").read_text())
    for op in OPS:
        for row in result["ops"][op]["rows"]:
            for block in (row["out_of_place"], row["in_place"]):
                if block is None:
                    continue
                assert block["wrong"] == 0 and block["time_us"] > 0 and block["algbw_GBps"] > 0
                if op not in ("broadcast", "reduce"):  # (n - 1) / n crosses a link: none in a world of one
                    assert block["busbw_GBps"] == 0.0


def test_the_text_table_reads_back_as_nccl_tests_output(sweep):
    _, out = sweep
    text = read(str(out / "collectives.txt"))
    result = json.loads((out / "collectives.json").read_text())
    assert text["ops"] and set(text["ops"]) == set(OPS)
    assert text["rows_read"] == sum(len(result["ops"][op]["rows"]) for op in OPS)
    csv = (out / "collectives.csv").read_text().splitlines()
    assert len(csv) == text["rows_read"] + 1


def test_sendrecv_in_a_world_of_one_is_skipped_with_the_reason(sweep):
    code, out = sweep
    result = json.loads((out / "collectives.json").read_text())
    assert code == 0 and "sendrecv" not in result["ops"]
    assert result["skipped"] == {"sendrecv": "needs at least 2 ranks"}
    assert "# fabric-harness: sendrecv skipped: it needs at least 2 ranks" in (out / "collectives.txt").read_text()


def test_a_gather_that_delivers_the_wrong_values_is_counted_wrong(tmp_path, monkeypatch):
    """The check reads the root's result: a gather that moved zeros instead of the operand is caught in
    both forms (in place, the root's own chunk is overwritten too)."""
    real = dist.gather

    def zeros_gathered(tensor, gather_list=None, dst=None, group=None, async_op=False, **kw):
        return real(tensor.new_zeros(tensor.shape), gather_list, dst=dst, group=group, async_op=async_op, **kw)
    monkeypatch.setattr(dist, "gather", zeros_gathered)
    out = tmp_path / "run"
    saved = dict(os.environ)
    try:
        code = main([SWEEP, f"output_dir={out}", "sweep.min_bytes=64", "sweep.max_bytes=256", "sweep.iters=1",
                     "sweep.warmup=0", "sweep.ops=[gather]", "sweep.latency_table=false", "sweep.pairs=false"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    rows = json.loads((out / "collectives.json").read_text())["ops"]["gather"]["rows"]
    assert code == 0  # as nccl-tests: the table says how many were wrong (its footer: FAILED)
    assert [(r["out_of_place"]["wrong"], r["in_place"]["wrong"]) for r in rows] == [(16, 16), (32, 32), (64, 64)]
