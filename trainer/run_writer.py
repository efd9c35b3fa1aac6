"""The trainer's run directory: telemetry/rundir.py owns the layout, the writer and the schema; a failed
metrics write is a fault here (exit 1, one line; only the writing rank sees it)."""
from __future__ import annotations

import json

from telemetry.redaction import redact_text
from telemetry.rundir import MetricsWriteError, RunDir as _RunDir, RunKey, now_iso, read_jsonl, write_json_atomic

from .error_report import FaultError

__all__ = ["RunDir", "now_iso", "read_jsonl", "record_for_lost_rank0", "write_json_atomic"]


def record_for_lost_rank0(run_json: str, error: str) -> bool:
    """A surviving rank records the end rank 0 did not live to record (killed, crashed hard): run.json, still
    `running`, becomes `failed` with `error`. Everything else stays rank 0's last version. False when rank 0
    recorded an end after all, or run.json cannot be read or written."""
    try:
        with open(run_json, encoding="utf-8") as f:
            info = json.load(f)
        if not isinstance(info, dict) or info.get(RunKey.STATUS) != "running":
            return False
        end = now_iso()
        info.update({RunKey.STATUS: "failed", RunKey.EXIT_CODE: 1, RunKey.ERROR: redact_text(error),
                     RunKey.END_TIME: end})
        if info.get(RunKey.ATTEMPT) is not None:  # rank 0 would have added its attempt's record: a resume lists it
            attempts = info.get(RunKey.ATTEMPTS)
            info[RunKey.ATTEMPTS] = (attempts if isinstance(attempts, list) else []) + [
                {RunKey.ATTEMPT: info[RunKey.ATTEMPT], RunKey.START_TIME: info.get(RunKey.START_TIME),
                 RunKey.END_TIME: end, RunKey.STATUS: "failed"}]
        write_json_atomic(run_json, info)
    except (OSError, ValueError):
        return False
    return True


class RunDir(_RunDir):
    def _write_line(self, record: dict) -> None:
        try:
            super()._write_line(record)
        except MetricsWriteError as exc:
            raise FaultError(str(exc), everywhere=False) from None
