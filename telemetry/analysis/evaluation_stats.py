"""Statistics of an evaluation's repeats: one headline number per run, summarised per fabric variant.

- the headline: a training run's time to train where its recipe sets a target (MLPerf Training's score:
  from the first step's start to the step that reached it), else its median iteration time; a sweep's
  all_reduce average bus bandwidth;
- mean and sample standard deviation of the repeats, with the 95% t-interval of the mean (from 3 runs:
  t(0.975, 2) = 4.30 makes it wide, but it says how far 3 runs pin the mean down);
- from 3 repeats, the olympic mean as MLPerf Training scores a benchmark (training_rules.adoc, "Benchmark
  results"): the fastest and the slowest run dropped, the rest averaged; and every run ranked, the two
  dropped ones marked;
- from 3 repeats of both variants, a 95% interval of the difference of their means: Welch's t-interval
  (unequal variances), as scipy.stats.ttest_ind(..., equal_var=False).confidence_interval gives it;
- from 3 rounds in which both variants completed, the same difference paired by round: the mean of the
  per-round differences with its paired t-interval (scipy.stats.ttest_rel). The runner interleaves the
  variants within each round, so a drift of the hosts shared by a round's runs cancels in the pairs
  instead of widening the interval.

Imports no torch (analysis).
"""
from __future__ import annotations

import json
import math
import os
import statistics

from telemetry.rundir import StepKey

MIN_REPEATS_FOR_INTERVAL = 3  # the olympic mean drops 2 runs: 3 is the fewest that leaves one


def run_metric(run_dir: str, sweep: bool) -> dict:
    """The headline number of one run: a training run's median iteration time (s), or a sweep's all_reduce
    average bus bandwidth (GB/s, as nccl-tests' "# Avg bus bandwidth"). value None with a reason if absent."""
    if sweep:
        path = os.path.join(run_dir, "collectives.json")
        try:
            with open(path, encoding="utf-8") as f:
                ops = json.load(f).get("ops") or {}
        except (OSError, json.JSONDecodeError) as exc:
            return {"name": "busbw", "unit": "GB/s", "value": None, "reason": f"no collectives.json: {exc}"}
        op = "all_reduce" if "all_reduce" in ops else next(iter(ops), None)
        value = (ops.get(op) or {}).get("avg_busbw_GBps") if op else None
        return {"name": f"{op or 'all_reduce'} avg busbw", "unit": "GB/s", "value": value, "higher_is_better": True,
                "reason": None if value is not None else "the sweep has no average bus bandwidth"}
    from telemetry.analysis.runs import RunError, load_run, median
    try:
        run = load_run(run_dir)
    except RunError as exc:
        return {"name": "iteration time", "unit": "s", "value": None, "reason": str(exc)}
    from telemetry.analysis.training_comparison import time_to_train
    ttt = time_to_train(run)
    if ttt is not None:  # a target in the recipe: scored as MLPerf scores it
        # a run that missed the target did not converge: MLPerf's score may drop one such run as the slowest
        reached = (run.info.get("final") or {}).get("target_reached_step") is not None
        return {"name": f"time to train ({ttt['target']})", "unit": "s", "value": ttt.get("seconds"),
                "higher_is_better": False, "reason": ttt.get("why"), "converged": reached}
    value = median([r.get(StepKey.STEP_TIME_S) for r in run.timed_steps()])
    return {"name": "iteration time", "unit": "s", "value": value, "higher_is_better": False,
            "reason": None if value is not None else "no timed steps"}


def olympic_mean(values: list[float], not_converged: int = 0) -> float | None:
    """MLPerf Training's score over a benchmark's runs: the fastest and the slowest dropped, the rest
    averaged; None under 3 runs (nothing would be left). `not_converged`: runs that missed the target (not in
    `values`): one is the slowest run, the one dropped (training_rules.adoc: "a single non-converging run may
    be treated as the slowest run and dropped"); more than one leaves no valid score (None)."""
    if not_converged > 1 or len(values) + not_converged < MIN_REPEATS_FOR_INTERVAL:
        return None
    kept = sorted(values)[1:] if not_converged else sorted(values)[1:-1]
    return sum(kept) / len(kept)


def _olympic_reason(n: int, not_converged: int) -> str | None:
    if not_converged > 1:
        return f"{not_converged} runs missed the target: MLPerf's score is invalid with more than one"
    if n + not_converged < MIN_REPEATS_FOR_INTERVAL:
        return f"fewer than {MIN_REPEATS_FOR_INTERVAL} runs"
    return None


mlperf_mean = olympic_mean  # the name evaluation.json has used


def mean_interval(values: list[float]) -> list[float] | None:
    """95% t-interval of the mean (scipy.stats.t); None under 3 values."""
    n = len(values)
    if n < MIN_REPEATS_FOR_INTERVAL:
        return None
    m, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0:
        return [m, m]
    from scipy import stats
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return [m - half, m + half]


def describe(values: list[float], not_converged: int = 0) -> dict:
    """`not_converged`: the variant's runs that missed the target (no value), for the olympic mean."""
    n = len(values)
    return {"n": n, "values": values, "mean": statistics.fmean(values) if n else None,
            "sd": statistics.stdev(values) if n >= 2 else None,
            "mlperf_mean": olympic_mean(values, not_converged), "not_converged": not_converged,
            "mlperf_mean_reason": _olympic_reason(n, not_converged), "mean_interval": mean_interval(values)}


def rank_runs(runs: list[dict], higher_is_better: bool = False) -> list[dict]:
    """Every run with a value, best first: {rank, variant, round, value, dropped}. `dropped` marks, per
    variant, the fastest and the slowest run the olympic mean leaves out (from 3 runs of that variant); where one
    run of the variant missed the target, it is the slowest dropped, so only the fastest is marked here; where
    more than one did, the variant has no olympic mean and nothing is marked."""
    missed = {}
    for r in runs:
        if r.get("converged") is False:
            missed[r["variant"]] = missed.get(r["variant"], 0) + 1
    ranked = sorted((r for r in runs if r.get("value") is not None), key=lambda r: r["value"],
                    reverse=higher_is_better)
    out = [{**r, "rank": i + 1, "dropped": None} for i, r in enumerate(ranked)]
    for variant in dict.fromkeys(r["variant"] for r in out):
        mine = [r for r in out if r["variant"] == variant]
        if olympic_mean([r["value"] for r in mine], missed.get(variant, 0)) is not None:
            mine[0]["dropped"] = "best of its variant (olympic mean)"
            if not missed.get(variant):
                mine[-1]["dropped"] = "worst of its variant (olympic mean)"
    return out


def difference(a: list[float], b: list[float]) -> dict:
    """mean(b) - mean(a), as a value and a fraction of mean(a), with Welch's 95% interval when both have
    at least MIN_REPEATS_FOR_INTERVAL (3) values (else the interval is None with the reason)."""
    if not a or not b:
        return {"diff": None, "pct": None, "interval": None, "pct_interval": None, "reason": "no values"}
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    out = {"diff": mb - ma, "pct": (mb - ma) / ma if ma else None, "interval": None, "pct_interval": None,
           "method": "Welch t-interval, 95%", "reason": None}
    if min(len(a), len(b)) < MIN_REPEATS_FOR_INTERVAL:
        out["reason"] = f"fewer than {MIN_REPEATS_FOR_INTERVAL} runs of each"
        return out
    if statistics.variance(a) == 0 and statistics.variance(b) == 0:
        low = high = mb - ma  # no spread at all: the interval is the difference itself
    else:
        from scipy import stats
        ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
        low, high = float(ci.low), float(ci.high)
    out["interval"] = [low, high]
    out["pct_interval"] = [low / ma, high / ma] if ma else None
    out["excludes_zero"] = low > 0 or high < 0
    out["ratio_pct_interval"] = _ratio_interval(a, b)
    return out


def _ratio_interval(a: list[float], b: list[float]) -> list[float] | None:
    """Welch's 95% interval of log(b) - log(a), as a % change (the ratio of the geometric means), for values that
    are all positive (times, bandwidths); None otherwise. A large fall read as a difference over mean(a) reaches
    past -100% when a's runs spread: 5 repeats of 1gbit (0.1236 +- 0.01 GB/s) against 100mbit on 3 nodes (0.01141
    +- 0.00017) gave [-101.2%, -80.3%] for a ratio of 0.092 in every round; as a ratio [-91.7%, -89.7%]."""
    if min(a + b) <= 0:
        return None
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    if statistics.variance(la) == 0 and statistics.variance(lb) == 0:
        low = high = statistics.fmean(lb) - statistics.fmean(la)
    else:
        from scipy import stats
        ci = stats.ttest_ind(lb, la, equal_var=False).confidence_interval(0.95)
        low, high = float(ci.low), float(ci.high)
    return [math.exp(low) - 1.0, math.exp(high) - 1.0]


def paired_difference(a: dict[int, float], b: dict[int, float]) -> dict:
    """b - a paired by round ({round: value}; rounds where both have a value): the mean per-round difference,
    as a value and a fraction of a's mean over those rounds, with the paired 95% t-interval from MIN_REPEATS_FOR_INTERVAL (3) pairs."""
    rounds = sorted(set(a) & set(b))
    out = {"method": "paired t-interval over rounds, 95%", "rounds": len(rounds), "diff": None, "pct": None,
           "interval": None, "pct_interval": None, "reason": None}
    if not rounds:
        out["reason"] = "no round in which both completed"
        return out
    diffs = [b[r] - a[r] for r in rounds]
    base = statistics.fmean(a[r] for r in rounds)
    out["diff"] = statistics.fmean(diffs)
    out["pct"] = out["diff"] / base if base else None
    if len(rounds) < MIN_REPEATS_FOR_INTERVAL:
        out["reason"] = f"fewer than {MIN_REPEATS_FOR_INTERVAL} rounds in which both completed"
        return out
    if statistics.variance(diffs) == 0:
        low = high = out["diff"]
    else:
        from scipy import stats
        ci = stats.ttest_rel([b[r] for r in rounds], [a[r] for r in rounds]).confidence_interval(0.95)
        low, high = float(ci.low), float(ci.high)
    out["interval"] = [low, high]
    out["pct_interval"] = [low / base, high / base] if base else None
    out["excludes_zero"] = low > 0 or high < 0
    out["ratio_pct_interval"] = _paired_ratio_interval([a[r] for r in rounds], [b[r] for r in rounds])
    return out


def _paired_ratio_interval(a: list[float], b: list[float]) -> list[float] | None:
    """The paired 95% interval of log(b/a) over rounds, as a % change (the geometric mean of the rounds' ratios),
    for values that are all positive; None otherwise: the paired twin of _ratio_interval."""
    if min(a + b) <= 0:
        return None
    logs = [math.log(y / x) for x, y in zip(a, b)]
    if statistics.variance(logs) == 0:
        low = high = logs[0]
    else:
        from scipy import stats
        ci = stats.ttest_1samp(logs, 0.0).confidence_interval(0.95)
        low, high = float(ci.low), float(ci.high)
    return [math.exp(low) - 1.0, math.exp(high) - 1.0]


def summarize(values_by_variant: dict[str, list[float]],
              rounds_by_variant: dict[str, dict[int, float]] | None = None,
              not_converged: dict[str, int] | None = None) -> dict:
    """Per variant its description, and every pair's difference (each later variant against each earlier);
    with each value's round, the pair's difference paired by round too."""
    names = list(values_by_variant)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair = {"a": a, "b": b, **difference(values_by_variant[a], values_by_variant[b])}
            if rounds_by_variant is not None:
                pair["paired"] = paired_difference(rounds_by_variant.get(a, {}), rounds_by_variant.get(b, {}))
            pairs.append(pair)
    return {"variants": {n: describe(v, (not_converged or {}).get(n, 0)) for n, v in values_by_variant.items()},
            "differences": pairs}


def summarize_runs(runs: list[dict], names: list[str], higher_is_better: bool = False) -> dict:
    """summarize() from the runs ({variant, round, value}) with the ranking beside it."""
    values = {n: [r["value"] for r in runs if r["variant"] == n and r.get("value") is not None] for n in names}
    rounds = {n: {r["round"]: r["value"] for r in runs if r["variant"] == n and r.get("value") is not None}
              for n in names}
    missed = {n: sum(1 for r in runs if r["variant"] == n and r.get("converged") is False) for n in names}
    return {**summarize(values, rounds, missed), "ranking": rank_runs(runs, higher_is_better)}


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"
