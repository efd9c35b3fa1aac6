"""Stop signals held over a block that must not be cut half way (a lab's namespaces brought up or torn down,
a rank's `error:` line once it has claimed it), then let take effect as they would have."""
from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def deferred(signals):
    """`signals` wait until the block is done, then take effect as they would have (the handler that was in
    place, or the default action). Only the main thread can set handlers: elsewhere nothing is held. A signal
    ignored, or handled outside Python (getsignal None), is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    old = {}
    for signum in signals:
        handler = signal.getsignal(signum)
        if handler is not None and handler is not signal.SIG_IGN:
            old[signum] = signal.signal(signum, lambda s, _frame: came.append(s))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if came:
            signal.raise_signal(came[0])
