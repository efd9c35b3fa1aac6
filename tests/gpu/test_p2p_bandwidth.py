"""launch.p2p_bandwidth on real GPUs: its copies move the right bytes (one GPU is enough for that), every
ordered pair is measured where there are two or more, and one GPU is refused in one line."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from ..conftest import REPO
from .common import GPU

pytestmark = GPU

COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0
REF = REPO / "tests" / "telemetry" / "analysis" / "p2p" / "p2pBandwidthLatencyTest_rtx5090_pair.txt"


def _run(*args: str, timeout: int = 480) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.p2p_bandwidth", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def _wrap(t: torch.Tensor):
    from launch.cuda_peer import Buffer
    return Buffer(t.device.index, t.numel() * 4, t.data_ptr(), torch.int32)


def test_copies_move_the_bytes():
    """cudaMemcpyPeerAsync through ctypes and the Triton copy kernel, on GPU 0 and GPU 0 -> 1 where there is
    a second GPU with peer access."""
    from launch.cuda_peer import TorchCuda
    rt = TorchCuda()
    n = (1 << 20) + 3  # not a multiple of the kernel's block
    dst_dev = 1 if COUNT > 1 and rt.can_access_peer(0, 1) and rt.can_access_peer(1, 0) else 0
    if dst_dev:
        rt.enable_peer_access(0, 1)
    try:
        for copy in (rt.memcpy_peer, rt.copy_kernel):
            src = torch.arange(n, dtype=torch.int32, device="cuda:0")
            dst = torch.zeros(n, dtype=torch.int32, device=f"cuda:{dst_dev}")
            torch.cuda.synchronize(0)  # filled on torch's stream; ours does not wait for it
            if dst_dev:
                torch.cuda.synchronize(dst_dev)
            rt.set_device(0)
            s = rt.stream(0)
            copy(_wrap(dst), _wrap(src), n * 4, s)
            rt.sync(s)
            assert torch.equal(dst.cpu(), src.cpu()), copy.__name__
    finally:
        if dst_dev:
            rt.disable_peer_access(0, 1)


@pytest.mark.skipif(COUNT != 1, reason="the one-GPU refusal needs exactly one GPU")
def test_one_gpu_is_refused_in_one_line(tmp_path):
    res = _run("--out", str(tmp_path / "p2p"))
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "needs 2 or more on this node; found 1" in lines[0]


@pytest.mark.skipif(COUNT < 2, reason=f"pairs need 2 GPUs; this machine has {COUNT}")
def test_every_ordered_pair_measured(tmp_path):
    out = tmp_path / "p2p"
    res = _run("--out", str(out), "--num-elems", "4000000", "--p2p-read", "--reference", str(REF))
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads((out / "p2p_bandwidth.json").read_text())
    assert len(data["devices"]) == COUNT and set(data["engines"]) == {"ce", "sm"}
    assert data["connectivity"] == [[1 if i == j else int(torch.cuda.can_device_access_peer(i, j))
                                     for j in range(COUNT)] for i in range(COUNT)]
    for e in data["engines"].values():
        for fam, states in e["matrices"].items():
            for state, m in states.items():
                assert all(v is not None and math.isfinite(v) and v > 0 for row in m for v in row), (fam, state)
    text = (out / "p2p_bandwidth.txt").read_text()
    assert "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)" in text and "(ours / reference)" in text
