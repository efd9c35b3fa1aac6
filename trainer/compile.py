"""`train.compile: blocks`: each decoder block's forward compiled with torch.compile (regional compilation, as
torchtitan's apply_compile and NeMo AutoModel do), and the compile time kept apart from step time.

Order (docs/compile.md): tensor parallel, activation checkpointing, compile, data parallel. What is
compiled is the block's `forward`, not the module's call: hooks registered on a block stay outside the
graph and run eagerly, so FSDP2's all-gathers and reduce-scatters, DDP's gradient buckets and the loop's
own collectives are issued by Python as before and the telemetry times them as before. Tensor parallelism
is refused with compile in this build (trainer/config.py): its collectives run inside the block.

All blocks of one class share one compiled function (the module is an input, not a constant), so a
32-layer model compiles its block once, not 32 times.

Compile time: torch.compile runs lazily, inside the first steps' forward and backward. `CompileWatch`
adds `compile_s` to each step's record (seconds torch.compile spent compiling in that step, dynamo and the
backend, the lazily compiled backward included; it is part of `step_time_s`) and run.json `compile` the
totals, so a report tells steady-state steps from compiling ones.
"""
from __future__ import annotations

import threading
import time
import types

import torch

from .hook_list import Hooks
from telemetry.rundir import StepKey


def compile_blocks(model: torch.nn.Module) -> int:
    """Compile the forward of every decoder block in `model`, in place; returns how many."""
    from .parallelize import block_classes

    names = block_classes(model)
    compiled: dict[type, object] = {}
    count = 0
    for module in model.modules():
        cls = type(module)
        if cls.__name__ not in names:
            continue
        if cls not in compiled:
            compiled[cls] = torch.compile(cls.forward)
        module.forward = types.MethodType(compiled[cls], module)
        count += 1
    return count


class CompileWatch(Hooks):
    """Seconds spent inside torch.compile per step (`compile_s`) and in the whole run (run.json `compile`)."""

    def __init__(self, rundir, blocks: int):
        from torch._dynamo.callback import callback_handler

        self.rundir, self.blocks = rundir, blocks
        self._handler = callback_handler
        self._lock = threading.Lock()
        self._began: float | None = None
        self._step_s = 0.0
        self.total_s = 0.0
        self.compiles = 0
        self.steps_compiling: list[int] = []
        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)

    def _start(self, args) -> None:
        with self._lock:
            self._began = time.perf_counter()

    def _end(self, args) -> None:
        with self._lock:
            if self._began is not None:
                spent = time.perf_counter() - self._began
                self._step_s += spent
                self.total_s += spent
                self.compiles += 1
            self._began = None

    def on_step_start(self, step: int) -> None:
        with self._lock:
            self._step_s = 0.0

    def on_step_end(self, step: int, record: dict) -> None:
        with self._lock:
            record[StepKey.COMPILE_S] = round(self._step_s, 6)
            if self._step_s > 0:
                self.steps_compiling.append(step)

    def summary(self) -> dict:
        return {"mode": "blocks", "blocks": self.blocks, StepKey.COMPILE_S: round(self.total_s, 3),
                "compiles": self.compiles, "steps_compiling": self.steps_compiling}

    def on_train_end(self, status: str) -> None:
        self.rundir.update(compile=self.summary())
        self._handler.remove_start_callback(self._start)
        self._handler.remove_end_callback(self._end)
