"""nccl-tests output, read into the collective sweep's JSON (the schema of a run's collectives.json).

    python -m telemetry nccl-tests all_reduce_perf.txt [more files] [--json OUT] [--csv OUT]

Reads nccl-tests' `-J` JSON files (telemetry/analysis/nccl_tests_json.py) and what nccl-tests prints, in its layouts since 2018, and the harness's own sweep tables:

- the parameters line `# nThread 1 nGpus 1 minBytes 8 maxBytes ... iters: 20 [agg iters: 1] validation: 1 ...`,
  the `# Using devices` block (`#  Rank  0 [Group  0] Pid ... on HOST device  0 [BUS] NAME`, one line per
  rank: the world size, unknown when the list does not start at rank 0 or names a rank twice), `# nccl-tests
  version`, `# Collective test starting/concluded: NAME` (the concluded line names a table whose start was cut);
- the column header, which says which columns a row has: `size count type [redop] [root]`, then per block
  (`out-of-place`, `in-place`) `time algbw busbw` and `#wrong` (a count) or, before 2022, `error` (the
  largest error, not a count: `wrong` is then null), plus any columns later versions add (they are kept
  under `extra`); the units line gives the time unit;
- rows, where a blank `redop` cell (old alltoall) or a missing out-of-place block (nccl-tests prints
  blanks there when it skips it) leave fewer tokens; `N/A` cells are null;
- `# Out of bounds values` and `# Avg bus bandwidth` when present (without the footer the average is the
  mean busbw of the rows' blocks, as nccl-tests computes it, and says so); footer lines alone (a grep of the
  averages) are runs of their own, with no row;
- Open MPI's `--tag-output` prefixes (`[1,0]<stdout>:`; stderr lines are dropped) and `srun --label`
  prefixes (`0: `); each prefix is read as its own stream, so ranks printing at once do not mix; lines that
  are none of the above (NCCL INFO, shell prompts, markdown) are skipped.

One run per table (or per preamble whose run failed before its column header: no row, `failed` true). The collective comes from the `Collective test starting` (or `concluded`) line, a `..._perf` command
(or NCCL 1's `..._test`) in the text, or else the file name (`all_gather_perf.txt`); unnamed tables are `unknown`,
with a note that says so.
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
from telemetry.errors import InputError
from telemetry.analysis.nccl_tests_json import DTYPES  # nccl-tests' type names, its text and JSON alike

# nccl-tests binary stem -> the sweep's collective name
TEST_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all", "alltoallv": "alltoallv", "sendrecv": "sendrecv", "broadcast": "broadcast",
            "reduce": "reduce", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
OP_TESTS = {op: f"{stem}_perf" for stem, op in TEST_OPS.items()}
BLOCKS = ("out_of_place", "in_place")



def block_busbw(key: str, row: dict, block: dict, ranks: int | None) -> float | None:
    """A row's busbw in GB/s. nccl-tests prints two decimals of GB/s, so a link under 5 MB/s (a slow lab link)
    reads 0.00 in every row: there it is the size over the printed time (several digits) x the collective's bus
    factor at `ranks`, as nccl-tests computes it; None where the time, the collective (`key`, the op's key:
    `sendrecv_inter_node` is a sendrecv) or the rank count is unknown. A printed value above 0 is kept."""
    from telemetry import formulas
    busbw = block.get("busbw_GBps")
    if not isinstance(busbw, (int, float)) or busbw > 0 or not row.get("size"):
        return busbw if isinstance(busbw, (int, float)) else None
    op = next((o for o in formulas.RECORDED_OPS if key == o or key.startswith(o + "_")), None)
    time_us = block.get("time_us")
    if op is None or not ranks or not isinstance(time_us, (int, float)) or time_us <= 0:
        return None  # under the printed precision and nothing to compute it from: unknown, not 0
    return formulas.busbw_GBps(op, row["size"], time_us / 1e6, ranks)


def bandwidths_from_times(result: dict) -> dict:
    """`result` (parse/read) with every block that printed 0.00 GB/s given its algbw and busbw from its size and
    time (block_busbw), marked `bandwidth_from_time`; an op's average without a footer is then the mean of those.
    For a table of a slow link read as a run's record (a lab sweep cut short), where 0.00 read as 0 B/s and 0% of
    line rate. Blocks it cannot compute keep what was printed."""
    for key, op in result.get("ops", {}).items():
        ranks = op.get("world_size") or result.get("world_size")
        changed = False
        for row in op.get("rows") or []:
            for name in BLOCKS:
                b = row.get(name)
                if not b or b.get("busbw_GBps") != 0 or not (busbw := block_busbw(key, row, b, ranks)):
                    continue
                b.update(algbw_GBps=row["size"] / (b["time_us"] / 1e6) / 1e9, busbw_GBps=busbw, bandwidth_from_time=True)
                changed = True
        if changed and op.get("avg_busbw_source") != "footer":
            vals = [b["busbw_GBps"] for r in op["rows"] for n in BLOCKS if (b := r.get(n)) and b.get("busbw_GBps") is not None]
            op["avg_busbw_GBps"] = sum(vals) / len(vals) if vals else op.get("avg_busbw_GBps")
    return result


# (a log pasted as an indented block keeps its indent before the tag)
_MPI_TAG = re.compile(r"^[ \t]*\[(\d+),(\d+)\]<(stdout|stderr)>:")
_SRUN_LABEL = re.compile(r"^\s*(\d+):[ \t]")  # a tab where an editor turned the label's blanks into one
# a launcher that tags each write of a process ("[0]", NVIDIA/nccl#1453): a row is several writes, so the tag
# starts the line and recurs glued to the cell before it ("...  sum      -1[0]    1626.5 ...   0[0]    2302.3 ...")
_WRITE_TAG = re.compile(r"^[ \t]*\[(\d+)\][ \t]")
_OPTION_AFTER = re.compile(r"\s+-\w")  # the test's first option: what makes a '#' line a command
_TEST_NAME = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|sendrecv|broadcast|hypercube|"
                        r"reduce|gather|scatter)_perf(?:_mpi)?\b"
                        # NCCL 1's own test programs (test/single/all_reduce_test, 2016-17), whose layout is read too
                        r"|\b(?:all_reduce|all_gather|reduce_scatter|broadcast|reduce)_test\b")
_FILE_OP = re.compile(r"all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|sendrecv|broadcast|hypercube")
# a host name may hold blanks where a reporter replaced it ("on NODE A  device  2")
# (the host grows a word at a time: a lazy "\S.*?" before "\s+device" is quadratic in a long run of blanks)
_RANK = re.compile(r"^Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+(?:\s+\S+)*?)\s+device\s+(-?\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")
# NCCL 1's test programs list one process's devices without host or pid ("#   Rank  0 uses device  0 [0x26] Tesla K10")
_RANK_NCCL1 = re.compile(r"^Rank\s+(\d+)\s+uses\s+device\s+(-?\d+)\s+\[([^\]]*)\]\s*(.*)$")
# (rccl-tests before 2024 wrote "# nThreads: 1 nGpus: 2 nRanks: 1 minBytes: 8 ... warmupIters: 5 iters: 20", rccl#957)
_PARAM = re.compile(r"(nThread|nGpus|nRanks|minBytes|maxBytes|warmup ?[Ii]ters|agg iters|iters|validation|graph|"
                    r"unalign)s?:? (-?\d+)")
_PARAM_KEYS = {"warmupIters": "warmup_iters", "warmup Iters": "warmup_iters"}
_STEP = re.compile(r"step: (\d+)\((\w+)\)")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")
_PLACEHOLDERS = {"N/A", "n/a", "NA", "-"}
# "HOST: Test NCCL failure common.cu:392 '...'", " .. HOST pid 5068: Test failure common.cu:590"; a failure can
# cut a row short ("2097152  32768  float  none  -1 node0: Test CUDA failure ...")
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure\b")
# a process killed by a signal, or one that exited with an error before saying why, shows only through its
# runtime: UCX ("[host:pid:0:tid] Caught signal 11 (Segmentation fault: ..."), Open MPI ("*** Process received
# signal ***", "mpirun detected that one or more processes exited with non-zero status", "mpirun noticed that
# process rank 3 ... exited on signal 11"), the shell ("Segmentation fault (core dumped)")
_CRASH = re.compile(r"\bCaught signal \d+|\*\*\* Process received signal \*\*\*|\(core dumped\)|"
                    r"\bmpirun (?:detected that one or more processes exited with non-zero status|"
                    r"noticed that process rank \d+ .*exited on signal)")
# AMD's rccl-tests print RCCL's banner ("RCCL version : 2.28.3-...") and "# rccl-tests version ... rccl-library=22803";
# RCCL's version is that of the NCCL release it follows
_NCCL_VERSION = re.compile(r"([NR])CCL version :? ?(\d+\.\d+\.\d+)")
_LIBRARY_CODE = re.compile(r"[nr]ccl-library=(\d{1,9})\b")  # (a damaged code too long for int(): none)
# Rows pasted without their header: nccl-tests' layout since 2022 has 13 cells (2 blocks of 4 after 5)
# nccl-tests' comment lines with their '#' lost (GitHub renders "# text" as a heading, so pasted-back output
# has none): read as if the '#' were there
_HASHLESS = re.compile(r"(?:nThreads?:? \d|Using devices$|Rank\s+\d+\s+(?:Group|Pid)|size\s+count\s+type\s|\(B\)\s+\(elements\)|"
                       r"out-of-place\s+in-place|Out of bounds values|Avg bus bandwidth|[nr]ccl-tests version|"
                       r"Collective test (?:starting|concluded)|Blocking Enabled)")
_ASSUMED_HEADER = "size count type redop root time algbw busbw #wrong time algbw busbw #wrong".split()
# and before 2022 (the largest error in place of #wrong, no root; before 2019 no redop either), by their cell count
_ASSUMED_OLD = {12: "size count type redop time algbw busbw error time algbw busbw error".split(),
                11: "size count type time algbw busbw error time algbw busbw error".split()}
_ERROR_CELL = re.compile(r"N/A|[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?")
_LAYOUT_NOTE = {13: "nccl-tests' layout since 2022 (size count type redop root, then time algbw busbw #wrong "
                    "out-of-place and in-place, times in us)",
                12: "nccl-tests' layout of 2019-2021 (size count type redop, then time algbw busbw error "
                    "out-of-place and in-place, times in us)",
                11: "nccl-tests' layout before 2019 (size count type, then time algbw busbw error out-of-place "
                    "and in-place, times in us)"}


# a terminal's colour codes ("\x1b[32m...\x1b[0m"; tput sgr0's "\x1b(B\x1b[m" chooses a character set first)
_ANSI = re.compile(r"\x1b(?:\[[0-9;:?]*[A-Za-z]|[()][0-9A-Za-z])")


class NcclTestsError(InputError):
    """A file that holds no nccl-tests table; the message names it."""


def _prefix(line: str) -> tuple[object, str] | None:
    """(stream key, line without the launcher's prefix); None for a line that came from stderr."""
    m = _MPI_TAG.match(line)
    if m:
        return (None if m.group(3) == "stderr" else ("mpi", m.group(2)), line[m.end():])
    m = _SRUN_LABEL.match(line)
    if m:
        return ("srun", m.group(1)), line[m.end():]
    m = _WRITE_TAG.match(line)
    if m:
        tag = f"[{m.group(1)}]"
        rest = line[m.end():]
        # (str.replace, not a regex: a line of many tags stays linear)
        return ("tag", m.group(1)), rest.replace(tag, " ") if tag in rest else rest
    return "", line


def _num(tok: str) -> float | None:
    """A cell's value; placeholders and non-finite values are unknown (null)."""
    if tok in _PLACEHOLDERS:
        return None
    v = float(tok)  # anything else that is not a number makes the row unreadable
    return v if math.isfinite(v) else None


def _cell_ends(text: str) -> list[int]:
    """The column after each blank-separated cell of a line (after any leading '#'); a tab counts as the four
    blanks an editor replaced by it."""
    return [m.end() for m in re.finditer(r"[^\s#]\S*", text.replace("\t", "    "))]


class _Run:
    def __init__(self, seq: int, name: str | None = None):
        self.seq, self.name = seq, name
        self.key = self.ranks = self.version = None
        self.params: dict = {}
        self.devices: list[dict] = []
        self.list_open = False  # the device list was the stream's last line so far: it may go on past the text
        self.prefix_cols: list[str] = []
        self.block_cols: list[str] = []
        self.extra_cols: list[str] = []
        self.block_names = list(BLOCKS)
        self.nblocks = 0
        self.time_scale = 1.0
        self.rows: list[dict] = []
        self.skipped: list[str] = []
        self.oob = self.avg = None
        self.avg_check: str | None = None  # "OK"/"FAILED" after the average when a minimum was given
        self.failures: list[str] = []
        self.nccl_version: str | None = None
        self.rccl = False  # the library is AMD's RCCL (its banner, or rccl-tests' version line)
        self.assumed_header = False
        self.block_ends: list[int] = []

    def empty(self) -> bool:
        return not (self.rows or self.params or self.devices or self.nblocks)

    # ---------------------------------------------------------------- header

    def header(self, tokens: list[str], text: str | None = None) -> None:
        times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
        names = {"bytes": "size", "N": "count", "op": "redop"}
        self.prefix_cols = [names.get(t, t) for t in tokens[:times[0]]]
        width = (times[1] - times[0]) if len(times) > 1 else len(tokens) - times[0]
        block = tokens[times[0]:times[0] + width]
        names = {"cputime": "time", "#wrong": "wrong", "res": "error"}
        self.block_cols = [names.get(t, t) for t in block]
        self.nblocks = len(times)
        self.extra_cols = tokens[times[0] + width * self.nblocks:]
        if len(self.block_names) != self.nblocks:
            # block titles that do not match the header (a pasted title line cut to "in-place"): nccl-tests
            # prints out-of-place first, then in-place
            self.block_names = list(BLOCKS) if self.nblocks == 2 else self.block_names[-self.nblocks:]
        # nccl-tests of 2017 printed milliseconds and had no units line
        self.time_scale = 1e3 if tokens[0] == "bytes" else 1.0
        # where each block ends, in columns from the end of the size cell (cells are right-aligned under their
        # titles): a row holding one block's cells shows by its columns which block that is
        ends = _cell_ends(text or "")
        ends = ends[len(ends) - len(tokens):] if len(ends) >= len(tokens) else []
        # (a header cut inside its last block, "... time algbw busb", has fewer cells than its blocks: no ends)
        last = len(self.prefix_cols) + self.nblocks * width - 1
        self.block_ends = [ends[len(self.prefix_cols) + (k + 1) * width - 1] - ends[0]
                           for k in range(self.nblocks)] if ends and last < len(ends) else []

    def units(self, tokens: list[str]) -> None:
        for t in tokens:
            if t in ("(us)", "(ms)", "(s)"):
                self.time_scale = {"(us)": 1.0, "(ms)": 1e3, "(s)": 1e6}[t]
                return

    def titles(self, text: str) -> None:
        found = [m.group(0) for m in re.finditer(r"out-of-place|in-place", text)]
        if found:
            self.block_names = [b.replace("-", "_") for b in found]

    # ---------------------------------------------------------------- rows

    def row(self, line: str) -> None:
        tokens = line.split()
        stamp = None
        if "timestamp" in self.extra_cols and len(tokens) > 2 and _TIMESTAMP.match(tokens[-2]):
            stamp = " ".join(tokens[-2:])
            tokens = tokens[:-2]
        npre, nblk = len(self.prefix_cols), len(self.block_cols)
        ncols = npre + nblk * self.nblocks
        prefix_cols = list(self.prefix_cols)
        blocks: list[list[str] | None]
        if len(tokens) == ncols:
            blocks = [tokens[npre + i * nblk:npre + (i + 1) * nblk] for i in range(self.nblocks)]
        elif len(tokens) == ncols - 1 and "redop" in prefix_cols:
            # tests without a reduction printed an empty redop cell before 2022
            prefix_cols.remove("redop")
            npre -= 1
            blocks = [tokens[npre + i * nblk:npre + (i + 1) * nblk] for i in range(self.nblocks)]
        elif self.nblocks == 2 and len(tokens) == npre + nblk:
            # one block's cells: nccl-tests leaves the out-of-place block blank when it skips it; mscclpp-test
            # (in-place titled first) ends the row after the in-place block when it skips out-of-place
            blocks = [None, tokens[npre:]]
            ends = _cell_ends(line)
            if self.block_ends and len(ends) == len(tokens):
                # only a row that ends under the first block's titles (right-aligned cells, a tab's width off at
                # most) is read as that block: where blanks were collapsed (a table copied out of a web page) the
                # columns say nothing, and nccl-tests' own order (in-place last) stands
                at, (first, last) = ends[-1] - ends[0], self.block_ends
                if abs(at - first) < abs(at - last) and abs(at - first) <= max(2, (last - first) // 4):
                    blocks = [tokens[npre:], None]
        else:
            self.skipped.append(f"{len(tokens)} cells, the header has {ncols}: {line.strip()}")
            return
        try:
            cells = dict(zip(prefix_cols, tokens[:npre]))
            row = {"size": int(cells["size"]), "count": int(cells["count"]) if "count" in cells else None,
                   "type": cells.get("type"), "redop": cells.get("redop"),
                   "root": int(cells["root"]) if "root" in cells else None}
            for name, toks in zip(self.block_names, blocks):
                row[name] = self._block(toks)
        except (ValueError, KeyError) as exc:
            self.skipped.append(f"unreadable ({exc}): {line.strip()}")
            return
        for name in BLOCKS:
            row.setdefault(name, None)
        if stamp:
            row["timestamp"] = stamp
        self.rows.append(row)

    def _block(self, toks: list[str] | None) -> dict | None:
        if toks is None:
            return None
        vals = dict(zip(self.block_cols, toks))
        if all(vals.get(k) in _PLACEHOLDERS for k in ("time", "algbw", "busbw")):
            return None  # a placeholder block: nothing was measured
        time = _num(vals["time"])
        block = {"time_us": None if time is None else time * self.time_scale,
                 "algbw_GBps": _num(vals["algbw"]), "busbw_GBps": _num(vals["busbw"]), "wrong": None}
        if "wrong" in vals:
            w = _num(vals["wrong"])
            block["wrong"] = None if w is None else int(w)
        if "error" in vals:
            block["error"] = _num(vals["error"])  # the largest error, not a count of wrong elements
        extra = {k: _num(v) for k, v in vals.items() if k not in ("time", "algbw", "busbw", "wrong", "error")}
        if extra:
            block["extra"] = extra
        return block

    # ---------------------------------------------------------------- result

    def to_op(self) -> dict:
        blocks = [b for r in self.rows for n in BLOCKS if (b := r.get(n))]
        notes, missing = [], {}
        world = len(self.devices) or None
        listed = [d["rank"] for d in self.devices]
        if len(set(listed)) != len(listed):
            # several processes each printed their own device list (nccl-tests built without MPI, started by
            # mpirun): each ran a world of its own, and the table mixes their runs
            world = None
            twice = sorted({r for r in listed if listed.count(r) > 1})
            notes.append(f"world size unknown: rank {twice[0]} is listed {listed.count(twice[0])} times, so several "
                         "processes each ran their own test (nccl-tests without MPI?) and their output is mixed")
        elif self.list_open:
            # the text ends inside the device list (an excerpt cut there, nccl#1403): more ranks may follow
            world = None
            notes.append(f"world size unknown: the text ends inside the device list (ranks {min(listed)}.."
                         f"{max(listed)} listed), which may go on")
        elif listed and sorted(listed) != list(range(len(listed))):
            # an excerpt that keeps the end of the list ("#  Rank 71 ..." of a 72-rank run): more ranks than listed
            world = None
            notes.append(f"world size unknown: the device list names rank {min(listed)}..{max(listed)} "
                         f"({len(listed)} lines), not every rank from 0")
        if self.avg is not None:
            avg, source = self.avg, "footer"
        else:
            vals = [b["busbw_GBps"] for b in blocks if b["busbw_GBps"] is not None]
            avg = sum(vals) / len(vals) if vals else None
            source = "mean of the rows' busbw (no footer)" if vals else None
        wrongs = [b["wrong"] for b in blocks if b.get("wrong") is not None]
        wrong = self.oob if self.oob is not None else (sum(wrongs) if wrongs else None)
        if wrong is None:
            notes.append("wrong: not reported (no footer, and no #wrong counts in the rows)")
        if any("error" in b for b in blocks):
            notes.append("wrong per block: null, this nccl-tests prints the largest error (`error`), not a count")
        elif blocks and all(b["wrong"] is None for b in blocks):
            notes.append("wrong per block: null, #wrong reads N/A (validation off)")
        if self.avg is None and self.rows:
            notes.append("no '# Avg bus bandwidth' footer: the output may have been cut short")
        if self.avg is not None and not self.rows and not self.nblocks:
            notes.append("only nccl-tests' footer lines: no header and no row (the average covers rows not in the "
                         "text)")
        if self.assumed_header:
            notes.append(f"no column header: the rows were read as {_LAYOUT_NOTE[self.assumed_header]}")
        last: dict = {}
        for row in self.rows:  # one test prints each (type, redop) series with growing sizes
            key = (row.get("type"), row.get("redop"))
            if key in last and row["size"] < last[key]:
                notes.append(f"sizes go back ({last[key]} B, then {row['size']} B) in one table: rows of more than "
                             "one run (processes printing at once, or repeated runs) may be mixed")
                break
            last[key] = row["size"]
        if wrong:
            notes.append(f"{wrong} values out of bounds: nccl-tests found wrong results")
        if self.avg_check == "FAILED":
            notes.append("the average bus bandwidth is below the minimum the run was given (nccl-tests printed "
                         "FAILED after it)")
        if self.rccl:
            version = self.nccl_version or _from_library_code(self.version)
            notes.append(f"the library is AMD's RCCL{' ' + version if version else ''}: nccl_version is the NCCL "
                         "release it follows")
        if self.failures:
            where = (f"after the row of {self.rows[-1]['size']} B" if self.rows else "before the first row")
            notes.append(f"the test failed {where}: {self.failures[0]}")
        elif self.nblocks and not self.rows:
            notes.append("no row after the column header and no failure line: the output was cut, or the run "
                         "stopped, before the first size")
        elif not self.nblocks and not self.rows and self.avg is None:
            notes.append("no column header after the preamble and no failure line: the output was cut, or the run "
                         "stopped, before its table")
        for name in BLOCKS:
            if self.rows and all(r.get(name) is None for r in self.rows):
                missing[name] = "not in this table"
        return {"test": self.name, "rows": self.rows, "avg_busbw_GBps": avg, "avg_busbw_source": source,
                "avg_busbw_check": self.avg_check,
                "wrong": wrong, "ranks": self.ranks, "world_size": world,
                "devices": self.devices, "params": self.params, "version": self.version,
                "nccl_version": self.nccl_version or _from_library_code(self.version), "missing": missing,
                "failed": bool(self.failures), "failures": self.failures, "notes": notes, "skipped_lines": self.skipped}


def _from_library_code(tests_version: str | None) -> str | None:
    """'2.17.6 nccl-headers=22807 nccl-library=22807' -> '2.28.7' (NCCL_VERSION_CODE: 2.9+ is
    major*10000 + minor*100 + patch, older releases major*1000 + minor*100 + patch)."""
    m = _LIBRARY_CODE.search(tests_version or "")
    if not m:
        return None
    code = int(m.group(1))
    major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _assumed_header(tokens: list[str]) -> list[str] | None:
    """The column header of a row pasted without one (size, count and a type name first): the layout its cell
    count names, when its cells fit it; else None."""
    if len(tokens) < 11 or not (tokens[0].isdigit() and tokens[1].isdigit() and tokens[2] in DTYPES):
        return None
    if len(tokens) == len(_ASSUMED_HEADER):
        return list(_ASSUMED_HEADER)
    header = _ASSUMED_OLD.get(len(tokens))
    # the older layouts: a redop name (12 cells) or a time (11) after the type, an error cell ending each block
    if header is None or tokens[3][0].isdigit() != (len(tokens) == 11) or \
            not (_ERROR_CELL.fullmatch(tokens[-1]) and _ERROR_CELL.fullmatch(tokens[-5])):
        return None
    return list(header)


class _Stream:
    """One launcher stream (one rank's tagged output, or the untagged text)."""

    def __init__(self, parser: "_Parser"):
        self.parser = parser
        self.run: _Run | None = None

    def current(self) -> _Run:
        if self.run is None:
            self.run = self.parser.new_run()
        return self.run

    def close(self) -> None:
        if self.run is not None:
            self.parser.finish(self.run)
            self.run = None

    def _plain(self, text: str) -> None:
        """A line that is not one of nccl-tests' comments: a row, a failure, a library banner, a command line."""
        run = self.run
        if ("failure" in text and _FAILURE.search(text)) or \
                (("ignal" in text or "dumped" in text or "mpirun" in text) and _CRASH.search(text)):
            self.current().failures.append(text)
        elif "CCL version" in text and (m := _NCCL_VERSION.search(text)):
            run = self.current()
            run.nccl_version = m.group(2)
            run.rccl = run.rccl or m.group(1) == "R"
        elif run is not None and run.nblocks and text.split()[0].isdigit():
            run.row(text)
        elif (run is None or not run.nblocks) and (header := _assumed_header(text.split())):
            run = self.current()
            run.header(header)
            run.assumed_header = len(header)
            run.row(text)
        else:
            m = _TEST_NAME.search(text)  # a command line naming the test
            if m:
                self.command(m.group(0))

    def command(self, name: str) -> None:
        """A command line naming a test: it names the run that starts after it. A table already read (its rows or
        its footer) is another test's (nccl#340: `./broadcast_perf ...` pasted under the previous test's footer)."""
        run = self.run
        if run is not None and (run.rows or run.avg is not None):
            self.close()
        self.parser.pending = name

    def feed(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        if self.run is not None:
            self.run.list_open = False
        if not text.startswith("#") and not text[0].isdigit() and _HASHLESS.match(text):
            text = "# " + text
        if not text.startswith("#"):
            self._plain(text)
            return
        body = text.lstrip("#").strip()
        tokens = body.split()
        if body.startswith(("nccl-tests version", "rccl-tests version")):
            self.close()
            run = self.current()
            run.version = body.split("version", 1)[1].strip()
            run.rccl = body.startswith("rccl")
        elif body.startswith("Collective test starting:"):
            run = self.run
            if run is not None and (run.nblocks or run.params):
                self.close()
            self.current().name = body.split(":", 1)[1].strip()
        elif body.startswith("Collective test concluded:"):
            run = self.run
            if run is not None and run.name is None and run.nblocks:  # an excerpt that kept only the end
                run.name = body.split(":", 1)[1].strip()
            self.close()
        elif body.startswith("fabric-harness test:"):
            m = re.match(r"\s*([\w.-]+)", body.split(":", 1)[1])
            run = self.current()
            run.key = m.group(1) if m else None
            m = re.search(r"ranks (\d+) and (\d+)", body)
            run.ranks = [int(m.group(1)), int(m.group(2))] if m else None
        elif body.startswith("fabric-harness collective sweep:"):
            m = re.search(r"time (\w+)", body)
            self.parser.sweep_time_reduction = m.group(1) if m else None
        elif body.startswith("fabric-harness latency (us):"):
            for item in body.split(":", 1)[1].split(","):
                parts = item.split()
                if len(parts) == 2:
                    self.parser.latency[f"{parts[0]}_us"] = _num(parts[1])
        elif body.startswith("nThread"):
            run = self.run
            if run is not None and (run.params or run.nblocks):
                self.close()
            run = self.current()
            run.params = {_PARAM_KEYS.get(k, k.replace(" ", "_")): int(v) for k, v in _PARAM.findall(body)}
            m = _STEP.search(body)
            if m:
                run.params["step"] = int(m.group(1))
                run.params["step_kind"] = m.group(2)
        elif tokens and tokens[0] == "Rank" and (m := _RANK.match(body)):
            self.current().list_open = True
            self.current().devices.append({
                "rank": int(m.group(1)), "group": None if m.group(2) is None else int(m.group(2)),
                "pid": None if m.group(3) is None else int(m.group(3)), "host": m.group(4),
                "device": int(m.group(5)), "bus_id": m.group(6), "name": m.group(7).strip()})
        elif tokens and tokens[0] == "Rank" and (m := _RANK_NCCL1.match(body)):
            self.current().devices.append({
                "rank": int(m.group(1)), "group": None, "pid": None, "host": None, "device": int(m.group(2)),
                "bus_id": m.group(3), "name": m.group(4).strip()})
        elif tokens and tokens[0] in ("size", "bytes") and ("time" in tokens or "cputime" in tokens):
            run = self.current()
            if run.rows:  # a second table without a preamble: a second run
                titles = run.block_names
                self.close()
                run = self.current()
                run.block_names = titles
            run.header(tokens, text)
        elif tokens and tokens[0] == "(B)":
            if self.run is not None:
                self.run.units(tokens)
        elif "out-of-place" in body or "in-place" in body:
            run = self.run
            if run is not None and run.rows:
                self.close()
            self.current().titles(body)
        elif body.startswith("Out of bounds values"):
            m = re.search(r":\s*(\d+)", body)
            if m:
                self._footer_run().oob = int(m.group(1))
        elif body.startswith("Blocking Enabled"):  # -z 1: a barrier after each collective
            self.current().params["blocking"] = 1
        elif "_perf" in body and (m := _TEST_NAME.search(body)) and _OPTION_AFTER.match(body, m.end()):
            # a command line behind a root shell's "# " prompt ("# ./build/all_reduce_perf -b 8 ...", nccl#428)
            self.command(m.group(0))
        elif body.startswith("Avg bus bandwidth"):
            # "# Avg bus bandwidth    : 95.3009 " and, with a minimum to check against, "... : 12.3 FAILED"
            m = re.search(r":\s*(\S+)(?:\s+(?:GB/s\s+)?(OK|FAILED)\b)?", body)
            if m:
                run = self._footer_run()
                try:
                    run.avg = _num(m.group(1))
                except ValueError:
                    run.avg = None
                run.avg_check = m.group(2)

    def _footer_run(self) -> _Run:
        """The run a footer line belongs to: the current one, or a run of its own when the text holds footers only
        (a grep of 'Avg bus bandwidth', nccl-tests#27) or a second footer follows a run's average."""
        run = self.run
        if run is None or run.avg is not None:
            self.close()
            run = self.current()
        return run


class _Parser:
    def __init__(self):
        self.seq = 0
        self.done: list[_Run] = []
        self.pending: str | None = None
        self.latency: dict = {}
        self.sweep_time_reduction: str | None = None

    def new_run(self) -> _Run:
        self.seq += 1
        return _Run(self.seq)

    def finish(self, run: _Run) -> None:
        if run.name is None:
            run.name = self.pending
        # a run that failed before its column header (nccl-tests#219) is still a run: its preamble and failure;
        # so is a whole preamble (parameters and device list) whose output was cut before the header (nccl#1403)
        if run.rows or run.nblocks or (run.failures and (run.params or run.devices)) or run.avg is not None \
                or (run.params and run.devices):
            self.done.append(run)


def _op_key(run: _Run, hint: str | None) -> str:
    if run.key:
        return run.key
    if run.name:
        stem = re.sub(r"_(?:perf(?:_mpi)?|test)$", "", os.path.basename(run.name))
        if stem in TEST_OPS:
            return TEST_OPS[stem]
        return stem
    return hint or "unknown"


# nccl-tests' own comment lines (with or without their '#') and its rows (size, count, a type name), wherever a
# line holds one: what a log shipper's prefix is learnt from
_ANCHOR = re.compile(r"#\s*(?:nThreads?:? \d|Using devices|Rank\s+\d+\s|size\s+count\s|bytes\s+N\s|\(B\)|out-of-place|"
                     r"Out of bounds|Avg bus bandwidth|[nr]ccl-tests version|Collective test)|"
                     r"(?<!\S)(?:nThread \d+ nGpus|Rank\s+\d+\s+(?:Group|Pid)\s|size\s+count\s+type\s)|"
                     r"(?<![\w.:])\d+\s+\d+\s+(?:" + "|".join(DTYPES) + r")\s+\S+\s+\S")
_SIDES = re.compile(r"\s\|\s+")
_TAIL_TAG = re.compile(r"(?:\[\d+,\d+\]<(?:stdout|stderr)>:|(?<!\S)\d+:|(?<![\w\]])\[\d+\])$")


def _side_by_side(line: str) -> list[str] | None:
    """The two halves of a line of two nccl-tests outputs pasted side by side, split at ' | ' (a before/after
    comparison), when each half is one of nccl-tests' comment lines or rows; else None."""
    halves = _SIDES.split(line)
    return halves if len(halves) == 2 and all(_ANCHOR.search(h) for h in halves) else None


# a row that GitHub's editor turned into a markdown table ("1024 | 512 | half | sum | -1 | 5.39 | ...", mscclpp#736):
# every cell one token; "-- | -- | ..." (the table's rule) says nothing
_PIPE_CELL = re.compile(r"[^\s|]+")
_PIPE_RULE = re.compile(r":?-+:?")


def _pipe_row(line: str) -> str | None:
    """A markdown table row's cells joined by blanks (an nccl-tests row again); '' for the table's rule line;
    None when the line is not a row of one-token cells."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 3 or not all(_PIPE_CELL.fullmatch(c) for c in cells):
        return None
    return "" if all(_PIPE_RULE.fullmatch(c) for c in cells) else " ".join(cells)


def _shipped_prefix(lines: list[str]) -> re.Pattern | None:
    """The prefix a log shipper or launcher put before every line (kubectl logs --timestamps, CloudWatch, journald,
    pdsh, Ray, kubectl --prefix), learnt from the lines that hold one of nccl-tests' comment lines: its shape with
    each run of digits generalised (timestamps change from line to line), so the rows behind it read too. Open
    MPI's tags and srun's labels are left to _prefix (they name a stream each)."""
    shapes: set[str] = set()
    for line in lines:
        m = _ANCHOR.search(line)
        if not m:
            continue
        pre = line[:m.start()].rstrip()  # a row's own indent (its numbers are right-aligned) is not the shipper's
        if t := _TAIL_TAG.search(pre):  # Open MPI's tag or srun's label: _prefix reads those
            pre = pre[:t.start()].rstrip()
        if pre and "NCCL " not in pre and len(shapes) < 64:
            shapes.add(r"\d+".join(re.escape(part) for part in re.split(r"\d+", pre)))
    if not shapes:
        return None
    return re.compile("(?:" + "|".join(sorted(shapes, key=len, reverse=True)) + ")")


def parse(text: str, name_hint: str | None = None, path: str | None = None) -> dict:
    """nccl-tests text -> the sweep's JSON. `name_hint`: a file name that may name the test."""
    parser = _Parser()
    streams: dict[object, _Stream] = {}
    if "\x1b" in text:  # a terminal's colour codes around lines or prefixes, kept by a log shipper: not the text's
        text = _ANSI.sub("", text)
    # markdown escapes a '#' at the start of a line ("\\#  size  count ...", mscclpp#736): the '#' is nccl-tests'
    lines = [line.replace("\\#", "#") if "\\#" in line else line for line in text.splitlines()]
    shipped = _shipped_prefix(lines)
    for raw in lines:
        raw = raw.rstrip("\r\n")
        if shipped is not None and (m := shipped.match(raw)):
            raw = raw[m.end():].lstrip(" \t|")  # "| " of CloudWatch's copy; an MPI tag may follow
        key, line = _prefix(raw)
        if key is None:  # stderr
            continue
        # two outputs pasted side by side ("... #wrong  |  #  size ...", rccl#1352): each half is a stream of its own
        halves = _side_by_side(line) if "|" in line else None
        if halves is None and "|" in line and (row := _pipe_row(line)) is not None:
            line = row
        for half_key, half in ((key, line),) if halves is None else (((key, i), h) for i, h in enumerate(halves)):
            stream = streams.get(half_key)
            if stream is None:
                stream = streams[half_key] = _Stream(parser)
            try:
                stream.feed(half)
            except ValueError:  # a number of over 4,300 digits (int() refuses it): not a line nccl-tests wrote
                continue
    for stream in streams.values():
        stream.close()
    hint = None
    if name_hint:
        found = set(_FILE_OP.findall(os.path.basename(name_hint)))
        hint = TEST_OPS[found.pop()] if len(found) == 1 else None
    runs = sorted(parser.done, key=lambda r: r.seq)
    ops: dict[str, dict] = {}
    for run in runs:
        key = _op_key(run, hint)
        unique, n = key, 2
        while unique in ops:
            unique, n = f"{key}_{n}", n + 1
        ops[unique] = run.to_op()
        if key == "unknown":
            ops[unique]["notes"].append(
                "collective unknown: no 'Collective test' line, test command line or collective in the file name "
                "names it (the rows' redop and root do not tell, e.g., all_gather from alltoall)")
    first = next(iter(ops.values()), None)
    types = [r["type"] for op in ops.values() for r in op["rows"] if r.get("type")]
    redops = [r["redop"] for op in ops.values() for r in op["rows"] if r.get("redop") not in (None, "none")]
    # `-d all` / `-o all` tables hold several types or reductions: then no single one is the sweep's
    types, redops = (types if len(set(types)) == 1 else []), (redops if len(set(redops)) == 1 else [])
    worlds = {op["world_size"] for op in ops.values() if op["world_size"]}
    params = first["params"] if first else {}
    return {
        "source": "fabric-harness" if parser.sweep_time_reduction else "nccl-tests", "path": path,
        "world_size": worlds.pop() if len(worlds) == 1 else None,
        "dtype": DTYPES.get(types[0], types[0]) if types else None,
        "redop": redops[0] if redops else None,
        "iters": params.get("iters"), "warmup": params.get("warmup_iters"),
        # nccl-tests does not print its -a setting
        "time_reduction": parser.sweep_time_reduction,
        "ops": ops, "latency_us": parser.latency,
        "rows_read": sum(len(op["rows"]) for op in ops.values()),
        "rows_skipped": sum(len(op["skipped_lines"]) for op in ops.values()),
        "nccl_version": versions.pop() if len(versions := {op["nccl_version"] for op in ops.values()} - {None}) == 1
        else None,
        "failed": any(op["failed"] for op in ops.values()),
    }


MAX_INPUT_BYTES = 256 << 20  # a full nccl-tests sweep of every op prints well under 1 MiB


def read(path: str, being_written: bool = False) -> dict:
    """Parse one nccl-tests output file (its text, or its `-J` JSON); NcclTestsError when it holds no table.
    `being_written`: a table still written line by line (a sweep's collectives.txt): a last line without its
    newline is a row being written, left for the next read, not a line that could not be read."""
    if not os.path.exists(path) or os.path.isdir(path):  # pipes (/dev/stdin, <(kubectl logs ...)) are read
        what = "does not exist" if not os.path.exists(path) else "is a directory"
        raise NcclTestsError(f"{path}: {what}; allowed: an nccl-tests output file (its text or its -J JSON) or "
                             "a sweep's collectives.txt")
    from telemetry.input_files import InputFileError, decode_text, read_limited
    try:  # bounded: /dev/zero, or a log far larger than any sweep's table, is refused, not read into memory
        text = decode_text(read_limited(path, MAX_INPUT_BYTES, streams=True))
    except PermissionError as exc:
        raise NcclTestsError(f"{path}: not readable by this user ({exc.strerror}); allowed: an nccl-tests output "
                             "file this user can read") from None
    except InputFileError as exc:
        raise NcclTestsError(f"{path}: {exc}; allowed: an nccl-tests output file (its text or its -J JSON) of at "
                             f"most {MAX_INPUT_BYTES >> 20} MiB, or a sweep's collectives.txt") from None
    if text.lstrip().startswith("{"):
        import json

        from telemetry.analysis.nccl_tests_json import is_nccl_tests_json, parse_json
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise NcclTestsError(f"{path}: not valid JSON ({exc}); expected nccl-tests -J output") from None
        except RecursionError:
            raise NcclTestsError(f"{path}: JSON nested too deeply to read; expected nccl-tests -J output (nested "
                                 "three levels)") from None
        if not is_nccl_tests_json(doc):
            raise NcclTestsError(f"{path}: JSON without nccl-tests' 'config' and 'results' keys; expected the "
                                 "file nccl-tests -J writes")
        return parse_json(doc, name_hint=path, path=path)
    if being_written:
        text = text[:text.rfind("\n") + 1]
    result = parse(text, name_hint=path, path=path)
    if not result["ops"]:
        raise NcclTestsError(f"{path}: no nccl-tests table found (expected a '#  size  count  type ...' "
                             "header followed by rows)")
    return result


# ---------------------------------------------------------------- CSV

CSV_COLUMNS = ["op", "test", "world_size", "size", "count", "type", "redop", "root"] + [
    f"{b}_{k}" for b in BLOCKS for k in ("time_us", "algbw_GBps", "busbw_GBps", "wrong")]


def to_csv(result: dict) -> str:
    """One line per row and collective; empty cells are unknown (null in the JSON)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for op, data in result["ops"].items():
        world = data.get("world_size") or result.get("world_size")
        for r in data["rows"]:
            cells = [op, data.get("test") or OP_TESTS.get(op, ""), world, r["size"], r.get("count"), r.get("type"),
                     r.get("redop"), r.get("root")]
            for b in BLOCKS:
                block = r.get(b) or {}
                cells += [block.get(k) for k in ("time_us", "algbw_GBps", "busbw_GBps", "wrong")]
            w.writerow(["" if c is None else c for c in cells])
    return out.getvalue()
