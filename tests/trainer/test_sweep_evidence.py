"""A real sweep with whole-server power read from a Redfish BMC on loopback: power per size, one counter
verdict for the sweep, and the BMC's password in no file of the run directory."""
from __future__ import annotations

import json

import pytest

from ..conftest import REPO, run_cli
from ..telemetry.capture.test_bmc_power import Bmc, chassis_docs
from ..telemetry.capture.test_switch_metrics import Exporter

SWEEP = str(REPO / "recipes" / "collectives.yaml")


@pytest.mark.integration
def test_sweep_records_server_power_per_size_and_a_verdict(tmp_path):
    bmc = Bmc(chassis_docs(["Power"]), password="pw-never-in-files")
    switch = Exporter()
    try:
        out = tmp_path / "sweep"
        res = run_cli(out, "sweep.ops=[all_reduce]", "sweep.max_bytes=256K", "sweep.min_bytes=64K", "sweep.iters=20",
                      "sweep.warmup=1", "sweep.latency_table=false", f"telemetry.bmc={bmc.url}",
                      "telemetry.bmc_sample_interval_s=0.02", f"telemetry.switch_metrics_url={switch.url}", recipe=SWEEP, timeout=240,
                      env={"FABRIC_HARNESS_BMC_USER": "admin", "FABRIC_HARNESS_BMC_PASSWORD": "pw-never-in-files"})
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        bmc.close()
        switch.close()
    result = json.loads((out / "collectives.json").read_text())
    (host,) = result["hosts_evidence"]
    power = host["server_power"]
    assert power["source"] == "redfish" and power["url"].endswith("/redfish/v1/Chassis/1U/Power")
    assert [r["bytes"] for r in power["rows"]] == [65536, 131072, 262144]
    assert all(r["watts"] == pytest.approx(344.0) for r in power["rows"])  # the mockup's PowerConsumedWatts
    assert power["mean_w"] == pytest.approx(344.0)
    run = json.loads((out / "run.json").read_text())
    assert run["telemetry"]["counters"]["verdict"] in ("clean", "loss")
    assert run["switch_metrics"]["url"] == switch.url and run["switch_metrics"]["deltas"]["resets"] == []
    (inventory,) = run["inventory"].values()  # one host, collected by its first rank at start-up
    assert inventory["os"] and inventory["kernel"] and (inventory["gpu_model"] or inventory["reasons"]["gpu_model"])
    for f in out.rglob("*"):
        if f.is_file():
            assert b"pw-never-in-files" not in f.read_bytes(), f
