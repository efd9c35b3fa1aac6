"""The rest of the inventory: real `ethtool -m` and `dmidecode -t 17` output (evidence_fixtures/README.md),
a fake sysfs tree for DMI, sockets, storage, PCIe links and NVSwitches, and the comparison's warning when
fabrics differ in anything but the fabric."""
from __future__ import annotations

import os

from telemetry.analysis.compare import compare
from telemetry.analysis.inventory_summary import hardware_warnings
from telemetry.capture import host_hardware as hh

from ..evidence import Tools, fixture
from ..recorded import write_run


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_optics_and_memory_from_real_output():
    dac = hh.parse_ethtool_module(fixture("ethtool_m_qsfp28_dac_dgx_spark.txt"))
    assert dac == {"module": "QSFP28", "transceiver": "40G Ethernet: 40G Base-CR4", "length": "1m (Copper or Active "
                   "cable)", "vendor": "Amphenol", "part": "NJAAKK-N911", "connector": None}
    cwdm4 = hh.parse_ethtool_module(fixture("ethtool_m_qsfp28_cwdm4_finisar.txt"))
    assert cwdm4["length"] == "2km (SMF,km)" and cwdm4["vendor"] == "FINISAR CORP." and cwdm4["connector"] == "0x07 (LC)"
    mem = hh.parse_dmidecode_memory(fixture("dmidecode_t17_ddr5.txt"))
    assert mem == {"dimms": 1, "memory_gib": 32, "memory_type": "DDR5", "memory_speed_mts": 4800}
    empty = hh.parse_dmidecode_memory("Handle 0x1, DMI type 17, 40 bytes\nMemory Device\n\tSize: No Module Installed\n")
    assert empty["dimms"] == 0 and empty["memory_speed_mts"] is None


def host(root):
    dmi = root / "sys" / "class" / "dmi" / "id"
    for k, v in (("sys_vendor", "Supermicro"), ("product_name", "SYS-821GE-TNHR"), ("bios_version", "2.1")):
        write(dmi / k, v + "\n")
    for c in range(4):
        write(root / "sys" / "devices" / "system" / "cpu" / f"cpu{c}" / "topology" / "physical_package_id", f"{c // 2}\n")
    write(root / "proc" / "meminfo", "MemTotal:       2113464320 kB\n")
    write(root / "sys" / "block" / "nvme0n1" / "size", "7501476528\n")
    write(root / "sys" / "block" / "nvme0n1" / "device" / "model", "SAMSUNG MZQL27T6HBLA-00A07\n")
    write(root / "sys" / "block" / "loop0" / "size", "100\n")
    pci = root / "sys" / "bus" / "pci" / "devices"
    for bdf, width in (("0000:18:00.0", "16"), ("0000:0c:00.0", "8")):
        for f, v in (("current_link_width", width), ("current_link_speed", "32.0 GT/s PCIe"),
                     ("max_link_width", "16"), ("max_link_speed", "32.0 GT/s PCIe")):
            write(pci / bdf / f, v + "\n")
    for i in range(4):
        write(pci / f"0000:0{i}:00.0" / "vendor", "0x10de\n")
        write(pci / f"0000:0{i}:00.0" / "class", "0x068000\n")
    (root / "sys" / "class" / "net" / "eth0").mkdir(parents=True)
    os.symlink(pci / "0000:0c:00.0", root / "sys" / "class" / "net" / "eth0" / "device")
    return root


def test_collect_on_a_fake_8_gpu_server(tmp_path):
    root = host(tmp_path)
    nics = [{"interface": "eth0"}]
    out, reasons = hh.collect(str(root), Tools({
        "dmidecode -t 17": fixture("dmidecode_t17_ddr5.txt"), "ethtool -m eth0": fixture("ethtool_m_qsfp28_cwdm4_finisar.txt"),
        "nv-fabricmanager --version": "Fabric Manager version is : 535.129.03\n"}),
        gpus=[{"pci_bus_id": "00000000:18:00.0"}], nics=nics)
    assert out["server"]["product_name"] == "SYS-821GE-TNHR" and out["cpu_sockets"] == 2
    assert out["memory_gib"] == 2015.6 and out["memory_speed_mts"] == 4800
    assert out["storage"] == [{"name": "nvme0n1", "gb": 3840.8, "model": "SAMSUNG MZQL27T6HBLA-00A07",
                               "rotational": False}]
    assert out["gpu_pcie"]["00000000:18:00.0"]["width"] == "16" and nics[0]["pcie"]["width"] == "8"
    assert out["nvswitches"] == 4 and out["fabric_manager"] == "535.129.03" and not reasons
    bare, why = hh.collect(str(tmp_path / "empty"), Tools({}))
    assert bare["server"] is None and "no /sys/class/dmi/id" in why["server"]
    assert why["memory_speed_mts"] == "dmidecode -t 17: FileNotFoundError"
    assert bare["fabric_manager"] is None and why["fabric_manager"].startswith("no NVSwitch here")


def test_compare_warns_when_fabrics_differ_in_more_than_the_fabric(tmp_path):
    def inv(gpu_driver):
        return {"inventory": {"a": {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_driver": gpu_driver,
                                    "gpus": [{}] * 8, "reasons": {}}}}
    a = write_run(tmp_path / "a", rate_bps=1e9, info_extra=inv("570.133.20"))
    b = write_run(tmp_path / "b", rate_bps=1e8, info_extra=inv("550.54.15"))
    result = compare([str(a), str(b)], str(tmp_path / "cmp"))
    (warning,) = [w for w in result["warnings"] if w.startswith("HARDWARE DIFFERS")]
    assert "GPU (driver)" in warning and "570.133.20" in warning and "550.54.15" in warning
    assert hardware_warnings(["x", "y"], [["storage", "unknown (a)", "unknown (b)"]]) == []
