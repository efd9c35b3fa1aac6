"""One results line for a benchmark: the command, date and machine beside the measured fields, printed and
appended to the benchmark's JSONL under bench/results/."""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def machine() -> str:
    import torch
    return f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}"


def append_result(path: str, module: str, fields: dict) -> dict:
    """Print the record and append it to `path`; `module` is the bench's dotted name (bench.NAME)."""
    record = {"command": " ".join([f"python -m {module}", *sys.argv[1:]]), "date": str(datetime.date.today()),
              "machine": machine(), **fields}
    print(json.dumps(record), flush=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return record


def line_start(module: str, argv: list[str] | None, machine: str) -> dict:
    """The first fields of a results line written with `append_line`: benchmark, date, the command as typed
    (`python -m bench.NAME` and its arguments: `argv`, else sys.argv's) and the machine as described."""
    return {"benchmark": module.rsplit(".", 1)[-1], "date": datetime.date.today().isoformat(),
            "command": " ".join([f"python -m {module}", *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine}


def append_line(path: str | None, record: dict) -> None:
    """Append `record` to `path` as one JSON line and say where (nothing without a path)."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {os.path.relpath(path, REPO)}")
