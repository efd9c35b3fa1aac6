"""Rank-0 progress: one concise line per log interval; other ranks speak only for warnings."""
from __future__ import annotations

import datetime
import sys
import time

from telemetry.rundir import StepKey


class Progress:
    def __init__(self, max_steps: int, every: int, enabled: bool):
        self.max_steps, self.every, self.enabled = max_steps, every, enabled
        self._times: list[float] = []
        self._start = time.perf_counter()

    def info(self, text: str) -> None:
        if self.enabled:
            print(f"[trainer] {text}", flush=True)

    def warn(self, text: str) -> None:
        print(f"[trainer] warning: {text}", file=sys.stderr, flush=True)

    def step(self, rec: dict) -> None:
        self._times.append(rec[StepKey.STEP_TIME_S])
        step = rec[StepKey.STEP]
        if not self.enabled or (step % self.every and step != self.max_steps):
            return
        recent = self._times[-20:]
        # the first step includes warm-up (allocator, first collectives); leave it out of the ETA when possible
        per_step = sum(recent[1:] or recent) / len(recent[1:] or recent)
        eta = datetime.timedelta(seconds=round(per_step * (self.max_steps - step)))
        parts = [f"step {step}/{self.max_steps}", f"loss {rec[StepKey.LOSS]:.4f}", f"lr {rec[StepKey.LR]:.2e}",
                 f"{rec['step_time_s']:.3f} s/step"]
        if rec.get(StepKey.TOKENS_PER_S) is not None:
            parts.append(f"{rec['tokens_per_s']:,.0f} tok/s")
        else:
            parts.append(f"{rec['samples_per_s']:,.1f} samples/s")
        if rec.get(StepKey.EVAL_LOSS) is not None:
            parts.append(f"eval_loss {rec['eval_loss']:.4f}")
        if rec.get(StepKey.EVAL_ACCURACY) is not None:
            parts.append(f"eval_acc {rec['eval_accuracy']:.4f}")
        parts.append(f"eta {eta}")
        print("[trainer] " + " | ".join(parts), flush=True)
