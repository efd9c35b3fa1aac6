"""Which RDMA ports' byte counters belong to the job: the ones NCCL uses, not every HCA in the host.

A GPU server often holds RDMA cards NCCL never touches (a storage or management HCA, a DPU's ports, a
card whose port is down); summing their counters credits the job with storage traffic. NCCL says which
devices it uses in its own log (`NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ...`), after applying
NCCL_IB_HCA; before that log exists (the first communicator is built in step 1), NCCL_IB_HCA is read
with NCCL's own rules (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca):

- a comma-separated list of `device[:port]` entries; a plain name matches as a prefix (`mlx5` takes
  mlx5_0, mlx5_1, ...), a leading `=` makes every entry an exact name, a leading `^` excludes the
  entries instead (`^=mlx5_4` excludes exactly mlx5_4); no port takes every port of the device.

NCCL also skips ports that are not ACTIVE, and so does this selection.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class HcaFilter:
    """NCCL_IB_HCA parsed: entries (device, port or None), exact names or prefixes, include or exclude."""
    entries: tuple[tuple[str, int | None], ...]
    exact: bool = False
    exclude: bool = False
    text: str = ""

    def matches(self, device: str, port: int) -> bool:
        """Whether NCCL would use (device, port) under this filter."""
        hit = any((device == name if self.exact else device.startswith(name)) and (want is None or want == port)
                  for name, want in self.entries)
        return not hit if self.exclude else hit


def parse_ib_hca(value: str | None) -> HcaFilter | None:
    """NCCL_IB_HCA's value as NCCL reads it; None when unset or empty (NCCL uses every active port)."""
    text = (value or "").strip()
    if not text:
        return None
    rest, exclude, exact = text, False, False
    if rest.startswith("^"):
        exclude, rest = True, rest[1:]
    if rest.startswith("="):
        exact, rest = True, rest[1:]
    entries = []
    for item in rest.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, port = item.partition(":")
        entries.append((name, int(port) if port.isdigit() else None))
    return HcaFilter(tuple(entries), exact, exclude, text)


@dataclass
class Selection:
    counted: list[tuple[str, int]] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)  # {"device", "port", "reason"}
    basis: str = ""

    def to_dict(self) -> dict:
        return {"counted": [f"{d}:{p}" for d, p in self.counted], "excluded": self.excluded, "basis": self.basis}


def select(ports: list[dict], nccl_devices: list[dict] | None = None, ib_hca: str | None = None) -> Selection:
    """Split the host's RDMA ports (counters.list_hcas rows) into those counted and those excluded, each
    excluded one with its reason. `nccl_devices`: the device list from this host's NCCL log
    (nccl_log's ib_devices: device, port); it decides when present. Else NCCL_IB_HCA, else every port."""
    out = Selection()
    flt = parse_ib_hca(ib_hca)
    used = {(d["device"], int(d["port"])) for d in nccl_devices or []}
    if used:
        out.basis = "the devices NCCL's log lists as in use (NET/IB : Using ...)"
    elif flt is not None:
        out.basis = f"NCCL_IB_HCA={flt.text} as NCCL reads it (NCCL's log not read yet or without a device list)"
    else:
        out.basis = "every active RDMA port: no NCCL device list in the log and NCCL_IB_HCA unset"
    for p in ports:
        dev, port, state = p["device"], int(p["port"]), p.get("state") or ""
        if used:
            reason = None if (dev, port) in used else "not in NCCL's device list"
        elif flt is not None and not flt.matches(dev, port):
            reason = f"not selected by NCCL_IB_HCA={flt.text}"
        elif state and "ACTIVE" not in state.upper():
            reason = f"port state {state} (NCCL uses ACTIVE ports only)"
        else:
            reason = None
        if reason is None:
            out.counted.append((dev, port))
        else:
            out.excluded.append({"device": dev, "port": port, "reason": reason})
    return out
