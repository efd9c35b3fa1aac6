"""The run directory contract (README: "The run directory"): run.json, metrics.jsonl, ranks/, logs/, checkpoints/."""
from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import json
import os
from typing import Any

from telemetry.runs import read_jsonl  # one reader for the contract's JSON lines

from .errors import FaultError

# Space set aside at the start of a run, given back when the disk fills, so the final run.json
# (status failed, the error) can still be written.
RESERVE_BYTES = 1 << 20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_json_atomic(path: str, data: Any) -> None:
    """Readers never see a half-written file: write beside it, then rename over it."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # nothing half-written stays behind (a full disk)
        raise


class RunDir:
    def __init__(self, path: str, rank: int):
        self.path, self.rank = path, rank
        self.run_json = os.path.join(path, "run.json")
        self.metrics_path = os.path.join(path, "metrics.jsonl")
        self.checkpoints = os.path.join(path, "checkpoints")
        self.ranks = os.path.join(path, "ranks")
        self.logs = os.path.join(path, "logs")
        self.info: dict = {}
        self._metrics = None
        self._held: collections.deque = collections.deque()  # lines waiting for a held record ahead of them

    def create(self) -> None:
        for d in (self.path, self.ranks, self.logs):
            os.makedirs(d, exist_ok=True)
        if self.rank == 0:
            self._reserve()

    @property
    def reserve_path(self) -> str:
        return os.path.join(self.path, ".reserve")

    def _reserve(self) -> None:
        try:
            with open(self.reserve_path, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)  # real blocks, not a sparse file
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(self.reserve_path)

    def release_reserve(self) -> bool:
        try:
            os.remove(self.reserve_path)
            return True
        except OSError:
            return False

    # run.json is owned by rank 0; other ranks write under ranks/.
    def update(self, **fields) -> None:
        self.info.update(fields)
        if self.rank == 0:
            try:
                write_json_atomic(self.run_json, self.info)
            except OSError as exc:
                if exc.errno not in _DISK_FULL or not self.release_reserve():
                    raise
                write_json_atomic(self.run_json, self.info)

    def load_previous(self) -> dict:
        if os.path.exists(self.run_json):
            try:
                with open(self.run_json, encoding="utf-8") as f:
                    return json.load(f)
            except (OSError, json.JSONDecodeError):
                return {}
        return {}

    def open_metrics(self, resume_step: int) -> None:
        """Append per-step lines; on resume, set aside the lines past the checkpoint first."""
        if self.rank != 0:
            return
        rows = read_jsonl(self.metrics_path)
        if resume_step and any(r.get("step", 0) > resume_step for r in rows):
            n = 1
            while os.path.exists(os.path.join(self.logs, f"metrics.before-resume-{n}.jsonl")):
                n += 1
            os.replace(self.metrics_path, os.path.join(self.logs, f"metrics.before-resume-{n}.jsonl"))
            with open(self.metrics_path, "w", encoding="utf-8") as f:
                for r in rows:
                    if r.get("step", 0) <= resume_step:
                        f.write(json.dumps(r) + "\n")
        elif not resume_step and rows:
            os.replace(self.metrics_path, os.path.join(self.logs, f"metrics.replaced-{now_iso()}.jsonl"))
        self._metrics = open(self.metrics_path, "a", encoding="utf-8")

    def metrics_up_to(self, step: int) -> list[dict]:
        """The recorded steps up to `step` (what a resume from that step's checkpoint continues)."""
        return [r for r in read_jsonl(self.metrics_path) if r.get("step", 0) <= step]

    def write_metrics(self, record: dict) -> None:
        """Append a step's line. A record marked `_held` (telemetry completing its communication fields from
        NCCL's late completion reports) waits, and later ones behind it, until the mark is gone."""
        self._held.append(record)
        while self._held and not self._held[0].get("_held"):
            self._write_line(self._held.popleft())

    def _write_line(self, record: dict) -> None:
        record.pop("_held", None)
        if self._metrics is not None:
            try:
                self._metrics.write(json.dumps(record) + "\n")
                self._metrics.flush()  # a killed job keeps every completed step
            except OSError as exc:
                stream, self._metrics = self._metrics, None
                with contextlib.suppress(OSError):
                    stream.close()  # closes the file even when its flush fails again
                raise FaultError(f"{self.metrics_path}: cannot write step {record.get('step')}: "
                                 f"{exc.strerror or exc}", everywhere=False) from None

    def write_rank_file(self, name: str, data: Any) -> None:
        write_json_atomic(os.path.join(self.ranks, f"rank{self.rank:05d}.{name}.json"), data)

    def close(self) -> None:
        while self._held:  # never released (a failed run): written as they are
            with contextlib.suppress(FaultError):
                self._write_line(self._held.popleft())
        if self._metrics is not None:
            with contextlib.suppress(OSError):  # a full disk: the error is already recorded
                self._metrics.close()
            self._metrics = None
        if self.rank == 0:
            self.release_reserve()
