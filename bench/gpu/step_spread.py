"""What the GPU bench scripts share (imported beside them: run.sh runs them as `python3 bench/gpu/X.py`): the
median step time and its spread, one definition for the plain loops and the report, and the result line."""
from __future__ import annotations

import json
import statistics


def spread(times: list[float]) -> dict:
    """Median, p10 and p90 step time and the spread (p90 - p10) as % of the median."""
    ordered = sorted(times)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"median_step_s": statistics.median(times), "p10_step_s": pick(0.1), "p90_step_s": pick(0.9),
            "spread_pct": 100 * (pick(0.9) - pick(0.1)) / statistics.median(times)}


def emit(result: dict, out: str | None) -> None:
    """The result as one JSON line on stdout, and into `out` where given (run.sh's OUT/<step>.json)."""
    print(json.dumps(result))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
