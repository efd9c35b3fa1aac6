"""NCCL's WARN lines in a log, grouped: what went wrong, not only which transport was used.

NCCL prints `host:pid:tid [dev] file.cc:line NCCL WARN <message>` (2.2x+: `(function)` after the position) for
each problem it meets; NCCL 2.2 and older print `WARN` without the word NCCL. The same message is often printed by
every rank and every channel, so messages are counted once per distinct text, with a kind for the common ones:

- `verbs_call`: a verbs call failed (`Call to ibv_modify_qp failed with error Connection timed out`): an RDMA
  device, GID or route problem;
- `completion_error`: `NET/IB : Got completion from peer with error 12, opcode 0, len 0, vendor err 129`: the
  fabric dropped or refused traffic after connecting (retry exhausted, remote access error);
- `no_device`: `NET/IB : No device found` (WARN in some releases, INFO in others), `Failed to open
  libibverbs.so[.1]` (no verbs library: IB unusable);
- `collnet`: SHARP/CollNet setup failed (`SHARP coll init error`, `Cannot initialize CollNet, using
  point-to-point network instead`): the job runs without in-network reduction;
- `cuda`: `Cuda failure ...`;
- `timeout`: a network or proxy operation timed out (`rx ctrl timeout`);
- `plugin`: a network or tuner plugin could not load or initialise (NET/Plugin, NET/OFI, `Failed to initialize
  any NET plugin`);
- `socket`: a socket connect/accept/poll failure (bootstrap or NET/Socket);
- `other`: everything else.
"""
from __future__ import annotations

import re
from collections import Counter

# the message is the rest of the line, its trailing blanks cut in code (a lazy "(.*?)\s*$" is quadratic in a
# long run of blanks inside the message)
# (aws-ofi-nccl's own test programs write "WARN: Function: create_nccl_ofi_component Line: 459: NET/OFI ...", no prefix)
_WARN = re.compile(r"(?:NCCL WARN|\] [\w./\-]+:\d+ WARN|\bWARN: Function: \w+ Line: \d+:)\s+(.*)")
_KINDS = (("verbs_call", re.compile(r"\bCall to ibv_\w+|\bibv_\w+ failed")),
          ("completion_error", re.compile(r"Got completion")),
          ("no_device", re.compile(r"No device found|Failed to open libibverbs")),
          ("collnet", re.compile(r"SHARP|CollNet")),
          ("cuda", re.compile(r"Cuda failure|CUDA error")),
          ("timeout", re.compile(r"time(?:d )?out", re.I)),
          ("plugin", re.compile(r"NET/Plugin|NET/OFI|TUNER/Plugin|NET plugin|[Pp]lugin load")),
          ("socket", re.compile(r"NET/Socket|socket|[Cc]onnect(?:ion|ing)? (?:to|refused)|bootstrap", re.I)))
MAX_MESSAGES = 50


def kind(message: str) -> str:
    for name, pattern in _KINDS:
        if pattern.search(message):
            return name
    return "other"


class Warnings:
    """Collects WARN lines fed one at a time (the connection parser's loop calls add for each line with WARN)."""

    def __init__(self):
        self.messages: Counter = Counter()

    def add(self, line: str) -> None:
        if m := _WARN.search(line):
            message = m.group(1).rstrip()
            if message in self.messages or len(self.messages) < MAX_MESSAGES:
                self.messages[message] += 1

    def summary(self) -> dict | None:
        """None where the log has no WARN line; else the total, the count per kind and each distinct message
        (the first 50 seen) with its kind and how often it was printed."""
        if not self.messages:
            return None
        kinds: Counter = Counter()
        listed = []
        for message, n in self.messages.items():
            k = kind(message)
            kinds[k] += n
            listed.append({"kind": k, "message": message, "count": n})
        return {"total": sum(self.messages.values()), "by_kind": dict(kinds), "messages": listed}
