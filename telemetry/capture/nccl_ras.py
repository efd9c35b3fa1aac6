"""The communicators table of the NCCL RAS client's report (`ncclras`, NCCL 2.24+), as the NCCL log parser meets it.

The report (a text dump, no NCCL prefix) holds a version line ("NCCL version 2.26.2 compiled with CUDA 12.6": the
NCCL of the job's processes that answered), a job summary and this table:

    Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
        #  in group  per comm  per node  per comm  in group
        0         1         4         8        32        32   RUNNING  MISMATCH

one row per group of alike communicators. Its 'ranks per comm' is a communicator size, as an init line's nranks
is; its 'nodes per comm' counts only the ranks that answered, so it is a node count only where every rank of the
group did (ranks in the group = comms x ranks per comm; an INCOMPLETE report has fewer).
"""
from __future__ import annotations

import re

HEADER = re.compile(r"Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors")
# (not anchored at the start: a launcher's or log shipper's prefix may come first)
ROW = re.compile(r"(?:^|\s)(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$")


class RasTable:
    """Rows of the communicators tables met so far: (comms in group, nodes per comm, ranks per comm, ranks in
    group). `open` is true inside a table, whose rows hold none of the words the parser looks for."""

    def __init__(self) -> None:
        self.open = False
        self.rows: list[tuple[int, int, int, int]] = []

    def feed(self, line: str) -> bool:
        """True when the line belongs to a table (header, second header, row); a table ends at any other line."""
        if self.open:
            if m := ROW.search(line):
                self.rows.append(tuple(int(m.group(i)) for i in (2, 3, 5, 6)))
                return True
            if "in group" in line and "per comm" in line:
                return True
            self.open = False
            return False
        if "Status" in line and HEADER.search(line):
            self.open = True
            return True
        return False

    def nranks(self) -> int | None:
        """The largest communicator size of the tables (a group of no communicator has 0)."""
        return max((r[2] for r in self.rows), default=0) or None

    def holds(self, nranks: int) -> bool:
        """Whether a row of the tables is of `nranks`-rank communicators (the log's other lines may give another
        size: the RAS report then says nothing of that communicator's nodes)."""
        return any(r[2] == nranks for r in self.rows)

    def nnodes(self, nranks: int) -> int | None:
        """Nodes per communicator of the rows of `nranks`-rank communicators, when every rank of each such group
        answered; None otherwise (or when no row holds communicators of that size)."""
        rows = [r for r in self.rows if r[2] == nranks]
        whole = [nodes for comms, nodes, ranks, in_group in rows if in_group == comms * ranks]
        return max(whole) if whole and len(whole) == len(rows) else None

    def why_no_nnodes(self, nranks: int) -> str:
        return (f"the RAS report's rows of the {nranks}-rank communicators count fewer ranks than they hold (some "
                "processes did not answer): their nodes per comm count only the ranks that did")
