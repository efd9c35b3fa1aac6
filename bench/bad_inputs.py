"""Bad inputs handled / tried: runs tests/trainer/test_bad_input.py (each case one bad input, handled when
it exits 2 with `error:` lines only, naming the key or file), then times the alias bomb's refusal.

    python -m bench.bad_inputs [--source DIR]   # DIR: another checkout to measure (e.g. an older commit)
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.support.bad_recipes import alias_bomb

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=str(REPO), help="checkout whose trainer/ is measured")
    args = ap.parse_args()
    src = Path(args.source)
    test = src / "tests" / "trainer" / "test_bad_input.py"
    if src != REPO:  # the same table against another checkout's code
        test.write_text((REPO / "tests" / "trainer" / "test_bad_input.py").read_text())

    bomb = Path("/tmp/bad_inputs_bomb.yaml")
    bomb.write_text(alias_bomb(10))
    start = time.monotonic()
    # 1.5 GB address-space cap and 60 s: without the fix the dry run grows until one of them stops it
    # (GNU time reports the trainer's own peak; a forked child's rusage starts from this big parent's)
    run = subprocess.run(["bash", "-c", f"ulimit -v 1500000; exec /usr/bin/time -f 'peak_kb=%M' timeout 60 "
                          f"{sys.executable} -m trainer {bomb} --dry-run"], cwd=src, capture_output=True, text=True)
    took = time.monotonic() - start
    peak = re.search(r"peak_kb=(\d+)", run.stderr)
    peak_mb = f"{int(peak.group(1)) / 1024:.0f} MB" if peak else "unknown (no GNU time output)"
    lines = [line for line in run.stderr.splitlines() if not line.startswith(("peak_kb=", "Command exited"))]
    print(f"alias bomb (9**10 values): exit {run.returncode} in {took:.2f} s, peak RSS {peak_mb}; "
          f"stderr: {' '.join(lines)[-160:]!r}")

    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                          cwd=src, capture_output=True, text=True, errors="replace", timeout=900)
    summary = proc.stdout.strip().splitlines()[-1]  # pytest's "N failed, M passed in S s"
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?)", summary)}
    handled = counts.get("passed", 0)
    tried = sum(counts.values())
    print(f"handled {handled} / tried {tried}")


if __name__ == "__main__":
    main()
