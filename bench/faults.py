"""Bad inputs handled / tried, faults survived / tried, attacks refused / tried: runs the tests that plant each
one (one test case = one bad input, fault or crafted file) and counts them from pytest's JUnit XML.

    python -m bench.faults            # about 15 minutes on a 2-core VM (the fault tests start real runs)

A case counts as handled when its test passes: for a bad input, exit 2 with one `error:` line naming the key
or file (and step); for a fault, the run records it in one line and what it promised holds (a resumable
checkpoint, no orphan, no second run); for an attack, nothing runs and the refusal names the file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILES = ["tests/trainer/test_bad_input.py", "tests/trainer/test_checkpoint_safety.py", "tests/trainer/test_faults.py",
         "tests/telemetry/capture/test_security.py", "tests/telemetry/analysis/test_flight_recorder.py"]


def category(path: str, name: str) -> str | None:
    if "test_bad_input" in path:
        return "bad input"
    if "test_faults" in path or "disk_full" in name:
        return "fault"
    if "crafted" in name or "old_pickled" in name or "hostile" in name or "secret" in name \
            or "markdown" in name:
        return "attack"
    if "test_checkpoint_safety" in path and any(k in name for k in ("damaged", "wrong_shape", "without_weights",
                                                                     "truncated")):
        return "bad input"
    return None  # round trips and readers of good data: not a bad input, fault or attack


def main() -> None:
    # no options; parsed first so that --help answers instead of starting the 15-minute test run
    argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n\n")[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "junit.xml")
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                               *FILES], cwd=REPO, capture_output=True, text=True, errors="replace", timeout=3600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        print(proc.stdout.strip().splitlines()[-1])
        tried, handled = Counter(), Counter()
        for case in ET.parse(xml).getroot().iter("testcase"):
            cat = category(case.get("file") or case.get("classname", ""), case.get("name", ""))
            if cat is None or case.find("skipped") is not None:
                continue
            tried[cat] += 1
            if case.find("failure") is None and case.find("error") is None:
                handled[cat] += 1
    for cat, verb in (("bad input", "handled"), ("fault", "survived"), ("attack", "refused")):
        print(f"{cat}s {verb} {handled[cat]} / tried {tried[cat]}")


if __name__ == "__main__":
    main()
