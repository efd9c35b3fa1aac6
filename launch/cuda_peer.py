"""The CUDA parts launch.p2p_bandwidth drives, in one place: peer access and peer copies through the CUDA
runtime (ctypes on the libcudart torch loaded: torch exposes neither cudaMemcpyPeerAsync nor a way to turn
peer access off), streams and timing events from torch, and the SM copy kernel in Triton.

Why not torch's own cross-device `tensor.copy_`: ATen turns peer access on itself the first time two
devices copy (at::cuda::get_p2p_access, cached for the life of the process, never turned off), so a
"P2P=Disabled" matrix after it would not be one; and with peer access off it still copies (a
cudaMemcpyAsync device to device, which the driver stages through host memory) without saying so. The
sample's cudaMemcpyPeerAsync under explicit cudaDeviceEnablePeerAccess/DisablePeerAccess is what is
measured here, on buffers from cudaMalloc as the sample's (torch's allocator may map memory with the
virtual memory API, where cudaDeviceEnablePeerAccess grants nothing).

The interface (`TorchCuda`'s methods) is what tests/launch/fake_cuda.py's FakeCudaRuntime models.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import time

from telemetry.errors import HarnessError

# Errors the measurement handles by name (values from the CUDA runtime's cudaError_t)
PEER_ACCESS_UNSUPPORTED = "cudaErrorPeerAccessUnsupported"  # 217
PEER_ACCESS_ALREADY_ENABLED = "cudaErrorPeerAccessAlreadyEnabled"  # 704
PEER_ACCESS_NOT_ENABLED = "cudaErrorPeerAccessNotEnabled"  # 705

# The sample holds each stream with a spin kernel until every copy is queued, so the timed span holds the
# copies, not the host's enqueueing. torch.cuda._sleep spins a fixed number of clocks instead of waiting
# for a flag: 50M clocks (about 25 ms at 2 GHz) outlast 100 Triton launches from Python.
HOLD_CYCLES = 50_000_000


class CudaError(HarnessError):
    """A CUDA runtime call that did not return cudaSuccess: `name` is cudaGetErrorName's."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call}: {name} ({code})")
        self.call, self.code, self.name = call, code, name


def cudart_candidates(maps_text: str, package_dirs: list[str]) -> list[str]:
    """Where libcudart may be, best first: the copy already mapped into this process (torch's, after CUDA
    started; /proc/self/maps), then the nvidia-cuda-runtime wheel's, then the loader's own search."""
    seen = []
    for line in maps_text.splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "/libcudart.so" in path and path not in seen:
            seen.append(path)
    for d in package_dirs:
        seen += sorted(p for p in glob.glob(os.path.join(d, "lib", "libcudart.so*")) if p not in seen)
    found = ctypes.util.find_library("cudart")
    return seen + [n for n in (found, "libcudart.so.13", "libcudart.so.12", "libcudart.so") if n and n not in seen]


def load_cudart() -> ctypes.CDLL:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        maps = ""
    dirs = []
    try:
        import nvidia.cuda_runtime as ncr  # the wheel torch depends on in pip installs
        dirs = list(ncr.__path__)
    except ImportError:
        pass
    tried = cudart_candidates(maps, dirs)
    for path in tried:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise OSError(f"no CUDA runtime library (libcudart) could be loaded; tried {', '.join(tried)}")


class CudaRuntime:
    """The runtime calls torch does not expose, each checked: a failure raises CudaError by name."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        lib.cudaMemcpyPeerAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_size_t, ctypes.c_void_p]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]

    def _check(self, call: str, rc: int) -> None:
        if rc != 0:
            raise CudaError(call, rc, self.lib.cudaGetErrorName(rc).decode())

    def set_device(self, d: int) -> None:
        self._check("cudaSetDevice", self.lib.cudaSetDevice(d))

    def can_access_peer(self, d: int, peer: int) -> bool:
        v = ctypes.c_int(0)
        self._check("cudaDeviceCanAccessPeer", self.lib.cudaDeviceCanAccessPeer(ctypes.byref(v), d, peer))
        return bool(v.value)

    def enable_peer_access(self, d: int, peer: int) -> None:
        self.set_device(d)
        self._check("cudaDeviceEnablePeerAccess", self.lib.cudaDeviceEnablePeerAccess(peer, 0))

    def disable_peer_access(self, d: int, peer: int) -> None:
        self.set_device(d)
        self._check("cudaDeviceDisablePeerAccess", self.lib.cudaDeviceDisablePeerAccess(peer))

    def clear_error(self) -> None:
        """cudaGetLastError: a refused peer call leaves its error behind, and torch's next kernel-launch
        check would report it as its own."""
        self.lib.cudaGetLastError()

    def malloc(self, d: int, nbytes: int) -> int:
        self.set_device(d)
        p = ctypes.c_void_p()
        self._check("cudaMalloc", self.lib.cudaMalloc(ctypes.byref(p), nbytes))
        self._check("cudaMemset", self.lib.cudaMemset(p, 0, nbytes))
        return p.value

    def free(self, d: int, ptr: int) -> None:
        self.set_device(d)
        self._check("cudaFree", self.lib.cudaFree(ptr))

    def memcpy_peer_async(self, dst: int, dst_dev: int, src: int, src_dev: int, nbytes: int, stream: int) -> None:
        self._check("cudaMemcpyPeerAsync", self.lib.cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, stream))


class Buffer:
    """A cudaMalloc'd buffer of int32 on one device; data_ptr and dtype are what Triton reads of an argument."""

    def __init__(self, device: int, nbytes: int, ptr: int, dtype):
        self.device, self.nbytes, self.ptr, self.dtype = device, nbytes, ptr, dtype

    def data_ptr(self) -> int:
        return self.ptr


_KERNEL = None


def _copy_kernel():
    """The sample's copyp2p in Triton: a grid-stride loop in which each thread moves 16 bytes (an int4) per
    step, 128 threads per program; loads from and stores to whichever device the pointers are on."""
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def copyp2p(dst, src, n, BLOCK: tl.constexpr):
            start = tl.program_id(0) * BLOCK
            step = tl.num_programs(0) * BLOCK
            for off in range(start, n, step):
                idx = tl.multiple_of(off, BLOCK) + tl.arange(0, BLOCK)  # aligned: 16-byte loads and stores
                mask = idx < n
                tl.store(dst + idx, tl.load(src + idx, mask=mask), mask=mask)

        _KERNEL = copyp2p
    return _KERNEL


class TorchCuda:
    """The real backend: torch streams and events, the runtime through ctypes, Triton's copy kernel."""

    def __init__(self):
        import torch
        self.torch = torch
        torch.cuda.init()
        self.rt = CudaRuntime(load_cudart())
        self._grids: dict[int, int] = {}

    def device_count(self) -> int:
        return self.torch.cuda.device_count()

    def has_kernel(self) -> bool:
        import importlib.util
        return importlib.util.find_spec("triton") is not None

    def device_info(self, d: int) -> dict:
        p = self.torch.cuda.get_device_properties(d)
        return {"index": d, "name": p.name, "pci_bus_id": getattr(p, "pci_bus_id", None),
                "pci_device_id": getattr(p, "pci_device_id", None), "pci_domain_id": getattr(p, "pci_domain_id", None),
                "sm_count": p.multi_processor_count}

    def set_device(self, d: int) -> None:
        self.rt.set_device(d)
        self.torch.cuda.set_device(d)

    def can_access_peer(self, d: int, peer: int) -> bool:
        return self.rt.can_access_peer(d, peer)

    def enable_peer_access(self, d: int, peer: int) -> None:
        self.rt.enable_peer_access(d, peer)

    def disable_peer_access(self, d: int, peer: int) -> None:
        self.rt.disable_peer_access(d, peer)

    def clear_error(self) -> None:
        self.rt.clear_error()

    def alloc(self, d: int, nbytes: int) -> Buffer:
        return Buffer(d, nbytes, self.rt.malloc(d, nbytes), self.torch.int32)

    def free(self, buf: Buffer) -> None:
        self.rt.free(buf.device, buf.ptr)

    def stream(self, d: int):
        return self.torch.cuda.Stream(device=d)  # torch's pool streams are non-blocking, as the sample's

    def event(self, d: int):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, event, stream) -> None:
        event.record(stream)

    def wait(self, stream, event) -> None:
        stream.wait_event(event)

    def sync(self, stream) -> None:
        stream.synchronize()

    def elapsed_ms(self, start, stop) -> float:
        return start.elapsed_time(stop)

    def hold(self, stream) -> None:
        with self.torch.cuda.device(stream.device), self.torch.cuda.stream(stream):
            self.torch.cuda._sleep(HOLD_CYCLES)

    def memcpy_peer(self, dst: Buffer, src: Buffer, nbytes: int, stream) -> None:
        self.rt.memcpy_peer_async(dst.ptr, dst.device, src.ptr, src.device, nbytes, stream.cuda_stream)

    def _grid(self, d: int) -> int:
        """A full device, as the sample's cudaOccupancyMaxPotentialBlockSize grid: 128-thread programs up to
        each SM's resident-thread limit."""
        if d not in self._grids:
            props = self.torch.cuda.get_device_properties(d)
            self._grids[d] = props.multi_processor_count * (getattr(props, "max_threads_per_multi_processor", 2048)
                                                            // 128)
        return self._grids[d]

    def copy_kernel(self, dst: Buffer, src: Buffer, nbytes: int, stream) -> None:
        d = stream.device.index
        with self.torch.cuda.device(d), self.torch.cuda.stream(stream):
            _copy_kernel()[(self._grid(d),)](dst, src, nbytes // 4, BLOCK=512, num_warps=4)

    def host_time(self) -> float:
        return time.perf_counter()
