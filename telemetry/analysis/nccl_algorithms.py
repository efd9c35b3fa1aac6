"""Which algorithm (ring, tree, NVLS, CollNet, PAT) and protocol (LL, LL128, Simple) NCCL chose, per
collective and message size, from its TUNING debug lines (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS including
TUNING; rank 0 of each communicator prints one line per collective it launches).

NCCL has printed these shapes of that line (src/enqueue.cc, read at each release tag); each is read anywhere in a
line, whatever the launcher put before it:

- 2.20-2.22, numbers and no collective: `262144 Bytes -> Algo 0 proto 1 time 54.707825` (NVIDIA/nccl#1453);
  the collective is then the last `AllReduce: opCount ...` line (NCCL_DEBUG_SUBSYS=COLL) of that process
  where there is one, else unknown. Every release also has the same text as a TRACE line (NCCL_DEBUG=TRACE,
  debug builds only, every rank: `h:1:2 [0] 12.5 topoGetAlgoInfo:1203 NCCL TRACE 8 Bytes -> ...`), the only one
  before 2.20: TRACE records are kept only where the log has no INFO one (they repeat rank 0's INFO lines);
- 2.23 names the collective, numbers for the rest: `AllGather: 37756928 Bytes -> Algo 1 proto 2 time 2860.208008`;
- 2.24 and later, names: `AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}` (NCCL's
  ncclAlgoToString/ncclProtoToString; write-ups also show `Algo Tree proto Simple`, NCCL's table spellings);
  some builds add ` comm 0x...`;
- 2.27 and later, a collective on window-registered (symmetric) buffers runs one of NCCL's symmetric kernels
  instead, and the line names the kernel, not an algorithm: `AllReduce [Symmetric]: 2097152 Bytes -> Kernel
  AllReduce_RSxLDMC_AGxSTMC nchannels 16 nthreads 512` (2.28 adds ` nWorks 1`);
- 2.29 and later, a collective offloaded to the copy engines (NCCL_CTA_POLICY zero): `AllGather [Copy Engine]:
  1048576 Bytes -> cudaMemcpy` (`; CE synchronization with NVLS` after it where NVLS syncs the copies); 2.30 adds
  `AllGather [Hierarchical CE]: 1048576 Bytes -> RMA proxy + CE` (copy engines within a node, the network's RMA
  proxy between nodes).

Collective names are ncclFuncToString's (`AlltoAll`, `Gather` and `Scatter` from 2.28; 2.30's PutSignal, Signal
and WaitSignal are one-sided and log no TUNING line). Algorithm numbers are
NCCL's enum (0 Tree, 1 Ring, 2 CollNetDirect, 3 CollNetChain, 4 NVLS, 5 NVLSTree, 6 PAT; 2 was plain CollNet
before 2.14), protocols 0 LL, 1 LL128, 2 Simple. Names are written as 2.24+ does. A symmetric kernel's record has
algorithm SYMMETRIC, the kernel's name and no protocol (the kernel name says which loads and stores it uses, not
one of NCCL's three protocols); a copy-engine record has algorithm COPY_ENGINE (HIERARCHICAL_CE for 2.30's) and
no protocol.

`tuning_table` reads the latency/bandwidth table rank 0 prints at init (src/graph/tuning.cc: `Algorithm |`,
`Protocol |`, `Max NThreads |`, then one row per collective of `latency/bandwidth` cells, three algorithms a
block): a bandwidth of 0 means NCCL will not pick that algorithm and protocol for that collective.
"""
from __future__ import annotations

import glob
import os
import re
from collections import Counter

from telemetry.analysis.compare_figures import size_text
from telemetry.rundir import LOGS

ALGORITHMS = {0: "TREE", 1: "RING", 2: "COLLNET_DIRECT", 3: "COLLNET_CHAIN", 4: "NVLS", 5: "NVLS_TREE", 6: "PAT"}
PROTOCOLS = {0: "LL", 1: "LL128", 2: "SIMPLE"}
_NAMES = {"TREE": "TREE", "RING": "RING", "COLLNETDIRECT": "COLLNET_DIRECT", "COLLNETCHAIN": "COLLNET_CHAIN",
          "COLLNET": "COLLNET", "NVLS": "NVLS", "NVLSTREE": "NVLS_TREE", "PAT": "PAT",
          "LL": "LL", "LL128": "LL128", "SIMPLE": "SIMPLE"}
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll", "AllToAll", "Gather",
               "Scatter", "Send", "Recv", "SendRecv")
_COLL = "|".join(COLLECTIVES)
_TUNING = re.compile(rf"(?:\b({_COLL}):\s*)?\b(\d+) Bytes -> Algo (\w+) proto (\w+)"
                     r"(?: time ([\d.]+))?(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?(?: comm (0x[0-9a-f]+))?")
_SYMMETRIC = re.compile(rf"\b({_COLL}) \[Symmetric\]:\s*(\d+) Bytes -> Kernel (\w+) nchannels (\d+) nthreads (\d+)"
                        r"(?: nWorks (\d+))?")
_COPY_ENGINE = re.compile(rf"\b({_COLL}) \[Copy Engine\]:\s*(\d+) Bytes -> cudaMemcpy(; CE synchronization with NVLS)?")
_HIERARCHICAL_CE = re.compile(rf"\b({_COLL}) \[Hierarchical CE\]:\s*(\d+) Bytes -> RMA proxy \+ CE")
# NCCL_DEBUG_SUBSYS=COLL: "AllReduce: opCount 1f sendbuff ... count 1048576 datatype 7 ... comm 0x.. [nranks=8]"
_COLL_LINE = re.compile(rf"\b({_COLL}): opCount ")
# (starts after a non-alphanumeric, as the leftmost match always did: tried inside a long word it was quadratic)
_PROCESS = re.compile(r"(?<![A-Za-z0-9])([A-Za-z0-9][\w.\-]*:\d+):\d+ \[ ?\d+ ?\] NCCL INFO")
# torch's names for NCCL's collectives (the harness's sweeps and comm records)
TORCH_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "all_gather_into_tensor": "AllGather",
               "reduce_scatter": "ReduceScatter", "reduce_scatter_tensor": "ReduceScatter",
               "broadcast": "Broadcast", "reduce": "Reduce", "all_to_all": "SendRecv",
               "all_to_all_single": "SendRecv", "send": "Send", "recv": "Recv"}


def _name(token: str, table: dict[int, str], version: tuple[int, int] | None) -> str:
    if token.isdigit():
        n = int(token)
        if table is ALGORITHMS and n == 2 and version and version < (2, 14):
            return "COLLNET"
        return table.get(n, f"unknown ({n})")
    return _NAMES.get(token.upper().replace("_", ""), token.upper())


def _record(coll, size, algorithm, protocol, **extra) -> dict:
    r = {"collective": coll, "bytes": int(size), "algorithm": algorithm, "protocol": protocol, "time_us": None,
         "channels": None, "comm": None, "named": coll is not None, "kernel": None, "nchannels": None,
         "nthreads": None, "nworks": None, "nvls_sync": None, "trace": False}
    r.update(extra)
    return r


def parse_lines(lines, version: tuple[int, int] | None = None) -> list[dict]:
    """One record per TUNING line: collective (None where the line and the log do not say), bytes, algorithm,
    protocol, NCCL's estimated time in us (older lines), channel range, communicator; for a symmetric kernel
    (2.27+) its kernel name, channel and thread counts and (2.28+) work count; for a copy-engine collective
    (2.29+) whether NVLS synchronised it; 2.30's hierarchical copy-engine collectives."""
    out, last_coll = [], {}
    for line in lines:
        if "Bytes ->" not in line:
            if "opCount" in line:
                proc = (m.group(1) if (m := _PROCESS.search(line)) else "")
                for c in _COLL_LINE.finditer(line):
                    last_coll[proc] = c.group(1)
            continue
        proc = (m.group(1) if (m := _PROCESS.search(line)) else "")
        for c in _COLL_LINE.finditer(line):
            last_coll[proc] = c.group(1)
        try:
            out += _line_records(line, last_coll.get(proc), version)
        except ValueError:  # a number of over 4,300 digits (int() refuses it): not a line NCCL wrote
            continue
    if any(r["trace"] for r in out) and not all(r["trace"] for r in out):
        out = [r for r in out if not r["trace"]]
    return out


def _line_records(line: str, last_coll: str | None, version: tuple[int, int] | None) -> list[dict]:
    out = []
    trace = " NCCL TRACE " in line  # once a line: a line of many glued records is not searched per record
    for m in _TUNING.finditer(line):
        coll, size, algo, proto, t, lo, hi, comm = m.groups()
        out.append(_record(coll or last_coll, size, _name(algo, ALGORITHMS, version),
                           _name(proto, PROTOCOLS, version), time_us=_float(t),
                           channels=[int(lo), int(hi)] if lo else None, comm=comm, named=coll is not None,
                           trace=trace))
    for m in _SYMMETRIC.finditer(line):
        coll, size, kernel, nch, nthr, nworks = m.groups()
        out.append(_record(coll, size, "SYMMETRIC", None, kernel=kernel, nchannels=int(nch), nthreads=int(nthr),
                           nworks=int(nworks) if nworks else None))
    for m in _COPY_ENGINE.finditer(line):
        out.append(_record(m.group(1), m.group(2), "COPY_ENGINE", None, nvls_sync=m.group(3) is not None))
    for m in _HIERARCHICAL_CE.finditer(line):
        out.append(_record(m.group(1), m.group(2), "HIERARCHICAL_CE", None))
    return out


def _float(text: str | None) -> float | None:
    """NCCL's estimated time; None where the line has none or a damaged one ("1.2.3")."""
    try:
        return float(text) if text else None
    except ValueError:
        return None


def label(r: dict) -> str:
    """'RING/SIMPLE'; 'SYMMETRIC/AllReduce_RSxLDMC_AGxSTMC' (the kernel); 'COPY_ENGINE/cudaMemcpy';
    'HIERARCHICAL_CE/RMA proxy + CE'."""
    if r["algorithm"] == "SYMMETRIC":
        return f"SYMMETRIC/{r['kernel']}"
    if r["algorithm"] == "COPY_ENGINE":
        return "COPY_ENGINE/cudaMemcpy" + (" (NVLS sync)" if r["nvls_sync"] else "")
    if r["algorithm"] == "HIERARCHICAL_CE":
        return "HIERARCHICAL_CE/RMA proxy + CE"
    return f"{r['algorithm']}/{r['protocol']}"


_TABLE_ROW = re.compile(r"\b(\w+) \|((?:\s*[\d.]+/\s*[\d.]+ \|)+)")
_TABLE_HEAD = re.compile(r"\bAlgorithm\s+\|(.*)$")
_TABLE_PROTO = re.compile(r"\bProtocol\s+\|(.*)$")


def tuning_table(lines) -> dict[str, dict[str, dict[str, float]]]:
    """NCCL's init-time latency/bandwidth table: collective -> "ALGO/PROTO" -> {"latency_us", "bandwidth_GBps"}.
    Rows before any `Algorithm |` header (an excerpt cut above it) are not read: their algorithms are unknown."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    algos: list[str] = []
    protos: list[str] = []
    for line in lines:
        if "|" not in line:
            continue
        if m := _TABLE_HEAD.search(line):
            algos = [_name(a, ALGORITHMS, None) for a in m.group(1).replace("|", " ").split()]
            protos = []
            continue
        if m := _TABLE_PROTO.search(line):
            protos = [_name(p, PROTOCOLS, None) for p in m.group(1).replace("|", " ").split()]
            continue
        m = _TABLE_ROW.search(line)
        if not m or not algos or not protos or m.group(1) == "NThreads":
            continue
        cells = re.findall(r"([\d.]+)/\s*([\d.]+)", m.group(2))
        names = list(dict.fromkeys(protos))  # the Protocol line repeats LL LL128 Simple per algorithm slot
        row = out.setdefault(m.group(1), {})
        for i, (lat, bw) in enumerate(cells):
            if i // len(names) < len(algos) and (value := _cell(lat, bw)) is not None:
                row[f"{algos[i // len(names)]}/{names[i % len(names)]}"] = value
    return out


def _cell(lat: str, bw: str) -> dict[str, float] | None:
    """A `latency/bandwidth` cell; None for a damaged one ("1.2.3/ 4"): its pair is then not in the table."""
    try:
        return {"latency_us": float(lat), "bandwidth_GBps": float(bw)}
    except ValueError:
        return None


def enabled(table: dict[str, dict[str, dict[str, float]]]) -> dict[str, list[str]]:
    """Per collective, the algorithm/protocol pairs the table gives a bandwidth above 0 (NCCL may pick them)."""
    return {c: sorted(k for k, v in row.items() if v["bandwidth_GBps"] > 0) for c, row in table.items()}


def _version(lines: list[str]) -> tuple[int, int] | None:
    for line in lines:
        if m := re.search(r"NCCL version (\d+)\.(\d+)\.", line):
            return int(m.group(1)), int(m.group(2))
    return None


def log_files(run_dir: str) -> list[str]:
    """The run's NCCL logs (logs/nccl.*.log), else a text file holding NCCL lines (an nccl-tests output)."""
    paths = sorted(glob.glob(os.path.join(run_dir, LOGS, "nccl*.log")))
    if not paths and os.path.isfile(run_dir):
        paths = [run_dir]
    return paths


def read_logs(run_dir: str, max_bytes: int = 64 << 20) -> tuple[list[dict], dict]:
    """Each of a run directory's NCCL logs read once (up to max_bytes): every TUNING record, and the init-time
    tuning tables (tuning_table; the last communicator's table of each log)."""
    records, tables = [], {}
    for path in log_files(run_dir):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read(max_bytes).splitlines()
        records += parse_lines(lines, _version(lines))
        tables.update(tuning_table(lines))
    return records, tables


def read_run(run_dir: str, max_bytes: int = 64 << 20) -> list[dict]:
    """Every TUNING record of a run directory's NCCL logs (each file read up to max_bytes)."""
    return read_logs(run_dir, max_bytes)[0]


def choices(records: list[dict]) -> dict[tuple[str, int], Counter]:
    """(collective, bytes) -> Counter of "ALGO/PROTO" over every call."""
    out: dict[tuple[str, int], Counter] = {}
    for r in records:
        key = (r["collective"] or "unknown collective", r["bytes"])
        out.setdefault(key, Counter())[label(r)] += 1
    return out


def choice_text(counter: Counter | None) -> str:
    """'RING/SIMPLE' or, where NCCL chose differently between calls, 'RING/LL 3, TREE/LL 1'."""
    if not counter:
        return "n/a (no TUNING line)"
    if len(counter) == 1:
        return next(iter(counter))
    return ", ".join(f"{k} {n}" for k, n in counter.most_common())


def why_missing(run_dir: str) -> str:
    if not log_files(run_dir):
        return "no NCCL log (NCCL_DEBUG=INFO into the run's logs/: telemetry.nccl_debug)"
    return "no TUNING lines (set telemetry.nccl_tuning=true, or NCCL_DEBUG_SUBSYS with TUNING)"


def report_sections(run_dir: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's NCCL tables, the logs read once: what NCCL picked (run_section), what it could pick
    (table_section); each only where the logs hold its lines."""
    records, tables = read_logs(run_dir)
    return [t for t in (run_section(run_dir, records=records), table_section(run_dir, tables=tables)) if t]


def run_section(run_dir: str, max_rows: int = 60, records: list[dict] | None = None
                ) -> tuple[str, list[str], list[list[str]]] | None:
    """The report's table: collective, size, algorithm/protocol (calls). None where the run has no line.
    `records`: the run's, already read (read_logs)."""
    records = read_run(run_dir) if records is None else records
    if not records:
        return None
    by = choices(records)
    rows = [[coll, size_text(size), choice_text(c), str(sum(c.values()))] for (coll, size), c in sorted(by.items())]
    title = "NCCL's algorithm and protocol per collective and size (its TUNING lines, rank 0 of each communicator)"
    if len(rows) > max_rows:
        title += f"; the first {max_rows} of {len(rows)}"
    if all(r["trace"] for r in records):
        title += "; from TRACE lines, which every rank prints (calls are summed over ranks)"
    if any(not r["named"] for r in records):
        title += "; NCCL before 2.23 names no collective in the line: taken from its COLL line where there is one"
    return title, ["collective", "size", "algorithm/protocol", "calls"], rows[:max_rows]


def table_section(run_dir: str, tables: dict | None = None) -> tuple[str, list[str], list[list[str]]] | None:
    """The report's table of what NCCL could pick: per collective, the algorithm/protocol pairs its init-time
    tuning table gives a bandwidth (the last communicator's table in each log; NCCL_DEBUG_SUBSYS with TUNING
    prints it). An algorithm missing here (NVLS, COLLNET_*, PAT) was disabled or not available on this fabric.
    `tables`: the run's, already read (read_logs)."""
    tables = read_logs(run_dir)[1] if tables is None else tables
    if not tables:
        return None
    rows = [[coll, ", ".join(pairs) or "none (every bandwidth 0)", str(len(tables[coll]) - len(pairs))]
            for coll, pairs in sorted(enabled(tables).items())]
    return ("What NCCL could pick per collective (its init-time latency/bandwidth table: pairs with a bandwidth "
            "above 0)", ["collective", "algorithm/protocol pairs enabled", "pairs at 0"], rows)


def compare_section(labels: list[str], run_dirs: list[list[str]], max_rows: int = 60
                    ) -> tuple[str, list[str], list[list[str]]] | None:
    """The comparison's table: per collective and size, each fabric's choice ("differs" where not the first's)."""
    per = []
    for dirs in run_dirs:
        records = [r for d in dirs for r in read_run(d)]
        per.append(choices(records) if records else None)
    if not any(per):
        return None
    keys = sorted({k for p in per if p for k in p})
    rows = []
    for key in keys:
        cells = []
        base = choice_text(per[0].get(key)) if per[0] else None
        for j, p in enumerate(per):
            if p is None:
                cells.append("n/a: " + why_missing(run_dirs[j][0]))
                continue
            text = choice_text(p.get(key))
            cells.append(text + (" (differs)" if j and base and text != base and p.get(key) and per[0].get(key)
                                 else ""))
        rows.append([key[0], size_text(key[1])] + cells)
    title = "NCCL's algorithm and protocol per collective and size (TUNING lines)"
    if len(rows) > max_rows:
        title += f"; the first {max_rows} of {len(rows)}"
    return title, ["collective", "size", *labels], rows[:max_rows]
