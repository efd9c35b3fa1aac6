"""The host inventory: a fake root tree and fake tools, the topology of a published 8x H100 host, and this
machine for real (where the GPU fields are null with the reason)."""
from __future__ import annotations

import os
import subprocess

from telemetry.capture import inventory as inv

FIX = os.path.join(os.path.dirname(__file__), "..", "evidence_fixtures")
with open(os.path.join(FIX, "nvidia_smi_topo_h100_sglang30401.txt"), encoding="utf-8") as f:
    TOPO = f.read()


def test_topology_of_a_published_h100_host():
    t = inv.parse_topology(TOPO)
    assert t["nic_legend"]["NIC3"] == "mlx5_3" and len(t["matrix"]) == 16
    assert t["matrix"]["GPU0"]["GPU1"] == "NV18" and t["matrix"]["GPU0"]["NIC0"] == "PIX"
    assert t["gpu_nic"]["GPU5"] == {"closest": ["mlx5_5"], "path": "PIX", "cpu_affinity": "48-95,144-191",
                                    "numa_affinity": "1"}
    # on a terminal the header comes underlined
    assert inv.parse_topology(TOPO.replace("GPU0    GPU1", "\x1b[4mGPU0\x1b[0m    GPU1", 1))["gpu_nic"]["GPU0"]["path"] == "PIX"


def topo(name: str) -> dict:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return inv.parse_topology(f.read())


def test_dgx_a100_affinity_cells_one_space_apart():
    """A full CPU Affinity cell (112-127,240-255) leaves one space before NUMA Affinity: read as two cells."""
    t = topo("nvidia_smi_topo_dgx_a100_nic_legend.txt")
    assert len(t["matrix"]) == 18 and t["nic_legend"]["NIC9"] == "mlx5_9"
    assert t["matrix"]["GPU4"]["CPU Affinity"] == "112-127,240-255" and t["matrix"]["GPU4"]["NUMA Affinity"] == "7"
    assert t["matrix"]["GPU4"]["GPU NUMA ID"] == "N/A" and t["matrix"]["NIC9"]["NIC8"] == "PIX"
    assert t["gpu_nic"]["GPU4"] == {"closest": ["mlx5_4", "mlx5_5"], "path": "PXB",
                                    "cpu_affinity": "112-127,240-255", "numa_affinity": "7"}
    assert t["gpu_nic"]["GPU0"]["closest"] == ["mlx5_0", "mlx5_1"]


def test_older_driver_names_the_nic_column_after_the_device():
    """Driver 495 has no NIC legend: the column is mlx5_0 itself, and it is still a NIC."""
    t = topo("nvidia_smi_topo_a100_mlx5_column_driver495.txt")
    assert t["nic_legend"] == {} and set(t["matrix"]) == {f"GPU{i}" for i in range(8)} | {"mlx5_0"}
    assert t["gpu_nic"]["GPU2"] == {"closest": ["mlx5_0"], "path": "PXB", "cpu_affinity": "16-31",
                                    "numa_affinity": "1"}
    assert t["gpu_nic"]["GPU6"]["path"] == "SYS" and t["gpu_nic"]["GPU6"]["cpu_affinity"] == "80-95"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class Tools:
    """Answers the commands the inventory runs; anything else fails like a missing tool."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def __call__(self, cmd, **kwargs):
        self.calls.append(cmd)
        key = " ".join(cmd)
        if key not in self.answers:
            raise FileNotFoundError(cmd[0])
        return subprocess.CompletedProcess(cmd, 0, self.answers[key], "")


def fake_host(root):
    write(root / "sys" / "class" / "net" / "eth0" / "device" / "vendor", "0x15b3\n")
    write(root / "sys" / "class" / "net" / "lo" / "mtu", "65536\n")  # virtual: no device link
    ib = root / "sys" / "class" / "infiniband" / "mlx5_0"
    write(ib / "fw_ver", "28.39.1002\n")
    write(ib / "hca_type", "MT4129\n")
    write(ib / "board_id", "MT_0000000838\n")
    write(ib / "ports" / "1" / "rate", "400 Gb/sec (4X NDR)\n")
    write(ib / "ports" / "1" / "link_layer", "Ethernet\n")
    (ib / "device" / "net" / "eth0").mkdir(parents=True)
    write(root / "etc" / "os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n')
    write(root / "proc" / "cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    write(root / "proc" / "sys" / "kernel" / "osrelease", "5.15.0-105-generic\n")
    (root / ".dockerenv").write_text("")
    return root


def test_a_gpu_host_with_ofed_in_an_ngc_container(tmp_path):
    fake_host(tmp_path)
    tools = Tools({
        f"nvidia-smi --query-gpu={inv.GPU_QUERY} --format=csv,noheader":
            "NVIDIA H100 80GB HBM3, 570.133.20, 96.00.99.00.01, 00000000:18:00.0, GPU-1b2c\n"
            "NVIDIA H100 80GB HBM3, 570.133.20, 96.00.99.00.01, 00000000:2A:00.0, GPU-3d4e\n",
        "nvidia-smi topo -m": TOPO,
        "ethtool -i eth0": "driver: mlx5_core\nversion: 24.10-1.1.4\nfirmware-version: 28.39.1002 (MT_0000000838)\n"
                           "expansion-rom-version: \nbus-info: 0000:0c:00.0\n",
        "ofed_info -s": "MLNX_OFED_LINUX-24.10-1.1.4.0:\n",
    })
    got = inv.collect(str(tmp_path), run=tools, env={"NVIDIA_PYTORCH_VERSION": "24.12", "CUDA_VERSION": "12.6.3"},
                      cuda_runtime="12.6")
    assert got["gpu_model"] == "NVIDIA H100 80GB HBM3" and got["gpu_driver"] == "570.133.20" and len(got["gpus"]) == 2
    assert got["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"
    (nic,) = got["nics"]
    assert nic["interface"] == "eth0" and nic["driver"] == "mlx5_core" and nic["firmware"].startswith("28.39.1002")
    assert nic["rdma_device"] == "mlx5_0" and nic["rdma_fw_ver"] == "28.39.1002" and nic["rate"].startswith("400")
    assert got["ofed"] == "MLNX_OFED_LINUX-24.10-1.1.4.0" and got["rdma_core"] is None
    assert got["os"] == "Ubuntu 22.04.4 LTS" and got["kernel"] == "5.15.0-105-generic"
    assert got["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert got["container"]["image"] == "nvcr.io/nvidia/pytorch:24.12-py3" and got["container"]["tag"] == "24.12-py3"
    assert got["topology"]["gpu_nic"]["GPU0"]["closest"] == ["mlx5_0"]
    assert "gpus" not in got["reasons"] and "ofed" not in got["reasons"]


def test_this_machine_for_real():
    got = inv.collect()
    assert got["os"] and got["kernel"] and got["cpu_count"]
    for field in ("gpu_model", "gpu_driver", "topology", "ofed"):  # a CPU VM: null, with the reason
        if got[field] is None:
            assert got["reasons"][field]
    if got["gpus"] is None:
        assert "nvidia-smi" in got["reasons"]["gpus"]
