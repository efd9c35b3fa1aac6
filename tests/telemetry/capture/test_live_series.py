"""The live series (telemetry/capture/live_series.py) from rank files of known content, and the exporter's
settings, port and HTTP server (in-process: a real HTTP server on a free port, read with urllib)."""
from __future__ import annotations

import json
import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import generate_latest, CollectorRegistry

from telemetry.capture import live_export
from telemetry.capture.live_series import SERIES, RunSeries
from telemetry.errors import InputError
from telemetry.rundir import rank_file
from telemetry.settings import TelemetrySettings

IDENT = {"job": "slurm-42", "run": "r1", "host": "node1"}


def rank_line(step: int, step_time=0.5, comm_time=0.1, untimed=0, host=False) -> dict:
    line = {"step": step, "step_time_s": step_time, "gpu_energy_j": 100.0, "gpu_power_w": 200.0,
            "comm": {"all_reduce": {"count": 3, "bytes": 1000, "time_s": comm_time, "untimed": untimed}},
            "comm_bytes": 1000, "comm_time_s": comm_time, "exposed_comm_s": 0.05,
            "comm_groups": {"dp": {"dim": "dp", "size": 2, "scope": "inter", "bytes": 1000, "count": 3,
                                   "by_op": {"all_reduce": {"count": 3, "bytes": 1000, "time_s": comm_time,
                                                            "untimed": untimed, "untimed_bytes": 0,
                                                            "busbw_GBps": 2.5}}},
                            "tp": {"dim": "tp", "size": 2, "scope": "intra", "bytes": 64, "count": 1,
                                   "by_op": {"all_gather": {"count": 1, "bytes": 64, "time_s": None,
                                                            "untimed": 1, "untimed_bytes": 64,
                                                            "busbw_GBps": None}}}}}
    if host:
        line["host"] = {"cpu_energy_j": None,
                        "counters": {"net:eth0": {"tx_bytes": 5000, "rx_bytes": 4000, "rx_dropped": 2},
                                     "rdma:mlx5_0/1": {"port_xmit_bytes": 8000, "port_rcv_bytes": 8000}},
                        "congestion": {"pfc": {"rx_pause": {"prio3": 7}, "rx_pause_duration": {"prio3": 99}},
                                       "ecn_marked": 4, "cnp_sent": None, "cnp_received": 1}}
    return line


def write_lines(path, lines, torn: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.write(torn)


def scrape(series: RunSeries) -> dict:
    """{(name, frozenset(labels)): value} from the exposition text prometheus-client renders."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(series)
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def lab(**kw) -> frozenset:
    return frozenset({**IDENT, **kw}.items())


def test_counters_sum_the_steps_since_start_and_gauges_hold_the_newest(tmp_path):
    f0 = tmp_path / rank_file(0, "telemetry.jsonl")
    write_lines(f0, [rank_line(1, step_time=9.0)])  # an earlier attempt's line: before the exporter started
    series = RunSeries(str(tmp_path), [0, 1], IDENT, job_metrics=True)
    write_lines(f0, [rank_line(2, host=True), rank_line(3, step_time=0.7, comm_time=0.2, host=True)],
                torn='{"step": 4, "step_time_s"')  # a line being written: waits for its end
    write_lines(tmp_path / rank_file(1, "telemetry.jsonl"), [rank_line(2), rank_line(3, untimed=1, comm_time=None)])
    write_lines(tmp_path / "metrics.jsonl", [{"step": 2, "loss": 2.5, "tokens": 100, "tokens_per_s": 1e4, "mfu": None,
                                             "lr": 1e-3, "tflops_per_device": 0.5}])
    got = scrape(series)
    p = "fabric_harness_"
    assert got[(p + "steps_total", lab(rank="0"))] == 2
    assert got[(p + "step", lab(rank="0"))] == 3
    assert got[(p + "step_seconds", lab(rank="0"))] == 0.7
    assert got[(p + "train_seconds_total", lab(rank="0"))] == pytest.approx(1.2)
    assert got[(p + "step_compute_seconds", lab(rank="0"))] == pytest.approx(0.5)
    assert got[(p + "comm_seconds_total", lab(rank="0"))] == pytest.approx(0.3)
    dp0 = dict(rank="0", group="dp", scope="inter", op="all_reduce")
    assert got[(p + "collective_bytes_total", lab(**dp0))] == 2000
    assert got[(p + "collective_calls_total", lab(**dp0))] == 6
    assert got[(p + "collective_busbw_bytes_per_second", lab(**dp0))] == 2.5e9
    assert got[(p + "step_collective_seconds", lab(**dp0))] == 0.2
    tp0 = dict(rank="0", group="tp", scope="intra", op="all_gather")
    assert got[(p + "collective_untimed_calls_total", lab(**tp0))] == 2
    assert (p + "step_collective_seconds", lab(**tp0)) not in got  # unknown: no sample, never 0
    assert (p + "collective_busbw_bytes_per_second", lab(**tp0)) not in got
    # rank 1's newest step had an untimed call: its compute time is unknown
    assert (p + "step_compute_seconds", lab(rank="1")) not in got
    assert got[(p + "collective_untimed_calls_total", lab(rank="1", group="dp", scope="inter", op="all_reduce"))] == 1
    assert got[(p + "gpu_energy_joules_total", lab(rank="1"))] == 200
    assert got[(p + "gpu_power_watts", lab(rank="1"))] == 200
    # host counters: from local rank 0's lines only
    assert got[(p + "nic_transmit_bytes_total", lab(device="eth0"))] == 10000
    assert got[(p + "rdma_receive_bytes_total", lab(device="mlx5_0/1"))] == 16000
    assert got[(p + "nic_loss_events_total", lab(device="eth0", counter="rx_dropped"))] == 4
    assert got[(p + "pfc_pause_frames_total", lab(direction="rx", priority="3"))] == 14
    assert got[(p + "ecn_marked_packets_total", lab())] == 8
    assert got[(p + "cnp_received_total", lab())] == 2
    assert (p + "cnp_sent_total", lab()) not in got and (p + "cpu_energy_joules_total", lab()) not in got
    # the job's figures, from metrics.jsonl
    assert got[(p + "loss", lab())] == 2.5 and got[(p + "tokens_total", lab())] == 100
    assert got[(p + "device_flops_per_second", lab())] == 0.5e12
    assert (p + "mfu_ratio", lab()) not in got
    # the torn line completes: read once whole at the next scrape
    write_lines(f0, [], torn=': 0.4}\n')
    got = scrape(series)
    assert got[(p + "step", lab(rank="0"))] == 4 and got[(p + "steps_total", lab(rank="0"))] == 3


def test_tracer_health_becomes_counters_per_group_and_outcome(tmp_path):
    series = RunSeries(str(tmp_path), [0], IDENT, job_metrics=False)
    dp = {"calls": 10, "bytes": 1000, "timed": 7, "timed_bytes": 900, "late": 2, "no_duration": 1, "captured": 0,
          "never_reported": 1, "timing": "completion_hook", "calls_pct": 70.0}
    # the step's totals carry the same counts again: they must not be added under a made-up group
    health = {"calls": 10, "bytes": 1000, "timed": 7, "timed_bytes": 900, "never_reported": 1, "calls_pct": 70.0,
              "by_group": {"dp": dp}, "verdict": "timing covers 70% of calls and 90% of bytes; missing: ..."}
    write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [{**rank_line(1), "comm_health": health}] * 2)
    got = scrape(series)
    calls = {dict(k[1])["outcome"]: v for k, v in got.items() if k[0] == "fabric_harness_tracer_calls_total"}
    assert calls["timed"] == 14 and calls["late"] == 4 and calls["captured"] == 0
    assert "all" not in calls and "never_reported" not in calls and "calls_pct" not in calls
    # the outcomes partition the calls: a sum() over them is every call seen, once
    assert sum(calls.values()) == 20
    tracer = [dict(k[1]) for k in got if k[0].startswith("fabric_harness_tracer_")]
    assert {t["group"] for t in tracer} == {"dp"}
    nbytes = {dict(k[1])["outcome"]: v for k, v in got.items() if k[0] == "fabric_harness_tracer_bytes_total"}
    assert nbytes == {"timed": 1800, "untimed": 200}
    events = {dict(k[1])["kind"]: v for k, v in got.items() if k[0] == "fabric_harness_tracer_events_total"}
    assert events == {"never_reported": 2}


def test_last_steps_say_how_far_each_served_rank_got(tmp_path):
    series = RunSeries(str(tmp_path), [0, 1], IDENT, job_metrics=False)
    write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [rank_line(1), rank_line(2)])
    series.refresh()
    assert series.last_steps() == {0: 2, 1: -1}


def test_every_series_is_named_by_the_conventions():
    for s in SERIES:
        assert s.name == s.name.lower() and not s.name.endswith("_total"), s.name
        assert s.kind in ("gauge", "counter")
        if s.kind == "gauge":
            # a gauge never shares its name with a counter's base
            assert not any(c.name == s.name for c in SERIES if c.kind == "counter")


@pytest.mark.parametrize("value", [0, 70000, "9400", "yes", True, -1, 1.5])
def test_bad_prometheus_values_are_one_line(value):
    problem = live_export.prometheus_problem(value)
    assert problem and problem.startswith("telemetry.prometheus: got") and "auto" in problem


def test_push_settings_are_checked():
    assert live_export.push_problems(None, None, 15) == []
    got = live_export.push_problems("gw:9091", "http://u:p@c:4318/v1/metrics", 0.1)
    assert len(got) == 3 and "telemetry.pushgateway" in got[0] and "credentials" in got[1]


def test_a_targets_dir_without_a_port_to_list_is_refused():
    """telemetry.prometheus_targets_dir with telemetry.prometheus null was silently nothing: no target list
    written, so the Prometheus watching that directory never found the job, and nothing said why."""
    got = live_export.settings_problems(TelemetrySettings(prometheus_targets_dir="/shared/prometheus-targets"))
    assert len(got) == 1 and got[0].startswith("telemetry.prometheus_targets_dir: got '/shared/prometheus-targets'")
    assert "telemetry.prometheus is null" in got[0] and "auto" in got[0], got
    assert live_export.settings_problems(TelemetrySettings(prometheus="auto", prometheus_targets_dir="/x")) == []


@pytest.mark.parametrize("interval", [float("inf"), float("nan")])
def test_a_push_interval_that_is_no_finite_number_is_refused(interval):
    """TelemetrySettings(push_interval_s=inf) (a loop that is not the trainer: its recipe check refuses it)
    passed: the push thread died on its first wait (OverflowError) and nothing was pushed until the end; nan
    passed too (nan < 1 is False), and a wait of nan returns at once: pushes back to back."""
    got = live_export.push_problems("http://gw:9091", None, interval)
    assert len(got) == 1 and got[0].startswith("telemetry.push_interval_s: got") and ">= 1" in got[0], got


@pytest.mark.parametrize("key", ["pushgateway", "otlp"])
@pytest.mark.parametrize("address,words", [
    ("http://", "names no host"),
    ("http://gw:port", "not an address (Port could not be cast to integer value as 'port')"),
    ("http://collector:99999/v1/metrics", "not an address (Port out of range"),
    ("http://gw:0", "port 0; allowed: a port from 1 to 65535"),
    ("http://collector :4318/v1/metrics", "holds a space or control character"),
    ("http://[::1:9091", "not an address (Invalid IPv6 URL)"),
])
def test_a_push_address_that_names_no_server_is_refused(key, address, words):
    """Each was accepted; the run then warned of a failed push every interval until it ended."""
    got = live_export.push_problems(*((address, None) if key == "pushgateway" else (None, address)), 15)
    assert got == [f"telemetry.{key}: got {address!r}; {got[0].split('; ', 1)[1]}"] and words in got[0]
    assert "allowed" in got[0] or "expected" in got[0]


def test_good_push_addresses_pass():
    for address in ("http://gw:9091", "https://[::1]:9091/x", "https://gw", "https://proxy/pushgateway/"):
        assert live_export.push_problems(address, address, 15) == []
    assert live_export.push_problems(None, "http://collector:4318/v1/metrics", 15) == []


def test_a_pushgateway_address_with_the_path_the_push_appends_is_refused():
    """push_to_gateway appends /metrics/job/JOB/...: the scrape path or a grouping path given too pushed to
    /metrics/metrics/job/..., a query or fragment came before the appended path."""
    for address, what in (("http://gw:9091/metrics", "holds /metrics (the scrape path)"),
                          ("http://gw:9091/metrics/job/train", "holds /metrics (the scrape path) or a /metrics/job/"),
                          ("http://gw:9091/?x=1", "holds a ?query or #fragment"),
                          ("http://gw:9091#top", "holds a ?query or #fragment")):
        got = live_export.push_problems(address, None, 15)
        assert len(got) == 1 and got[0].startswith(f"telemetry.pushgateway: got {address!r}; {what}"), got
        assert "allowed: " in got[0]


def test_a_port_in_use_is_one_error_line_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InputError, match=rf"telemetry.prometheus: cannot serve on port {port} .*in use"):
            live_export.open_exporter(TelemetrySettings(prometheus=port), str(tmp_path))
    assert live_export.current() is None


def test_auto_serves_the_node_ranks_over_http_and_writes_its_target(tmp_path, monkeypatch):
    for k, v in {"LOCAL_RANK": "0", "RANK": "0", "LOCAL_WORLD_SIZE": "2", "SLURM_JOB_ID": "42"}.items():
        monkeypatch.setenv(k, v)
    shared = tmp_path / "sd"
    exporter = live_export.open_exporter(TelemetrySettings(prometheus="auto", prometheus_targets_dir=str(shared)),
                                         str(tmp_path))
    try:
        target = json.loads((tmp_path / "logs" / f"prometheus-targets.{exporter.ident['host']}.json").read_text())
        assert target[0]["targets"] == [f"{exporter.ident['host']}:{exporter.port}"]
        assert json.loads((shared / f"42-{tmp_path.name}-{exporter.ident['host']}.json").read_text()) == target
        write_lines(tmp_path / rank_file(1, "telemetry.jsonl"), [rank_line(1)])
        text = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10).read().decode()
        assert 'fabric_harness_step_seconds{host="%s",job="42",rank="1",run="%s"} 0.5' % (
            exporter.ident["host"], tmp_path.name) in text
    finally:
        live_export.close_exporter()
    assert not list((tmp_path / "logs").glob("prometheus-targets.*")) and not list(shared.iterdir())


def test_a_lab_node_names_its_lab_address_and_how_the_host_reaches_it(tmp_path, monkeypatch, capsys):
    """launch.lab names its nodes lab-nodeI, a name that resolves nowhere, and their addresses exist only inside
    the lab's namespaces: the target and the printed line carry the node's address and the namespace to curl from
    (a 5 x 2 lab printed http://lab-node0:46715/metrics, 2026-11-29)."""
    lab = {"addresses": ["10.213.7.1", "10.213.7.2"], "namespaces": ["fh7n0", "fh7n1"]}
    for k, v in {"LOCAL_RANK": "0", "RANK": "2", "LOCAL_WORLD_SIZE": "2", "FABRIC_HARNESS_NODE": "lab-node1",
                 "FABRIC_HARNESS_LAB": json.dumps(lab)}.items():
        monkeypatch.setenv(k, v)
    exporter = live_export.open_exporter(TelemetrySettings(prometheus="auto"), str(tmp_path))
    try:
        target = json.loads((tmp_path / "logs" / "prometheus-targets.lab-node1.json").read_text())
        assert target[0]["targets"] == [f"10.213.7.2:{exporter.port}"] and exporter.ident["host"] == "lab-node1"
        assert (f"at http://10.213.7.2:{exporter.port}/metrics (fabric lab node lab-node1: reachable from inside the "
                f"lab's namespaces only; from the host, ip netns exec fh7n1 curl -s http://10.213.7.2:{exporter.port}"
                "/metrics)") in capsys.readouterr().err
    finally:
        live_export.close_exporter()
    monkeypatch.setenv("FABRIC_HARNESS_LAB", "not json")  # a damaged description: the host name, as elsewhere
    assert live_export.lab_node_address() is None


def test_other_local_ranks_serve_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert live_export.open_exporter(TelemetrySettings(prometheus="auto"), str(tmp_path)) is None


def test_the_docs_list_every_series_and_the_monitoring_examples_parse():
    import yaml

    from tests.conftest import REPO
    doc = (REPO / "docs" / "live.md").read_text()
    for s in SERIES:
        name = "fabric_harness_" + s.name + ("_total" if s.kind == "counter" else "")
        assert f"`{name}`" in doc, name
    kinds = [d["kind"] for d in yaml.safe_load_all((REPO / "launch" / "monitoring" / "kubernetes.yaml").read_text())]
    assert kinds == ["PodMonitor", "Service", "ServiceMonitor"]
    board = json.loads((REPO / "launch" / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    used = {s.name for s in SERIES if f"fabric_harness_{s.name}" in exprs}
    assert used >= {"step_seconds", "comm_seconds", "collective_busbw_bytes_per_second", "step_compute_seconds",
                    "gpu_power_watts", "nic_loss_events", "pfc_pause_frames", "collective_untimed_calls"}


def test_an_unwritable_targets_dir_is_one_error_line_and_frees_the_port(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="telemetry.prometheus_targets_dir: cannot write"):
        live_export.open_exporter(TelemetrySettings(prometheus="auto", prometheus_targets_dir=str(blocker / "sd")),
                                  str(tmp_path / "run"))
    assert live_export.current() is None


def test_otlp_without_the_sdk_is_one_error_line(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_otel(name, *a, **k):
        if name.startswith("opentelemetry"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(builtins, "__import__", no_otel)
    with pytest.raises(InputError, match=r"telemetry.otlp: the OpenTelemetry SDK is not installed .*\[otlp\]"):
        live_export.open_exporter(TelemetrySettings(otlp="http://127.0.0.1:1/v1/metrics"), str(tmp_path))


def test_a_loop_that_only_starts_the_session_gets_the_exporter_too(tmp_path, monkeypatch):
    """The HF Trainer and Lightning callbacks call Telemetry.start() without prepare_environment."""
    from telemetry.capture.session import Telemetry

    for k, v in {"LOCAL_RANK": "0", "RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    tel = Telemetry(TelemetrySettings(prometheus="auto", cross_rank_every=0), str(tmp_path))
    tel.start()
    try:
        port = live_export.current().port
        tel.start_step(1)
        tel.end_step(1, 0.25)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'fabric_harness_step_seconds{host=' in text and ',rank="0",' in text and "} 0.25" in text
    finally:
        tel.close()
    assert live_export.current() is None


def test_telemetry_off_turns_the_exporter_off_but_still_checks_the_values(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert live_export.open_exporter(TelemetrySettings(enabled=False, prometheus="auto"), str(tmp_path)) is None
    assert live_export.current() is None
    with pytest.raises(InputError, match="telemetry.prometheus"):
        live_export.open_exporter(TelemetrySettings(enabled=False, prometheus="yes"), str(tmp_path))


def size_line(op: str, size: int, power=(300.0, 310.0), energy=(3.0, 3.1), wrong=0) -> dict:
    """A line of sweep.jsonl as trainer/sweep/measure.py's size_record writes it (two ranks)."""
    ranks = [{"rank": i, "gpu_power_w": p, "gpu_energy_j": e} for i, (p, e) in enumerate(zip(power, energy))]
    known = [e for e in energy if e is not None]
    return {"op": op, "size": size, "requested_bytes": size, "count": size // 4,
            "out_of_place": None if op == "all_reduce" else {"time_us": 20.0, "algbw_GBps": 0.4, "busbw_GBps": 0.2,
                                                             "wrong": wrong},
            "in_place": {"time_us": 10.0, "algbw_GBps": size / 10e-6 / 1e9, "busbw_GBps": 1.5, "wrong": wrong},
            "gpu_energy_j": sum(known) if known else None, "gpu_power_w": list(power), "ranks": ranks,
            "sizes_planned": 4}


def test_a_sweeps_sizes_become_series_each_size_counted_once(tmp_path):
    series = RunSeries(str(tmp_path), [0], IDENT, job_metrics=True)
    path = tmp_path / "sweep.jsonl"
    write_lines(path, [size_line("all_reduce", 8), size_line("all_reduce", 16), size_line("all_gather", 8, wrong=3)],
                torn='{"op": "all_gather", "si')
    got = scrape(series)
    labels = lambda **kv: frozenset({**IDENT, **kv}.items())  # noqa: E731
    assert got[("fabric_harness_sweep_sizes_total", labels(op="all_reduce"))] == 2
    assert got[("fabric_harness_sweep_sizes_total", labels(op="all_gather"))] == 1  # the torn line waits
    assert got[("fabric_harness_sweep_size_bytes", labels(op="all_reduce"))] == 16
    assert got[("fabric_harness_sweep_sizes_planned", labels(op="all_reduce"))] == 4
    assert got[("fabric_harness_sweep_time_seconds", labels(op="all_reduce", placement="in_place"))] == \
        pytest.approx(10e-6)
    assert ("fabric_harness_sweep_time_seconds", labels(op="all_reduce", placement="out_of_place")) not in got
    assert got[("fabric_harness_sweep_busbw_bytes_per_second", labels(op="all_gather", placement="out_of_place"))] \
        == pytest.approx(0.2e9)
    assert got[("fabric_harness_sweep_wrong_elements_total", labels(op="all_gather"))] == 6
    assert got[("fabric_harness_sweep_gpu_power_watts", labels(op="all_reduce"))] == 610
    assert got[("fabric_harness_sweep_gpu_energy_joules_total", labels(op="all_reduce"))] == pytest.approx(12.2)
    # the end renames the same lines, with the transport, over the file: nothing counted twice
    lines = [size_line("all_reduce", 8), size_line("all_reduce", 16), size_line("all_gather", 8, wrong=3),
             size_line("all_gather", 16, power=(300.0, None), energy=(3.0, None))]
    (tmp_path / "new").write_text("".join(json.dumps({**x, "transport": "tcp"}) + "\n" for x in lines))
    (tmp_path / "new").replace(path)
    got = scrape(series)
    assert got[("fabric_harness_sweep_sizes_total", labels(op="all_reduce"))] == 2
    assert got[("fabric_harness_sweep_sizes_total", labels(op="all_gather"))] == 2
    # one rank's GPU unknown: no job total (a partial sum would read as a drop in power)
    assert ("fabric_harness_sweep_gpu_power_watts", labels(op="all_gather")) not in got
    assert got[("fabric_harness_sweep_gpu_energy_joules_total", labels(op="all_gather"))] == pytest.approx(6.1)


def test_a_node_without_rank_0_serves_no_sweep(tmp_path):
    series = RunSeries(str(tmp_path), [2, 3], IDENT, job_metrics=False)
    write_lines(tmp_path / "sweep.jsonl", [size_line("all_reduce", 8)])
    assert not [k for k in scrape(series) if k[0].startswith("fabric_harness_sweep_")]


def test_a_rerun_serves_its_own_sizes_not_the_earlier_attempts(tmp_path):
    # a rerun in the same run directory: the exporter opens (trainer/run.py, open_live) before the sweep moves the
    # earlier attempt's record to logs/sweep.attempt-N (trainer/sweep/output.py keep_earlier_record), and a scrape
    # can come in between. The earlier attempt's sizes are not this run's: neither counted nor served, and this
    # run's sizes (the same ops and sizes) are counted and served as they come
    path = tmp_path / "sweep.jsonl"
    earlier = [size_line("all_reduce", 8), size_line("all_reduce", 16)]
    write_lines(path, [{**x, "transport": "tcp"} for x in earlier])
    series = RunSeries(str(tmp_path), [0], IDENT, job_metrics=True)
    labels = lambda **kv: frozenset({**IDENT, **kv}.items())  # noqa: E731
    assert not [k for k in scrape(series) if k[0].startswith("fabric_harness_sweep_")]
    (tmp_path / "logs" / "sweep.attempt-1").mkdir(parents=True)
    path.replace(tmp_path / "logs" / "sweep.attempt-1" / "sweep.jsonl")
    rerun = {**size_line("all_reduce", 8), "in_place": {"time_us": 40.0, "algbw_GBps": 0.2, "busbw_GBps": 0.4,
                                                        "wrong": 0}}
    write_lines(path, [rerun])
    got = scrape(series)
    assert got[("fabric_harness_sweep_sizes_total", labels(op="all_reduce"))] == 1
    assert got[("fabric_harness_sweep_size_bytes", labels(op="all_reduce"))] == 8
    assert got[("fabric_harness_sweep_time_seconds", labels(op="all_reduce", placement="in_place"))] == \
        pytest.approx(40e-6)


def test_a_resumes_kept_steps_are_not_counted_again(tmp_path):
    # a resume moves metrics.jsonl aside and writes the steps up to its checkpoint into a new one
    # (telemetry/rundir.py open_metrics) after the exporter opened: read whole as a replaced file, those steps
    # (an earlier attempt's) were counted as this run's: job_steps_total and tokens_total jumped by them
    now = time.time()
    old = [{"step": s, "loss": 3.0, "tokens": 10, "time": now - 100 + s} for s in range(1, 6)]
    write_lines(tmp_path / "metrics.jsonl", old)
    series = RunSeries(str(tmp_path), [0], IDENT, job_metrics=True)
    labels = frozenset(IDENT.items())
    assert ("fabric_harness_job_steps_total", labels) not in scrape(series)
    (tmp_path / "logs").mkdir()
    (tmp_path / "metrics.jsonl").replace(tmp_path / "logs" / "metrics.before-resume-1.jsonl")
    write_lines(tmp_path / "metrics.jsonl", old[:3] + [{"step": 4, "loss": 1.5, "tokens": 10, "time": time.time()}])
    got = scrape(series)
    assert got[("fabric_harness_job_steps_total", labels)] == 1 and got[("fabric_harness_tokens_total", labels)] == 10
    assert got[("fabric_harness_loss", labels)] == 1.5
