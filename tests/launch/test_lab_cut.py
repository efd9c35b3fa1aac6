"""A link cut mid-run in the fabric lab: within distributed.timeout_s the run fails with one line naming the
collective, the step, the peer and the lab interface, and the setting that sets the time.

Needs root and iproute2; elsewhere skipped with the reason."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

from launch.lab import IFACE, Lab, cut_link, leftover_namespaces, run_in_lab

from ..conftest import TINY

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="the fabric lab needs root and iproute2")


@pytest.mark.integration
@needs_root
def test_cut_link_is_named_within_the_timeout(tmp_path):
    out = tmp_path / "run"
    args = [TINY, "max_steps=400", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
            "distributed.timeout_s=15"]
    result = {}
    with Lab(2, "none") as lab:
        runner = threading.Thread(target=lambda: result.update(code=run_in_lab(lab, 1, args, str(out), 300, 29431)),
                                  daemon=True)
        runner.start()
        deadline = time.monotonic() + 240
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline and runner.is_alive():
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
                break
            time.sleep(0.5)
        assert runner.is_alive(), "the run ended before the cut"
        cut = time.monotonic()
        cut_link(lab, 1)
        runner.join(timeout=200)
        took = time.monotonic() - cut
        namespaces = lab.namespaces
    assert not [ns for ns in leftover_namespaces() if ns in namespaces]
    assert result.get("code") not in (None, 0)
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed", info
    error = info["error"]
    assert error.startswith("distributed: ") and " timed out after 15 s waiting for rank 1 (host lab-node1) " \
        f"over interface {IFACE} (GLOO_SOCKET_IFNAME); the time is distributed.timeout_s" in error, error
    assert " at step " in error
    import datetime
    last_step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["time"]
    recorded = datetime.datetime.fromisoformat(info["end_time"]).timestamp() - last_step
    print(f"last step's end to run.json's end_time: {recorded:.1f} s (whole-second end_time); cut to the lab's "
          f"return: {took:.1f} s (its 30 s grace for the other node included)")
