"""Count the reads of tensor values into Python that a training step makes (each is a host sync on a GPU).

Counted: `.item()`, `float()`/`int()`/`bool()` of a tensor (all dispatch aten._local_scalar_dense) and
`.tolist()` (which copies to the host without dispatching on CPU). On the CPU every tensor is a host
tensor, so reads that touch only the CPU-side batch (never the device) are excluded by the caller with
`host_side()`: the workloads' loss_counts and input_tokens read the batch before it is moved.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SCALAR = {torch.ops.aten._local_scalar_dense.default}


class HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.where: list[str] = []
        self._paused = threading.local()
        self._orig_tolist = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _SCALAR and not getattr(self._paused, "on", False) and not _optimizer_step_count():
            self._note("item")
        return func(*args, **(kwargs or {}))

    def _note(self, kind: str) -> None:
        import traceback

        self.count += 1
        frame = next((f for f in reversed(traceback.extract_stack()[:-2])
                      if "torch" not in f.filename.split("site-packages")[-1][:8]), None)
        self.where.append(f"{kind} at {frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" if frame else kind)

    @contextlib.contextmanager
    def host_side(self):
        """Reads inside this block are of host data (the CPU batch): not counted."""
        before = getattr(self._paused, "on", False)
        self._paused.on = True
        try:
            yield
        finally:
            self._paused.on = before

    def __enter__(self):
        counter = self
        self._orig_tolist = orig = torch.Tensor.tolist

        def tolist(t):
            if not getattr(counter._paused, "on", False):
                counter._note("tolist")
            with counter.host_side():
                return orig(t)
        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._orig_tolist
        return super().__exit__(*exc)


def _optimizer_step_count() -> bool:
    """torch.optim keeps its step counters on the host (non-capturable optimizers read them with
    `_get_value`): those reads never wait for the device."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code.co_name == "_get_value" and "optim" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def count_step_reads(trainer_cls) -> list[HostReads]:
    """Patch `trainer_cls.train_step` so each call runs under a fresh counter; returns the counters."""
    counters: list[HostReads] = []
    orig = trainer_cls.train_step

    def counted(self, step):
        counter = HostReads()
        wl = self.workload
        for name in ("loss_counts", "input_tokens"):
            fn = getattr(wl, name)
            if not getattr(fn, "_host_side", False):
                def host(*a, _fn=fn, **k):
                    with counters[-1].host_side():
                        return _fn(*a, **k)
                host._host_side = True
                setattr(wl, name, host)
        counters.append(counter)
        with counter:
            return orig(self, step)

    trainer_cls.train_step = counted
    return counters
