"""Faults on purpose, for tests and benchmarks, kept out of the step loop: a straggler (one rank's compute
late by `debug.delay_s` from `debug.delay_from_step`), and a lost or hung rank after a given step
(FABRIC_HARNESS_CRASH_AFTER_STEP=N, FABRIC_HARNESS_CRASH_RANK=R,
FABRIC_HARNESS_CRASH_MODE=kill|hang|hang_at_step_end|input|raise: the resume and fault tests stand it in for a
lost node or a cut link; `hang_at_step_end`: silent after step N's collectives but before its end-of-step hooks,
so the peers wait in telemetry's cross-rank exchange instead of the next step's collectives; `input`: that
rank alone refuses its input while the others train on, to test that the `error:` line survives whichever
rank fails first; `raise`: that rank alone crashes, with a traceback, as a rank out of device memory would). The loop calls `before_step`, `at_step_end` and `after_step`; with nothing asked for,
they do nothing."""
from __future__ import annotations

import os
import signal
import time


CRASH_MODES = ("kill", "hang", "hang_at_step_end", "input", "raise")


def _whole(environ, name: str, allowed: str) -> int:
    raw = environ.get(name, "").strip() or "0"
    if not (raw.isascii() and raw.isdigit()):
        from .error_report import InputError
        raise InputError(f"{name}: got {environ[name]!r}; allowed: {allowed}")
    return int(raw)


class FaultInjection:
    def __init__(self, rank: int, delay_s: float = 0.0, delay_from_step: int = 1, crash_after_step: int = 0,
                 crash_rank: int = 0, crash_mode: str = "kill"):
        self.rank = rank
        self.delay_s, self.delay_from_step = delay_s, delay_from_step
        self.crash_after_step, self.crash_rank, self.crash_mode = crash_after_step, crash_rank, crash_mode

    @classmethod
    def from_recipe(cls, debug, rank: int, environ=os.environ) -> "FaultInjection":
        """The recipe's straggler and the environment's lost rank; InputError (one line naming the variable)
        for a value that is not one (a word where a step goes was a ValueError traceback, an unknown mode a
        kill)."""
        mode = environ.get("FABRIC_HARNESS_CRASH_MODE", "").strip() or "kill"
        if mode not in CRASH_MODES:
            from .error_report import InputError
            raise InputError(f"FABRIC_HARNESS_CRASH_MODE: got {mode!r}; allowed: {', '.join(CRASH_MODES)}, or unset "
                             "(kill)")
        return cls(rank, delay_s=debug.delay_s if debug.delay_rank == rank else 0.0,
                   delay_from_step=debug.delay_from_step,
                   crash_after_step=_whole(environ, "FABRIC_HARNESS_CRASH_AFTER_STEP", "a step number >= 1 (0 or "
                                           "unset: no crash)"),
                   crash_rank=_whole(environ, "FABRIC_HARNESS_CRASH_RANK", "a rank >= 0 (unset: 0)"),
                   crash_mode=mode)

    def before_step(self, step: int) -> None:
        """Inside the step's time, before its compute: the straggler's delay."""
        if self.delay_s and step >= self.delay_from_step:
            time.sleep(self.delay_s)

    def _lost_here(self, step: int) -> bool:
        """This rank is the one lost, and this is its step."""
        return bool(self.crash_after_step) and step == self.crash_after_step and self.rank == self.crash_rank

    def at_step_end(self, step: int) -> None:
        """After the step's compute and collectives, before its end-of-step hooks (telemetry's exchange)."""
        if self.crash_mode == "hang_at_step_end" and self._lost_here(step):
            time.sleep(3600)

    def after_step(self, step: int) -> None:
        """After the step is recorded (and checkpointed, if due): the lost or hung rank."""
        if self.crash_mode != "hang_at_step_end" and self._lost_here(step):
            if self.crash_mode == "hang":  # stops answering, as behind a cut link
                time.sleep(3600)
            if self.crash_mode == "input":  # bad input found by this rank alone, while the others train on
                from .error_report import InputError
                raise InputError(f"fault injection: rank {self.crash_rank} refuses its input after step {step} "
                                 "(FABRIC_HARNESS_CRASH_MODE=input)")
            if self.crash_mode == "raise":  # a crash of this rank alone (a device out of memory)
                raise RuntimeError(f"fault injection: rank {self.crash_rank} crashes after step {step} "
                                   "(FABRIC_HARNESS_CRASH_MODE=raise)")
            os.kill(os.getpid(), signal.SIGKILL)
