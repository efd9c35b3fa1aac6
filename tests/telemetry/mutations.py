"""Seeded mutations of real log text for the parsers' fuzz tests (test_*_fuzz.py): what other clusters' logs,
pastes and log shippers do to a file (cut, lines lost, repeated, swapped or joined, bytes of other encodings,
damaged numbers, CRLF, tabs, colour codes, a very long line, two files interleaved, a launcher's tag on every
line). Each reader must return its documented result for all of them, never raise."""
from __future__ import annotations

import random
import re

NUMBERS = ["1e308", "99999999999999999999", "9" * 5000, "-1", "-0", "nan", "NaN", "inf", "-inf", "", "1.2.3", "²"]
ANSI = ["\x1b[31m", "\x1b[0m", "\x1b[1;32m", "\x1b[K"]
TAGS = ["[1,0]<stdout>:", "0: ", "2024-01-01T00:00:00.123456789Z ", "pod-a | ", "[rank3]: ", "> "]
FILLERS = [" ", "\t", "a", "0", "#", "[0]={", "|", " 1", "/", ":", "x ", "-", ".", "{"]
KINDS = ("truncate", "drop", "duplicate", "swap", "insert", "invalid_utf8", "numbers", "crlf", "cr", "tabs", "join",
         "ansi", "long_line", "long_run", "interleave", "tag")
LONG = 200_000  # characters of the long line / run: enough for a quadratic pattern to show, small for a fast test


def mutate(text: str, other: str, rng: random.Random) -> tuple[str, str]:
    """(the mutated text, the mutation's name): one of KINDS, or two to four of them in turn."""
    if rng.random() < 0.2:
        for _ in range(rng.randint(2, 4)):
            text = _one(text, other, rng, rng.choice(KINDS))
        return text, "several"
    kind = rng.choice(KINDS)
    return _one(text, other, rng, kind), kind


def _one(text: str, other: str, rng: random.Random, kind: str) -> str:  # noqa: C901 (one branch a mutation)
    lines = text.splitlines(keepends=True) or [""]
    if kind == "truncate":
        return text[:rng.randint(0, len(text))]
    if kind == "drop":
        for _ in range(rng.randint(1, max(1, len(lines) // 3))):
            lines.pop(rng.randrange(len(lines))) if lines else None
    elif kind == "duplicate":
        for _ in range(rng.randint(1, 10)):
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
    elif kind == "swap":
        for _ in range(rng.randint(1, 10)):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
    elif kind == "insert":
        for _ in range(rng.randint(1, 20)):
            i = rng.randint(0, len(text))
            text = text[:i] + "".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(1, 8))) + text[i:]
        return text
    elif kind == "invalid_utf8":
        raw = bytearray(text.encode("utf-8"))
        for _ in range(rng.randint(1, 20)):
            i = rng.randint(0, len(raw))
            raw[i:i] = bytes(rng.choice([0xFF, 0xFE, 0xC3, 0x80, 0xED, 0xA0, 0]) for _ in range(rng.randint(1, 3)))
        return raw.decode("utf-8", "replace")
    elif kind == "numbers":
        found = list(re.finditer(r"\d+(?:\.\d+)?", text))
        for m in sorted(rng.sample(found, min(len(found), rng.randint(1, 30))), key=lambda m: -m.start()):
            text = text[:m.start()] + rng.choice(NUMBERS) + text[m.end():]
        return text
    elif kind == "crlf":
        return text.replace("\n", "\r\n")
    elif kind == "cr":
        return text.replace("\n", "\r")
    elif kind == "tabs":
        return text.replace(" ", "\t") if rng.random() < 0.5 else text.replace("  ", "\t")
    elif kind == "join":
        return text.replace("\n", rng.choice([" ", "", "  "]))
    elif kind == "ansi":
        lines = [rng.choice(ANSI) + s[:len(s) // 2] + rng.choice(ANSI) + s[len(s) // 2:] for s in lines]
    elif kind == "long_line":  # one line repeated, or one character, to a very long line
        i = rng.randrange(len(lines))
        fill = rng.choice([lines[i].rstrip("\n") or "x", *FILLERS])
        lines.insert(i, fill * (LONG // len(fill)) + "\n")
    elif kind == "long_run":  # a long run of one filler inside a line (where a backtracking pattern shows)
        i = rng.randrange(len(lines))
        j = rng.randint(0, len(lines[i]))
        fill = rng.choice(FILLERS)
        lines[i] = lines[i][:j] + fill * (LONG // 4 // len(fill)) + lines[i][j:]
    elif kind == "interleave":
        theirs = other.splitlines(keepends=True)
        lines = [s for pair in zip(lines, theirs + [""] * len(lines)) for s in pair]
    elif kind == "tag":
        tag = rng.choice(TAGS)
        lines = [tag + s for s in lines]
    return "".join(lines)


def cases(texts: list[str], n: int, seed: int):
    """n mutated texts (index, mutation, text), each of a random corpus text, seeded."""
    rng = random.Random(seed)
    for i in range(n):
        text, other = texts[rng.randrange(len(texts))], texts[rng.randrange(len(texts))]
        mutated, kind = mutate(text, other, rng)
        yield i, kind, mutated
