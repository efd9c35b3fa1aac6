"""The tbf buckets the lab asks for are the ones tc holds (round 8 of the lab configurations): below 480 bit/s and
with --burst near tc's 274 s, the bucket shown by `tc qdisc show` is the one asked for, not a wrapped remainder
(`rate 476bit burst 16384` showed `burst 166b` before the lab capped it), and --burst/--limit reach every link.

Needs root and iproute2; elsewhere skipped with the reason."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from launch.lab import Lab

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                 reason="the fabric lab needs root and iproute2")]


def tbf(ns: str, dev: str = "fab0") -> dict:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return next(q for q in json.loads(out) if q.get("kind") == "tbf")["options"]


@pytest.mark.parametrize("rate, kwargs, burst, limit", [
    ("100bit", {}, 3288, 262144),  # 274 s of tc's 12 bytes/s, still above one 1514-byte frame
    ("1mbit", {"burst": "34250000", "limit": "64k"}, 34250000, 65536),  # the largest bucket tc holds at 1 Mbit/s
    ("1gbit", {"burst": "64k", "limit": "1m"}, 65536, 2 ** 20),
])
def test_the_bucket_tc_holds_is_the_one_asked_for(rate, kwargs, burst, limit):
    with Lab(3, rate, lab_id=f"fhbk{os.getpid() % 1000}", **kwargs) as lab:
        assert lab.describe()["burst_bytes"] == burst
        for ns, dev in lab.shaped:  # every node's egress and every switch port
            got = tbf(ns, dev)
            # tc prints the queue as `limit` or, where it derives it, as `lat` (a time)
            # tc keeps the bucket as a time in whole microseconds: 64 KiB at 1 Gbit/s shows 65500
            assert abs(got["burst"] - burst) <= max(1, burst * 0.002) and got.get("limit", limit) == limit, (ns, dev, got)
    assert not lab.left_behind()


def test_burst_and_limit_from_the_command_line_reach_lab_json_and_the_report(tmp_path):
    import sys

    from telemetry.analysis.report import write_report

    from ..conftest import REPO
    out = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", "10mbit", "--burst", "64k",
                           "--limit", "1m", "--timeout", "120", "--", "recipes/collectives.yaml",
                           "sweep.ops=[all_reduce]", "sweep.pairs=false", "sweep.min_bytes=8K", "sweep.max_bytes=32K",
                           "sweep.iters=2", "sweep.warmup=1", "sweep.latency_table=false", f"output_dir={out}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "links 10mbit (burst 65536 B, queue 1048576 B, MTU 1500)" in proc.stdout
    info = json.loads((out / "lab.json").read_text())
    assert (info["burst_bytes"], info["queue_bytes"], info["burst_given"], info["limit_given"]) == (65536, 2 ** 20,
                                                                                                   True, True)
    write_report(str(out))
    md = (out / "report" / "report.md").read_text()
    assert "| lab links | 10mbit; 2 nodes, veth pair, MTU 1500; tbf burst 65,536 B, queue 1,048,576 B (--burst, " \
           "--limit);" in md
