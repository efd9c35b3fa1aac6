"""Reading torch's flight-recorder dumps: which rank did not enter (or finish) which collective.

torch keeps a ring buffer of each process group's recent collectives (PyTorch's flight recorder). Two
sources land in a run's `logs/flight_recorder/`:

- `rankN.json`: written by the harness on every rank when a run fails or is interrupted, from torch's
  JSON dump (`_dump_fr_trace_json`), for gloo and NCCL alike;
- `nccl_trace_rankN`: written by NCCL's watchdog on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT, the file
  prefix set by TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE before torch 2.8). That one is a pickle: it is read with an unpickler that
  resolves no global at all, so only plain containers, strings and numbers come back and nothing can run.

Each dump is a dict: `version`, `pg_config` (process group -> ranks), `pg_status`, `entries` (one per
collective: `pg_id`, `process_group` [name, desc], `collective_seq_id`, `profiling_name` such as
"nccl:all_reduce", `state` scheduled/started/completed, `input_sizes`, `timeout_ms`, ...).
"""
from __future__ import annotations

import glob
import json
import os
import pickle
import re
from telemetry.errors import InputError
from telemetry.input_files import MiB, InputFileError, read_limited
from telemetry.rundir import LOGS

DUMP_DIR = "flight_recorder"
MAX_DUMP_BYTES = 256 * MiB  # a dump of TORCH_FR_BUFFER_SIZE=2000 entries with stacks is a few MiB


class DumpError(InputError, ValueError):
    """A dump that cannot be read: one line naming the file."""


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id")


def _rank_of(path: str) -> int | None:
    m = re.search(r"(\d+)(\.json)?$", os.path.basename(path))
    return int(m.group(1)) if m else None


def read_dump(path: str) -> dict:
    """One rank's dump (JSON or NCCL's pickle), as plain data."""
    try:  # bounded, and never a FIFO (its read waited forever for a writer) or a device (/dev/zero: memory)
        raw = read_limited(path, MAX_DUMP_BYTES)
    except InputFileError as exc:
        raise DumpError(f"{path}: {exc}; allowed: a flight-recorder dump (torch's JSON or NCCL's pickle), a "
                        "regular file") from None
    except OSError as exc:
        raise DumpError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        if raw[:1] == b"\x80":  # a pickle (protocol 2+), as NCCL's watchdog writes it
            import io
            dump = _NoGlobals(io.BytesIO(raw)).load()
        else:
            dump = json.loads(raw.decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - any failure means a damaged or foreign file
        raise DumpError(f"{path}: not a flight-recorder dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        raise DumpError(f"{path}: not a flight-recorder dump (no 'entries' list)")
    return dump


def read_dir(run_dir: str) -> dict[int, dict]:
    """{rank: dump} from a run directory's logs/flight_recorder/ (the JSON dump wins over the pickle)."""
    found: dict[int, dict] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, LOGS, DUMP_DIR, "*")), key=lambda p: p.endswith(".json")):
        rank = _rank_of(path)
        if rank is None or path.endswith(".tmp"):
            continue
        found[rank] = read_dump(path)
    return found


def _group_key(entry: dict) -> str:
    pg = entry.get("process_group")
    return str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(entry.get("pg_id"))


def _op(entry: dict) -> str:
    name = str(entry.get("profiling_name") or "?")
    return name.split(":", 1)[-1]  # "nccl:all_reduce" -> "all_reduce"


def analyze(dumps: dict[int, dict]) -> list[str]:
    """Findings, one line each: per process group, the furthest collective any rank entered, and the ranks
    that never entered it or have not finished it ("rank 5 never entered all_reduce #812")."""
    if not dumps:
        return []
    # (group, seq) -> entry (the first rank's description of it); per group and rank: what each entered
    described: dict[tuple[str, int], dict] = {}
    entered: dict[str, dict[int, int]] = {}
    unfinished: dict[tuple[str, int], set[int]] = {}
    for rank, dump in sorted(dumps.items()):
        for e in dump["entries"]:
            if not isinstance(e, dict) or e.get("is_p2p"):
                continue
            seq = e.get("collective_seq_id")
            if not isinstance(seq, int) or seq <= 0:
                continue
            group = _group_key(e)
            described.setdefault((group, seq), e)
            entered.setdefault(group, {})
            entered[group][rank] = max(entered[group].get(rank, 0), seq)
            if e.get("state") != "completed" and not e.get("retired"):
                unfinished.setdefault((group, seq), set()).add(rank)
    lines = []
    for group, by_rank in sorted(entered.items()):
        top = max(by_rank.values())
        entry = described[(group, top)]
        what = f"{_op(entry)} #{top}"
        sizes = entry.get("input_sizes")
        where = f" (process group {group}" + (f", sizes {sizes}" if sizes else "") + ")"
        missing = sorted(r for r, s in by_rank.items() if s < top)
        for r in missing:
            last = by_rank[r]
            lines.append(f"rank {r} never entered {what}{where}; its last was "
                         f"{_op(described.get((group, last), {}))} #{last}")
        absent = sorted(set(dumps) - set(by_rank))
        for r in absent:
            lines.append(f"rank {r} recorded no collective of process group {group}")
        stuck = sorted(unfinished.get((group, top), set()))
        if stuck and not missing:
            lines.append(f"{what}{where} did not finish on rank{'s' if len(stuck) > 1 else ''} "
                         f"{', '.join(map(str, stuck))}; every rank with a dump entered it")
    return lines


def section(run_dir: str) -> tuple[str, list[str], list[list[str]]] | None:
    """The report's table of findings, or None when the run left no dump."""
    if not os.path.isdir(os.path.join(run_dir, LOGS, DUMP_DIR)):
        return None
    try:
        dumps = read_dir(run_dir)
    except DumpError as exc:
        return ("Flight recorder (hang analysis)", ["finding"], [[f"unreadable: {exc}"]])
    findings = analyze(dumps) or ["every rank entered and finished the same collectives"]
    ranks = ", ".join(map(str, sorted(dumps))) or "none"
    return (f"Flight recorder (hang analysis; dumps from ranks {ranks})", ["finding"], [[f] for f in findings])
