"""The wording every recipe check shares: one problem per key, naming the value and what is allowed."""
from __future__ import annotations

from typing import Any


def at_least(section: str, obj: Any, keys: tuple[str, ...], low: int, note: str = "") -> list[str]:
    """One problem per integer field below `low`, in the shared wording."""
    prefix = f"{section}." if section else ""
    return [f"{prefix}{key}: got {getattr(obj, key)}; expected an integer >= {low}{note}"
            for key in keys if getattr(obj, key) < low]


def within(section: str, obj: Any, keys: tuple[str, ...], low: int, high: int, note: str = "") -> list[str]:
    """One problem per integer field outside [low, high]."""
    prefix = f"{section}." if section else ""
    return [f"{prefix}{key}: got {getattr(obj, key)}; expected an integer from {low} to {high}{note}"
            for key in keys if not low <= getattr(obj, key) <= high]
