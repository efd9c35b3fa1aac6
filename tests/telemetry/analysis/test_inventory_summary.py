"""The compare header's inventory rows from run.json inventories."""
from __future__ import annotations

from telemetry.analysis.inventory_summary import inventory_rows
from telemetry.analysis.runs import Run

from ..capture.test_inventory import TOPO
from telemetry.capture.inventory import parse_topology

H100 = {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8, "gpu_model": "NVIDIA H100 80GB HBM3",
        "gpu_driver": "570.133.20", "cuda_runtime": "12.6", "ofed": "MLNX_OFED_LINUX-24.10-1.1.4.0",
        "nics": [{"interface": f"eth{i}", "driver": "mlx5_core", "rdma_device": f"mlx5_{i}", "hca_type": "MT4129",
                  "rdma_fw_ver": "28.39.1002", "rate": "400 Gb/sec (4X NDR)"} for i in range(8)],
        "os": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-105-generic", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "container": {"image": "nvcr.io/nvidia/pytorch:24.12-py3"}, "topology": parse_topology(TOPO), "reasons": {}}
CPU_VM = {"gpus": None, "gpu_model": None, "cuda_runtime": None, "ofed": None, "rdma_core": "50.0-2",
          "nics": [{"interface": "ens4", "driver": "virtio_net"}], "os": "Debian GNU/Linux 12 (bookworm)",
          "kernel": "6.1.0", "cpu_model": "AMD EPYC", "container": {"image": None}, "topology": None,
          "reasons": {"gpu_model": "nvidia-smi is not installed", "cuda_runtime": "this torch build has no CUDA",
                      "container_image": "not in a container", "topology": "nvidia-smi is not installed"}}


def test_rows_per_fabric_with_reasons_for_unknowns():
    runs = [[Run("a", {"inventory": {"node1": H100, "node2": H100}}, [])], [Run("b", {"inventory": {"vm": CPU_VM}}, [])],
            [Run("c", {}, [])]]
    rows = {r[0]: r[1:] for r in inventory_rows(runs)}
    assert rows["GPU (driver)"][0] == "8 x NVIDIA H100 80GB HBM3 (driver 570.133.20)"
    assert rows["GPU (driver)"][1] == "unknown (nvidia-smi is not installed)"
    assert rows["NICs (driver, firmware)"][0] == "8 x MT4129 400 Gb/sec (4X NDR) (mlx5_core, fw 28.39.1002)"
    assert rows["NICs (driver, firmware)"][1] == "no RDMA NIC; ens4 (virtio_net)"
    assert rows["OFED / rdma-core"] == ["MLNX_OFED_LINUX-24.10-1.1.4.0", "rdma-core 50.0-2",
                                        "unknown (run.json has no inventory)"]
    assert rows["GPU-NIC closest"][0].startswith("GPU0-mlx5_0 PIX, GPU1-mlx5_1 PIX")
    assert rows["container image"][1] == "unknown (not in a container)"
