"""GPU-to-GPU bandwidth and latency on one node, measured the way CUDA's p2pBandwidthLatencyTest measures
them, in one process over every ordered pair of GPUs:

    python -m launch.p2p_bandwidth --out DIR [--engine ce|sm|both] [--p2p-read] [--num-elems N]
                                   [--reference p2pBandwidthLatencyTest.txt]

For each pair, with peer access disabled and then enabled (cudaDeviceEnablePeerAccess both ways where
cudaDeviceCanAccessPeer allows it, disabled again after the pair):
- unidirectional bandwidth: 5 copies of N int32 (default 40,000,000: 160 MB) from the row's GPU to the
  column's (P2P writes; --p2p-read adds the reads matrix, the row's GPU pulling), on the row's stream;
- bidirectional bandwidth: the same both ways at once, one stream per GPU, timed from the first start to
  the last end; bytes of both directions over that time;
- latency: 100 copies of 16 bytes; GPU latency is the events' time / 100, CPU latency the host's time to
  queue one copy.
The diagonal is a copy within one GPU, counted as read plus write (x 2), as the sample counts it. Each
stream is held by a spin kernel until all its copies are queued, so the events time the copies, not the
enqueueing. Engines: `ce` copies with cudaMemcpyPeerAsync (the sample's default); `sm` with a copy kernel
(Triton; the sample's --sm_copy) where peer access is on, and like the sample falls back to
cudaMemcpyPeerAsync where it is off. Writes DIR/p2p_bandwidth.json and DIR/p2p_bandwidth.txt (the sample's
tables, titles and layout); with --reference, every matrix both have as ours / reference.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from datetime import datetime, timezone

from launch.cuda_peer import (PEER_ACCESS_ALREADY_ENABLED, PEER_ACCESS_NOT_ENABLED, CudaError)
from telemetry.analysis import p2p_matrix as pm
from telemetry.errors import OneLineParser, output_dir_problem, print_errors

ENGINES = {"ce": "copy engine (cudaMemcpyPeerAsync)", "sm": "SM copy kernel (the sample's --sm_copy)"}
NUM_ELEMS = 40_000_000  # the sample's default
REPEAT = 5  # copies per bandwidth cell, as the sample (more would outrun the spin that holds the stream)
LATENCY_REPEAT = 100
LATENCY_ELEMS = 4  # one int4: 16 bytes
MAX_ELEMS = 2**31 - 1  # the sample's element count is an int


class _Ctx:
    """Buffers, streams and events per device, made once for every matrix."""

    def __init__(self, rt, n: int, nbytes: int):
        self.n, self.nbytes = n, nbytes
        self.bufs = [rt.alloc(d, nbytes) for d in range(n)]
        self.d2d = [rt.alloc(d, nbytes) for d in range(n)]
        self.small = [rt.alloc(d, LATENCY_ELEMS * 4) for d in range(n)]
        self.small_d2d = [rt.alloc(d, LATENCY_ELEMS * 4) for d in range(n)]
        self.s0 = [rt.stream(d) for d in range(n)]
        self.s1 = [rt.stream(d) for d in range(n)]
        self.start = [rt.event(d) for d in range(n)]
        self.stop = [rt.event(d) for d in range(n)]
        self.mid = [rt.event(d) for d in range(n)]

    def free(self, rt) -> None:
        for b in self.bufs + self.d2d + self.small + self.small_d2d:
            rt.free(b)


def _enable(rt, d: int, peer: int, notes: set) -> None:
    try:
        rt.enable_peer_access(d, peer)
    except CudaError as exc:
        if exc.name != PEER_ACCESS_ALREADY_ENABLED:
            raise
        rt.clear_error()
        notes.add(f"peer access {d}->{peer} was already on when this pair started (another library turned "
                  "it on); measured as enabled")


def _disable(rt, d: int, peer: int, notes: set | None) -> None:
    """Off, whatever it was; `notes` given: say so when it had been on (P2P=Disabled must be off)."""
    try:
        rt.disable_peer_access(d, peer)
    except CudaError as exc:
        if exc.name != PEER_ACCESS_NOT_ENABLED:
            raise
        rt.clear_error()
        return
    if notes is not None:
        notes.add(f"peer access {d}->{peer} was on before a P2P=Disabled measurement; turned off for it")


def _open(rt, i: int, j: int, p2p: bool, notes: set) -> bool:
    """Peer access for the pair as the mode wants it; True when both ways are on. The sample asks
    cudaDeviceCanAccessPeer one way and enables both; here both ways are asked (a one-way pair is copied
    as one without access)."""
    if i == j:
        return False
    if not p2p:  # off, even where another library turned it on (a pair that cannot have it has it off)
        for a, b in ((i, j), (j, i)):
            if rt.can_access_peer(a, b):
                _disable(rt, a, b, notes)
        return False
    if not (rt.can_access_peer(i, j) and rt.can_access_peer(j, i)):
        return False
    _enable(rt, i, j, notes)
    _enable(rt, j, i, notes)
    return True


def _close(rt, i: int, j: int, access: bool) -> None:
    if access:
        _disable(rt, i, j, None)
        _disable(rt, j, i, None)


def _enqueue(rt, engine: str, access: bool, dst, src, nbytes: int, repeat: int, stream) -> str:
    kernel = engine == "sm" and access
    copy = rt.copy_kernel if kernel else rt.memcpy_peer
    for _ in range(repeat):
        copy(dst, src, nbytes, stream)
    return "sm" if kernel else "ce"


def _square(n: int) -> list[list]:
    return [[None] * n for _ in range(n)]


def _one_way(rt, ctx: _Ctx, i: int, j: int, access: bool, read: bool, engine: str, small: bool) -> tuple:
    """One timed span of copies between i and j on i's stream (row i writes to j, or pulls from j when
    `read`; the diagonal is a copy inside i): (path, GPU ms over the span, host seconds to queue it)."""
    bufs, d2d = (ctx.small, ctx.small_d2d) if small else (ctx.bufs, ctx.d2d)
    nb, repeat = (LATENCY_ELEMS * 4, LATENCY_REPEAT) if small else (ctx.nbytes, REPEAT)
    rt.set_device(i)
    s = ctx.s0[i]
    rt.sync(s)
    rt.hold(s)
    rt.record(ctx.start[i], s)
    t0 = rt.host_time()
    if i == j:
        path = _enqueue(rt, "ce", False, bufs[i], d2d[i], nb, repeat, s)
    elif read:
        path = _enqueue(rt, engine, access, bufs[i], bufs[j], nb, repeat, s)
    else:
        path = _enqueue(rt, engine, access, bufs[j], bufs[i], nb, repeat, s)
    host_s = rt.host_time() - t0
    rt.record(ctx.stop[i], s)
    rt.sync(s)
    return path, rt.elapsed_ms(ctx.start[i], ctx.stop[i]), host_s


def unidirectional(rt, ctx: _Ctx, p2p: bool, read: bool, engine: str, notes: set) -> tuple[list, list]:
    """GB/s from the row's GPU to the column's (writes) or pulled by the row's GPU (reads); the paths used."""
    n = ctx.n
    bw, paths = _square(n), _square(n)
    for i in range(n):
        for j in range(n):
            access = _open(rt, i, j, p2p, notes)
            path, ms, _ = _one_way(rt, ctx, i, j, access, read, engine, small=False)
            gb = ctx.nbytes * REPEAT / 1e9 * (2 if i == j else 1)
            bw[i][j], paths[i][j] = gb / (ms / 1e3), path
            _close(rt, i, j, access)
    return bw, paths


def bidirectional(rt, ctx: _Ctx, p2p: bool, engine: str, notes: set) -> tuple[list, list]:
    """GB/s of both directions at once: i->j on i's stream, j->i on j's, the second stream started by the
    first's start event and the first's stop waiting for the second, so one span covers both."""
    n, nb = ctx.n, ctx.nbytes
    bw, paths = _square(n), _square(n)
    for i in range(n):
        for j in range(n):
            access = _open(rt, i, j, p2p, notes)
            rt.set_device(i)
            s0, s1 = ctx.s0[i], ctx.s1[j]
            rt.sync(s0)
            rt.sync(s1)
            rt.hold(s0)
            rt.record(ctx.start[i], s0)
            rt.wait(s1, ctx.start[i])
            if i == j:
                path = _enqueue(rt, "ce", False, ctx.bufs[i], ctx.d2d[i], nb, REPEAT, s0)
                _enqueue(rt, "ce", False, ctx.d2d[i], ctx.bufs[i], nb, REPEAT, s1)
            else:
                kernel = access and engine == "sm"
                if kernel:
                    rt.set_device(j)  # a kernel runs on its stream's device
                path = _enqueue(rt, engine, access, ctx.bufs[i], ctx.bufs[j], nb, REPEAT, s1)
                if kernel:
                    rt.set_device(i)
                _enqueue(rt, engine, access, ctx.bufs[j], ctx.bufs[i], nb, REPEAT, s0)
            rt.record(ctx.mid[j], s1)
            rt.wait(s0, ctx.mid[j])
            rt.record(ctx.stop[i], s0)
            rt.sync(s0)
            rt.sync(s1)
            seconds = rt.elapsed_ms(ctx.start[i], ctx.stop[i]) / 1e3
            gb = 2 * nb * REPEAT / 1e9 * (2 if i == j else 1)
            bw[i][j], paths[i][j] = gb / seconds, path
            _close(rt, i, j, access)
    return bw, paths


def latency(rt, ctx: _Ctx, p2p: bool, read: bool, engine: str, notes: set) -> tuple[list, list, list]:
    """us per 16-byte copy: on the GPU (events over 100 copies) and on the host (time to queue one)."""
    n = ctx.n
    gpu, cpu, paths = _square(n), _square(n), _square(n)
    for i in range(n):
        for j in range(n):
            access = _open(rt, i, j, p2p, notes)
            path, ms, host_s = _one_way(rt, ctx, i, j, access, read, engine, small=True)
            gpu[i][j] = ms * 1e3 / LATENCY_REPEAT
            cpu[i][j] = host_s * 1e6 / LATENCY_REPEAT
            paths[i][j] = path
            _close(rt, i, j, access)
    return gpu, cpu, paths


def measure(rt, engines: list[str], num_elems: int = NUM_ELEMS, p2p_read: bool = False) -> dict:
    """Every matrix the sample prints, per engine, on every GPU `rt` sees."""
    n = rt.device_count()
    notes: set = set()
    conn = [[1 if i == j else int(rt.can_access_peer(i, j)) for j in range(n)] for i in range(n)]
    ctx = _Ctx(rt, n, num_elems * 4)
    out = {}
    try:
        for engine in engines:
            if engine == "sm":  # compile and load the kernel on every GPU before anything is timed
                for d in range(n):
                    rt.set_device(d)
                    rt.copy_kernel(ctx.small_d2d[d], ctx.small[d], LATENCY_ELEMS * 4, ctx.s0[d])
                    rt.sync(ctx.s0[d])
            m: dict = {"unidirectional": {}, "bidirectional": {}, "latency_gpu": {}, "latency_cpu": {}}
            paths: dict = {"unidirectional": {}, "bidirectional": {}, "latency": {}}
            modes = [("disabled", False, False), ("enabled", True, False)] + ([("enabled_reads", True, True)]
                                                                            if p2p_read else [])
            for state, p2p, read in modes:
                m["unidirectional"][state], paths["unidirectional"][state] = unidirectional(rt, ctx, p2p, read,
                                                                                            engine, notes)
            for state, p2p in (("disabled", False), ("enabled", True)):
                m["bidirectional"][state], paths["bidirectional"][state] = bidirectional(rt, ctx, p2p, engine, notes)
            for state, p2p, read in modes:
                (m["latency_gpu"][state], m["latency_cpu"][state],
                 paths["latency"][state]) = latency(rt, ctx, p2p, read, engine, notes)
            out[engine] = {"engine": ENGINES[engine], "matrices": m, "paths": paths}
    finally:
        ctx.free(rt)
    return {"tool": "launch.p2p_bandwidth", "equivalent_of": "CUDA samples p2pBandwidthLatencyTest",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": socket.gethostname(),
            "devices": [rt.device_info(d) for d in range(n)], "connectivity": conn,
            "num_elems": num_elems, "bytes": num_elems * 4, "repeat": REPEAT, "latency_repeat": LATENCY_REPEAT,
            "latency_bytes": LATENCY_ELEMS * 4, "p2p_read": p2p_read, "engines": out, "notes": sorted(notes)}


def _hex(v) -> str:
    return f"{v:x}" if isinstance(v, int) else "?"


def render(result: dict) -> str:
    """The result as the sample prints it: devices, connectivity, then each engine's matrices."""
    lines = [f"Device: {d['index']}, {d['name']}, pciBusID: {_hex(d.get('pci_bus_id'))}, pciDeviceID: "
             f"{_hex(d.get('pci_device_id'))}, pciDomainID:{_hex(d.get('pci_domain_id'))}" for d in result["devices"]]
    lines.append(pm.render_matrices({}, result["connectivity"]))
    for name, e in result["engines"].items():
        lines += [f"# engine {name}: {e['engine']}", pm.render_matrices(e["matrices"])]
    lines += [f"# note: {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]):
    p = OneLineParser(prog="python -m launch.p2p_bandwidth",
                      description="GPU pair bandwidth and latency as CUDA's p2pBandwidthLatencyTest measures them "
                      "(unidirectional, bidirectional, latency; P2P disabled and enabled; copy engine and SM copy "
                      "kernel), in its table layout, with ratios against its output from a reference system")
    p.add_argument("--out", required=True, help="directory for p2p_bandwidth.json and p2p_bandwidth.txt")
    p.add_argument("--engine", choices=["ce", "sm", "both"], default="both",
                   help="ce: cudaMemcpyPeerAsync (the sample's default); sm: a copy kernel (its --sm_copy); "
                   "both (default)")
    p.add_argument("--p2p-read", action="store_true", help="also the P2P reads matrices (the sample's --p2p_read)")
    p.add_argument("--num-elems", type=int, default=NUM_ELEMS,
                   help=f"int32 elements per bandwidth copy (the sample's --numElems; default {NUM_ELEMS:,})")
    p.add_argument("--reference", default=None, help="p2pBandwidthLatencyTest's output from a reference system")
    return p.parse_args(argv)


def _reference(path: str) -> dict:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            ref = pm.parse_reference(f.read())
    except OSError as exc:
        raise ValueError(f"--reference {path}: {exc.strerror or exc}; allowed: a text file of "
                         "p2pBandwidthLatencyTest's output") from None
    if not any(k in ref for k in ("unidirectional", "bidirectional", "latency_gpu")):
        raise ValueError(f"--reference {path}: no p2pBandwidthLatencyTest matrix in it; allowed: the sample's "
                         "output (a text file)")
    return ref


def _backend():
    """The real backend, or the one line why this node cannot run it."""
    import torch
    if not torch.cuda.is_available():
        raise ValueError("launch.p2p_bandwidth measures pairs of CUDA GPUs and needs 2 or more on this node; torch "
                         f"sees none (torch {torch.__version__}, torch.cuda.is_available() is False)")
    n = torch.cuda.device_count()
    if n < 2:
        raise ValueError(f"launch.p2p_bandwidth measures pairs of GPUs and needs 2 or more on this node; found 1 "
                         f"({torch.cuda.get_device_name(0)}); allowed: a node with 2+ GPUs (CUDA_VISIBLE_DEVICES)")
    from launch.cuda_peer import TorchCuda
    try:
        return TorchCuda()
    except OSError as exc:
        raise ValueError(str(exc)) from None


def main(argv: list[str] | None = None, backend=None) -> int:
    """`backend`: what measures (tests pass tests/launch/fake_cuda.py's FakeCudaRuntime); default the GPUs."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problems = [output_dir_problem(args.out, "--out")]
    if not 1 <= args.num_elems <= MAX_ELEMS:
        problems.append(f"--num-elems {args.num_elems}: allowed 1 to {MAX_ELEMS} (int32 elements per copy)")
    if any(problems):
        return print_errors(*[p for p in problems if p])
    engines = ["ce", "sm"] if args.engine == "both" else [args.engine]
    try:
        ref = _reference(args.reference) if args.reference else None
        rt = backend or _backend()
        if rt.device_count() < 2:
            raise ValueError(f"launch.p2p_bandwidth measures pairs of GPUs and needs 2 or more on this node; "
                             f"found {rt.device_count()}")
        if "sm" in engines and not getattr(rt, "has_kernel", lambda: True)():
            raise ValueError("--engine sm needs Triton (CUDA builds of torch ship it); allowed: --engine ce")
    except ValueError as exc:
        return print_errors(exc)
    try:
        result = measure(rt, engines, args.num_elems, args.p2p_read)
    except CudaError as exc:
        print_errors(f"launch.p2p_bandwidth: {exc}")
        return 1
    text = render(result)
    if ref is not None:
        engine = engines[0]  # the sample's default is the copy engine; --engine sm compares the kernel path
        ratios = pm.ratio_matrices(result["engines"][engine]["matrices"], ref)
        result["reference"] = {"file": os.path.abspath(args.reference), "engine": engine, "ratios": ratios}
        text += (f"\n# against {args.reference} (engine {engine}), ours / reference\n"
                 + pm.text_table(pm.RATIO_HEADER, pm.ratio_rows(ratios)) + "\n\n" + pm.ratio_tables(ratios) + "\n")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, pm.BANDWIDTH_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "p2p_bandwidth.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
