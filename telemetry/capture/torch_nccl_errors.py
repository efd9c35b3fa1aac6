"""torch's ProcessGroupNCCL error lines in a log: which collective timed out, on which ranks, and the NCCL errors
torch raised. NCCL's own WARN lines are nccl_warnings.py's; these are torch's (c10d), which a log of a hung or failed
job often holds instead of, or after, NCCL's lines.

torch writes, behind its own prefix (`[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] `, older
`[E ProcessGroupNCCL.cpp:458] `, often behind torchrun's `[rank1]:`):

- `[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523,
  NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.` (before torch 2.2 without
  the Numel fields; repeated in the `what():` of the exception that ends the process);
- `[PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 808,
  ...` (2.4+: ` failure detected by watchdog at work sequence id: 808 ...`);
- `torch.distributed.DistBackendError: NCCL error in: .../ProcessGroupNCCL.cpp:1333, unhandled system error (run with
  NCCL_DEBUG=INFO for details), NCCL version 2.18.6` (older: `RuntimeError: NCCL error in: ..., unhandled system
  error, NCCL version 2.4.8`).
"""
from __future__ import annotations

import re
from collections import Counter

_TIMEOUT = re.compile(r"WorkNCCL\(SeqNum=(\d{1,18}), OpType=(\w+)[^)]*?Timeout\(ms\)=(\d{1,18})\)")
_WATCHDOG_FAILURE = re.compile(r"detected by watchdog at work(?: sequence id)?: (\d{1,18})")
_RANK = re.compile(r"\bRank (\d{1,9})\]")  # torch's own: the rank inside the collective's process group
_JOB_RANK = re.compile(r"\[rank(\d{1,9})\]:")  # torchrun's prefix: the job's rank (a subgroup's differ, pytorch#134006)
# the error's name: up to its "(run with NCCL_DEBUG=INFO ...)" hint or the ", NCCL version" that follows it
_NCCL_ERROR = re.compile(r"NCCL error in: \S+?:\d+, (.+?)(?: \(run with|, NCCL version|$)")
_SIGNS = ("WorkNCCL(", "atchdog", "CCL error in: ")  # (nccl_log.py tests the same three inline, once a line)
MAX_ITEMS = 50


def relevant(line: str) -> bool:
    """Whether a line may hold one of torch's ProcessGroupNCCL errors (a cheap test before the patterns)."""
    return any(sign in line for sign in _SIGNS)


class TorchErrors:
    """Collects torch's ProcessGroupNCCL error lines fed one at a time."""

    def __init__(self):
        self.lines = 0
        self.timeouts: dict[tuple[int, str, int], set[int]] = {}  # (seq, op, timeout ms) -> ranks that reported it
        self.failures: dict[int, set[int]] = {}  # work sequence number -> ranks whose watchdog reported it failed
        self.errors: Counter = Counter()

    def add(self, line: str) -> None:
        rank = _JOB_RANK.search(line) or _RANK.search(line)
        ranks = {int(rank.group(1))} if rank else set()
        if m := _TIMEOUT.search(line):
            key = (int(m.group(1)), m.group(2), int(m.group(3)))
            if key in self.timeouts or len(self.timeouts) < MAX_ITEMS:
                self.timeouts.setdefault(key, set()).update(ranks)
        elif m := _WATCHDOG_FAILURE.search(line):
            seq = int(m.group(1))
            if seq in self.failures or len(self.failures) < MAX_ITEMS:
                self.failures.setdefault(seq, set()).update(ranks)
        elif m := _NCCL_ERROR.search(line):
            error = m.group(1).rstrip()
            if error in self.errors or len(self.errors) < MAX_ITEMS:
                self.errors[error] += 1
        else:
            return
        self.lines += 1

    def summary(self) -> dict | None:
        """None where the log has none of these lines; else how many lines, each timed-out collective (torch's
        sequence number, op type, timeout) with the ranks that named it, the work sequence numbers the watchdog
        reported failed, and each NCCL error torch raised with how often it was printed. A line that names no rank
        (an exception's `what():` may not) adds none: the ranks are those the lines name, not the world; the job's
        rank where torchrun's `[rankN]:` prefix gives it, else torch's own (its process group's rank)."""
        if not self.lines:
            return None
        return {"lines": self.lines,
                "timeouts": [{"seq": seq, "op": op, "timeout_ms": ms, "ranks": sorted(r)}
                             for (seq, op, ms), r in self.timeouts.items()],
                "watchdog_failures": [{"seq": seq, "ranks": sorted(r)} for seq, r in self.failures.items()],
                "nccl_errors": [{"error": e, "count": n} for e, n in self.errors.items()]}
