"""Power per server per collective and size: each host's own BMC (a {host} template or a host map; one
address is one BMC, read once), a sweep holding chosen sizes with the real Redfish server of the BMC tests
on loopback, and the comparison's table of watts per operation and size per fabric."""
from __future__ import annotations

import json


from telemetry.analysis.compare import compare
from telemetry.capture import bmc_power as bp
from telemetry.capture.sweep_evidence import SweepEvidence

from ..recorded import sweep_result, write_run
from .test_bmc_power import Bmc, chassis_docs, creds  # noqa: F401  (the fixture)


def test_each_host_its_own_bmc():
    assert bp.bmc_for_host("https://{host}-bmc", "node07.cluster", False, 4) == ("https://node07-bmc", None)
    assert bp.bmc_for_host({"node07": "https://10.0.0.7"}, "node07.cluster", False, 4) == ("https://10.0.0.7", None)
    addr, why = bp.bmc_for_host({"node01": "https://10.0.0.1"}, "node07", False, 4)
    assert addr is None and "no address for host node07" in why
    assert bp.bmc_for_host("ipmitool", "node07", False, 4) == ("ipmitool", None)  # each node's local BMC
    # one address for several hosts is one BMC: read once, by the first host
    assert bp.bmc_for_host("https://bmc", "node01", True, 4) == ("https://bmc", None)
    addr, why = bp.bmc_for_host("https://bmc", "node02", False, 4)
    assert addr is None and "one address for 4 hosts" in why
    assert bp.bmc_for_host(None, "n", True) == (None, "telemetry.bmc is not set")


def test_sweep_windows_read_each_hosts_bmc_through_its_template(creds):  # noqa: F811
    import time
    bmc = Bmc(chassis_docs(["Power"]))
    try:
        port = bmc.url.rsplit(":", 1)[1]
        ev = SweepEvidence("http://{host}:" + port, None, 0.02, [], sysfs="/nonexistent", ethtool=False,
                           host="localhost", first_host=False, hosts=2)
        for size in (8192, 1048576):
            t0 = time.monotonic()
            time.sleep(0.12)
            ev.marks.append(("all_reduce", size, t0, time.monotonic()))
        out = ev.finish()
    finally:
        bmc.close()
    assert out["server_power"]["source"] == "redfish" and "s3cret" not in json.dumps(out)
    assert [(r["bytes"], r["watts"]) for r in out["server_power"]["rows"]] == [(8192, 344.0), (1048576, 344.0)]


def sweep_run(path, watts_by_size, gpu_w, scale=1.0, reason=None):
    hosts = {h: ({"source": "redfish", "rows": [{"op": "all_reduce", "bytes": s, "seconds": 5.0, "watts": w,
                                                 "energy_j": w * 5, "samples": 5} for s, w in watts_by_size.items()]}
                 if reason is None else {"source": None, "reason": reason}) for h in ("a", "b")}
    run = write_run(path, sweep=sweep_result(scale=scale), info_extra={"telemetry": {"server_power": hosts}})
    (run / "sweep.jsonl").write_text("\n".join(json.dumps({"op": "all_reduce", "size": s, "requested_bytes": s,
                                                           "gpu_power_w_sum": gpu_w * 2}) for s in watts_by_size) + "\n")
    return run


def test_compare_table_of_watts_per_op_and_size(tmp_path):
    roce = sweep_run(tmp_path / "roce", {1024: 800.0, 1048576: 900.0}, gpu_w=300.0)
    tcp = sweep_run(tmp_path / "tcp", {1024: 880.0, 1048576: 810.0}, gpu_w=330.0, scale=3.0)
    compare([f"roce={roce}", f"tcp={tcp}"], str(tmp_path / "cmp"))
    md = (tmp_path / "cmp" / "compare.md").read_text()
    # 1 KB: 21.024 us per op on roce (the sweep's time) at 800 W: 16.8 mJ per op
    assert "| all_reduce | 1 KB | 800 W/server, 16.8 mJ/op; GPUs 300 W/server | 880 W/server (+10.0%), " in md
    assert "| all_reduce | 1 MB | 900 W/server" in md and "810 W/server (-10.0%)" in md and "GPUs 330 W/server (+10.0%)" in md
    none = sweep_run(tmp_path / "none", {1024: 0.0}, gpu_w=300.0, reason="telemetry.bmc is not set")
    compare([f"roce={roce}", f"none={none}"], str(tmp_path / "cmp2"))
    md = (tmp_path / "cmp2" / "compare.md").read_text()
    assert "server n/a (telemetry.bmc is not set); GPUs 300 W/server" in md
