"""Hostile recipe files, shared by the bad-input tests and bench/bad_inputs.py."""
from __future__ import annotations


def alias_bomb(levels: int, width: int = 9, nested: bool = True) -> str:
    """A recipe that stands for width**levels values through aliases: under the free-form model.config
    (which the old dry run expanded), or at the top level (refused as unknown keys before any walk, so the
    table can run in-process against code without the limit)."""
    indent = "    " if nested else ""
    lines = ["model:", "  tokenizer: tok", "  config:"] if nested else []
    lines.append(f"{indent}l0: &l0 [{', '.join(['x'] * width)}]")
    for i in range(1, levels):
        lines.append(f"{indent}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"
