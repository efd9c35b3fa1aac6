"""The straggler detector over per-step data recorded in the fabric lab, and over crafted steps where
the right answer is known: who, where, which kind, from which step, and no finding from noise."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from telemetry import stragglers

from telemetry.stragglers import StragglerDetector, detect, leaders

RUNS = Path(__file__).parent / "stragglers_runs"


def recorded(name: str) -> dict:
    """Rank 0's metrics lines (step and cross-rank spreads only) from a real lab run; `source` says which."""
    return json.loads((RUNS / f"{name}.json").read_text())


def spread(values: list[float]) -> dict:
    """The cross-rank figures session.py reduces to rank 0 (a tie goes to the higher rank, as there)."""
    top = max(values)
    return {"min": min(values), "mean": sum(values) / len(values), "max": top,
            "max_rank": max(r for r, v in enumerate(values) if v == top), "ranks": len(values), "median": None}


def steps(compute: list[list[float]], probes: dict[int, list[float]] | None = None,
          step_s: float | None = None) -> list[dict]:
    """Records from per-step, per-rank compute times and, on some steps, per-rank probe times (NaN-free:
    a rank without a probe value is simply left out, as the reduction leaves out unknowns); `step_s`: every
    rank's step time (left out: the detector takes the slowest compute as the least the step took)."""
    out = []
    for i, row in enumerate(compute, start=1):
        ranks = {"compute_s": spread(row)}
        if step_s is not None:
            ranks["step_time_s"] = spread([step_s] * len(row))
        if probes and i in probes:
            ranks["link_in_s"] = spread(probes[i])
        out.append({"step": i, "ranks": ranks})
    return out


def test_recorded_slow_compute_rank_is_named_with_its_host():
    run = recorded("slow_compute")
    s = detect(run["metrics"], run["hosts"])
    assert (s["verdict"], s["rank"], s["host"]) == ("compute", 1, "lab-node1")
    assert s["detected_at_step"] <= 20 and len(s["findings"]) == 1


def test_recorded_slow_link_is_named_by_the_sending_host():
    run = recorded("slow_link")
    s = detect(run["metrics"], run["hosts"])
    # node 1's egress was shaped: rank 0 (node 0) receives slowly, so the sender, rank 1 on lab-node1, is named
    assert (s["verdict"], s["rank"], s["host"]) == ("network", 1, "lab-node1")
    # and no compute finding: both ranks wait alike in the ring all-reduce, their compute stays level
    assert s["detected_at_step"] <= 20 and [f["verdict"] for f in s["findings"]] == ["network"]


def test_healthy_noise_gives_no_finding():
    rng = random.Random(7)
    compute = []
    for _ in range(500):
        row = [rng.uniform(0.2, 0.3), rng.uniform(0.2, 0.3)]
        if rng.random() < 0.1:  # a stall on a shared machine: one rank twice as slow for one step
            row[rng.randrange(2)] *= 2
        compute.append(row)
    probes = {i: [rng.uniform(1e-4, 2e-3), rng.uniform(1e-4, 2e-3)] for i in range(5, 501, 5)}
    probes[50][1] = 0.05  # one slow probe, not repeated
    s = detect(steps(compute, probes), ["a", "b"])
    assert s["verdict"] == "none" and s["findings"] == [] and s["steps_checked"] == 500 and s["probes"] == 100


def test_compute_needs_persistence_then_names_the_rank_once():
    base = [[0.2, 0.2, 0.2, 0.2] for _ in range(30)]
    for i in range(10, 30):
        base[i][2] = 0.5  # rank 2 slow from step 11
    det = StragglerDetector(["h0", "h0", "h1", "h1"])
    found = []
    for r in steps(base, step_s=1.0):  # 1 s steps: the last 10 steps span the 10 s a finding needs
        found += det.feed(r["step"], r)
    assert len(found) == 1
    f = found[0]
    assert (f["verdict"], f["rank"], f["host"]) == ("compute", 2, "h1")
    assert f["since_step"] == 11 and f["detected_at_step"] == 11 + stragglers.COMPUTE_NEEDED - 1
    assert f["value_s"] == pytest.approx(0.5) and f["others_mean_s"] == pytest.approx(0.2)


def test_slow_link_of_a_middle_host_in_a_ring_of_three():
    # hosts h0 (ranks 0,1), h1 (2,3), h2 (4,5): the probe ring is 0 -> 2 -> 4 -> 0; h1's egress is slow,
    # so leader 4 (h2) receives slowly and the finding names its predecessor, rank 2 on h1
    hosts = ["h0", "h0", "h1", "h1", "h2", "h2"]
    assert leaders(hosts) == [0, 2, 4]
    compute = [[0.2] * 6 for _ in range(20)]
    probes = {i: [0.001, 0.001, 0.04] for i in range(5, 21, 5)}  # values of the three leaders only
    records = steps(compute)
    for r in records:
        if r["step"] in probes:
            sp = spread(probes[r["step"]])
            sp["max_rank"] = leaders(hosts)[sp["max_rank"]]  # the reduction's max_rank is a global rank
            r["ranks"]["link_in_s"] = sp
    s = detect(records, hosts)
    assert (s["verdict"], s["rank"], s["host"], s["detected_at_step"]) == ("network", 2, "h1", 15)


def test_a_uniformly_slow_fabric_or_machine_is_not_a_straggler():
    compute = [[0.9, 0.9] for _ in range(50)]
    probes = {i: [0.05, 0.05] for i in range(5, 51, 5)}
    assert detect(steps(compute, probes), ["a", "b"])["verdict"] == "none"


def test_no_cross_rank_data_is_unknown_with_a_reason():
    s = detect([{"step": 1, "loss": 1.0}], None)
    assert s["verdict"] is None and "cross-rank" in s["reason"]


def test_report_section_names_rank_host_and_kind():
    run = recorded("slow_link")
    title, _, rows = stragglers.report_section({"hosts": [{"hostname": h} for h in run["hosts"]]}, run["metrics"])
    table = dict((k, v) for k, v in rows if k != "finding")
    assert title == "Stragglers" and table["verdict"] == "network" and table["host"] == "lab-node1"
    assert "replayed from metrics.jsonl" in table["checked"]
    assert any("straggler rank 1 on lab-node1: network" in v for k, v in rows if k == "finding")


def test_recorded_healthy_500_steps_names_nobody():
    run = recorded("healthy_500")
    s = detect(run["metrics"], run["hosts"])
    assert s["verdict"] == "none" and s["findings"] == [] and s["steps_checked"] == 500 and s["probes"] == 100


def _old_rule_flags(compute: list[list[float]], rank: int) -> int:
    """The most steps `rank` was flagged on in any 10 consecutive steps (the rule before the time span)."""
    flags = [max(row) == row[rank] and row[rank] >= stragglers.COMPUTE_RATIO * (sum(row) - row[rank]) /
             (len(row) - 1) for row in compute]
    return max(sum(flags[i:i + 10]) for i in range(len(flags) - 9))


def test_a_run_too_short_for_the_rule_is_unknown_not_none():
    """4 steps and no link probe (a short lab run): the rule could not have named anyone, so the verdict is
    unknown with the reason, not "none"."""
    s = detect(steps([[0.2, 0.21]] * 4, step_s=0.3), ["a", "b"])
    assert s["verdict"] is None and s["findings"] == [] and s["steps_checked"] == 4
    assert s["reason"] == ("too few to judge: 4 steps checked (the compute rule needs 10 spanning 10 s) and 0 link "
                           "probes (the network rule needs 3)")
    assert stragglers.report_section({"telemetry": {"stragglers": s}}, [])[2][0][1].startswith(
        "not checked: too few to judge")


def test_a_noise_episode_of_a_few_seconds_on_a_loaded_host_names_nobody():
    """An oversubscribed host: another job takes rank 1's core for ~4 s of 0.3 s steps, and rank 1 computes
    1.6-2.2x slower on 13 steps in a row. That is one noisy window (the rule of 8 of 10 steps named it, as
    it did once in CI's healthy lab run); a straggler must stay slow for COMPUTE_SPAN_S."""
    rng = random.Random(3)
    compute = [[rng.uniform(0.2, 0.3), rng.uniform(0.2, 0.3)] for _ in range(40)]  # 12 s: the window fills
    for row in compute[8:21]:
        row[1] = row[0] * rng.uniform(1.6, 2.2)
    assert _old_rule_flags(compute, 1) >= 8
    s = detect(steps(compute, step_s=0.3), ["a", "b"])
    assert s["verdict"] == "none" and s["findings"] == [], s


def test_fast_steps_need_more_of_them_slow_steps_no_fewer_than_the_window():
    """The window is the last COMPUTE_WINDOW steps or more, until they span COMPUTE_SPAN_S: 0.25 s steps
    need 40 of them (80% flagged), 5 s steps still need 10; a delay that starts late is named once its
    steps are 80% of the window (8 of 10 one-second steps: detected 7 steps after it began)."""
    slow = [[0.1, 0.2] for _ in range(60)]
    fast = detect(steps(slow, step_s=0.25), ["a", "b"])
    assert (fast["verdict"], fast["detected_at_step"], fast["findings"][0]["flagged"]) == ("compute", 40, "40 of 40")
    long = detect(steps(slow, step_s=5.0), ["a", "b"])
    assert (long["verdict"], long["detected_at_step"], long["findings"][0]["flagged"]) == ("compute", 10, "10 of 10")
    late = [[0.2, 0.2]] * 20 + [[0.2, 1.2]] * 20  # 1 s more from step 21: the steps take 1.2 s
    s = detect(steps(late, step_s=1.2), ["a", "b"])
    assert (s["verdict"], s["rank"], s["findings"][0]["since_step"], s["detected_at_step"]) == ("compute", 1, 21, 28)
