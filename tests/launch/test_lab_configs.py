"""The fabric lab on configurations the other lab tests do not use: a 4-node bridge with an odd frame size,
namespaces left by a lab that was killed, two labs at once, and a lab stopped by SIGTERM mid-run.

Needs root and iproute2 (CI has both); elsewhere skipped with the reason."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from launch.lab import Lab, LabError, leftover_namespaces, owner_mark

from ..conftest import REPO, TINY

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
                                 reason="the fabric lab needs root and iproute2")]

# the mark of a lab process that cannot exist: 4194304 is above Linux's highest pid
GONE = re.sub(r"pid=\d+", "pid=4194304", owner_mark())


def make_namespace(name: str, mark: str | None) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    if mark:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "alias", mark], check=True, timeout=30)


def ns_exec(ns, *cmd):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=30)


def test_bridge_odd_mtu_leftovers_and_two_labs_at_once(capfd):
    tag = f"fhcf{os.getpid() % 1000}"
    # a lab killed earlier (no teardown ran) left one of this lab's names and one of another id's
    make_namespace(f"{tag}an2", GONE)
    make_namespace(f"{tag}zn0", GONE)
    with Lab(4, "1.5mbit", lab_id=f"{tag}a", mtu=576) as lab, Lab(2, "1Gbit", lab_id=f"{tag}b") as other:
        err = capfd.readouterr().err
        assert f"[lab] removed namespace {tag}an2, left by a lab that is gone (process 4194304)" in err, err
        assert f"[lab] removed namespace {tag}zn0" in err
        # 4 nodes through a bridge: every node's egress and every switch port shaped, the odd MTU on both ends
        counters = lab.qdisc_counters()
        assert sorted(counters) == sorted([f"{tag}asw/p{i}" for i in range(4)] + [f"{ns}/fab0" for ns in lab.namespaces])
        assert all(c["drops"] == 0 for c in counters.values()), counters
        assert "mtu 576" in ns_exec(lab.namespaces[3], "ip", "link", "show", "fab0").stdout
        assert "mtu 576" in ns_exec(lab.switch, "ip", "link", "show", "p3").stdout
        assert "rate 1500Kbit" in ns_exec(lab.namespaces[3], "tc", "qdisc", "show", "dev", "fab0").stdout
        assert "rate 1Gbit" in ns_exec(other.namespaces[0], "tc", "qdisc", "show", "dev", "fab0").stdout
        # node 3 reaches node 0 across the switch with frames of the odd size
        server = f"import socket;s=socket.socket();s.bind(('{lab.address(0)}',5998));s.listen(1);c,_=s.accept();print(len(c.recv(4096)))"
        srv = subprocess.Popen(["ip", "netns", "exec", lab.namespaces[0], sys.executable, "-c", server],
                               stdout=subprocess.PIPE, text=True)
        client = (f"import socket,sys,time\nfor _ in range(300):\n try:\n  socket.create_connection(('{lab.address(0)}',"
                  f"5998), timeout=1).sendall(b'x' * 1000);break\n except OSError: time.sleep(0.1)\nelse: sys.exit(1)")
        assert ns_exec(lab.namespaces[3], sys.executable, "-c", client).returncode == 0
        assert int(srv.communicate(timeout=30)[0]) > 0
        # the 1000 bytes crossed node 3's link in frames of at most 576 bytes
        assert lab.qdisc_counters()[f"{lab.namespaces[3]}/fab0"]["packets"] >= 2
        # a lab whose name is held: by a namespace no lab marked, by a gone lab's with a process still in it
        make_namespace(f"{tag}cn1", None)
        with pytest.raises(LabError, match=rf"^this lab needs the name {tag}cn1: namespace {tag}cn1 exists and no "
                                           rf"fabric lab marked it as its own .*sudo ip netns del {tag}cn1$"):
            with Lab(2, "none", lab_id=f"{tag}c"):
                pass
        make_namespace(f"{tag}dn0", GONE)
        sleeper = subprocess.Popen(["ip", "netns", "exec", f"{tag}dn0", "sleep", "60"])
        try:
            time.sleep(0.5)
            with pytest.raises(LabError, match=rf"processes {sleeper.pid} still run in it"):
                with Lab(2, "none", lab_id=f"{tag}d"):
                    pass
        finally:
            sleeper.kill()
            sleeper.wait(timeout=30)
        for name in (f"{tag}cn1", f"{tag}dn0"):
            subprocess.run(["ip", "netns", "del", name], timeout=30)
        # the other lab, up beside this one, is untouched by all of it
        assert set(other.namespaces) <= set(leftover_namespaces())
    assert not [ns for ns in leftover_namespaces() if ns.startswith(tag)]


def test_a_lab_stopped_by_sigterm_tears_down_and_exits_143(tmp_path):
    """A launcher (launch.evaluate on its timeout, Slurm, systemd) stops the lab with SIGTERM: every node is
    stopped, the bridge and all 4 namespaces go, and the exit status says which signal ended it."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "launch.lab", "--nodes", "3", "--rate", "10mbit", "--timeout", "200",
                             "--", TINY, f"output_dir={out}", "max_steps=400", "train.global_batch_size=12",
                             "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
                             "distributed.timeout_s=60"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 240
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and metrics.read_text().count("\n") >= 3:  # a few steps: the lab polls
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, stdout[-2000:] + stderr[-2000:]
    assert "[lab] interrupted by SIGTERM; every node was stopped" in stderr
    assert "[lab] torn down (4 namespaces removed: 3 nodes and the switch)" in stdout
    lab = json.loads((out / "lab.json").read_text())
    assert lab["switch"] and not set(lab["namespaces"] + [lab["switch"]]) & set(leftover_namespaces())
    # the links' counters are kept on this path too: 3 node egresses and 3 switch ports, read at the first step
    assert len(lab["qdisc"]) == 6 and lab["tbf_drops_after_first_step"] is not None


def test_tcs_binary_rate_units_shape_as_tc_reads_them():
    """Round 6: `--rate 10Mibit` (tc's 1024-based units) was refused; tc shapes it to 10485760 bit/s."""
    tag = f"fhib{os.getpid() % 1000}"
    with Lab(3, "10Mibit", lab_id=tag, slow_node=2, slow_rate="2KiBps") as lab:
        assert lab.rate_bps == 10 * 2 ** 20 and lab.slow_rate_bps == 8 * 2 * 1024
        assert "rate 10485Kbit" in ns_exec(lab.namespaces[0], "tc", "qdisc", "show", "dev", "fab0").stdout
        assert "rate 16384bit" in ns_exec(lab.namespaces[2], "tc", "qdisc", "show", "dev", "fab0").stdout
        assert "rate 10485Kbit" in ns_exec(lab.switch, "tc", "qdisc", "show", "dev", "p2").stdout
    assert not [ns for ns in leftover_namespaces() if ns.startswith(tag)]
