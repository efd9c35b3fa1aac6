"""The trainer's run directory: telemetry/rundir.py owns the layout, the writer and the schema; a failed
metrics write is a fault here (exit 1, one line; only the writing rank sees it)."""
from __future__ import annotations

from telemetry.rundir import MetricsWriteError, RunDir as _RunDir, now_iso, read_jsonl, write_json_atomic

from .error_report import FaultError

__all__ = ["RunDir", "now_iso", "read_jsonl", "write_json_atomic"]


class RunDir(_RunDir):
    def _write_line(self, record: dict) -> None:
        try:
            super()._write_line(record)
        except MetricsWriteError as exc:
            raise FaultError(str(exc), everywhere=False) from None
