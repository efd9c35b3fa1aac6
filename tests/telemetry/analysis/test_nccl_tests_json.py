"""nccl-tests' -J JSON: read (both spellings of the average, -N cycles, per-iteration blocks), written from
a sweep result and read back, and the force-network check on real NCCL logs."""
from __future__ import annotations

import json

import pytest

from telemetry.__main__ import main as telemetry_main
from telemetry.analysis.nccl_tests_json import nccl_version_code, parse_json, to_nccl_tests
from telemetry.capture import force_network
from telemetry.capture.nccl_log import parse_files
from telemetry.analysis.nccl_tests import NcclTestsError, read

from ...conftest import REPO

FIXTURES = REPO / "tests" / "telemetry" / "analysis" / "nccl_tests_json"
LOGS = REPO / "tests" / "telemetry" / "nccl_logs"


def test_version_1_with_the_misspelt_average():
    out = read(str(FIXTURES / "all_reduce_perf_v1_2.17.8_misspelt.json"))
    assert out["format"] == "nccl-tests json" and out["source"] == "nccl-tests"
    assert list(out["ops"]) == ["all_reduce"] and out["world_size"] == 16 and out["dtype"] == "float32"
    op = out["ops"]["all_reduce"]
    assert op["test"] == "all_reduce_perf" and len(op["rows"]) == 12 and op["wrong"] == 0
    first = op["rows"][0]
    assert (first["size"], first["count"], first["type"], first["redop"], first["root"]) == (8, 2, "float", "sum", -1)
    assert first["out_of_place"] == {"time_us": 135.8, "algbw_GBps": 0.0, "busbw_GBps": 0.0, "wrong": 0}
    # the average came from the misspelt key, and a note says so
    busbw = [b["busbw_GBps"] for r in op["rows"] for b in (r["out_of_place"], r["in_place"])]
    assert op["avg_busbw_GBps"] == pytest.approx(sum(busbw) / len(busbw), abs=1e-6)  # printed with %lf
    assert any("average_bus_bandwidith" in n for n in op["notes"])
    assert op["devices"][8] == {"rank": 8, "group": 0, "pid": 6733, "host": "ztan-mig-gq73", "device": 0,
                                "bus_id": "0000:04:00", "name": "NVIDIA H100 80GB HBM3"}


def test_version_3_per_iteration_and_repeated_cycles():
    out = read(str(FIXTURES / "all_reduce_perf_v3_per_iter_N2.json"))
    # -N 2: the size ladder twice, read as two runs as with repeated text tables
    assert list(out["ops"]) == ["all_reduce", "all_reduce_2"] and out["rows_read"] == 8
    for op in out["ops"].values():
        assert [r["size"] for r in op["rows"]] == [8, 16, 32, 64]
        pi = op["rows"][0]["out_of_place"]["per_iter"]
        assert pi["skipped_iterations"] == 1 and len(pi["per_process_max_times_us"]) == 2
        assert pi["times_us"] == [max(c) for c in zip(*pi["per_process_max_times_us"])]
    assert "cycle 2 of 2" in out["ops"]["all_reduce_2"]["notes"][0]


def test_the_command_line_reads_json(tmp_path, capsys):
    path = str(FIXTURES / "all_reduce_perf_v3_per_iter_N2.json")
    assert telemetry_main(["nccl-tests", path, "--csv", str(tmp_path / "o.csv")]) == 0
    assert "8 rows in 2 table(s) (all_reduce, all_reduce_2)" in capsys.readouterr().out
    assert len((tmp_path / "o.csv").read_text().splitlines()) == 9
    bad = tmp_path / "other.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(NcclTestsError, match="without nccl-tests' 'config' and 'results'"):
        read(str(bad))


def _sweep_result() -> dict:
    block = {"time_us": 12.5, "algbw_GBps": 1.5, "busbw_GBps": 2.25, "wrong": 0,
             "per_iter": {"skipped_iterations": 0, "min_us": 12.0, "max_us": 13.0, "avg_us": 12.5, "p50_us": 13.0,
                          "p95_us": 13.0, "p99_us": 13.0, "stdev_us": 0.5, "cv_pct": 4.0, "times_us": [12.0, 13.0],
                          "per_process_max_times_us": [[12.0, 13.0], [11.0, 12.0]]}}
    rows = [{"size": s, "count": s // 4, "requested_bytes": s, "type": "float", "redop": "sum", "root": -1,
             "out_of_place": None, "in_place": dict(block)} for s in (8, 16)]
    return {"iters": 2, "warmup": 1, "min_bytes": 8, "max_bytes": 16, "factor": 2, "per_iter_timing": True,
            "per_iter_skip": 0, "backend": "gloo", "time_reduction": "avg",
            "ops": {"all_reduce": {"rows": rows, "avg_busbw_GBps": 2.25, "wrong": 0, "checked": True,
                                   "devices": [{"rank": r, "host": "h", "pid": 10 + r, "device": -1, "bus_id": "cpu",
                                                "name": "CPU x86_64"} for r in (0, 1)],
                                   "missing": {"out_of_place": "torch's all_reduce exists only in place"},
                                   "notes": [], "stragglers": [], "start_time": "2026-11-25 10:00:00",
                                   "end_time": "2026-11-25 10:00:01"}}}


def test_sweep_writes_the_schema_nccl_tests_writes_and_reads_it_back():
    doc = to_nccl_tests(_sweep_result(), "all_reduce", ["python", "-m", "trainer"], ["NCCL_DEBUG=INFO"], None)
    # the keys and their order of nccl-tests' writer
    assert list(doc)[:-1] == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                              "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]
    assert list(doc["config"]) == ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor",
                                   "warmup_iters", "iterations", "aggregated_iterations", "validation", "graph",
                                   "blocking_collectives", "per_iter_timing", "per_iter_skip", "parallel_init",
                                   "devices"]
    assert doc["config"]["per_iter_timing"] == "true" and doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    row = doc["results"][0]
    assert list(row) == ["size", "count", "type", "redop", "root", "out_of_place", "in_place", "in_place_per_iter",
                         "actual_iterations", "experiment_name"]
    assert row["root"] == "    -1" and row["out_of_place"] is None
    assert row["in_place"] == {"time": 12.5, "alg_bw": 1.5, "bus_bw": 2.25, "nwrong": 0.0}
    assert doc["nccl_version"] is None and "backend gloo" in doc["fabric_harness"]["nccl_version_reason"]
    back = parse_json(json.loads(json.dumps(doc)))
    assert back["source"] == "fabric-harness" and back["time_reduction"] == "avg"
    got = back["ops"]["all_reduce"]
    assert [r["size"] for r in got["rows"]] == [8, 16] and got["rows"][0]["in_place"]["per_iter"]["p99_us"] == 13.0
    assert got["missing"] == {"out_of_place": "torch's all_reduce exists only in place"}
    assert nccl_version_code("2.21.5") == 22105 and nccl_version_code(None) is None


def test_force_network_sets_nccl_environment_before_the_group():
    env = {"NCCL_P2P_DISABLE": "0"}
    got = force_network.apply(True, "nccl", env)
    assert env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    assert got["applied"] and got["overridden"] == {"NCCL_P2P_DISABLE": "0"}
    assert force_network.apply(False, "nccl", {}) is None
    assert force_network.apply(True, "gloo", {})["applied"] is False


@pytest.mark.parametrize("log,all_net,local", [
    ("nccl_707_nccl2.7.6_ib_gdr_forced_net", True, None),  # every channel NET/IB
    ("azure_aks_rdma_36_ib_gdr_forced", True, None),
    ("nccl_1814_ibext_v8_p2p_cumem", False, {"P2P": 12}),  # intra-node channels via P2P
    ("nccl_tests_188_socket_p2p_two_hosts", False, None),
])
def test_force_network_check_on_real_nccl_logs(log, all_net, local):
    verdict = force_network.check(parse_files([str(LOGS / f"{log}.log")]))
    assert verdict["all_net"] is all_net
    if all_net:
        assert "warning" not in verdict
    else:
        assert verdict["warning"].startswith("FORCE_NETWORK VIOLATED") and verdict["not_net"]
        assert local is None or verdict["not_net"] == local


def test_force_network_check_without_channel_lines_is_unknown():
    verdict = force_network.check(parse_files([str(LOGS / "nccl_1267_nccl2.19.3_socket_one_rank.log")]))
    assert verdict["all_net"] is None and verdict["reason"]
    assert force_network.check(None) == {"all_net": None, "reason": "no NCCL log with connection lines was read",
                                         "channels": None}


@pytest.mark.parametrize("log,all_net", [("nccl_1814_ibext_v8_p2p_cumem", False),
                                         ("nccl_707_nccl2.7.6_ib_gdr_forced_net", True)])
def test_force_network_flag_lands_in_run_json(tmp_path, log, all_net, capsys):
    """The trainer's fabric watch reads the run's NCCL logs (a real log copied in) and records the check."""
    import shutil

    from telemetry.integrations.recorder import RunRecorder

    logs = tmp_path / "logs"
    logs.mkdir()
    from telemetry.capture.fabric import nccl_log_host
    shutil.copy(LOGS / f"{log}.log", logs / f"nccl.{nccl_log_host()}.1234.log")  # as NCCL_DEBUG_FILE names it
    info = {"backend": "nccl", "transport": None, "nccl": None,
            "force_network": force_network.apply(True, "nccl", {})}
    watch = RunRecorder(str(tmp_path), harness=True)
    watch.rundir.update(fabric=info)  # as start() records it
    watch.on_step_end(1, {})
    check = json.loads((tmp_path / "run.json").read_text())["fabric"]["force_network"]["check"]
    assert check["all_net"] is all_net
    err = capsys.readouterr().err
    assert ("FORCE_NETWORK VIOLATED" in err) is (not all_net)


# ---- found by mutation fuzzing (inputs minimised): a value of the wrong JSON type is unknown, never an exception

def test_values_of_the_wrong_type_read_as_unknown():
    doc = {"args": 1.5, "config": {"nthreads": {}, "ngpus": "2", "devices": [{"rank": 0}, 7]},
           "results": [{"size": 8, "count": [], "type": ["float"], "redop": "sum", "root": [1],
                        "out_of_place": {"time": [], "alg_bw": "1e999", "bus_bw": 99999999999999999999 ** 20,
                                         "nwrong": -1.5},
                        "in_place": 3},
                       {"size": "x"}, {"size": 4}],
           "average_bus_bandwidth": 5.0, "out_of_bounds": [], "fabric_harness": {"op": []}}
    out = parse_json(doc, name_hint="all_reduce_perf.json")
    assert out["world_size"] == 2 and out["dtype"] is None  # one device dict, ngpus "2" (a number as text)
    row = out["ops"]["all_reduce"]["rows"][0]
    assert (row["size"], row["count"], row["type"], row["root"]) == (8, None, None, None)
    assert row["out_of_place"] == {"time_us": None, "algbw_GBps": None, "busbw_GBps": None, "wrong": None}
    assert row["in_place"] is None and out["ops"]["all_reduce"]["avg_busbw_GBps"] is None
    assert parse_json({"config": [], "results": [], "average_bus_bandwidth": {"okay": []}})["ops"]["unknown"][
        "avg_busbw_check"] is None


def test_json_nested_too_deeply_is_an_input_error(tmp_path):
    path = tmp_path / "all_reduce_perf.json"
    path.write_text('{"config": ' + "[" * 100_000, encoding="utf-8")
    with pytest.raises(NcclTestsError, match="nested too deeply"):
        read(str(path))
