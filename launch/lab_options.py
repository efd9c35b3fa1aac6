"""The fabric lab's command-line checks that argparse alone gets wrong, and the tbf sizes it takes.

`--burst` and `--limit` set every shaped link's tc tbf bucket and queue in bytes (the lab sizes them itself
otherwise: launch/lab.py burst_bytes and queue_bytes). Sizes are written as tc writes them (iproute2's
tc/tc_util.c get_size, 1024 steps): `65536`, `64k` or `64kb` (KiB), `2m`/`2mb`/`2mib`, `1g`, and in bits
`512kbit`; `b` is bytes.
"""
from __future__ import annotations

import math
import re

from telemetry.analysis import rates
from telemetry.analysis.fabric_summary import TBF_MAX_BUCKET_S, TBF_MAX_BYTES, tbf_max_bucket_bytes
from telemetry.errors import InputError

LAB_OPTIONS = ("--nodes", "--nproc-per-node", "--rate", "--slow-node", "--slow-rate", "--mtu", "--timeout", "--port",
               "--burst", "--limit")
NETEM_OPTIONS = ("--delay", "--jitter", "--loss", "--netem", "--corrupt", "--reorder", "--duplicate")
# what the lab offers instead, named by every refusal of a netem impairment (the CLI's and evaluate's)
NETEM_REFUSAL = ("the lab shapes bandwidth only (tc tbf) and adds no delay, jitter, loss or reordering (tc netem)")
# tc's `latency` is netem's added delay or tbf's queue as a time: the lab takes the queue in bytes (--limit)
LATENCY_REFUSAL = ("tc's latency is either netem's added delay, which the lab does not add, or tbf's queue as a "
                   "time")
MIN_MTU = 576  # launch/lab.py MIN_MTU (the lab imports this module)
ETHERNET_HEADER = 14  # a frame on the wire is the MTU plus this; tbf drops a frame larger than its bucket
MAX_TBF_BYTES = TBF_MAX_BYTES  # tc's TCA_TBF_BURST and the queue limit are 32-bit
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|kbit|mbit|gbit)?$", re.I)
_SIZE_BYTES = {"b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 2 ** 20, "mb": 2 ** 20, "mib": 2 ** 20,
               "g": 2 ** 30, "gb": 2 ** 30, "gib": 2 ** 30, "kbit": 1024 / 8, "mbit": 2 ** 20 / 8, "gbit": 2 ** 30 / 8}


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?)\s*$", re.I)
_DURATION_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_WORD = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def seconds_hint(text) -> str:
    """`(for 30 minutes write 1800)` when `text` is a duration with a unit (30m, 1h, 90s), which a timeout in
    seconds does not take; '' otherwise."""
    m = _DURATION.match(str(text))
    if isinstance(text, bool) or not m:
        return ""
    unit = m.group(2)[0].lower()
    word = _DURATION_WORD[unit] if float(m.group(1)) != 1 else _DURATION_WORD[unit][:-1]
    return f" (for {m.group(1)} {word} write {float(m.group(1)) * _DURATION_S[unit]:g})"


def seconds(text: str) -> float:
    """argparse type of --timeout: a number of seconds; `30m` is refused with what to write for it."""
    import argparse

    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a number of seconds{seconds_hint(text)}") from None


class SizeError(InputError, ValueError):
    """A --burst or --limit that is no size tc takes, or one the lab cannot shape with; one line."""


def parse_size(text, what: str, mtu: int) -> int:
    """Bytes from a tc size (`64k` is 65536 bytes, `512kbit` 65536, a bare number bytes); at least one frame of
    `mtu` (a smaller bucket or queue passes no frame of that size) and at most tc's 32 bits."""
    m = _SIZE.match(str(text).strip())
    if isinstance(text, bool) or not m:
        raise SizeError(f"{what}: got {text!r}; expected a size in bytes as tc writes it: 65536, 64k (KiB), 2m "
                        "(MiB), 512kbit")
    size = float(m.group(1)) * _SIZE_BYTES[(m.group(2) or "b").lower()]
    frame = mtu + ETHERNET_HEADER
    if not math.isfinite(size) or size < frame:
        why = ("tbf drops a frame larger than its bucket" if what.endswith("burst")
               else "a queue shorter than one frame drops every frame that waits")
        raise SizeError(f"{what}: got {text!r} ({size:g} bytes); {why}: expected at least one frame, {frame} bytes "
                        f"at MTU {mtu}")
    if size > MAX_TBF_BYTES:
        raise SizeError(f"{what}: got {text!r} ({size:g} bytes); expected at most {MAX_TBF_BYTES} bytes (4 GiB: tc "
                        "keeps it in 32 bits)")
    return int(size)


def option_problems(ours: list[str]) -> list[str]:
    """What argparse would take silently or name badly: an option given twice (the last one won: `--rate 10mbit
    --rate 100mbit` ran every link at 100mbit), netem's impairments, which the lab does not add, and tbf's
    `--latency` (its queue as a time: the lab takes it as --limit in bytes)."""
    seen: dict[str, list[str]] = {}
    problems = []
    for i, arg in enumerate(ours):
        name, eq, value = arg.partition("=")
        if name in NETEM_OPTIONS:
            problems.append(f"{name}: {NETEM_REFUSAL}; allowed: --rate, --mtu, --burst, --limit, --slow-node with "
                            "--slow-rate")
        elif name == "--latency":
            problems.append(f"--latency: {LATENCY_REFUSAL}; allowed: --limit BYTES (the queue of each shaped link)")
        elif name in LAB_OPTIONS:
            seen.setdefault(name, []).append(value if eq else (ours[i + 1] if i + 1 < len(ours) else ""))
    for name, values in seen.items():
        if len(values) > 1:
            per_node = " (one rate for every link; one slower node: --slow-node with --slow-rate)" \
                if name == "--rate" else ""
            problems.append(f"{name}: given {len(values)} times ({', '.join(map(repr, values))}); allowed: once"
                            + per_node)
    return problems


def bucket_problem(option: str, given, bps: float, burst: int, mtu: int, burst_given: bool) -> str | None:
    """One line when tc cannot hold a tbf bucket of `burst` bytes at `bps`: it would wrap it silently (to less than
    a frame: no frame passes). None when it can."""
    fill_s = burst / max(math.floor(bps / 8), 1)  # tc shapes in whole bytes per second: 100bit is 12 bytes/s
    if fill_s <= TBF_MAX_BUCKET_S:
        return None
    frame = mtu + ETHERNET_HEADER
    if burst_given:
        return (f"--burst: got {given!r} ({burst} bytes), which takes {fill_s:.4g} s to fill at {rates.bits_text(bps)}; "
                f"tc holds a tbf bucket of at most {TBF_MAX_BUCKET_S:g} s of the rate (32 bits of 64 ns) and wraps a "
                f"larger one silently; allowed: at most {tbf_max_bucket_bytes(bps)} bytes at this rate")
    floor = 8 * math.ceil(frame / TBF_MAX_BUCKET_S)
    shaped = 8 * math.floor(bps / 8)
    whole = f" ({rates.bits_text(shaped)} in tc's whole bytes per second)" if shaped != bps else ""
    return (f"{option}: got {given!r}; one frame at MTU {mtu} ({frame} bytes) takes {fill_s:.4g} s at "
            f"{rates.bits_text(bps)}{whole}, and tc holds a tbf bucket of at most {TBF_MAX_BUCKET_S:g} s of the rate (32 bits "
            f"of 64 ns; a larger one wraps to less than a frame and no frame passes); allowed: at least {floor}bit at "
            f"MTU {mtu} (a smaller --mtu lowers it: {8 * math.ceil((MIN_MTU + ETHERNET_HEADER) / TBF_MAX_BUCKET_S)}bit at {MIN_MTU})")
