"""The collective tracer's fallback timing: CUDA events around blocking NCCL calls where a group has no completion hook."""
from __future__ import annotations

from collections import deque

import torch


def events_available() -> bool:
    try:
        return torch.cuda.is_available()
    except (RuntimeError, AttributeError):
        return False


def new_event():
    """A CUDA event with timing (tests replace this with a fake modelling query() and elapsed_time())."""
    return torch.cuda.Event(enable_timing=True)


def read_completed(by_events: deque, settle) -> None:
    """Take the calls whose end event has completed off the front of `by_events` (issue order), credit each
    its start-to-end time and `settle` it. query() only: never a synchronisation. The caller holds the lock
    that guards `by_events`."""
    while by_events:
        call = by_events[0]
        start, end = call.events or (None, None)
        if call.queued and (end is None or not end.query()):
            break  # events on one stream complete in order: the later ones are not done either
        by_events.popleft()
        if not call.queued:
            continue
        try:
            duration_s = start.elapsed_time(end) / 1000.0
        except (RuntimeError, ValueError):
            duration_s = None
        call.events = None
        call.seen = call.works = 1
        if duration_s is None or duration_s < 0:
            call.bad = True
        else:
            call.acc_s = duration_s
        settle(call)
