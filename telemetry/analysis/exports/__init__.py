"""Outputs other tools read, written from a run directory after the run (nothing on the training path).

    export_run("runs/x", ["tensorboard", "parquet", "trace", "wandb"])

Sources: metrics.jsonl (rank 0's step records, cross-rank figures included), ranks/rank*.telemetry.jsonl
(every rank's own values) and, for the trace, ranks/rank*.events.jsonl (kept only when the run had
`telemetry.export` with trace). Everything lands in RUN/exports/; exports/manifest.json says what was
written and, for a kind that failed (library missing, no events), why.
"""
from __future__ import annotations

import json
import os
import sys

from telemetry.analysis.exports.scalars import step_scalars  # noqa: F401 (the names every exporter shows)
from telemetry.analysis.runs import Run, load_run
from telemetry.errors import InputError
from telemetry.rundir import EXPORTS

from telemetry.settings import EXPORT_KINDS as KINDS  # noqa: E402


def check_kinds(kinds) -> list[str]:
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds:
        raise ValueError(f"telemetry.export: got no kind; allowed: one or more of {', '.join(KINDS)}")
    if unknown:
        raise ValueError(f"telemetry.export: got {unknown}; allowed: {', '.join(KINDS)}")
    return list(dict.fromkeys(kinds))


def export_run(path: str, kinds, out: str | None = None) -> dict:
    """Write each kind under `out` (default RUN/exports); returns {kind: {"path": ...} or {"error": ...}}."""
    kinds = check_kinds(kinds)
    run = load_run(path)
    out = out or os.path.join(path, EXPORTS)
    os.makedirs(out, exist_ok=True)
    result = {}
    for kind in kinds:
        try:
            result[kind] = {"path": _WRITERS[kind](run, out)}
        except InputError as exc:  # the run lacks what this kind needs: said as it is, bad input
            result[kind] = {"path": None, "error": str(exc), "input": True}
        except (IsADirectoryError, NotADirectoryError, FileExistsError) as exc:  # out holds another kind of entry
            result[kind] = {"path": None, "input": True,
                            "error": f"{exc.filename!r} is in the way ({exc.strerror}); allowed: an output directory "
                                     f"whose {kind} entries are of the kind the export writes (a file where it "
                                     "writes a file, a folder where it writes a folder), or absent"}
        except ImportError as exc:  # the kind's library is not installed: a missing tool, bad input too
            result[kind] = {"path": None, "error": f"{type(exc).__name__}: {exc}", "input": True}
        except Exception as exc:  # one kind failing must not cost the others (or the run)
            result[kind] = {"path": None, "error": f"{type(exc).__name__}: {exc}"}
    manifest = os.path.join(out, "manifest.json")
    previous = {}
    if os.path.exists(manifest):
        try:
            with open(manifest, encoding="utf-8") as f:
                previous = json.load(f)
        except ValueError:  # damaged: rewritten from this export's entries
            previous = {}
        if not isinstance(previous, dict):
            previous = {}
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump({**previous, **result}, f, indent=1)
    return result


def _tensorboard(run: Run, out: str) -> str:
    from telemetry.analysis.exports.tensorboard import write
    return write(run, out)


def _wandb(run: Run, out: str) -> str:
    from telemetry.analysis.exports.wandb_offline import write
    return write(run, out)


def _parquet(run: Run, out: str) -> str:
    from telemetry.analysis.exports.parquet import write
    return write(run, out)


def _trace(run: Run, out: str) -> str:
    from telemetry.analysis.exports.trace import write
    return write(run, out)


_WRITERS = {"tensorboard": _tensorboard, "wandb": _wandb, "parquet": _parquet, "trace": _trace}


def export_after_close(telemetry) -> dict | None:
    """Rank 0 writes the exports a run asked for (`telemetry.export`) once its telemetry session has closed
    (close() waits for every rank's files); other ranks, and runs without exports, do nothing. A failure
    is printed, never raised: the run itself succeeded."""
    kinds, run_dir = telemetry.s.export, telemetry.run_dir
    if not kinds or not run_dir or getattr(telemetry, "rank", None) != 0:
        return None
    try:
        result = export_run(run_dir, kinds)
    except Exception as exc:  # say why there are no exports
        result = {k: {"error": f"{type(exc).__name__}: {exc}"} for k in kinds}
    for kind, r in result.items():
        if r.get("error"):
            print(f"[telemetry] export {kind}: not written: {r['error']}", file=sys.stderr, flush=True)
    return result
