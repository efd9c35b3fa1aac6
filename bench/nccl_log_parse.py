"""NCCL log parser: field accuracy on the corpus of real logs and parse rate, against a baseline revision.

    python -m bench.nccl_log_parse [--baseline REV] [--files 128] [--rounds 5]

Accuracy: for every log in tests/telemetry/nccl_logs/ and every field of its truth file, a parser's value
is right (equal, null included), wrong (another value), null-but-known (the log establishes a value) or
invented (a value where the log establishes none). The baseline revision's parser is read with
`git show REV:telemetry/capture/nccl_log.py`; its older schema had no devices/nranks keys, so devices are taken
from its ib_devices (or socket interfaces) and nranks reads as null.

TUNING: for every log in tests/telemetry/nccl_tuning/ named in its truth.json, the per-collective
algorithm/protocol records of telemetry/analysis/nccl_algorithms.py (right, missed, extra, as multisets of
(collective, bytes, label)) and the algorithm/protocol pairs its init-time table enables (a baseline without
`tuning_table` misses them all).

Rate: MB/s over synthetic per-rank logs of an 8-GPU RoCE node (bench/cross_rank_scale.py), rounds
interleaved between the two parsers. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import collections
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "telemetry", "nccl_logs")


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fields(out: dict) -> dict:
    devices = out.get("devices", "absent")
    if devices == "absent":  # baseline schema
        devices = out["ib_devices"] or [{"device": d["interface"], "port": None, "link_layer": None}
                                        for d in out["socket_devices"]] or None
    return {"nccl_version": out["nccl_version"], "network": out["network"],
            "devices": None if not devices else sorted((d["device"], d["port"], d["link_layer"]) for d in devices),
            "gpudirect_rdma": out["gpudirect_rdma"],
            "channel_transports": None if not out["channels"] else sorted(out["channels"]),
            "nranks": out.get("nranks"), "transport": out["transport"]}


def accuracy(parser) -> dict:
    score = collections.defaultdict(collections.Counter)
    for truth_file in sorted(glob.glob(os.path.join(CORPUS, "*.json"))):
        truth = json.load(open(truth_file, encoding="utf-8"))["truth"]
        got = _fields(parser.parse_files([truth_file[:-5] + ".log"]))
        for field, want in truth.items():
            if field == "devices" and want is not None:
                want = sorted((d["device"], d["port"], d["link_layer"]) for d in want)
            if field == "channel_transports" and want is not None:
                want = sorted(want)
            have = got[field]
            verdict = ("right" if have == want else "wrong" if have is not None and want is not None
                       else "null_but_known" if have is None else "invented")
            score[field][verdict] += 1
    total = collections.Counter()
    for c in score.values():
        total.update(c)
    return {"logs": len(glob.glob(os.path.join(CORPUS, "*.json"))), "total": dict(total),
            "by_field": {k: dict(v) for k, v in score.items()}}


TUNING_CORPUS = os.path.join(ROOT, "tests", "telemetry", "nccl_tuning")


def tuning_accuracy(mod) -> dict:
    truth = json.load(open(os.path.join(TUNING_CORPUS, "truth.json"), encoding="utf-8"))
    score = {"records": collections.Counter(), "enabled": collections.Counter()}
    for name, want in truth.items():
        if name.startswith("_"):
            continue
        lines = open(os.path.join(TUNING_CORPUS, name), encoding="utf-8").read().splitlines()
        recs = mod.parse_lines(lines)
        label = getattr(mod, "label", None) or (lambda r: f"{r['algorithm']}/{r['protocol']}")
        have = collections.Counter((r["collective"], r["bytes"], label(r)) for r in recs)
        wanted = collections.Counter(tuple(x) for x in want["records"])
        score["records"].update(right=sum((have & wanted).values()), missed=sum((wanted - have).values()),
                                extra=sum((have - wanted).values()))
        table = mod.enabled(mod.tuning_table(lines)) if hasattr(mod, "tuning_table") else {}
        have_e = {(c, k) for c, ks in table.items() for k in ks}
        want_e = {(c, k) for c, ks in (want["enabled"] or {}).items() for k in ks}
        score["enabled"].update(right=len(have_e & want_e), missed=len(want_e - have_e), extra=len(have_e - want_e))
    return {"logs": sum(1 for k in truth if not k.startswith("_")), **{k: dict(v) for k, v in score.items()}}


def _baseline_file(rev: str, where: tuple[str, ...], tmp: str, name: str):
    for path in where:
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            out = os.path.join(tmp, name + ".py")
            with open(out, "w", encoding="utf-8") as f:
                f.write(shown.stdout)
            return _load(out, name)
    return None


def rate(parsers: dict, files: int, rounds: int) -> dict:
    from bench.cross_rank_scale import parse_rate
    out = {k: [] for k in parsers}
    with tempfile.TemporaryDirectory() as tmp:
        parse_rate(files, tmp)  # writes the synthetic logs
        paths = sorted(glob.glob(os.path.join(tmp, "nccl-logs", "*.log")))
        size = sum(os.path.getsize(p) for p in paths)
        for _ in range(rounds):
            for name, parser in parsers.items():
                t = time.perf_counter()
                parser.parse_files(paths)
                out[name].append(round(size / (time.perf_counter() - t) / 1e6, 1))
    return {"bytes": size, "files": files, "mb_per_s": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="c323910", help="git revision whose telemetry/capture/nccl_log.py is compared")
    ap.add_argument("--files", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # the parser moved to telemetry/capture/ with the package split; older revisions have it at the top
        base = _baseline_file(args.baseline, ("telemetry/capture/nccl_log.py", "telemetry/nccl_log.py"), tmp,
                              "baseline_nccl_log")
        if base is None:
            sys.exit(f"error: {args.baseline} has no nccl_log.py (looked for telemetry/capture/ and telemetry/)")
        parsers = {"baseline": base,
                   "current": _load(os.path.join(ROOT, "telemetry", "capture", "nccl_log.py"), "current_nccl_log")}
        tuning = {"baseline": _baseline_file(args.baseline, ("telemetry/analysis/nccl_algorithms.py",), tmp,
                                             "baseline_nccl_algorithms"),
                  "current": _load(os.path.join(ROOT, "telemetry", "analysis", "nccl_algorithms.py"),
                                   "current_nccl_algorithms")}
        print(json.dumps({"baseline": args.baseline,
                          "accuracy": {k: accuracy(p) for k, p in parsers.items()},
                          "tuning": {k: tuning_accuracy(m) if m else None for k, m in tuning.items()},
                          "rate": rate(parsers, args.files, args.rounds)}))

if __name__ == "__main__":
    main()
