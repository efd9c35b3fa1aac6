"""iperf3 across the fabric lab's shaped link with `python -m launch.linktest`: received rate as a share
of the tbf rate, one stream and two pairs at once, a few runs per rate.

    sudo python -m bench.lab_linktest --rates 100mbit,1gbit --runs 3 --duration 3
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from launch.lab import Lab  # noqa: E402
from launch.linktest import main as linktest  # noqa: E402


def one(lab: Lab, devices: str | None, duration: int, rate: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        argv = ["--tool", "iperf3", "--server", lab.namespaces[0], "--client", lab.namespaces[1],
                "--server-addr", lab.address(0), "--exec", "ip netns exec {host}", "--duration", str(duration),
                "--line-rate", rate, "--output", out]
        if devices:
            argv += ["--devices", devices]
        if linktest(argv) != 0:
            raise SystemExit("a link test failed")
        with open(os.path.join(out, "linktest.json"), encoding="utf-8") as f:
            res = json.load(f)
    return sum(link["percent_of_line"] for link in res["links"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="100mbit,1gbit")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=3)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "lab_linktest.jsonl"))
    a = p.parse_args()
    results = {}
    for rate in a.rates.split(","):
        with Lab(2, rate, lab_id="fhbench") as lab:
            single, pairs = [], []
            for _ in range(a.runs):  # interleaved: one stream, then two pairs at once
                single.append(one(lab, None, a.duration, rate))
                pairs.append(one(lab, "a,b", a.duration, rate))
        results[rate] = {"one_stream_pct": single, "two_pairs_pct": pairs,
                         "one_stream_median": statistics.median(single), "two_pairs_median": statistics.median(pairs)}
        print(f"{rate}: one stream {statistics.median(single):.1f}% of the rate, two pairs at once "
              f"{statistics.median(pairs):.1f}% (medians of {a.runs})")
    line = {"command": "sudo python -m bench.lab_linktest " + " ".join(sys.argv[1:]),
            "machine": "development VM, 2 cores, 24 GiB, no GPU, torch 2.13.0 CPU",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores (shared)", "results": results}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
