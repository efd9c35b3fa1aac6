"""The pushers (telemetry/capture/live_push.py) against real HTTP servers in this process: an OTLP/HTTP
receiver that decodes what the OpenTelemetry SDK sends with the OTLP protobuf definitions, and a
Pushgateway stand-in that records the PUT (the real Pushgateway: test_live_prometheus.py)."""
from __future__ import annotations

import threading

import pytest

from telemetry.capture.live_push import OtlpPusher, PushgatewayPusher
from telemetry.capture.live_series import PREFIX, SERIES, RunSeries
from telemetry.rundir import rank_file
from tests.telemetry.capture.test_live_series import IDENT, rank_line, write_lines

from .loopback import LoopbackServer, QuietHandler


class Receiver(LoopbackServer):
    """A real HTTP server on a free port keeping each request's method, path and body."""

    def __init__(self, status: int = 200):
        got = self.requests = []

        class Handler(QuietHandler):
            def _take(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append((self.command, self.path, self.headers.get("Content-Type"), body))
                self.reply(status)

            do_POST = do_PUT = do_DELETE = _take

        super().__init__(Handler)


@pytest.fixture
def series(tmp_path):
    s = RunSeries(str(tmp_path), [0], IDENT, job_metrics=True)
    write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [rank_line(1), rank_line(2)])
    write_lines(tmp_path / "metrics.jsonl", [{"step": 1, "loss": 3.0, "tokens": 10}, {"step": 2, "loss": 2.0, "tokens": 10}])
    return s


def test_otlp_push_carries_counters_gauges_and_the_job_identity(series):
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    rx = Receiver()
    try:
        pusher = OtlpPusher(series, f"{rx.url}/v1/metrics", 3600)
        series.finished = True  # as LiveExporter.close marks it before the pushers' last push
        pusher.close()
    finally:
        rx.close()
    assert rx.requests and rx.requests[-1][:3] == ("POST", "/v1/metrics", "application/x-protobuf")
    req = ExportMetricsServiceRequest.FromString(rx.requests[-1][3])
    resource = {a.key: a.value.string_value for a in req.resource_metrics[0].resource.attributes}
    # Prometheus's OTLP receiver writes service.name over the points' job label: it must be the job's name
    assert resource["service.name"] == "slurm-42" and resource["service.instance.id"] == "node1"
    metrics = {m.name: m for sm in req.resource_metrics[0].scope_metrics for m in sm.metrics}
    steps = metrics["fabric_harness_steps"]
    assert steps.sum.is_monotonic and steps.sum.aggregation_temporality == 2  # cumulative
    point = steps.sum.data_points[0]
    attrs = {a.key: a.value.string_value for a in point.attributes}
    assert attrs == {"job": "slurm-42", "run": "r1", "host": "node1", "rank": "0"} and point.as_double == 2
    assert metrics["fabric_harness_loss"].gauge.data_points[0].as_double == 2.0
    assert metrics["fabric_harness_step_seconds"].unit == "s"
    assert metrics["fabric_harness_run_finished"].gauge.data_points[0].as_double == 1
    busbw = metrics["fabric_harness_collective_busbw_bytes_per_second"].gauge.data_points
    assert {a.key: a.value.string_value for a in busbw[0].attributes}["scope"] == "inter"


def test_pushgateway_push_replaces_the_group_of_job_run_host(series):
    rx = Receiver()
    try:
        pusher = PushgatewayPusher(series, rx.url, 3600)
        series.finished = True
        pusher.close()
    finally:
        rx.close()
    method, path, _, body = rx.requests[-1]
    assert (method, path) == ("PUT", "/metrics/job/slurm-42/host/node1/run/r1")
    text = body.decode()
    assert 'fabric_harness_steps_total{host="node1",job="slurm-42",rank="0",run="r1"} 2.0' in text
    assert "fabric_harness_run_finished" in text


def test_a_failing_push_is_one_warning_and_the_run_goes_on(series, capsys):
    rx = Receiver(status=500)
    try:
        pusher = PushgatewayPusher(series, rx.url, 3600)
        pusher._safe_push()
        pusher._safe_push()
    finally:
        rx.close()
    assert pusher.failures == 2
    err = capsys.readouterr().err
    assert err.count("warning: Pushgateway push") == 1


def test_a_failing_otlp_push_is_one_warning_not_the_sdks_log_lines(series, capsys, caplog):
    """The SDK's force_flush returns True whatever the export did, and its exporter logs its own lines
    (`Failed to export metrics batch ...`) at every push: a collector refusing each push read as pushes done,
    with no warning of ours and the SDK's lines every interval for the whole run."""
    import logging

    rx = Receiver(status=400)  # a refusal the SDK does not retry: no backoff in the test
    try:
        pusher = OtlpPusher(series, f"{rx.url}/v1/metrics", 3600)
        with caplog.at_level(logging.DEBUG):
            pusher._safe_push()
            pusher._safe_push()
            pusher.close()
    finally:
        rx.close()
    assert len(rx.requests) >= 3 and pusher.failures == 3 and pusher.pushes == 0
    err = capsys.readouterr().err
    assert err.count("warning: OTLP push") == 1 and "400" in err, err
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []


def test_a_rank_line_of_an_unexpected_shape_is_a_failed_push_not_a_dead_thread(series, tmp_path, capsys):
    rx = Receiver()
    try:
        pusher = PushgatewayPusher(series, rx.url, 3600)
        write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [{"step": 3, "comm_groups": ["dp"]}])
        pusher._safe_push()  # the refresh fails inside the guarded push: counted and said, never raised
        pusher._safe_push()
    finally:
        rx.close()
    assert pusher.failures == 1 and pusher.pushes == 1
    assert capsys.readouterr().err.count("warning: Pushgateway push") == 1


def _exporter(tmp_path, environ, **settings):
    from telemetry.capture.live_export import LiveExporter
    from telemetry.settings import TelemetrySettings

    return LiveExporter(TelemetrySettings(**settings), str(tmp_path), environ)


def test_closing_the_exporter_never_raises_and_warns_once(tmp_path, capsys):
    exporter = _exporter(tmp_path, {"RANK": "0", "LOCAL_RANK": "0"}, pushgateway="http://127.0.0.1:9")
    write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [{"step": 1, "comm_groups": ["dp"]}])

    class Broken:
        def close(self):
            raise RuntimeError("push thread gone")
    exporter.pushers = [Broken(), Broken()]
    exporter.close()  # the caller still has the other ranks to wait for
    err = capsys.readouterr().err
    assert err.count("warning: closing the live exporter failed") == 1 and exporter.series.finished


def test_no_pusher_starts_when_another_cannot_be_built(tmp_path, monkeypatch):
    from telemetry.capture import live_push
    from telemetry.errors import InputError

    def no_sdk(*args, **kwargs):
        raise ImportError("no opentelemetry", name="opentelemetry")
    monkeypatch.setattr(live_push.OtlpPusher, "__init__", no_sdk)
    rx = Receiver()
    try:
        exporter = _exporter(tmp_path, {"RANK": "0", "LOCAL_RANK": "0"}, pushgateway=rx.url,
                             otlp="http://127.0.0.1:9/v1/metrics")
        with pytest.raises(InputError, match="telemetry.otlp"):
            exporter.start_push()
    finally:
        rx.close()
    # no push at all: in particular no run_finished for a run that never started
    assert exporter.pushers == [] and rx.requests == []


def test_the_finished_push_waits_for_the_other_local_ranks_last_lines(tmp_path):
    from telemetry.capture import live_export

    rx = Receiver()
    try:
        exporter = _exporter(tmp_path, {"RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, pushgateway=rx.url,
                             push_interval_s=3600)
        exporter.start_push()
        write_lines(tmp_path / rank_file(0, "telemetry.jsonl"), [rank_line(1), rank_line(2)])
        write_lines(tmp_path / rank_file(1, "telemetry.jsonl"), [rank_line(1)])
        # rank 1 writes its last (held) step a moment after rank 0 closes
        later = threading.Timer(0.5, write_lines, (tmp_path / rank_file(1, "telemetry.jsonl"), [rank_line(2)]))
        later.start()
        live_export._EXPORTER[0] = exporter
        live_export.close_exporter(final_step=2, wait_s=30)
        later.join()
    finally:
        live_export._EXPORTER[0] = None
        rx.close()
    from prometheus_client.parser import text_string_to_metric_families

    got = {(s.name, s.labels.get("rank")): s.value
           for fam in text_string_to_metric_families(rx.requests[-1][3].decode()) for s in fam.samples}
    assert got[("fabric_harness_steps_total", "1")] == 2 and got[("fabric_harness_run_finished", None)] == 1


def test_otlp_units_of_rates_are_rates():
    from telemetry.capture.live_push import otlp_unit as unit

    assert unit("collective_busbw_bytes_per_second") == "By/s" and unit("step_collective_bytes") == "By"
    assert unit("tokens_per_second") == "{token}/s" and unit("device_flops_per_second") == "{flop}/s"


# The OpenTelemetry specification's OTLP-to-Prometheus names (a collector's Prometheus exporters, Prometheus' own OTLP
# receiver): the unit's words appended unless the name holds them, "{...}" dropped, "1" becoming "ratio", and
# _total on a counter (https://github.com/open-telemetry/opentelemetry-specification/blob/main/specification/
# compatibility/prometheus_and_openmetrics.md, "OTLP Metric points to Prometheus")
PROM_UNIT_WORDS = {"By": "bytes", "s": "seconds", "J": "joules", "W": "watts", "1": "ratio"}
PROM_PER_WORDS = {"s": "second"}  # "foo/bar": foo_per_bar, bar in the singular


def prometheus_name_of_otlp(name: str, unit: str, counter: bool) -> str:
    main, _, per = unit.partition("/")
    words = [w for w in (PROM_UNIT_WORDS.get(main, main) if "{" not in main else "",
                         f"per_{PROM_PER_WORDS.get(per, per)}" if per else "") if w]
    for w in words:
        if w not in name:
            name += "_" + w
    return name + ("_total" if counter and not name.endswith("_total") else "")


def test_every_series_pushed_over_otlp_keeps_its_prometheus_name():
    # counts (steps, calls, a sweep's sizes measured and planned) had unit "1": through a collector they became
    # fabric_harness_sweep_sizes_planned_ratio and fabric_harness_sweep_sizes_ratio_total, and the dashboard's
    # queries (a sweep's progress) found nothing
    from telemetry.capture.live_push import otlp_unit

    for s in SERIES:
        scraped = PREFIX + s.name + ("_total" if s.kind == "counter" else "")
        assert prometheus_name_of_otlp(PREFIX + s.name, otlp_unit(s.name), s.kind == "counter") == scraped, s.name
    assert otlp_unit("sweep_busbw_bytes_per_second") == "By/s" and otlp_unit("sweep_size_bytes") == "By"
    assert otlp_unit("tokens_per_second") == "{token}/s" and otlp_unit("mfu_ratio") == "1"
