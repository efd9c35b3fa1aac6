"""What the fabric was: the hosts' own readings (real ethtool, dcb and mlnx_qos output from public sources:
tests/telemetry/evidence_fixtures/README.md), the switch exporter's labels, the recipe's fabric.config, and
their rows in the report and the comparison."""
from __future__ import annotations


from telemetry.analysis.compare import compare
from telemetry.analysis.fabric_config import KEYS, compare_rows, resolve
from telemetry.analysis.report import write_report
from telemetry.capture import nic_qos
from telemetry.capture.switch_metrics import identity, parse

from ..evidence import Tools, fixture
from ..recorded import write_run


def test_fec_of_three_ethtool_versions():
    assert nic_qos.parse_show_fec(fixture("ethtool_show_fec_ice_stats.txt")) == {
        "active": "RS", "configured": ["Auto", "RS", "BaseR"], "corrected_blocks": 0, "uncorrectable_blocks": 0}
    lanes = nic_qos.parse_show_fec(fixture("ethtool_show_fec_lanes_kicinski.txt"))
    assert lanes["active"] == "None" and lanes["corrected_blocks"] == 256 and lanes["uncorrectable_blocks"] == 145
    assert nic_qos.parse_show_fec(fixture("ethtool_show_fec_legacy_4.15.txt"))["active"] == "RS"


def test_pfc_from_dcb_and_mlnx_qos():
    assert nic_qos.parse_dcb_pfc(fixture("dcb_pfc_show_two_lines.txt")) == [3]
    assert nic_qos.parse_dcb_pfc(fixture("dcb_pfc_show_one_line.txt")) == [3]
    assert nic_qos.parse_dcb_pfc("pfc-cap 8 macsec-bypass off delay 0\n") is None
    assert nic_qos.parse_mlnx_qos(fixture("mlnx_qos_rdma_qos_sh.txt")) == {"trust": "dscp", "pfc_enabled": [5]}


def nic_tree(root, prio=3):
    net = root / "class" / "net" / "eth0"
    (net / "ecn" / "roce_np" / "enable").mkdir(parents=True)
    (net / "ecn" / "roce_rp" / "enable").mkdir(parents=True)
    for p in range(8):
        (net / "ecn" / "roce_np" / "enable" / str(p)).write_text("1\n" if p == prio else "0\n")
        (net / "ecn" / "roce_rp" / "enable" / str(p)).write_text("1\n" if p == prio else "0\n")
    (net / "speed").write_text("400000\n")
    return root


def test_collect_one_nic(tmp_path):
    root = nic_tree(tmp_path)
    got = nic_qos.collect("eth0", str(root), Tools({
        "ethtool -I --show-fec eth0": fixture("ethtool_show_fec_ice_stats.txt"),
        "dcb pfc show dev eth0": fixture("dcb_pfc_show_two_lines.txt")}))
    assert got["speed_mbps"] == 400000 and got["fec"]["active"] == "RS" and got["pfc_priorities"] == [3]
    assert got["ecn"] == {"np": [3], "rp": [3]} and got["sources"]["pfc_priorities"] == "dcb pfc show dev eth0"
    bare = nic_qos.collect("eth1", str(root), Tools({"mlnx_qos -i eth1": fixture("mlnx_qos_rdma_qos_sh.txt")}))
    assert bare["pfc_priorities"] == [5] and bare["sources"]["pfc_priorities"] == "mlnx_qos -i eth1"
    assert bare["fec"] is None and "ethtool" in bare["reasons"]["fec"] and "ecn" in bare["reasons"]


def test_switch_identity_from_info_labels():
    text = ('# TYPE switch_info gauge\nswitch_info{hwsku="Mellanox-SN5600",sonic_os_version="SONiC.202405"} 1\n'
            '# TYPE node_os_info gauge\nnode_os_info{name="Debian GNU/Linux",version="12 (bookworm)"} 1\n'
            '# TYPE if_in_octets counter\nif_in_octets{port="Ethernet0"} 5\n')
    assert identity(parse(text)) == {"switch_model": "Mellanox-SN5600", "switch_os": "SONiC.202405",
                                     "series": "switch_info"}
    assert identity(parse("# TYPE x counter\nx 1\n")) == {"switch_model": None, "switch_os": None, "series": None}


def host(fw="28.39.1002", prio=(3,), fec="RS"):
    return {"nics": [{"interface": "eth0", "rdma_device": "mlx5_0", "rdma_fw_ver": fw, "rate": "400 Gb/sec (4X NDR)",
                      "qos": {"speed_mbps": 400000, "fec": {"active": fec}, "pfc_priorities": list(prio),
                              "ecn": {"np": [3], "rp": [3]}, "sources": {"pfc_priorities": "dcb pfc show dev eth0"},
                              "reasons": {}}}]}


def info(stated=None, hosts=None, switch=None):
    return {"recipe": {"fabric": {"config": stated or {}}},
            "fabric": {"nccl": {"devices": [{"device": "mlx5_0", "port": 1}]}},
            "inventory": hosts if hosts is not None else {"a": host(), "b": host()},
            **({"switch_metrics": {"identity": switch}} if switch else {})}


def test_resolve_states_reads_and_conflicts():
    cfg = resolve(info({"topology": "leaf-spine", "pfc_priority": 4},
                       switch={"switch_model": "SN5600", "switch_os": None, "series": "switch_info"}))
    assert set(cfg) == set(KEYS)
    assert cfg["topology"] == {"value": "leaf-spine", "source": "recipe fabric.config", "reason": None}
    assert cfg["pfc_priority"]["value"] == 4 and cfg["pfc_priority"]["hosts_read"] == "3 (dcb on every NIC used)"
    assert cfg["nic_firmware"]["value"] == "28.39.1002" and cfg["fec"]["value"] == "RS"
    assert cfg["port_speed"]["value"] == "400 Gbit/s" and cfg["dcqcn"]["value"] is True
    assert cfg["switch_model"]["value"] == "SN5600" and "switch exporter label" in cfg["switch_model"]["source"]
    assert cfg["switch_os"]["value"] is None and "do not name it" in cfg["switch_os"]["reason"]
    assert cfg["routing"]["value"] is None and "no host can read it" in cfg["routing"]["reason"]
    mixed = resolve(info(hosts={"a": host(), "b": host(fw="28.40.1000")}))
    assert mixed["nic_firmware"]["value"] is None and "the NICs differ" in mixed["nic_firmware"]["reason"]
    assert resolve(info(hosts={}))["fec"]["reason"] == "no inventory of the NICs used (run.json inventory)"


def test_report_and_compare_rows(tmp_path):
    a = write_run(tmp_path / "a", transport="roce", info_extra={k: v for k, v in info().items() if k != "recipe"},
                  recipe_extra={"fabric": {"config": {"routing": "ecmp"}}})
    b = write_run(tmp_path / "b", transport="roce", step_time=2.0, recipe_extra={"fabric": {"config": {
        "routing": "adaptive-routing"}}}, info_extra={k: v for k, v in info().items() if k != "recipe"})
    write_report(str(a))
    md = (a / "report" / "report.md").read_text()
    assert "| routing | ecmp (recipe fabric.config) |" in md and "| fec | RS (ethtool --show-fec) |" in md
    assert "| topology | unknown (not stated in fabric.config, and no host can read it) |" in md
    rows = compare_rows([[info({"routing": "ecmp"})], [info({"routing": "adaptive-routing"})]])
    assert ["config: routing", "ecmp (recipe fabric.config)",
            "differs: adaptive-routing (recipe fabric.config)"] in rows
    assert ["config: fec", "RS (ethtool --show-fec)", "RS (ethtool --show-fec)"] in rows
    compare([f"ecmp={a}", f"ar={b}"], str(tmp_path / "cmp"), allow_mismatch=True)
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| config: routing | ecmp (recipe fabric.config) | differs: adaptive-routing (recipe fabric.config) |" in md
