"""FakeCudaRuntime: a fake of the CUDA surface launch.p2p_bandwidth drives (launch/cuda_peer.py's
TorchCuda), for tests on CPU. It models what the real runtime does that the measurement depends on:

- peer access is per direction and refused as the runtime refuses it: a pair without the capability
  raises cudaErrorPeerAccessUnsupported, a second enable cudaErrorPeerAccessAlreadyEnabled, disabling
  what is off cudaErrorPeerAccessNotEnabled; each leaves its error behind until cudaGetLastError
  (`clear_error`), and a kernel launched meanwhile reports it (torch checks cudaGetLastError after its
  launches), so a measurement that forgets to clear fails here as it would there;
- a kernel launched on a stream of a device that is not current fails (the runtime's rule for kernels,
  not for copies); a copy kernel touching another GPU's memory without peer access from its own device
  faults (cudaErrorIllegalAddress);
- copies are asynchronous: each stream keeps its own clock, a copy adds its time to its stream, events
  take the stream's clock, a stream waiting on an event moves to it; an idle stream's work starts no
  earlier than the latest synchronize (the GPU's "now"); so two streams run at once and a span is what
  the events say. A copy's time is a fixed latency plus bytes / rate: the link's rate where
  peer access is on either way, the host-staged rate where it is off, the device's own for a copy within
  it; the host clock moves by a fixed cost per call queued.
Not modelled: contention (two copies on one link or device memory take no longer together).
"""
from __future__ import annotations

from launch.cuda_peer import CudaError

CODES = {"cudaErrorInvalidDevice": 101, "cudaErrorInvalidResourceHandle": 400,
         "cudaErrorPeerAccessUnsupported": 217, "cudaErrorIllegalAddress": 700,
         "cudaErrorPeerAccessAlreadyEnabled": 704, "cudaErrorPeerAccessNotEnabled": 705}


class FakeBuffer:
    def __init__(self, device: int, nbytes: int):
        self.device, self.nbytes, self.freed = device, nbytes, False


class FakeStream:
    def __init__(self, device: int):
        self.device, self.t = device, 0.0


class FakeEvent:
    def __init__(self):
        self.device, self.t = None, None


class FakeCudaRuntime:
    """n GPUs; `peer`: the ordered pairs cudaDeviceCanAccessPeer allows (default all); `link_GBps`: a rate
    for every pair or {(src, dst): rate}; `already_on`: peer access some other library turned on before."""

    def __init__(self, n: int = 2, peer: set | None = None, link_GBps: float | dict = 50.0,
                 staged_GBps: float = 10.0, local_GBps: float = 1000.0, kernel_GBps: float = 40.0,
                 copy_us: float = 2.0, staged_us: float = 10.0, enqueue_us: float = 3.0, launch_us: float = 5.0,
                 hold_s: float = 0.025, already_on: set | None = None, triton: bool = True,
                 fail_copy_after: int | None = None):
        self.n = n
        self.peer = {(i, j) for i in range(n) for j in range(n) if i != j} if peer is None else set(peer)
        self.link, self.staged, self.local, self.kernel = link_GBps, staged_GBps, local_GBps, kernel_GBps
        self.copy_us, self.staged_us, self.enqueue_us, self.launch_us, self.hold_s = (copy_us, staged_us,
                                                                                     enqueue_us, launch_us, hold_s)
        self.enabled = set(already_on or ())
        self.last_error: str | None = None
        self.current = 0
        self.host = 0.0
        self.now = 0.0  # GPU time as far as the host has synchronized
        self.triton = triton
        self.buffers: list[FakeBuffer] = []
        self.copies = {"ce": 0, "sm": 0}
        self.fail_copy_after = fail_copy_after

    # --- errors, as the runtime reports them
    def _fail(self, call: str, name: str):
        self.last_error = name
        raise CudaError(call, CODES[name], name)

    def _launch_check(self, what: str):
        if self.last_error:
            raise CudaError(f"{what} (cudaGetLastError after the launch)", CODES[self.last_error], self.last_error)

    def clear_error(self) -> None:
        self.last_error = None

    # --- devices and peer access
    def device_count(self) -> int:
        return self.n

    def has_kernel(self) -> bool:
        return self.triton

    def device_info(self, d: int) -> dict:
        return {"index": d, "name": "Fake GPU", "pci_bus_id": 0x10 + d, "pci_device_id": 0, "pci_domain_id": 0,
                "sm_count": 132}

    def set_device(self, d: int) -> None:
        if not 0 <= d < self.n:
            self._fail("cudaSetDevice", "cudaErrorInvalidDevice")
        self.current = d

    def can_access_peer(self, d: int, peer: int) -> bool:
        return d != peer and (d, peer) in self.peer

    def enable_peer_access(self, d: int, peer: int) -> None:
        self.set_device(d)
        if not self.can_access_peer(d, peer):
            self._fail("cudaDeviceEnablePeerAccess", "cudaErrorPeerAccessUnsupported")
        if (d, peer) in self.enabled:
            self._fail("cudaDeviceEnablePeerAccess", "cudaErrorPeerAccessAlreadyEnabled")
        self.enabled.add((d, peer))

    def disable_peer_access(self, d: int, peer: int) -> None:
        self.set_device(d)
        if (d, peer) not in self.enabled:
            self._fail("cudaDeviceDisablePeerAccess", "cudaErrorPeerAccessNotEnabled")
        self.enabled.discard((d, peer))

    # --- memory, streams, events
    def alloc(self, d: int, nbytes: int) -> FakeBuffer:
        b = FakeBuffer(d, nbytes)
        self.buffers.append(b)
        return b

    def free(self, buf: FakeBuffer) -> None:
        buf.freed = True

    def stream(self, d: int) -> FakeStream:
        return FakeStream(d)

    def event(self, d: int) -> FakeEvent:
        return FakeEvent()

    def _begin(self, stream: FakeStream) -> None:
        stream.t = max(stream.t, self.now)

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        self._begin(stream)
        if event.device is not None and event.device != stream.device:  # torch: an event keeps its first device
            raise RuntimeError("Event device does not match recording stream's device")
        event.device, event.t = stream.device, stream.t

    def wait(self, stream: FakeStream, event: FakeEvent) -> None:
        self._begin(stream)
        stream.t = max(stream.t, event.t)

    def sync(self, stream: FakeStream) -> None:
        self.now = max(self.now, stream.t)

    def elapsed_ms(self, start: FakeEvent, stop: FakeEvent) -> float:
        assert start.device == stop.device, "cudaEventElapsedTime takes two events of one device"
        return (stop.t - start.t) * 1e3

    def host_time(self) -> float:
        return self.host

    # --- work on streams
    def hold(self, stream: FakeStream) -> None:
        self._launch_check("torch.cuda._sleep")
        if stream.device != self.current:
            self._fail("kernel launch", "cudaErrorInvalidResourceHandle")
        self.host += self.launch_us * 1e-6
        self._begin(stream)
        stream.t += self.hold_s

    def _rate(self, src: int, dst: int) -> float:
        return self.link[(src, dst)] if isinstance(self.link, dict) else self.link

    def memcpy_peer(self, dst: FakeBuffer, src: FakeBuffer, nbytes: int, stream: FakeStream) -> None:
        self._count("ce")
        self.host += self.enqueue_us * 1e-6
        if dst.device == src.device:
            seconds = self.copy_us * 1e-6 + nbytes / (self.local * 1e9)
        elif (src.device, dst.device) in self.enabled or (dst.device, src.device) in self.enabled:
            seconds = self.copy_us * 1e-6 + nbytes / (self._rate(src.device, dst.device) * 1e9)
        else:  # through host memory
            seconds = self.staged_us * 1e-6 + nbytes / (self.staged * 1e9)
        self._begin(stream)
        stream.t += seconds

    def copy_kernel(self, dst: FakeBuffer, src: FakeBuffer, nbytes: int, stream: FakeStream) -> None:
        self._launch_check("copy kernel")
        if stream.device != self.current:
            self._fail("kernel launch", "cudaErrorInvalidResourceHandle")
        for b in (dst, src):
            if b.device != stream.device and (stream.device, b.device) not in self.enabled:
                self._fail("copy kernel", "cudaErrorIllegalAddress")
        self._count("sm")
        self.host += self.launch_us * 1e-6
        self._begin(stream)
        stream.t += self.copy_us * 1e-6 + nbytes / (self.kernel * 1e9)

    def _count(self, path: str) -> None:
        self.copies[path] += 1
        if self.fail_copy_after is not None and sum(self.copies.values()) > self.fail_copy_after:
            self._fail("cudaMemcpyPeerAsync", "cudaErrorIllegalAddress")
