"""The sweep's output: nccl-tests' text table (rows, header, preamble, footer), the straggler line, and the
files beside collectives.json (collectives.csv, nccl-tests/<op>.json, sweep.jsonl)."""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys

import torch

from telemetry.formulas import algbw_GBps
from telemetry.rundir import LOGS, SWEEP_CSV, SWEEP_NCCL_TESTS, SWEEP_RECORD, SWEEP_SIZES


def describe_straggler(s: dict) -> str:
    what = f"host {s['host']} is a slow node (every rank on it slower than every other host's)" if s["slow_node"] \
        else f"rank {s['rank']} (host {s['host']}) is the slowest"
    return (f"{s['op']} {s['size']} B {s['form'].replace('_', '-')}: {what}: {s['mean_us']:.1f} us per iteration "
            f"vs {s['fastest_mean_us']:.1f} us on rank {s['fastest_rank']} (+{s['excess_pct']:.0f}%)")


def timed_block(times: list[float], size: int, factor: float, wrong: int | None, stat: str = "median") -> dict:
    """One block of a row: the median (or the shortest, `best`) of the repeated timings, and their spread
    when there were several."""
    t = min(times) if stat == "best" else statistics.median(times)
    block = {"time_us": t * 1e6, "algbw_GBps": algbw_GBps(size, t), "busbw_GBps": algbw_GBps(size, t) * factor,
             "wrong": wrong}
    if len(times) > 1:
        bws = [algbw_GBps(size, x) * factor for x in times]
        block["spread"] = {"repeats": len(times), "time_us": [x * 1e6 for x in times],
                           "busbw_min_GBps": min(bws), "busbw_max_GBps": max(bws)}
    return block


# ---------------------------------------------------------------- tables

# The layout nccl-tests prints (its src/util.cu): 5 leading columns, then two blocks of 4.
_PREFIX_W = (12, 12, 8, 6, 6)
_BLOCK_W = (7, 6, 6, 6)
TEST_OF = {"all_reduce": "all_reduce_perf", "reduce_scatter": "reduce_scatter_perf",
            "all_gather": "all_gather_perf", "all_to_all": "alltoall_perf", "sendrecv": "sendrecv_perf",
            "broadcast": "broadcast_perf", "reduce": "reduce_perf", "gather": "gather_perf",
            "scatter": "scatter_perf"}
# Why a block is null: torch has no such form of the collective.
MISSING = {("all_reduce", "out_of_place"): "torch's all_reduce exists only in place",
           ("broadcast", "out_of_place"): "torch's broadcast exists only in place",
           ("reduce", "out_of_place"): "torch's reduce exists only in place",
           ("all_to_all", "in_place"): "all_to_all_single needs distinct input and output buffers",
           ("sendrecv", "in_place"): "send/recv uses separate send and receive buffers"}
BLOCKS_ALL = ("out_of_place", "in_place")
NA = "N/A"  # nccl-tests' mark for a value it did not measure (its #wrong without -c)


def _cells(values, widths) -> str:
    return "  ".join(f"{v:>{w}}" for v, w in zip(values, widths))


def _header_line(prefix, block) -> str:
    # '#' takes the first character of the 12-wide size column, as in nccl-tests
    line = _cells(prefix, _PREFIX_W) + "".join("  " + _cells(block, _BLOCK_W) for _ in range(2))
    return "#" + line[1:]


HEADER = "\n".join([
    "#" + " " * (sum(_PREFIX_W) + 2 * (len(_PREFIX_W) - 1) - 1 + 11) + "out-of-place" + " " * 23 + "in-place",
    _header_line(("size", "count", "type", "redop", "root"), ("time", "algbw", "busbw", "#wrong")),
    _header_line(("(B)", "(elements)", "", "", ""), ("(us)", "(GB/s)", "(GB/s)", "")).rstrip(),
])


def fit(value: float, width: int) -> str:
    """A number in `width` characters: two decimals, fewer when it is wide (as nccl-tests prints)."""
    for spec in (".2f", ".1f", ".0f"):
        text = format(value, spec)
        if len(text) <= width:
            return text
    return format(value, ".1e" if width >= 7 else ".0e")


def _block(b: dict | None) -> str:
    if b is None:
        return _cells((NA,) * 4, _BLOCK_W)
    wrong = NA if b["wrong"] is None else str(b["wrong"])
    return _cells((fit(b["time_us"], 7), fit(b["algbw_GBps"], 6), fit(b["busbw_GBps"], 6), wrong), _BLOCK_W)


def format_row(row: dict, type_name: str, redop: str, root: int) -> str:
    """One row of 13 whitespace-separated columns."""
    return (_cells((row["size"], row["count"], type_name, redop, root), _PREFIX_W)
            + f"  {_block(row.get('out_of_place'))}  {_block(row.get('in_place'))}")


def avg_busbw(rows: list[dict]) -> float | None:
    """nccl-tests' '# Avg bus bandwidth': the mean busbw over every measured block of every size."""
    vals = [b["busbw_GBps"] for r in rows for b in (r.get("out_of_place"), r.get("in_place")) if b]
    return sum(vals) / len(vals) if vals else None


def device_info(device: torch.device) -> dict:
    """This rank's device as nccl-tests' '#  Rank' line names it; CPU ranks are device -1 (none)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        ids = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
        bus = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}" if None not in ids else "unknown"
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {"device": index, "bus_id": bus, "name": props.name}
    return {"device": -1, "bus_id": "cpu", "name": f"CPU {platform.machine()}".strip()}


def preamble(cfg, lo: int, hi: int, ranks: list[int], hosts: list[dict], devices: list[dict],
             step: int | None = None) -> list[str]:
    """The parameters line and '# Using devices' of one nccl-tests run (one process and GPU per rank)."""
    stepping = f"{step}(bytes)" if step else f"{cfg.factor}(factor)"  # nccl-tests' -i or -f
    lines = [f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: {stepping} warmup iters: "
             f"{cfg.warmup} iters: {cfg.iters} agg iters: 1 validation: {int(bool(cfg.check))} graph: 0 unalign: 0",
             "#", "# Using devices"]
    for r in ranks:
        h, d = hosts[r], devices[r]
        lines.append(f"#  Rank {r:2d} Group {0:2d} Pid {h.get('pid', -1):6d} on {h['hostname']:>10} device "
                     f"{d['device']:2d} [{d['bus_id']}] {d['name']}")
    return lines + ["#"]


def footer(wrong: int | None, avg: float | None) -> list[str]:
    oob = f"{wrong} {'OK' if wrong == 0 else 'FAILED'}" if wrong is not None else f"{NA} (results not checked)"
    return [f"# {'Out of bounds values':<20} : {oob}",
            f"# {'Avg bus bandwidth':<20} : " + (f"{avg:g}" if avg is not None else NA), "#"]


def spread_line(rows: list[dict], repeats: int, stat: str = "median") -> str:
    """A comment line (nccl-tests readers skip it): busbw min-max over the repeats, per size."""
    parts = []
    for r in rows:
        for b in (r.get("out_of_place"), r.get("in_place")):
            if b and b.get("spread"):
                # three significant digits: a slow link's busbw reads 0.01 in the table's two decimals
                parts.append(f"{r['size']} {b['spread']['busbw_min_GBps']:.3g}-{b['spread']['busbw_max_GBps']:.3g}")
                break
    what = "the best" if stat == "best" else "the median"
    return f"# fabric-harness: rows are {what} of {repeats} repeats; busbw min-max (GB/s): " + ", ".join(parts)


def write_sweep_files(run_dir: str, result: dict, argv: list[str], env: dict, nccl_version: str | None) -> None:
    """Rank 0, beside collectives.json/.txt: collectives.csv, nccl-tests/<op>.json (nccl-tests' -J schema,
    one document per collective as separate nccl-tests runs write them) and sweep.jsonl (one line per size
    and collective: energy, power and NIC/RDMA counter deltas)."""
    import json

    from telemetry.analysis.nccl_tests_json import nccl_version_code, to_nccl_tests
    from telemetry.analysis.nccl_tests import to_csv

    # each file whole or not at all: a job killed while they are written leaves no half a file read as whole
    _write_atomic(os.path.join(run_dir, SWEEP_CSV), to_csv(result))
    folder = os.path.join(run_dir, SWEEP_NCCL_TESTS)
    os.makedirs(folder, exist_ok=True)
    env_lines = [f"{k}={v}" for k, v in sorted(env.items())]  # already redacted (run.json's environment)
    for op in result["ops"]:
        doc = to_nccl_tests(result, op, argv, env_lines, nccl_version_code(nccl_version))
        _write_atomic(os.path.join(folder, f"{op}.json"), json.dumps(doc, indent=1))
    # the lines written as each size was measured, again with the transport (known once the sweep is done)
    transport = (result.get("fabric") or {}).get("transport")
    _write_atomic(os.path.join(run_dir, SWEEP_SIZES),
                  "".join(json.dumps({**rec, "transport": transport}) + "\n" for rec in result.get("sizes", [])))


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def keep_earlier_record(run_dir: str, attempt: int | None) -> str | None:
    """Rank 0, before a sweep writes its table: an earlier attempt's sweep record (its table, numbers, CSV, nccl-tests
    JSON and sizes) moved whole to logs/sweep.attempt-N/ (N: that attempt). The table and sizes are written as each
    size is measured, the rest at the end: a rerun that failed or was killed left the earlier numbers beside its own
    table, read as its own. Returns the folder, None when there was no record."""
    for name in SWEEP_RECORD:  # a half-written file of a run killed inside _write_atomic: never read, never kept
        with contextlib.suppress(OSError):
            os.remove(os.path.join(run_dir, f"{name}.tmp"))
    found = [name for name in SWEEP_RECORD if os.path.lexists(os.path.join(run_dir, name))]
    if not found:
        return None
    n = attempt - 1 if isinstance(attempt, int) and attempt > 1 else 0
    folder = os.path.join(run_dir, LOGS, f"sweep.attempt-{n}")
    k = 1
    while os.path.lexists(folder):  # attempts restart at 1 without resume: never overwrite a kept record
        folder = os.path.join(run_dir, LOGS, f"sweep.attempt-{n}.{k}")
        k += 1
    try:
        os.makedirs(folder)
        for name in found:
            os.replace(os.path.join(run_dir, name), os.path.join(folder, name))
    except OSError as exc:
        print(f"warning: could not move the earlier sweep's record in {run_dir} to {folder}: {exc}", file=sys.stderr,
              flush=True)
        return None
    return folder
