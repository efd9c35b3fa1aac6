"""Which RDMA ports' counters count for the job: NCCL_IB_HCA read as NCCL reads it, then the devices NCCL's
own log lists; the rest (a storage HCA, a down port) are named as excluded. The session counts only the
chosen ports (fake sysfs tree; the NCCL log line is real, from a public issue)."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from telemetry.capture.nccl_log import parse_files
from telemetry.capture.rdma_devices import parse_ib_hca, select

LOGS = Path(__file__).parent.parent / "nccl_logs"
HOST = [{"device": d, "port": 1, "link_layer": "InfiniBand", "rate": "400", "state": "4: ACTIVE"}
        for d in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_10")] + \
       [{"device": "mlx5_4", "port": 1, "link_layer": "Ethernet", "rate": "100", "state": "1: DOWN"}]


@pytest.mark.parametrize("value, device, port, used", [
    ("mlx5", "mlx5_10", 1, True),  # a prefix: mlx5 takes mlx5_10 too
    ("mlx5_1", "mlx5_10", 1, True),  # ...and mlx5_1 takes mlx5_10: NCCL matches prefixes
    ("=mlx5_1", "mlx5_10", 1, False),  # = makes names exact
    ("=mlx5_1", "mlx5_1", 1, True),
    ("^mlx5_4", "mlx5_4", 1, False),  # ^ excludes
    ("^mlx5_4", "mlx5_0", 1, True),
    ("^=mlx5_1", "mlx5_10", 1, True),  # ^= excludes exact names only
    ("^=mlx5_1", "mlx5_1", 1, False),
    ("mlx5_0:1,mlx5_1:2", "mlx5_1", 1, False),  # a port narrows the entry
    ("mlx5_0:1,mlx5_1:2", "mlx5_1", 2, True),
])
def test_nccl_ib_hca_as_nccl_reads_it(value, device, port, used):
    assert parse_ib_hca(value).matches(device, port) is used


def test_unset_counts_active_ports_and_names_the_rest():
    assert parse_ib_hca("") is None and parse_ib_hca(None) is None
    sel = select(HOST)
    assert [d for d, _ in sel.counted] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_10"]
    assert sel.excluded == [{"device": "mlx5_4", "port": 1, "reason": "port state 1: DOWN (NCCL uses ACTIVE ports only)"}]


def test_nccl_ib_hca_excludes_a_storage_card():
    sel = select(HOST, ib_hca="^=mlx5_10")
    assert ("mlx5_10", 1) not in sel.counted and len(sel.counted) == 4
    assert {"device": "mlx5_10", "port": 1, "reason": "not selected by NCCL_IB_HCA=^=mlx5_10"} in sel.excluded
    assert sel.basis.startswith("NCCL_IB_HCA=^=mlx5_10")


def test_the_device_list_in_ncclss_log_decides():
    """nccl-tests#228 (real log): NCCL used mlx5_0 and mlx5_2; the host's other cards are excluded by name."""
    nccl = parse_files([str(LOGS / "nccl_tests_228_ib_two_hcas.log")])
    assert [(d["device"], d["port"]) for d in nccl["ib_devices"]] == [("mlx5_0", 1), ("mlx5_2", 1)]
    sel = select(HOST, nccl["ib_devices"], ib_hca="mlx5")  # the log wins over the variable
    assert sel.counted == [("mlx5_0", 1), ("mlx5_2", 1)]
    assert {e["device"] for e in sel.excluded} == {"mlx5_1", "mlx5_3", "mlx5_10", "mlx5_4"}
    assert all(e["reason"] == "not in NCCL's device list" for e in sel.excluded)
    assert sel.to_dict()["counted"] == ["mlx5_0:1", "mlx5_2:1"]


def _port(root: Path, dev: str, words: int) -> None:
    p = root / "class" / "infiniband" / dev / "ports" / "1"
    for name, value in (("link_layer", "InfiniBand"), ("state", "4: ACTIVE"), ("rate", "400 Gb/sec (4X NDR)"),
                        ("counters/port_xmit_data", words), ("counters/port_rcv_data", words)):
        (p / name).parent.mkdir(parents=True, exist_ok=True)
        (p / name).write_text(f"{value}\n")


def test_session_counts_only_ncclss_devices_and_names_the_storage_card(tmp_path, monkeypatch):
    """A host with the two HCAs NCCL uses and a storage HCA (mlx5_10) moving 1 GB during the step: the
    step's RDMA bytes are the two NCCL cards' only, and run.json's summary names the storage card."""
    from telemetry.capture.session import Telemetry, TelemetrySettings

    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    sysfs, run = tmp_path / "sys", tmp_path / "run"
    for dev in ("mlx5_0", "mlx5_2", "mlx5_10"):
        _port(sysfs, dev, 0)
    tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, sysfs=str(sysfs), ethtool=False,
                                      interfaces=[]), run_dir=str(run))
    tel.start()
    assert tel.summary()["rdma_ports"]["counted"] == ["mlx5_0:1", "mlx5_10:1", "mlx5_2:1"]  # no log yet
    # step 1 builds NCCL's communicator: its log (a real line, nccl-tests#228) names the devices in use
    (run / "logs").mkdir(parents=True, exist_ok=True)
    header = [line for line in (LOGS / "nccl_tests_228_ib_two_hcas.log").read_text().splitlines() if "NET/IB : Using" in line]
    host = socket.gethostname().split(".")[0]
    (run / "logs" / f"nccl.{host}.{os.getpid()}.log").write_text(header[0] + "\n")
    tel.start_step(0)
    _port(sysfs, "mlx5_0", 100)
    _port(sysfs, "mlx5_2", 100)
    _port(sysfs, "mlx5_10", 250_000_000)  # storage traffic: 1 GB
    tel.counters.sample_now()  # what the sampler thread does every telemetry.counter_sample_interval_s
    rec = tel.end_step(0)
    summary = tel.summary()
    tel.close()
    assert rec["job_rdma_tx_bytes"] == 2 * 100 * 4  # the storage card's gigabyte is not the job's
    assert set(rec["host"]["counters"]) == {"rdma:mlx5_0/1", "rdma:mlx5_2/1"}
    assert summary["rdma_ports"] == {
        "counted": ["mlx5_0:1", "mlx5_2:1"],
        "excluded": [{"device": "mlx5_10", "port": 1, "reason": "not in NCCL's device list"}],
        "basis": "the devices NCCL's log lists as in use (NET/IB : Using ...)"}

