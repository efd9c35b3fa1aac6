"""Link rates in tc units, shared by projections (here) and the fabric lab (launch/).

tc's units: `bit`, `kbit`, `mbit`, `gbit`, `tbit` are bits per second (1e3 steps); `bps`, `kbps`, `mbps`,
`gbps`, `tbps` are BYTES per second. `10mbps` is therefore 80 Mbit/s, not 10: an easy mistake, so
`bytes_unit_warning` names it. tc also takes the binary (IEC) prefixes, 1024 steps: `kibit`, `mibit`, `gibit`,
`tibit` and `kibps` ... `tibps` (iproute2's tc/tc_util.c suffix table, any case: `1Mibit` shapes to 1048576
bit/s, `tc qdisc show` prints 1048Kbit).
"""
from __future__ import annotations

import math
import re
from telemetry.errors import InputError

_RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,  # tc: "bps" is bytes/s
              "kibit": 2.0 ** 10, "mibit": 2.0 ** 20, "gibit": 2.0 ** 30, "tibit": 2.0 ** 40,
              "kibps": 8 * 2.0 ** 10, "mibps": 8 * 2.0 ** 20, "gibps": 8 * 2.0 ** 30, "tibps": 8 * 2.0 ** 40}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(" + "|".join(sorted(_RATE_BITS, key=len, reverse=True)) + ")$", re.I)


class RateError(InputError, ValueError):
    """A rate that is not in tc units; one line naming the value and what is allowed."""


def parse_rate(rate: str, what: str = "--rate", min_bps: float = 1) -> float | None:
    """Bits per second from tc units (1gbit, 100mbit, 125mbps = bytes/s); None for 'none' (unshaped). `what`:
    the option or key the messages name; `min_bps`: the slowest rate allowed (tc shapes in whole bytes/s: 8)."""
    if rate.lower() == "none":
        return None
    m = _RATE.match(rate.strip())
    if not m and _RATE.match(rate.strip().lstrip("-")):
        raise RateError(f"{what}: got {rate!r}, a negative rate; expected a tc rate of at least {min_bps:g}bit "
                        "such as 10gbit, 1gbit, 100mbit, or 'none' for unshaped links")
    if not m:
        hint = suggestion(rate)
        raise RateError(f"{what}: got {rate!r}; expected a tc rate such as 10gbit, 1gbit, 100mbit, 500kbit, "
                        "or 'none' for unshaped links" + (f"; {hint}" if hint else ""))
    bps = float(m.group(1)) * _RATE_BITS[m.group(2).lower()]
    if bps < min_bps:  # tc cannot shape to nothing; a link that carries nothing is no fabric
        why = "tc shapes in whole bytes per second: " if min_bps > 1 else ""
        raise RateError(f"{what}: got {rate!r}; {why}expected {'at least' if why else 'a rate of at least'} "
                        f"{min_bps:g}bit (e.g. 100mbit, 1gbit), or 'none' for unshaped links")
    return bps


# how people write rates that tc does not take: `10G`, `100GbE`, `10Gb/s`, `10 gbit`, `1e9`, `25GB/s`
_WRITTEN = re.compile(r"^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([kmgt]?)(i?)([a-z/]*)$", re.I)
_BITS_TAILS = ("", "b", "b/s", "bit", "bits", "bit/s", "bits/s", "bit/sec", "be")  # `be`: 100GbE, Ethernet's bits
_BYTES_TAILS = ("B", "B/s", "Byte/s", "Bytes/s", "bytes/s")


def _tc_bits(bps: float) -> str:
    """A bit rate in tc's own units, the largest prefix that keeps it readable: 1e9 -> 1gbit."""
    for unit, size in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= size:
            return f"{bps / size:g}{unit}"
    return f"{bps:g}bit"


def suggestion(rate: str) -> str | None:
    """What to write for a rate as people write it and tc does not take it: `10G`, `100GbE`, `10Gb/s`, `10 gbit`
    are bits ('for 10 Gbit/s write 10gbit'), `25GB/s` bytes, a bare number tc's bits per second (`1e9`); None
    when the text is no such rate."""
    m = _WRITTEN.match(str(rate).strip())
    if not m:
        return None
    number, prefix, binary, tail = m.groups()
    try:
        value = float(number)
    except ValueError:
        return None
    if binary and not prefix:  # `10ibit`: no binary prefix without its power
        return None
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[prefix.lower()]
    if binary:
        scale = {"": 1, "k": 2.0 ** 10, "m": 2.0 ** 20, "g": 2.0 ** 30, "t": 2.0 ** 40}[prefix.lower()]
    if not prefix and not tail:  # a bare number: tc itself reads it as bit/s
        bps = value
        return f"a number without a unit is bits per second to tc: for {_fmt_bits(bps)} write {_tc_bits(bps)}" \
            if math.isfinite(bps) and bps > 0 else None
    plain = "e" not in number.lower()
    bits_written = f"{number}{prefix.lower()}{'i' if binary else ''}bit" if plain and binary else (
        f"{number}{prefix.lower()}bit" if plain else _tc_bits(value * scale))
    if tail in _BYTES_TAILS:
        bytes_written = bits_written[:-3] + "bps"
        return (f"for {number} {prefix.upper()}{binary}B/s ({_fmt_bits(value * scale * 8)}) write {bytes_written} "
                f"(tc's bytes per second), for {_fmt_bits(value * scale)} {bits_written}")
    if tail.lower() in _BITS_TAILS and math.isfinite(value * scale) and value > 0:
        return f"for {_fmt_bits(value * scale)} write {bits_written}"
    return None


def bytes_unit_warning(rate: str, what: str = "--rate") -> str | None:
    """A one-line warning when `rate` is in tc's bytes-per-second units (`mbps` and the like), else None;
    `what`: the option or key it names."""
    m = _RATE.match(rate.strip())
    if not m or not m.group(2).lower().endswith("bps"):
        return None
    number, unit = m.group(1), m.group(2).lower()
    bits = unit[:-3] + "bit"
    return (f"warning: {what} {rate}: in tc units '{unit}' is bytes per second, so this is "
            f"{_fmt_bits(float(number) * _RATE_BITS[unit])}; for {_fmt_bits(float(number) * _RATE_BITS[bits])} "
            f"write {number}{bits}")


def misreadable(rate: str) -> bool:
    """True for a rate whose unit is easy to misread: tc's bytes-per-second units (`mbps`) and the binary
    prefixes (`mibit`: 1,048,576 bit/s); such a rate is shown with its bit rate beside it."""
    m = _RATE.match(str(rate).strip())
    unit = m.group(2).lower() if m else ""
    return unit.endswith("bps") or unit[1:3] == "ib"  # kibit, mibps...; not plain `bit`, whose 'i' is no prefix


def with_bits(rate, bps: float | None = None) -> str:
    """A rate as written, with its bit rate beside it where its unit is easy to misread ('1mbps (8 Mbit/s)',
    '10Mibit (10.49 Mbit/s)'); `bps`: its bit rate where already parsed."""
    if not misreadable(rate):
        return str(rate)
    if bps is None:
        try:
            bps = parse_rate(str(rate))
        except RateError:
            return str(rate)
    return f"{rate} ({bits_text(bps)})" if bps else str(rate)


def bits_text(bps: float) -> str:
    """A rate in bits per second as a person reads it: 8 Mbit/s, 1.5 Gbit/s."""
    return _fmt_bits(bps)


def _fmt_bits(bps: float) -> str:
    for unit, size in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.4g} {unit}"
    return f"{bps:.4g} bit/s"
