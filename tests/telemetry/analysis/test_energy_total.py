"""The report's total energy: the sum of every step's job GPU energy, never a sum that counts a step without a
reading as 0 J (unknown values are null with a reason, never 0)."""
from __future__ import annotations

import json

from telemetry.analysis.report import summarize, tables
from telemetry.analysis.runs import load_run

from ..recorded import write_run


def _energy_row(s):
    rows = next(r for title, _, r in tables(s) if title == "Energy")
    return dict((k, v) for k, v in rows)


def test_total_energy_sums_every_step(tmp_path):
    run = load_run(str(write_run(tmp_path / "r")))
    s = summarize(run)
    assert s["energy"]["total_j"] == 6 * 500.0
    assert _energy_row(s)["total energy"] == "3,000 J"


def test_a_step_without_a_reading_leaves_the_total_unknown(tmp_path):
    d = write_run(tmp_path / "r")
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()[:6]]
    rows[3]["job_gpu_energy_j"] = None
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(load_run(str(d)))
    assert s["energy"]["per_step_j"] == 500.0
    assert s["energy"]["total_j"] is None
    assert _energy_row(s)["total energy"] == "n/a (1 of 6 steps without a reading)"


def test_layout_row_names_gradient_accumulation_and_busbw_reads_in_its_unit(tmp_path):
    """Lab round 7 (tiny LoRA, 2 nodes, micro batch 2 of global 16: 4 accumulation steps): the report's layout
    read only 'global batch 16' and the per-step all_reduce busbw '0.0013 GB/s'; the 2 calls and 150 kB a step
    were the same as with micro batch 8 (DDP syncs once a step), which the row now says."""
    from telemetry.analysis.report import accumulation_text
    lay = {"dp": 2, "tp": 1, "pp": 1, "data_parallel": "ddp", "global_batch_size": 16, "micro_batch_size": 2,
           "grad_accum_steps": 4}
    assert accumulation_text(lay) == ("; micro batch 2 x 4 accumulation steps per rank, the gradients synchronised "
                                      "once a step (the communication below is per step, not per micro-batch)")
    assert accumulation_text({**lay, "grad_accum_steps": 1}) == ""
    assert "synchronised" not in accumulation_text({**lay, "data_parallel": "fsdp"})
    s = summarize(load_run(str(write_run(tmp_path / "r"))))
    s["layout"] = lay
    flat = [c for _, _, rows in tables(s) for r in rows for c in r]
    assert any("micro batch 2 x 4 accumulation steps" in c for c in flat)
    assert not any(c.endswith(" GB/s") and c.startswith("0.00") for c in flat)


def test_a_partial_collectives_busbw_says_partial(tmp_path):
    """Lab round 7 (tiny Llama dp 2 x tp 2 x pp 2 on 4 nodes): all_reduce, 2.1 MB a step of which 44 B were timed
    (tp's functional collectives and pp's untimed on gloo), read busbw '585 B/s' with only its share marked."""
    s = summarize(load_run(str(write_run(tmp_path / "r"))))
    op = next(iter(s["comm"]))
    s["comm"][op].update(partial=True, untimed_bytes_per_step=2_100_000, busbw_GBps=5.85e-7)
    rows = next(r for title, _, r in tables(s) if title.startswith("Communication per step"))
    row = next(r for r in rows if r[0] == op)
    assert row[4] == "585 B/s (partial)" and row[5].endswith("(partial)")


def test_a_one_rank_groups_busbw_is_not_read_as_a_slow_one():
    """Lab round 7 (tp 2 x pp 2 on 4 ranks: dp of 1 rank): the dp row read busbw `0.00 GB/s (under 5 MB/s as
    printed)`, nccl-tests' rounding for a busbw that is (n-1)/n = 0 of nothing."""
    from telemetry.analysis.report import group_rows
    from telemetry.rundir import StepKey
    g = {"dim": "dp", "size": 1, "scope": "intra", "by_op": {"all_reduce": {}}, "count_per_step": 3,
         "bytes_per_step": 48, "time_per_step_s": 0.00678, "busbw_GBps": 0.0, "partial": False}
    _, _, rows = group_rows({StepKey.COMM_GROUPS: {"dp": g, "pp": {**g, "dim": "pp", "size": 2, "busbw_GBps": 1.16e-5}}})
    assert rows[0][-1] == "n/a (one rank: its calls move no bytes between ranks)"
    assert rows[1][-1] == "11.6 kB/s"
