"""launch.p2p_bandwidth, p2pBandwidthLatencyTest's measurement, on FakeCudaRuntime (tests/launch/fake_cuda.py):
which copy each cell times and how, both P2P modes, both engines, the matrices' assembly, the sample's
table layout (against its real output, tests/telemetry/analysis/p2p/) and the error paths."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from launch import p2p_bandwidth as pb
from launch.cuda_peer import CudaError, cudart_candidates
from telemetry.analysis import p2p_matrix as pm

from .fake_cuda import FakeCudaRuntime

REF = Path(__file__).parents[1] / "telemetry" / "analysis" / "p2p" / "p2pBandwidthLatencyTest_rtx5090_pair.txt"
N = 2_500_000  # int32 elements: 10 MB per copy
NB = N * 4


def rate(nbytes: float, gbps: float, lat_us: float, factor: float = 1) -> float:
    """GB/s the fake should give: `factor` x bytes over one copy's time (repeats cancel out)."""
    return factor * nbytes / 1e9 / (lat_us * 1e-6 + nbytes / (gbps * 1e9))


def test_copy_engine_matrices_both_p2p_modes():
    rt = FakeCudaRuntime(n=2)
    r = pb.measure(rt, ["ce"], N)
    m = r["engines"]["ce"]["matrices"]
    uni, bi = m["unidirectional"], m["bidirectional"]
    assert uni["enabled"][0][1] == pytest.approx(rate(NB, 50, 2))  # over the link, peer access on
    assert uni["disabled"][0][1] == pytest.approx(rate(NB, 10, 10))  # staged through the host
    assert uni["enabled"][0][0] == pytest.approx(rate(NB, 1000, 2, factor=2))  # read + write counted
    assert bi["enabled"][0][1] == pytest.approx(2 * rate(NB, 50, 2))  # both ways at once, both counted
    assert bi["disabled"][1][0] == pytest.approx(2 * rate(NB, 10, 10))
    assert bi["enabled"][1][1] == pytest.approx(2 * rate(NB, 1000, 2, factor=2))
    assert m["latency_gpu"]["enabled"][0][1] == pytest.approx(2 + 16 / 50e3)  # us per 16-byte copy
    assert m["latency_gpu"]["disabled"][0][1] == pytest.approx(10 + 16 / 10e3)
    assert m["latency_cpu"]["enabled"][0][1] == pytest.approx(3.0)  # the host's cost of queuing one
    assert "enabled_reads" not in uni
    assert r["connectivity"] == [[1, 1], [1, 1]] and r["bytes"] == NB and r["repeat"] == 5
    assert r["latency_repeat"] == 100 and r["latency_bytes"] == 16 and r["notes"] == []
    assert not rt.enabled and all(b.freed for b in rt.buffers)  # every pair turned off again, buffers freed


def test_each_cell_is_its_ordered_pair_writes_and_reads():
    """Row i, column j: i writes to j; with --p2p-read, i pulls from j (the copy runs j -> i)."""
    links = {(s, d): 10.0 * (s + 1) + d for s in range(3) for d in range(3) if s != d}
    rt = FakeCudaRuntime(n=3, link_GBps=links, copy_us=0)
    uni = pb.measure(rt, ["ce"], N, p2p_read=True)["engines"]["ce"]["matrices"]["unidirectional"]
    for (s, d), gbps in links.items():
        assert uni["enabled"][s][d] == pytest.approx(gbps)
        assert uni["enabled_reads"][d][s] == pytest.approx(gbps)
    lat = pb.measure(rt, ["ce"], N, p2p_read=True)["engines"]["ce"]["matrices"]["latency_gpu"]
    assert lat["enabled_reads"][0][2] == pytest.approx(16 / links[(2, 0)] / 1e3)


def test_sm_copies_where_peer_access_is_on_and_falls_back_as_the_sample():
    rt = FakeCudaRuntime(n=2)
    e = pb.measure(rt, ["ce", "sm"], N)["engines"]
    sm, paths = e["sm"]["matrices"], e["sm"]["paths"]
    assert sm["unidirectional"]["enabled"][0][1] == pytest.approx(rate(NB, 40, 2))  # the kernel's rate
    assert sm["bidirectional"]["enabled"][1][0] == pytest.approx(2 * rate(NB, 40, 2))
    assert sm["unidirectional"]["disabled"][0][1] == pytest.approx(rate(NB, 10, 10))  # no access: a copy
    assert sm["latency_cpu"]["enabled"][0][1] == pytest.approx(5.0)  # a launch costs more than a copy call
    assert paths["unidirectional"]["enabled"] == [["ce", "sm"], ["sm", "ce"]]  # the diagonal is a copy
    assert paths["unidirectional"]["disabled"] == [["ce", "ce"], ["ce", "ce"]]
    assert paths["bidirectional"]["enabled"][0][1] == "sm"
    assert e["ce"]["paths"]["unidirectional"]["enabled"][0][1] == "ce"
    assert e["ce"]["engine"] == "copy engine (cudaMemcpyPeerAsync)"


def test_a_pair_without_peer_access_reads_the_same_enabled_or_not():
    """As the sample's RTX 5090 pair: cudaDeviceCanAccessPeer says no, so nothing is enabled (the runtime
    would refuse: cudaErrorPeerAccessUnsupported) and both modes copy through the host."""
    rt = FakeCudaRuntime(n=2, peer=set())
    with pytest.raises(CudaError, match="cudaErrorPeerAccessUnsupported"):
        rt.enable_peer_access(0, 1)
    rt.clear_error()
    r = pb.measure(rt, ["ce", "sm"], N)
    assert r["connectivity"] == [[1, 0], [0, 1]]
    for e in r["engines"].values():
        uni = e["matrices"]["unidirectional"]
        assert uni["enabled"][0][1] == pytest.approx(uni["disabled"][0][1]) == pytest.approx(rate(NB, 10, 10))
    assert r["engines"]["sm"]["paths"]["unidirectional"]["enabled"][0][1] == "ce"


def test_peer_access_left_on_by_another_library():
    """torch turns peer access on itself (and keeps it): P2P=Disabled turns it off first, P2P=Enabled's
    cudaErrorPeerAccessAlreadyEnabled is taken as on and cleared (else the next launch reports it)."""
    rt = FakeCudaRuntime(n=2, already_on={(0, 1), (1, 0)})
    r = pb.measure(rt, ["ce"], N)
    assert r["engines"]["ce"]["matrices"]["unidirectional"]["disabled"][0][1] == pytest.approx(rate(NB, 10, 10))
    assert any("was on before a P2P=Disabled measurement" in n for n in r["notes"])
    rt = FakeCudaRuntime(n=2)
    rt.enable_peer_access(0, 1)
    ctx = pb._Ctx(rt, 2, 64)
    pb._enable(rt, 0, 1, notes := set())  # the second enable: refused, cleared, noted
    assert rt.last_error is None and "already on" in next(iter(notes))
    with pytest.raises(CudaError, match="cudaErrorPeerAccessAlreadyEnabled"):
        rt.enable_peer_access(0, 1)
    with pytest.raises(CudaError, match="after the launch.*cudaErrorPeerAccessAlreadyEnabled"):
        rt.hold(ctx.s0[0])  # the fake reports a stale error at the next launch, as torch's check does


def test_a_kernel_without_peer_access_faults_in_the_fake():
    rt = FakeCudaRuntime(n=2)
    s = rt.stream(0)
    with pytest.raises(CudaError, match="cudaErrorIllegalAddress"):
        rt.copy_kernel(rt.alloc(1, 16), rt.alloc(0, 16), 16, s)


def test_the_samples_layout_byte_for_byte():
    """Its own matrices, read from its real output and written back, give its text (each table's lines)."""
    text = REF.read_text()
    ref = pm.parse_reference(text)
    ours = pm.render_matrices(ref, ref["connectivity"]).splitlines()
    assert ours == text.splitlines()[: len(ours)] and len(ours) == 36
    rendered = pb.render(pb.measure(FakeCudaRuntime(n=2), ["ce"], N))
    assert "Device: 0, Fake GPU, pciBusID: 10, pciDeviceID: 0, pciDomainID:0" in rendered
    for _, state, title in pm.MATRICES:
        assert (title in rendered) == (state != "enabled_reads"), title
    assert "   D\\D     0      1 \n     0 " in rendered and "\n   CPU     0      1 \n" in rendered


def test_reads_matrix_read_apart_from_writes():
    ref = pm.parse_reference((REF.parent / "p2pBandwidthLatencyTest_6gpu_p2p_read_excerpt.txt").read_text())
    uni = ref["unidirectional"]
    assert uni["enabled"][2][0] == 10.01 and uni["enabled_reads"][2][0] == 9.90 and len(uni["disabled"]) == 6


def test_command_writes_json_text_and_ratios(tmp_path, capsys):
    rt = FakeCudaRuntime(n=2, peer=set(), staged_GBps=38.24, staged_us=0, local_GBps=1516.99 / 2, copy_us=0)
    out = tmp_path / "p2p"
    assert pb.main(["--out", str(out), "--num-elems", str(N), "--reference", str(REF)], backend=rt) == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "p2p_bandwidth.json").read_text())
    assert set(data["engines"]) == {"ce", "sm"} and data["reference"]["engine"] == "ce"
    ratios = {(r["family"], r["state"]): r for r in data["reference"]["ratios"]}
    assert len(ratios) == 8  # uni x2, bi x2, GPU and CPU latency x2: every matrix the reference has
    uni = ratios[("unidirectional", "disabled")]
    assert uni["ratio"][0][1] == pytest.approx(1.0) and uni["ratio"][0][0] == pytest.approx(1.0)
    assert uni["ratio"][1][0] == pytest.approx(38.24 / 38.92)
    assert uni["pairs"] == 2 and uni["mean"] == pytest.approx((1 + 38.24 / 38.92) / 2)
    assert "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s) (ours / reference)" in printed
    assert (out / "p2p_bandwidth.txt").read_text() == printed
    # the command's own text reads back as the sample's output (the last engine's matrices)
    again = pm.parse_reference(printed.split("# against")[0])
    assert again["unidirectional"]["disabled"][0][1] == pytest.approx(38.24, abs=0.006)


def test_telemetry_p2p_reads_the_measurement(tmp_path, capsys):
    from telemetry.__main__ import main
    out = tmp_path / "p2p"
    assert pb.main(["--out", str(out), "--num-elems", str(N), "--engine", "ce"], backend=FakeCudaRuntime(n=2)) == 0
    capsys.readouterr()
    assert main(["p2p", str(out), "--reference", str(REF)]) == 0
    printed = capsys.readouterr().out
    assert "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D" in printed
    assert "P2P=Enabled Latency (P2P Writes) Matrix (us) [CPU]" in printed and "mean" in printed


@pytest.mark.parametrize("argv,backend,expected,code", [
    (["--num-elems", "0"], None, "--num-elems 0: allowed 1 to 2147483647", 2),
    (["--engine", "nvlink"], None, "argument --engine: invalid choice", 2),
    ([], FakeCudaRuntime(n=1), "needs 2 or more on this node; found 1", 2),
    (["--engine", "sm"], FakeCudaRuntime(n=2, triton=False), "--engine sm needs Triton", 2),
    (["--reference", "{ref_empty}"], FakeCudaRuntime(n=2), "no p2pBandwidthLatencyTest matrix in it", 2),
    (["--reference", "{missing}"], FakeCudaRuntime(n=2), "No such file or directory; allowed: a text file of "
     "p2pBandwidthLatencyTest's output", 2),
    ([], FakeCudaRuntime(n=2, fail_copy_after=3), "cudaMemcpyPeerAsync: cudaErrorIllegalAddress (700)", 1),
])
def test_errors_are_one_line(tmp_path, capsys, argv, backend, expected, code):
    (tmp_path / "empty.txt").write_text("nothing\n")
    argv = [a.format(ref_empty=tmp_path / "empty.txt", missing=tmp_path / "no.txt") for a in argv]
    try:
        rc = pb.main(["--out", str(tmp_path / "out"), "--num-elems", "64", *argv], backend=backend)
    except SystemExit as exc:  # argparse's mistakes: OneLineParser exits
        rc = exc.code
    assert rc == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err


def test_out_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert pb.main(["--out", str(tmp_path / "f")], backend=FakeCudaRuntime(n=2)) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_no_cuda_here_is_refused(tmp_path, capsys):
    assert pb.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs 2 or more on this node; torch sees none" in err[0]
    assert not (tmp_path / "out").exists()


def test_libcudart_found_where_torch_loaded_it(tmp_path):
    maps = ("7f0000000000-7f0000001000 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f1000000000-7f1000100000 r-xp 00000000 08:01 456 "
            "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12\n"
            "7f2000000000-7f2000001000 rw-p 00000000 00:00 0 \n")
    wheel = tmp_path / "cuda_runtime"
    (wheel / "lib").mkdir(parents=True)
    (wheel / "lib" / "libcudart.so.13").write_text("")
    found = cudart_candidates(maps, [str(wheel)])
    assert found[0] == "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
    assert found[1] == str(wheel / "lib" / "libcudart.so.13") and "libcudart.so" in found



@pytest.mark.integration
def test_the_copy_kernel_copies_under_tritons_interpreter():
    """The SM path's kernel run by Triton's CPU interpreter (TRITON_INTERPRET=1): a grid smaller than the
    buffer, so each program loops, and a length that is not a multiple of its block."""
    import os
    import subprocess
    import sys
    pytest.importorskip("triton")
    code = ("import torch\nfrom launch.cuda_peer import _copy_kernel\nn = 5 * 512 * 3 + 7\n"
            "src = torch.arange(n, dtype=torch.int32)\ndst = torch.zeros(n, dtype=torch.int32)\n"
            "_copy_kernel()[(3,)](dst, src, n, BLOCK=512, num_warps=4)\nassert torch.equal(src, dst)\nprint('ok')\n")
    repo = Path(__file__).parents[2]
    res = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(repo)})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
