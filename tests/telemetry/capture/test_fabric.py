"""Fabric identity: NCCL log set-up, the gloo interface, and the expected-transport check."""
from __future__ import annotations

import json
import os

from telemetry.capture import fabric as fabric_module
from telemetry.capture.fabric import check_expectation, configure_nccl_logging, default_route_interface, describe, \
    gloo_interface, pin_gloo_interface


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
    # AWS EFA (NCCL's libfabric plugin with the efa provider) is a transport of its own
    assert check_expectation("efa", "efa")["match"] is True
    assert check_expectation("efa", "tcp")["match"] is False


NCCL_LINES = """\
{host}:{pid}:{pid} [0] NCCL INFO NCCL version 2.21.5+cuda12.4
{host}:{pid}:{pid} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>
{host}:{pid}:{pid} [0] NCCL INFO Using network IB
{host}:{pid}:{pid} [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
"""


def test_nccl_logs_are_parsed_by_rank_0_only_and_every_log_once(tmp_path, monkeypatch):
    from telemetry.capture import nccl_log
    from telemetry.integrations.recorder import RunRecorder
    from trainer.run_writer import RunDir

    here = fabric_module.nccl_log_host()
    logs = tmp_path / "logs"
    logs.mkdir()
    for host in (here, "other-node"):  # two ranks per host, as NCCL_DEBUG_FILE=nccl.%h.%p.log names them
        for pid in (100, 101):
            (logs / f"nccl.{host}.{pid}.log").write_text(NCCL_LINES.format(host=host, pid=pid))
    opened = []
    real = nccl_log.parse_files
    monkeypatch.setattr(nccl_log, "parse_files", lambda paths: opened.extend(paths) or real(paths))
    info = {"backend": "nccl", "transport": None}

    # every other rank: never touches the logs, after step 1 or at the end
    def recorder(rank):  # the fabric as start() recorded it, before the first step
        rec = RunRecorder(str(tmp_path), expect="roce", harness=True, rundir=RunDir(str(tmp_path), rank))
        rec.rundir.update(fabric=dict(info))
        return rec

    other = recorder(1)
    other.on_step_end(1, {})
    assert other.check_fabric() == {} and opened == []

    watch = recorder(0)
    watch.on_step_end(1, {})  # after step 1: this host's logs only, whatever the world size
    assert sorted(os.path.basename(p) for p in opened) == [f"nccl.{here}.100.log", f"nccl.{here}.101.log"]
    first = json.loads((tmp_path / "run.json").read_text())["fabric"]
    assert first["transport"] == "roce" and first["nccl"]["scope"] == f"host {here}"
    assert first["expectation"]["match"] is True
    watch.on_step_end(2, {})
    assert len(opened) == 2  # later steps read nothing
    opened.clear()
    watch.check_fabric()  # at the end: every rank's log, once
    assert len(opened) == 4
    final = json.loads((tmp_path / "run.json").read_text())["fabric"]
    assert final["nccl"]["log_files"] == 4 and final["nccl"]["scope"] == "all ranks"


def _hosts_env(**extra):
    return {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "10.0.0.1", **extra}


ADDRESSES = {"lo": "127.0.0.1", "eth0": "10.0.0.2", "ib0": "192.168.0.2"}


def test_gloo_pinned_on_multi_host_jobs_from_nccl_socket_ifname():
    env = _hosts_env(NCCL_SOCKET_IFNAME="ib")  # NCCL's prefix form: gloo needs the whole name
    out = pin_gloo_interface(env, addresses=ADDRESSES, route={"interface": "eth0", "how": "route"})
    assert out["pinned"] and env["GLOO_SOCKET_IFNAME"] == "ib0" and "NCCL_SOCKET_IFNAME=ib" in out["how"]
    env = _hosts_env(NCCL_SOCKET_IFNAME="=eth0,ib0")  # exact names
    assert pin_gloo_interface(env, addresses=ADDRESSES, route={})["interface"] == "eth0"


def test_gloo_pinned_from_the_route_to_master_or_the_default_route():
    env = _hosts_env(NCCL_SOCKET_IFNAME="^docker,lo")  # an exclusion list names no interface
    out = pin_gloo_interface(env, addresses=ADDRESSES, route={"interface": "eth0", "how": "route to MASTER_ADDR x"})
    assert env["GLOO_SOCKET_IFNAME"] == "eth0" and out["address"] == "10.0.0.2"
    # on MASTER_ADDR's own host the host name may resolve to loopback: the default route's interface then
    env = _hosts_env()
    out = pin_gloo_interface(env, addresses=ADDRESSES, route={"interface": "lo", "how": "route"}, default_route="ib0")
    assert env["GLOO_SOCKET_IFNAME"] == "ib0" and "default route" in out["how"]
    env = _hosts_env()
    out = pin_gloo_interface(env, addresses={"lo": "127.0.0.1"}, route={"interface": "lo", "how": "r"},
                             default_route="eth0")  # no address on it here
    assert out["pinned"] is False and "GLOO_SOCKET_IFNAME" not in env and "set GLOO_SOCKET_IFNAME" in out["how"]


def test_gloo_left_alone_on_one_host_or_when_the_user_chose():
    env = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "127.0.0.1"}
    assert pin_gloo_interface(env, addresses=ADDRESSES)["pinned"] is False and "GLOO_SOCKET_IFNAME" not in env
    env = _hosts_env(GLOO_SOCKET_IFNAME="bond0", NCCL_SOCKET_IFNAME="ib0")
    out = pin_gloo_interface(env, addresses=ADDRESSES)
    assert out["pinned"] is False and env["GLOO_SOCKET_IFNAME"] == "bond0"


def test_default_route_interface_from_the_route_table(tmp_path):
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway\tFlags\n"
                     "eth1\t000200C0\t00000000\t0001\n"
                     "eth0\t00000000\t010200C0\t0003\n")
    assert default_route_interface(str(table)) == "eth0"
    assert default_route_interface(str(tmp_path / "missing")) is None
