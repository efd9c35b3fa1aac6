"""nccl-tests' JSON (`-J FILE`, nccl-tests >= 2.17, file version 1-3), written from a sweep and read back.

The schema is the one nccl-tests' own writer emits (src/util.cu): one document per test run,

    {"version", "start_time", "args": [argv], "env": ["NAME=value"], "nccl_version",
     "config": {"nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor" | "step_bytes",
                "warmup_iters", "iterations", "aggregated_iterations", "validation", "graph",
                "blocking_collectives", "per_iter_timing", "per_iter_skip", "parallel_init",
                "devices": [{"rank", "group", "pid", "hostname", "device", "device_hex", "device_info"}]},
     "results": [{"size", "count", "type", "redop", "root": "    -1",
                  "out_of_place": {"time", "alg_bw", "bus_bw", "nwrong"} | null, "out_of_place_per_iter": {...},
                  "in_place": {...}, "in_place_per_iter": {...}, "actual_iterations", "experiment_name"}],
     "out_of_bounds": {"count", "okay"}, "average_bus_bandwidth": {"bandwidth", "okay"},
     "errors": [], "end_time"}

Booleans are the strings "true"/"false" (its jsonBool writes a string), `root` is the text cell (`%6i`),
`nwrong` is null without validation, and nccl-tests up to 2.17.8 spelt the average `average_bus_bandwidith`
/ `bandwidith`. With `-N` cycles the results list holds every size once per cycle, in order; the reader
splits it into one run per cycle. The sweep adds one key nccl-tests does not have, `fabric_harness`
(backend, null reasons, straggler notes); readers of nccl-tests' JSON skip unknown keys.

No torch here: this module is analysis, and the trainer imports it to write.
"""
from __future__ import annotations

import math
import os
import re

# nccl-tests type names -> torch dtype names (the sweep's `dtype`)
DTYPES = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "int8": "int8",
          "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
          "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
          # the names nccl-tests and NCCL 1's tests printed before 2019
          "char": "int8", "int": "int32"}

FILE_VERSION = 3  # the writer's JSON_FILE_VERSION this output follows (nccl-tests 2.19.x)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # nccl-tests' TIME_STRING_FORMAT (local time)
_TEST = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoallv|alltoall|sendrecv|broadcast|hypercube|"
                   r"reduce|gather|scatter)_perf(?:_mpi)?\b")
_STEMS = {"alltoall": "all_to_all"}
BLOCKS = ("out_of_place", "in_place")


def _flag(value: bool) -> str:
    return "true" if value else "false"


def nccl_version_code(version: str | None) -> int | None:
    """'2.21.5' -> 22105, NCCL's NCCL_VERSION_CODE (major*10000 + minor*100 + patch since 2.9)."""
    try:
        major, minor, patch = (int(x) for x in str(version).split(".")[:3])
    except (TypeError, ValueError):
        return None
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


def _block(b: dict | None) -> dict | None:
    if b is None:
        return None
    return {"time": b["time_us"], "alg_bw": b["algbw_GBps"], "bus_bw": b["busbw_GBps"],
            "nwrong": None if b.get("wrong") is None else float(b["wrong"])}


def to_nccl_tests(sweep: dict, op: str, argv: list[str], env: list[str], nccl_version: int | None) -> dict:
    """One collective of the sweep's result (collectives.json) as the document `<test> -J FILE` writes."""
    data = sweep["ops"][op]
    checked = data.get("checked", True)
    results = []
    for row in data["rows"]:
        rec = {"size": row["size"], "count": row["count"], "type": row["type"], "redop": row["redop"],
               "root": f"{row['root']:6d}"}
        for b in BLOCKS:
            rec[b] = _block(row.get(b))
            per_iter = (row.get(b) or {}).get("per_iter")
            if per_iter is not None:
                rec[f"{b}_per_iter"] = per_iter
        rec["actual_iterations"] = sweep["iters"]
        rec["experiment_name"] = ""
        results.append(rec)
    wrong = data.get("wrong") or 0
    avg = data.get("avg_busbw_GBps")
    devices = [{"rank": d["rank"], "group": 0, "pid": d.get("pid") if d.get("pid") is not None else -1,
                "hostname": d["host"], "device": d["device"], "device_hex": d["bus_id"], "device_info": d["name"]}
               for d in data["devices"]]
    harness = {"source": "fabric-harness", "op": op, "backend": sweep.get("backend"),
               "time_reduction": sweep.get("time_reduction"), "missing": data.get("missing", {}),
               "notes": list(data.get("notes", [])), "stragglers": data.get("stragglers", [])}
    if nccl_version is None:
        harness["nccl_version_reason"] = "no NCCL in this run (backend " + str(sweep.get("backend")) + ")"
    if not checked:
        harness["notes"].append("validation 0: nwrong null, out_of_bounds counts nothing")
    return {
        "version": FILE_VERSION, "start_time": data.get("start_time"), "args": list(argv), "env": list(env),
        "nccl_version": nccl_version,
        "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": sweep["min_bytes"], "maximum_bytes": sweep["max_bytes"],
                   **({"step_bytes": sweep["step_bytes"]} if sweep.get("step_bytes") else {"step_factor": sweep["factor"]}),
                   "warmup_iters": sweep["warmup"], "iterations": sweep["iters"],
                   "aggregated_iterations": 1, "validation": int(bool(checked)), "graph": 0,
                   "blocking_collectives": _flag(False), "per_iter_timing": _flag(sweep.get("per_iter_timing", False)),
                   "per_iter_skip": sweep.get("per_iter_skip", 0), "parallel_init": _flag(False),
                   "devices": devices},
        "results": results,
        "out_of_bounds": {"count": wrong, "okay": _flag(wrong == 0)},
        "average_bus_bandwidth": {"bandwidth": avg if avg is not None else "nan", "okay": "unchecked"},
        "errors": [],
        "end_time": data.get("end_time"),
        "fabric_harness": harness,
    }


# ---------------------------------------------------------------- reading

def is_nccl_tests_json(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("results"), list) and "config" in doc


# A document another tool edited may hold any JSON value where nccl-tests writes a number, a string or an object:
# such a value reads as unknown (null), never as an exception.

def _obj(v) -> dict:
    return v if isinstance(v, dict) else {}


def _text(v) -> str | None:
    return v if isinstance(v, str) else None


def _num(v):
    """A JSON number, or null for nccl-tests' "nan" string and anything that is not a finite number."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:  # an integer beyond a float's range
        return None
    return v if math.isfinite(v) else None


def _whole(v) -> int | None:
    """A count or byte size: a whole number not below 0, else null."""
    n = _num(v)
    return int(n) if n is not None and n >= 0 and n.is_integer() else None


def _read_block(b, per_iter) -> dict | None:
    if not isinstance(b, dict):
        return None
    t = _num(b.get("time", b.get("cpu_time")))
    out = {"time_us": t, "algbw_GBps": _num(b.get("alg_bw")), "busbw_GBps": _num(b.get("bus_bw")),
           "wrong": _whole(b.get("nwrong"))}
    if "cpu_time" in b:
        out["time_is"] = "cpu time (-C 1)"
    if isinstance(per_iter, dict):
        out["per_iter"] = per_iter
    return out


def _op_name(doc: dict, hint: str | None) -> str:
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    for text in [a for a in args if isinstance(a, str)][:1] + [hint or ""]:
        m = _TEST.search(os.path.basename(text))
        if m:
            stem = m.group(1)
            return _STEMS.get(stem, stem)
    if isinstance(doc.get("fabric_harness"), dict) and _text(doc["fabric_harness"].get("op")):
        return doc["fabric_harness"]["op"]
    return "unknown"


def _cycles(results: list[dict]) -> list[list[dict]]:
    """-N repeats the whole size ladder: a size not above the previous one starts the next cycle."""
    cycles: list[list[dict]] = []
    last = None
    for r in results:
        size = _whole(r.get("size"))
        if not cycles or (last is not None and size is not None and size <= last and
                          not (size == 0 and last == 0)):
            cycles.append([])
        cycles[-1].append(r)
        last = size
    return cycles


def parse_json(doc: dict, name_hint: str | None = None, path: str | None = None) -> dict:
    """An nccl-tests JSON document -> the sweep's JSON schema (what telemetry.analysis.nccl_tests.read returns)."""
    cfg = _obj(doc.get("config"))
    devices = [{"rank": d.get("rank"), "group": d.get("group"), "pid": d.get("pid"), "host": d.get("hostname"),
                "device": d.get("device"), "bus_id": d.get("device_hex"), "name": d.get("device_info")}
               for d in (cfg.get("devices") if isinstance(cfg.get("devices"), list) else []) if isinstance(d, dict)]
    per_proc = (_whole(cfg.get("nthreads")) or 1) * (_whole(cfg.get("ngpus")) or 1)
    world = len(devices) * per_proc if devices else None
    avg_obj = _obj(doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith"))
    avg = _num(avg_obj.get("bandwidth", avg_obj.get("bandwidith")))
    misspelt = "average_bus_bandwidith" in doc
    oob = _whole(_obj(doc.get("out_of_bounds")).get("count"))
    op = _op_name(doc, name_hint)
    harness = doc.get("fabric_harness") if isinstance(doc.get("fabric_harness"), dict) else {}
    cycles = _cycles([r for r in doc["results"] if isinstance(r, dict)])
    ops: dict[str, dict] = {}
    for i, cycle in enumerate(cycles or [[]]):
        rows = []
        for r in cycle:
            root = r.get("root")
            try:
                root = int(str(root).strip()) if root is not None else None
            except ValueError:
                root = None
            row = {"size": _whole(r.get("size")), "count": _whole(r.get("count")), "type": _text(r.get("type")),
                   "redop": _text(r.get("redop")), "root": root}
            for b in BLOCKS:
                row[b] = _read_block(r.get(b), r.get(f"{b}_per_iter"))
            rows.append(row)
        blocks = [b for r in rows for n in BLOCKS if (b := r.get(n))]
        wrongs = [b["wrong"] for b in blocks if b["wrong"] is not None]
        notes = []
        if misspelt:
            notes.append("average read from 'average_bus_bandwidith' (nccl-tests <= 2.17.8 spelling)")
        if len(cycles) > 1:
            notes.append(f"cycle {i + 1} of {len(cycles)} (-N): the file's average and out-of-bounds count cover "
                         "every cycle")
        key = op if i == 0 else f"{op}_{i + 1}"
        ops[key] = {"test": f"{ {'all_to_all': 'alltoall'}.get(op, op)}_perf", "rows": rows,
                    "avg_busbw_GBps": avg if len(cycles) <= 1 else _mean([b["busbw_GBps"] for b in blocks]),
                    "avg_busbw_source": "average_bus_bandwidth" if len(cycles) <= 1 else "mean of this cycle's busbw",
                    # okay: "unchecked" without a minimum to check against, else true/false (as JSON or as strings)
                    "avg_busbw_check": {True: "OK", "true": "OK", False: "FAILED", "false": "FAILED"}.get(
                        okay) if isinstance(okay := avg_obj.get("okay"), (bool, str)) else None,
                    "wrong": oob if len(cycles) <= 1 and oob is not None else (sum(wrongs) if wrongs else None),
                    "ranks": None, "world_size": world, "devices": devices,
                    "params": {k: cfg.get(k) for k in ("minimum_bytes", "maximum_bytes", "step_factor", "step_bytes",
                                                      "warmup_iters", "iterations", "validation", "per_iter_timing",
                                                      "per_iter_skip") if k in cfg},
                    "version": doc.get("version"), "missing": harness.get("missing", {}), "notes": notes,
                    "stragglers": harness.get("stragglers", []), "skipped_lines": []}
    types = [r["type"] for o in ops.values() for r in o["rows"] if r.get("type")]
    redops = [r["redop"] for o in ops.values() for r in o["rows"] if r.get("redop") not in (None, "none")]
    return {"source": "fabric-harness" if harness else "nccl-tests", "format": "nccl-tests json", "path": path,
            "world_size": world, "dtype": DTYPES.get(types[0], types[0]) if types else None,
            "redop": redops[0] if redops else None, "iters": cfg.get("iterations"), "warmup": cfg.get("warmup_iters"),
            "time_reduction": harness.get("time_reduction"), "nccl_version": doc.get("nccl_version"),
            "start_time": doc.get("start_time"), "end_time": doc.get("end_time"), "errors": doc.get("errors"),
            "ops": ops, "latency_us": {},
            "rows_read": sum(len(o["rows"]) for o in ops.values()), "rows_skipped": 0}


def _mean(vals):
    known = [v for v in vals if v is not None]
    return sum(known) / len(known) if known else None
