"""What a host is: the inventory every published fabric evaluation prints (docs/evidence.md).

GPU model, driver, VBIOS and bus id (nvidia-smi), NICs with driver and firmware (ethtool -i, and
/sys/class/infiniband/*/fw_ver), MLNX_OFED (`ofed_info -s`) or the distribution's rdma-core, OS release,
kernel, CPU model, the container image (NGC containers say which release they are in their environment),
and the GPU-to-NIC topology (`nvidia-smi topo -m`). Collected once per host, on its first rank, at
start-up. Every value that cannot be read is null, and `reasons` says why.
"""
from __future__ import annotations

import csv
import io
import os
import platform
import re
import subprocess

from telemetry.capture import host_hardware, nic_qos
from telemetry.capture.host_tool import run_tool
GPU_QUERY = "name,driver_version,vbios_version,pci.bus_id,uuid"
# NGC containers' own release variables: (variable, image it implies or None)
NGC_RELEASES = (("NVIDIA_PYTORCH_VERSION", "nvcr.io/nvidia/pytorch:{}-py3"),
                ("NVIDIA_NEMO_VERSION", "nvcr.io/nvidia/nemo:{}"),
                ("NVIDIA_TENSORFLOW_VERSION", "nvcr.io/nvidia/tensorflow:{}-tf2-py3"),
                ("CUDA_VERSION", None), ("NVIDIA_BUILD_ID", None))




def parse_gpu_query(text: str) -> list[dict]:
    """nvidia-smi --query-gpu=name,driver_version,vbios_version,pci.bus_id,uuid --format=csv,noheader."""
    keys = ("name", "driver_version", "vbios_version", "pci_bus_id", "uuid")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    return [dict(zip(keys, (c.strip() for c in r))) for r in rows]


# the matrix's trailing columns; their headers are several words, their cells one token each
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_PATH_ORDER = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def parse_topology(text: str) -> dict:
    """nvidia-smi topo -m: the matrix, the NIC legend (NIC0 -> mlx5_0) and, for each GPU, its closest NICs
    by device name (PIX nearest, then PXB, PHB, NODE, SYS).

    Every cell is one token (X, NV12, PXB, 0-31,64-95, N/A), so rows are split on any whitespace: a full
    column leaves a single space before the next (a DGX A100's "112-127,240-255 7"). Drivers before the NIC
    legend (495 and older) name the NIC columns after the device (mlx5_0) instead of NIC0."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the header is underlined with ANSI escapes on a terminal
    lines = text.splitlines()
    legend = {}
    for line in lines:
        m = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
    # the header is the one indented line naming GPU0; the matrix rows start at the margin
    header = next((ln for ln in lines if re.search(r"\bGPU0\b", ln) and ln[:1] in (" ", "\t")), None)
    if header is None:
        return {"matrix": {}, "nic_legend": legend, "gpu_nic": {}}
    for name in _AFFINITY:  # one token while splitting, then the name again
        header = header.replace(name, name.replace(" ", "\x00"))
    cols = [c.replace("\x00", " ") for c in header.split()]
    devices = {c for c in cols if c not in _AFFINITY}  # GPUn, NICn or a device name such as mlx5_0
    matrix = {}
    for line in lines:
        cells = line.split()
        if line[:1] not in (" ", "\t") and len(cells) > 1 and cells[0] in devices:
            matrix[cells[0]] = dict(zip(cols, cells[1:]))
    gpu_nic = {}
    for gpu, row in matrix.items():
        if not re.fullmatch(r"GPU\d+", gpu):
            continue
        links = {legend.get(c, c): v for c, v in row.items() if c in devices and not re.fullmatch(r"GPU\d+", c)}
        if links:
            best = min(_PATH_ORDER.get(v, 9) for v in links.values())
            gpu_nic[gpu] = {"closest": sorted(n for n, v in links.items() if _PATH_ORDER.get(v, 9) == best),
                            "path": next((v for v in links.values() if _PATH_ORDER.get(v, 9) == best), None),
                            "cpu_affinity": row.get("CPU Affinity"), "numa_affinity": row.get("NUMA Affinity")}
    return {"matrix": matrix, "nic_legend": legend, "gpu_nic": gpu_nic}


def parse_ethtool_i(text: str) -> dict:
    """ethtool -i: driver, version, firmware-version, bus-info."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip() or None
    return {"driver": out.get("driver"), "driver_version": out.get("version"),
            "firmware": out.get("firmware-version"), "bus_info": out.get("bus-info")}


def parse_os_release(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_model(root: str = "/") -> str | None:
    text = _read(os.path.join(root, "proc", "cpuinfo")) or ""
    for key in ("model name", "Model Name", "cpu model"):  # x86; some Arm kernels; others
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    return None


def collect(root: str = "/", run=subprocess.run, env: dict | None = None, interfaces: list[str] | None = None,
            cuda_runtime: str | None = None) -> dict:
    """This host's inventory. `root` and `run` let tests point at a fake tree and fake tools."""
    env = os.environ if env is None else env
    reasons: dict[str, str] = {}
    inv: dict = {}

    out, why = run_tool(run, "nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader")
    inv["gpus"] = parse_gpu_query(out) if out else None
    if why:
        reasons["gpus"] = why
    inv["gpu_model"] = inv["gpus"][0]["name"] if inv["gpus"] else None
    inv["gpu_driver"] = inv["gpus"][0]["driver_version"] if inv["gpus"] else None
    for k in ("gpu_model", "gpu_driver"):
        if inv[k] is None:
            reasons[k] = reasons.get("gpus", "nvidia-smi listed no GPU")
    inv["cuda_runtime"] = cuda_runtime
    if cuda_runtime is None:
        reasons["cuda_runtime"] = "this torch build has no CUDA"
    topo, why = run_tool(run, "nvidia-smi", "topo", "-m") if inv["gpus"] else (None, reasons.get("gpus", "no GPU"))
    inv["topology"] = parse_topology(topo) if topo else None
    if inv["topology"] is None:
        reasons["topology"] = why or "nvidia-smi topo -m printed nothing"

    inv["nics"] = _nics(root, run, interfaces, reasons)

    ofed, why = run_tool(run, "ofed_info", "-s")
    inv["ofed"] = ofed.strip().rstrip(":") if ofed and ofed.strip() else None
    if inv["ofed"] is None:
        reasons["ofed"] = why or "ofed_info printed nothing"
    inv["rdma_core"] = _rdma_core(run)
    if inv["rdma_core"] is None:
        reasons["rdma_core"] = "no rdma-core package found (dpkg-query, rpm)"

    osr = parse_os_release(_read(os.path.join(root, "etc", "os-release")) or "")
    inv["os"] = osr.get("PRETTY_NAME")
    if inv["os"] is None:
        reasons["os"] = "no /etc/os-release"
    inv["kernel"] = platform.release() if root == "/" else (_read(os.path.join(root, "proc", "sys", "kernel",
                                                                               "osrelease")) or "").strip() or None
    if inv["kernel"] is None:
        reasons["kernel"] = "no kernel release"
    inv["cpu_model"] = cpu_model(root)
    if inv["cpu_model"] is None:
        reasons["cpu_model"] = "no model name in /proc/cpuinfo"
    inv["cpu_count"] = os.cpu_count()
    inv["container"] = _container(root, env, reasons)
    hardware, why = host_hardware.collect(root, run, inv["gpus"], inv["nics"])  # DMI, memory, PCIe, optics
    inv.update(hardware)
    reasons.update(why)
    inv["reasons"] = reasons
    return inv


def _nics(root: str, run, interfaces: list[str] | None, reasons: dict) -> list[dict] | None:
    net = os.path.join(root, "sys", "class", "net")
    names = sorted(os.listdir(net)) if os.path.isdir(net) else []
    # physical NICs have a device link; with `interfaces` given, those too (the ones the job uses)
    names = [n for n in names if os.path.exists(os.path.join(net, n, "device")) or n in (interfaces or [])]
    ib = os.path.join(root, "sys", "class", "infiniband")
    by_netdev = {}
    for dev in sorted(os.listdir(ib)) if os.path.isdir(ib) else []:
        ndir = os.path.join(ib, dev, "device", "net")
        for n in sorted(os.listdir(ndir)) if os.path.isdir(ndir) else []:
            by_netdev[n] = dev
    rdma_only = [d for d in (sorted(os.listdir(ib)) if os.path.isdir(ib) else []) if d not in by_netdev.values()]
    out = []
    for name in names:
        info, why = run_tool(run, "ethtool", "-i", name)
        nic = {"interface": name, **(parse_ethtool_i(info) if info else
                                     {"driver": None, "driver_version": None, "firmware": None, "bus_info": None})}
        if why:
            nic["reason"] = why
        dev = by_netdev.get(name)
        if dev:
            nic.update(_rdma(ib, dev))
        nic["qos"] = nic_qos.collect(name, os.path.join(root, "sys"), run)  # FEC, PFC, ECN, speed
        out.append(nic)
    for dev in rdma_only:  # an InfiniBand HCA whose netdev (IPoIB) is absent
        out.append({"interface": None, "driver": None, "driver_version": None, "firmware": None, "bus_info": None,
                    **_rdma(ib, dev)})
    if not out:
        reasons["nics"] = "no physical network interface in /sys/class/net"
        return None
    return out


def _rdma(ib: str, dev: str) -> dict:
    def attr(name):
        return (_read(os.path.join(ib, dev, name)) or "").strip() or None
    return {"rdma_device": dev, "rdma_fw_ver": attr("fw_ver"), "hca_type": attr("hca_type"),
            "board_id": attr("board_id"), "rate": (_read(os.path.join(ib, dev, "ports", "1", "rate")) or "").strip() or None,
            "link_layer": (_read(os.path.join(ib, dev, "ports", "1", "link_layer")) or "").strip() or None}


def _rdma_core(run) -> str | None:
    out, _ = run_tool(run, "dpkg-query", "-W", "-f=${Version}", "rdma-core")
    if out and out.strip():
        return out.strip()
    out, _ = run_tool(run, "rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", "rdma-core")
    return out.strip() if out and out.strip() and "not installed" not in out else None


def _container(root: str, env, reasons: dict) -> dict:
    in_container = (os.path.exists(os.path.join(root, ".dockerenv")) or os.path.exists(
        os.path.join(root, "run", ".containerenv")) or "KUBERNETES_SERVICE_HOST" in env or "container" in env)
    image, source = env.get("FABRIC_HARNESS_IMAGE"), "FABRIC_HARNESS_IMAGE" if env.get("FABRIC_HARNESS_IMAGE") else None
    release = {}
    for var, pattern in NGC_RELEASES:
        if env.get(var):
            release[var] = env[var]
            if image is None and pattern:
                image, source = pattern.format(env[var]), f"{var} (NGC release)"
    if image is None:
        reasons["container_image"] = ("in a container that does not name its image (set FABRIC_HARNESS_IMAGE)"
                                      if in_container else "not in a container")
    tag = image.rsplit(":", 1)[1] if image and ":" in image.rsplit("/", 1)[-1] else None
    return {"in_container": in_container, "image": image, "tag": tag, "image_source": source,
            "release": release or None}
