"""Reading a recipe file safely: size, encoding and YAML limits (duplicate keys, nesting, alias bombs),
each refusal one line naming the file and what is allowed. No torch."""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

import yaml

from telemetry.errors import InputProblems
from telemetry.input_files import what_is_there


class RecipeError(InputProblems):
    """One or more problems in a recipe or its overrides; each is a complete one-line message."""


MAX_RECIPE_BYTES = 1 << 20  # real recipes are a few KiB; checked before parsing


MAX_YAML_DEPTH = 32  # nesting levels


MAX_YAML_NODES = 100_000  # values after expanding aliases: a few small aliases can stand for billions


class Refused(yaml.YAMLError):
    """A YAML construct a recipe may not use; `line` is 1-based or None."""

    def __init__(self, message: str, line: Optional[int]):
        super().__init__(message)
        self.message, self.line = message, line


class _RecipeLoader(yaml.SafeLoader):
    """Safe loading that refuses duplicate keys (PyYAML lets the last silently win), deep nesting and
    alias expansion beyond MAX_YAML_NODES (an 'alias bomb' parses in microseconds and then explodes in
    whatever walks the tree)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise Refused(f"nested deeper than {MAX_YAML_DEPTH} levels", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise Refused(f"duplicate key {key!r} (first at line {first}); each key may appear once", line)
                seen[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        """An integer Python refuses to convert (more digits than sys.get_int_max_str_digits(), 4300 by default:
        int() raises ValueError, which was a traceback) is refused with its line; so are YAML 1.1's octal (010 is
        8) and base-60 (1:30 is 90) forms, which YAML 1.2, JSON and a reader of the recipe take for other numbers
        (07 and 00 read the same either way)."""
        _refuse_yaml11_number(node)
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            digits = sum(c.isdigit() for c in str(node.value))
            if digits <= sys.get_int_max_str_digits():  # YAML 1.1's 0b_ or 0x_: a prefix with no digits after it
                raise Refused(f"{node.value!r} is no number (no digits after its 0b/0x); allowed: an integer such as "
                              "60, 0x3c or 0b111100", node.start_mark.line + 1) from None
            raise Refused(f"an integer of {digits} digits; allowed: at most {sys.get_int_max_str_digits()} digits "
                          "(a 64-bit value has 19)", node.start_mark.line + 1) from None

    def construct_yaml_float(self, node):
        _refuse_yaml11_number(node, octal=False)
        return super().construct_yaml_float(node)


def _refuse_yaml11_number(node, octal: bool = True) -> None:
    """YAML 1.1 (PyYAML) reads a leading zero as octal (max_steps: 010 is 8) and colons as base 60 (1:30 is 90):
    a recipe's reader, YAML 1.2 and JSON see other numbers, so the value is refused with what to write."""
    text = str(node.value)
    digits = text.lstrip("+-").replace("_", "")
    line = node.start_mark.line + 1
    if ":" in digits:
        raise Refused(f"{text!r} is a base-60 number in YAML 1.1 (1:30 is 90); allowed: the number itself, or "
                      f"quoted text ('{text}')", line)
    if octal and len(digits) > 1 and digits[0] == "0" and digits.isdigit() and int(digits, 8) != int(digits):
        sign = "-" if text.startswith("-") else ""
        plain = sign + (digits.lstrip("0") or "0")
        raise Refused(f"{text!r} is an octal number in YAML 1.1 ({sign}{int(digits, 8)}), not {plain}; allowed: "
                      f"{plain} without the leading zero, or quoted text ('{text}')", line)


_RecipeLoader.add_constructor("tag:yaml.org,2002:int", _RecipeLoader.construct_yaml_int)
_RecipeLoader.add_constructor("tag:yaml.org,2002:float", _RecipeLoader.construct_yaml_float)


def _expanded_nodes(node, memo: dict) -> int:
    """Values the node stands for once aliases are expanded; shared nodes are counted per use."""
    known = memo.get(id(node))
    if known is not None:
        return known
    count = 1
    if isinstance(node, yaml.SequenceNode):
        count += sum(_expanded_nodes(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        count += sum(_expanded_nodes(k, memo) + _expanded_nodes(v, memo) for k, v in node.value)
    count = min(count, MAX_YAML_NODES + 1)  # keeps the integers small for exponential graphs
    memo[id(node)] = count
    return count


def parse_yaml(text: str) -> Any:
    """YAML text -> Python values with the recipe loader's limits (raises yaml.YAMLError)."""
    loader = _RecipeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > MAX_YAML_NODES:
            raise Refused(f"expands to more than {MAX_YAML_NODES} values through aliases (&anchor/*alias); "
                           "write the values out", None)
        return loader.construct_document(node)
    finally:
        loader.dispose()


_ODD_SPACES = {"\u00a0": "U+00A0 NO-BREAK SPACE", "\u2007": "U+2007 FIGURE SPACE", "\u202f": "U+202F NARROW NO-BREAK SPACE",
               "\u3000": "U+3000 IDEOGRAPHIC SPACE", "\ufeff": "U+FEFF ZERO WIDTH NO-BREAK SPACE"}


def _yaml_hint(reason: str, line_text: str) -> str:
    """What is allowed, for the PyYAML errors a recipe's author meets most (tabs, characters pasted from a web
    page or left by an editor, two documents in one file)."""
    odd = [name for char, name in _ODD_SPACES.items() if char in line_text]
    if odd:  # pasted from a web page: looks like indentation, is a character of the key
        return f"; the line holds {', '.join(odd)} (pasted from a web page?); allowed: indentation with ASCII spaces"
    if "'\\t' that cannot start any token" in reason:  # PyYAML's words for an indenting tab
        return "; allowed: indentation with spaces (YAML refuses tabs)"
    if "special characters are not allowed" in reason:
        return ("; allowed: printable text (a control character such as the Ctrl-Z (0x1A) an old DOS/Windows editor "
                "appends, or NUL, is not)")
    if "found undefined alias" in reason:
        return "; allowed: an alias (*name) after its anchor (&name) in the same file"
    if "found another document" in reason:
        return "; allowed: one YAML document per recipe (no '---' starting a second; put each recipe in a file)"
    return ""


def _yaml_problem(exc: yaml.YAMLError, text: str = "") -> str:
    """' at line N: reason' in one line, whatever PyYAML error it is."""
    if isinstance(exc, Refused):
        line, reason = exc.line, exc.message
    else:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    reason = " ".join(str(reason).split())
    lines = text.splitlines()
    # the line PyYAML names, and the one before it (a mapping error is marked where the next key starts)
    reason += _yaml_hint(reason, "\n".join(lines[max(0, line - 2):line]) if line else "")
    return (f" at line {line}" if line else "") + f": {reason}"


def read_recipe(path: str, what: str = "recipe") -> Any:
    """The parsed YAML of a recipe file, or RecipeError naming the file (and line) and what is allowed. `what`:
    the kind of file, as the messages name it (an evaluation file is read with the same limits)."""
    if not os.path.isfile(path):  # a FIFO or device is not opened: with no writer a read waits forever
        raise RecipeError([f"{what}: {path!r} is not a file ({what_is_there(path)}); allowed: a YAML file"])
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECIPE_BYTES + 1)  # bounded even if the size changes under us
    except OSError as exc:
        raise RecipeError([f"{what}: cannot read {path}: {exc.strerror or exc}; allowed: a YAML file this user can "
                           "read"]) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError([f"{what}: {path} is larger than {MAX_RECIPE_BYTES} bytes; allowed: a {what} of at "
                           f"most {MAX_RECIPE_BYTES // 1024} KiB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise RecipeError([f"{what}: {path} is UTF-16 text (as PowerShell's > and Out-File write it); allowed: a "
                               "UTF-8 YAML file (iconv -f UTF-16 -t UTF-8 converts it)"]) from None
        line = raw[:exc.start].count(b"\n") + 1
        raise RecipeError([f"{what}: {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
                           "allowed: a UTF-8 YAML file"]) from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        raise RecipeError([f"{what}: {path} is not valid YAML{_yaml_problem(exc, text)}"]) from None
    except RecursionError:
        raise RecipeError([f"{what}: {path} is nested too deeply; allowed: a {what} nested a few levels, as the "
                           "examples (an alias inside the anchor it names, &a ... *a, nests without end)"]) from None
