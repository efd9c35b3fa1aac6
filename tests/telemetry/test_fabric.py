"""Fabric identity: NCCL log set-up, the gloo interface, and the expected-transport check."""
from __future__ import annotations

from telemetry.fabric import check_expectation, configure_nccl_logging, describe, gloo_interface


def test_nccl_logging_goes_to_the_run_directory_but_respects_the_user(tmp_path):
    env = {"NCCL_DEBUG": "WARN"}
    applied = configure_nccl_logging(str(tmp_path / "logs"), env)
    assert env["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG" not in applied  # the user's choice stands
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "logs" / "nccl.%h.%p.log")
    assert "NET" in env["NCCL_DEBUG_SUBSYS"].split(",")  # the GPUDirect RDMA line needs NET


def test_gloo_interface_from_env_or_route():
    assert gloo_interface({"GLOO_SOCKET_IFNAME": "veth0,veth1"})["interface"] == "veth0"
    route = gloo_interface({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    assert route["interface"] == "lo" and route["address"] == "127.0.0.1"
    assert gloo_interface({})["interface"] is None


def test_describe_gloo_on_loopback():
    info = describe("gloo", None, environ={"MASTER_ADDR": "127.0.0.1", "NCCL_IB_HCA": "mlx5_0", "HF_TOKEN": "x"})
    assert info["transport"] == "loopback" and info["gloo"]["interface"] == "lo"
    assert info["environment"] == {"MASTER_ADDR": "127.0.0.1", "NCCL_IB_HCA": "mlx5_0"}
    assert any(i["name"] == "lo" for i in info["interfaces"])


def test_expectation_mismatch_is_loud():
    bad = check_expectation("roce", "tcp")
    assert bad["match"] is False and "FABRIC MISMATCH" in bad["warning"] and "NCCL_IB_DISABLE" in bad["warning"]
    assert check_expectation("roce", "roce") == {"expected": "roce", "detected": "roce", "match": True}
    assert check_expectation("any", "tcp")["match"] is None
    assert check_expectation("intra-node", "loopback")["match"] is True
    assert "could not be detected" in check_expectation("infiniband", None)["warning"]
