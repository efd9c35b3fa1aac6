"""The loop's side of the hook interface: `Hooks` itself lives in telemetry/capture/hooks.py (telemetry implements
it, any loop may drive it); HookList lets the loop hold several as one.

Steps are numbered from 1 (the optimizer step being taken). `on_step_end` may add fields to the
record that becomes that step's line in metrics.jsonl.
"""
from __future__ import annotations

from telemetry.capture.hooks import Hooks


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


__all__ = ["Hooks", "HookList"]
