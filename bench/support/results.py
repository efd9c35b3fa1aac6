"""One results line for a benchmark: the command, date and machine beside the measured fields, printed and
appended to the benchmark's JSONL under bench/results/."""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys


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
