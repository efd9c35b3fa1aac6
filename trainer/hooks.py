"""The small hook interface the loop calls; telemetry implements it.

Steps are numbered from 1 (the optimizer step being taken). `on_step_end` may add fields to the
record that becomes that step's line in metrics.jsonl.
"""
from __future__ import annotations


class Hooks:
    def on_train_start(self, context: dict) -> None: ...
    def on_step_start(self, step: int) -> None: ...
    def before_backward(self, step: int, micro_batch: int) -> None: ...
    def after_backward(self, step: int, micro_batch: int) -> None: ...
    def before_optimizer_step(self, step: int) -> None: ...
    def after_optimizer_step(self, step: int) -> None: ...
    def on_step_end(self, step: int, record: dict) -> None: ...
    def on_train_end(self, status: str) -> None: ...


class HookList(Hooks):
    """Calls each hook in order; one object for the loop to hold."""

    def __init__(self, hooks: list[Hooks] | None = None):
        self.hooks = list(hooks or [])

    def __getattribute__(self, name):
        if name.startswith(("on_", "before_", "after_")):
            hooks = object.__getattribute__(self, "hooks")

            def dispatch(*args, **kwargs):
                for hook in hooks:
                    getattr(hook, name)(*args, **kwargs)
            return dispatch
        return object.__getattribute__(self, name)
