"""`python -m telemetry nccl-log`: what a job's NCCL log says about the fabric it used, for logs the harness did
not write (a NeMo, Megatron or nccl-tests job's output, `kubectl logs`, a Slurm job's .out file).

The reading is the run directory's (`telemetry/capture/nccl_log.py`, run.json `fabric.nccl`); this module finds
the files, says it in lines a person reads, and holds it against the transport the fabric claims."""
from __future__ import annotations

import glob
import json
import os
import sys
from collections import Counter

from telemetry.analysis.transport_claims import check_transport
from telemetry.errors import HarnessError
from telemetry.input_files import what_is_there
from telemetry.rundir import LOGS, RUN_JSON
from telemetry.transport_hints import TCP_FALLBACK

LINE_MAX_CHARS = 1 << 20  # longer lines are read in pieces of this size (no NCCL record is near it)
TUNING_MAX_BYTES = 64 << 20  # per file, as the run directory's reader (nccl_algorithms.read_logs)


class NcclLogError(HarnessError):
    """An input that holds no NCCL log to read."""


def log_paths(inputs: list[str]) -> list[str]:
    """The files to read, in the order given: a file (or `-`, standard input) as it is; a directory is a run
    directory (its logs/nccl*.log) or a folder of one job's per-rank logs (its nccl*.log, else *.log)."""
    paths: list[str] = []
    for item in inputs:
        if item == "-":
            paths.append(item)
        elif os.path.isdir(item):
            for pattern in (os.path.join(LOGS, "nccl*.log"), "nccl*.log", "*.log"):
                found = sorted(glob.glob(os.path.join(glob.escape(item), pattern)))
                if found:
                    paths += found
                    break
            else:
                raise NcclLogError(f"{item}: a directory without {LOGS}/nccl*.log, nccl*.log or *.log"
                                   + _backend_note(item) + "; allowed: a run directory, a folder of one job's NCCL "
                                   "logs, or a log file")
        elif not os.path.exists(item):
            raise NcclLogError(f"{item}: does not exist; allowed: a log file (NCCL_DEBUG=INFO output), a folder of "
                               "them, a run directory, or - for standard input")
        elif (kind := what_is_there(item)) in ("a character device", "a block device", "a socket"):
            raise NcclLogError(f"{item}: is {kind}, not a log; allowed: a log file, a FIFO such as <(kubectl logs "
                               "POD), a folder of logs, a run directory, or - for standard input")
        elif not os.access(item, os.R_OK):
            raise NcclLogError(f"{item}: not readable by this user; allowed: a log file this user can read")
        elif packed := _compressed(item):  # read as text, a .log.gz was 'no line names NCCL'
            tool, cat = packed
            raise NcclLogError(f"{item}: is {tool}-compressed, not text; allowed: the log itself, e.g. {cat} {item} | "
                               "python -m telemetry nccl-log -")
        else:
            paths.append(item)  # a FIFO too: <(kubectl logs ...) is one
    same = [p if p == "-" else os.path.realpath(p) for p in paths]  # a.log and ./a.log, or a folder and its log
    if len(set(same)) < len(same):
        twice = next(p for p, key in zip(paths, same) if same.count(key) > 1)
        raise NcclLogError(f"{twice}: given twice; allowed: each log once (its ranks would count twice)")
    return paths


def _backend_note(path: str) -> str:
    """Why a run directory has no NCCL log: its run.json names another backend (the fabric lab's runs are gloo over
    TCP: lab round 7 read only 'a directory without logs/nccl*.log')."""
    try:
        with open(os.path.join(path, RUN_JSON), encoding="utf-8") as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        return ""
    if isinstance(backend, str) and backend != "nccl":
        return f" (its {RUN_JSON} names backend {backend}: the job used no NCCL, so it wrote no NCCL log)"
    return ""


COMPRESSED = ((b"\x1f\x8b", ("gzip", "zcat")), (b"\x28\xb5\x2f\xfd", ("zstd", "zstdcat")),
              (b"BZh", ("bzip2", "bzcat")), (b"\xfd7zXZ\x00", ("xz", "xzcat")))


def _compressed(path: str) -> tuple[str, str] | None:
    """(format, the tool that prints it) when a regular file starts with a compressor's magic bytes (a FIFO is
    not peeked at: its bytes would be lost to the reader)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return next((found for magic, found in COMPRESSED if head.startswith(magic)), None)


def _open(path: str):
    from telemetry.input_files import text_encoding

    return (open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False) if path == "-"
            else open(path, encoding=text_encoding(path), errors="replace"))


def read(paths: list[str], parse_lines) -> dict:
    """The log's reading over every file as one job, plus `nccl_lines` (lines naming NCCL or RCCL),
    `log_files`, and `tuning`: "ALGO/PROTO" -> calls per collective, from TUNING lines. `parse_lines` is the
    run's own reader (telemetry/capture/nccl_log.py), handed in by the command line: analysis does not import
    capture."""
    from telemetry.analysis import nccl_algorithms

    counted = Counter()
    kept: list[str] = []  # TUNING lines only (each file's first TUNING_MAX_BYTES): the rest streams through

    def lines():
        for path in paths:
            size = 0
            with _open(path) as f:
                for line in iter(lambda: f.readline(LINE_MAX_CHARS), ""):  # a file with no line break stays bounded
                    if "NCCL" in line or "RCCL" in line:
                        counted["nccl"] += 1
                        if "Bytes ->" in line or "opCount" in line or " | " in line:
                            size += len(line)
                            if size <= TUNING_MAX_BYTES:
                                kept.append(line)
                    yield line

    out = parse_lines(lines())
    out["log_files"] = len(paths)
    out["nccl_lines"] = counted["nccl"]
    tuning: dict[str, Counter] = {}
    for r in nccl_algorithms.parse_lines(kept):
        tuning.setdefault(r["collective"] or "unknown collective", Counter())[nccl_algorithms.label(r)] += 1
    out["tuning"] = {coll: dict(c.most_common()) for coll, c in sorted(tuning.items())} or None
    return out


def expectation(expected: str, reading: dict) -> tuple[bool, str]:
    """(met, the line saying so), by the rule evaluations and `compare --expect-transport` use
    (transport_claims.check_transport). Unknown is not met: a check that cannot see the transport cannot pass."""
    check = check_transport(expected, {"backend": "nccl", "transport": reading.get("transport"), "nccl": reading})
    if check["verdict"] == "ok":
        return True, f"transport: {check['detected'] or expected}, as expected ({expected})"
    if check["verdict"] == "unknown":
        return False, f"transport: expected {expected!r}; the log does not establish it ({check['reason']})"
    why = TCP_FALLBACK if check["detected"] == "tcp" and expected not in ("tcp", "socket") else ""
    return False, f"FABRIC MISMATCH: {check['reason']}{why}"


def _or(value, unknown: dict, key: str) -> str:
    if value is None or value == [] or value == {}:
        return f"unknown ({unknown[key]})" if key in unknown else "unknown"
    return str(value)


def lines_of(r: dict) -> list[str]:
    """The reading, a fact a line; every unknown field with its reason."""
    unknown = r.get("unknown") or {}
    hosts = r.get("hosts") or []
    shown = ", ".join(hosts[:8]) + (f", ... ({len(hosts)} in all)" if len(hosts) > 8 else "")
    out = [f"read {r['log_files']} file(s), {r['nccl_lines']:,} NCCL lines; hosts: {shown or 'none named'}",
           f"library: {r.get('library') or 'NCCL'} {_or(r.get('nccl_version'), unknown, 'nccl_version')}",
           f"transport: {_or(r.get('transport'), unknown, 'transport')}"
           + (f" (from {r['transport_basis']})" if r.get("transport") and r.get("transport_basis") else ""),
           f"network: {_or(r.get('network'), unknown, 'network')}"
           + (f"; plugin {r['net_plugin']}" if r.get("net_plugin") else "")
           + (f"; provider {r['provider']}" if r.get("provider") else "")]
    devices = r.get("devices")
    if devices:
        out.append("devices: " + ", ".join(_device(d) for d in devices))
    else:
        out.append(f"devices: {_or(None, unknown, 'devices')}")
    gdr = r.get("gpudirect_rdma")
    out.append(f"GPUDirect RDMA: {'on' if gdr else 'off' if gdr is False else _or(None, unknown, 'gpudirect_rdma')}")
    out.append(f"nodes: {_or(r.get('nnodes'), unknown, 'nnodes')}; ranks: {_or(r.get('nranks'), unknown, 'nranks')}"
               + ("; MNNVL on (one NVLink domain spans the trays)" if r.get("mnnvl") else ""))
    channels = r.get("channels") or {}
    out.append("connections: " + (", ".join(f"{k} {v}" for k, v in sorted(channels.items(), key=lambda kv: -kv[1]))
                                  if channels else _or(None, unknown, "channels"))
               + ("; CollNet refused by SHARP, point-to-point used" if r.get("collnet_refused") else ""))
    for coll, choices in (r.get("tuning") or {}).items():
        out.append(f"tuning {coll}: " + ", ".join(f"{k} x{v}" for k, v in choices.items()))
    warnings = r.get("warnings") or {}
    for w in warnings.get("messages") or []:
        out.append(f"WARN x{w['count']} [{w['kind']}]: {w['message']}")
    return out + _torch_lines(r.get("torch_errors") or {})


def _torch_lines(torch: dict) -> list[str]:
    """torch's ProcessGroupNCCL errors (telemetry/capture/torch_nccl_errors.py): what timed out, on which ranks."""
    def ranks(named: list) -> str:
        return f"rank(s) {', '.join(map(str, named))}" if named else "no rank named"
    out = [f"torch watchdog timeout: {t['op']} (SeqNum {t['seq']}, timeout {t['timeout_ms']} ms) on {ranks(t['ranks'])}"
           for t in torch.get("timeouts") or []]
    out += [f"torch watchdog: work {f['seq']} failed on {ranks(f['ranks'])}" for f in torch.get("watchdog_failures") or []]
    return out + [f"torch NCCL error x{e['count']}: {e['error']}" for e in torch.get("nccl_errors") or []]


def _device(d) -> str:
    if not isinstance(d, dict):
        return str(d)
    port, layer, address = d.get("port"), d.get("link_layer"), d.get("address")
    return (f"{d.get('device')}{':' + str(port) if port is not None else ''}{'/' + layer if layer else ''}"
            f"{' (' + address + ')' if address else ''}")
