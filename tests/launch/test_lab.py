"""The fabric lab for real: namespaces, shaped links, runs across them, and teardown on every path.

Needs root and iproute2 (CI has both); elsewhere these tests are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from launch.lab import Lab, LabError, burst_bytes, leftover_namespaces, parse_rate

from ..conftest import REPO, TINY

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                reason="the fabric lab needs root and iproute2")


def test_rates_and_bursts():
    assert parse_rate("1gbit") == 1e9 and parse_rate("100mbit") == 1e8 and parse_rate("125mbps") == 1e9
    assert parse_rate("none") is None
    assert burst_bytes(1e9) >= 128 * 1024 and burst_bytes(1e8) >= 16 * 1024  # docs/reference.md section 8
    assert burst_bytes(1e6, mtu=65535) == 65535 + 14  # a bucket smaller than a frame would drop it
    with pytest.raises(LabError, match="--mtu: got 100; expected 576 to 65535"):
        Lab(2, "1gbit", mtu=100)
    with pytest.raises(LabError, match="--rate: got 'fast'"):
        parse_rate("fast")


def ns_exec(ns, *cmd, timeout=30):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout)


@pytest.mark.integration
@needs_root
def test_three_nodes_through_a_bridge_with_shaped_links():
    with Lab(3, "50mbit", lab_id="fhtest3", mtu=9000) as lab:
        assert set(lab.namespaces + [lab.switch]) <= set(leftover_namespaces())
        qdisc = ns_exec(lab.namespaces[1], "tc", "qdisc", "show", "dev", "fab0").stdout
        assert "tbf" in qdisc and "50Mbit" in qdisc
        # jumbo frames on the node's link and on its switch port
        assert "mtu 9000" in ns_exec(lab.namespaces[1], "ip", "link", "show", "fab0").stdout
        assert "mtu 9000" in ns_exec(lab.switch, "ip", "link", "show", "p1").stdout
        # node 2 reaches node 0 across the switch, and only through the lab's own addresses
        server = f"import socket;s=socket.socket();s.bind(('{lab.address(0)}',5999));s.listen(1);c,_=s.accept();print(c.recv(5).decode())"
        srv = subprocess.Popen(["ip", "netns", "exec", lab.namespaces[0], sys.executable, "-c", server],
                               stdout=subprocess.PIPE, text=True)
        # up to 30 s for the server's Python to start and listen on a loaded host; never connected is a failure
        client = (f"import socket,sys,time\nfor _ in range(300):\n try:\n  socket.create_connection(('{lab.address(0)}',"
                  f"5999), timeout=1).sendall(b'hello');break\n except OSError: time.sleep(0.1)\nelse: sys.exit(1)")
        assert ns_exec(lab.namespaces[2], sys.executable, "-c", client).returncode == 0
        assert srv.communicate(timeout=30)[0].strip() == "hello"
    assert not [ns for ns in leftover_namespaces() if ns.startswith("fhtest3")]


@needs_root
@pytest.mark.integration
def test_bring_up_failure_leaves_nothing_behind():
    lab = Lab(2, "1gbit", lab_id="fhtestfail")
    lab.rate = "1gbitz"  # tc refuses it after the namespaces exist
    with pytest.raises(LabError, match="shaping"):
        with lab:
            pass
    assert not [ns for ns in leftover_namespaces() if ns.startswith("fhtestfail")]


def own_namespaces_left(*run_dirs) -> list[str]:
    """Namespaces a lab run recorded in its lab.json that still exist (other labs may run beside the tests:
    only this run's own namespaces are its to clean up)."""
    mine = set()
    for d in run_dirs:
        lab = json.loads((d / "lab.json").read_text())
        mine |= set(lab["namespaces"]) | ({lab["switch"]} if lab.get("switch") else set())
    return sorted(mine & set(leftover_namespaces()))


def lab_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "launch.lab", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.integration
@needs_root
def test_failed_run_is_torn_down_and_says_why(tmp_path):
    proc = lab_cli("--nodes", "2", "--rate", "100mbit", "--", TINY, f"output_dir={tmp_path / 'bad'}",
                   "data.dataset=/no/such/data.jsonl", "distributed.timeout_s=30")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "data.dataset: path '/no/such/data.jsonl' does not exist" in proc.stdout
    assert "[lab] torn down" in proc.stdout
    assert own_namespaces_left(tmp_path / "bad") == []


@pytest.mark.integration
def test_bad_lab_arguments_are_one_line(tmp_path):
    proc = lab_cli("--nodes", "1", "--rate", "1gbit", "--", TINY)
    if os.geteuid() == 0:
        assert proc.returncode == 2 and "error: --nodes: got 1; a fabric needs at least 2 nodes" in proc.stderr
    if os.geteuid() == 0:
        proc = lab_cli("--nodes", "2", "--rate", "1gbit", "--mtu", "100", "--", TINY)
        assert proc.returncode == 2 and proc.stderr.strip() == "error: --mtu: got 100; expected 576 to 65535 bytes " \
            "(1500 Ethernet, 9000 jumbo frames)"
    proc = lab_cli("--nodes", "2", "--rate", "fast", "--", TINY)
    assert proc.returncode == 2 and "--rate: got 'fast'" in proc.stderr or "needs root" in proc.stderr


@pytest.mark.integration
@needs_root
def test_tiny_run_at_two_rates_then_compare(tmp_path):
    """The README's second use case, small: the same recipe on a fast and a slow emulated fabric."""
    runs = []
    for rate in ("1gbit", "5mbit"):
        out = tmp_path / rate
        proc = lab_cli("--nodes", "2", "--rate", rate, "--", TINY, f"output_dir={out}", "max_steps=4",
                       "data.seq_len=128", "train.eval_every_samples=null", "train.save_final=false",
                       "distributed.timeout_s=60")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "[lab] torn down" in proc.stdout
        runs.append(out)
    assert own_namespaces_left(*runs) == []
    # every shaped link's tbf counters are kept (the node's egress on a veth pair: 2 links); bytes went through
    lab = json.loads((runs[1] / "lab.json").read_text())
    assert len(lab["qdisc"]) == 2 and all(c["bytes"] > 0 for c in lab["qdisc"].values())
    assert lab["tbf_drops"] == sum(c["drops"] for c in lab["qdisc"].values())
    assert 0 <= lab["tbf_drops_after_first_step"] <= lab["tbf_drops"]  # the counters were read at the first step
    info = json.loads((runs[1] / "run.json").read_text())
    assert info["fabric"]["lab"]["rate"] == "5mbit" and info["fabric"]["transport"] == "tcp"
    assert [h["hostname"] for h in info["hosts"]] == ["lab-node0", "lab-node1"]
    proc = subprocess.run([sys.executable, "-m", "telemetry", "compare", *map(str, runs), "--out",
                           str(tmp_path / "cmp")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| verdict | identical |" in md  # the fabric changes the time, never the numerics
    assert "5mbit lab" in md and "Projection from 1gbit lab" in md
    assert "5mbit (emulated: tc tbf; " in md  # with what its queues dropped (lab.json)
    # the lab records its host's cores (projections to more lab nodes need them); project onto 4 nodes
    assert info["fabric"]["lab"]["host_cpus"] == len(os.sched_getaffinity(0))
    proc = subprocess.run([sys.executable, "-m", "telemetry", "project", str(runs[0]), "--rate", "5mbit", "--nodes",
                           "4", "--json", str(tmp_path / "p.json")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    p = json.loads((tmp_path / "p.json").read_text())["projections"][0]
    assert p["world_size"] == 4 and p["interval_s"][0] <= p["step_time_s"] <= p["interval_s"][1]
