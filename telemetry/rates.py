"""Link rates in tc units, shared by projections (here) and the fabric lab (launch/)."""
from __future__ import annotations

import re

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$", re.I)
_RATE_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}  # tc: "bps" is bytes/s


class RateError(ValueError):
    """A rate that is not in tc units; one line naming the value and what is allowed."""


def parse_rate(rate: str) -> float | None:
    """Bits per second from tc units (1gbit, 100mbit, 125mbps = bytes/s); None for 'none' (unshaped)."""
    if rate.lower() == "none":
        return None
    m = _RATE.match(rate.strip())
    if not m:
        raise RateError(f"--rate: got {rate!r}; expected a tc rate such as 10gbit, 1gbit, 100mbit, 500kbit, "
                        "or 'none' for unshaped links")
    return float(m.group(1)) * _RATE_BITS[m.group(2).lower()]
