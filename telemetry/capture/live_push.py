"""Pushing the live series, for jobs the scraper cannot reach: a Prometheus Pushgateway (prometheus-client's
push_to_gateway) and an OpenTelemetry collector over OTLP/HTTP (the OpenTelemetry SDK's exporter). Each
pusher is a daemon thread on the node's local rank 0 that reads the rank files and pushes every
`push_interval_s`; a push that fails is one warning line, and the run goes on. At the end a last push
carries `fabric_harness_run_finished 1`: the Pushgateway keeps the group (so the last values stay
readable) until someone deletes it (docs/live.md)."""
from __future__ import annotations

import logging
import math
import sys
import threading

from telemetry.capture.live_series import BY_NAME, PREFIX, RunSeries

# longest suffix first: bytes_per_second is a rate, not a size
UNITS = {"bytes_per_second": "By/s", "tokens_per_second": "{token}/s", "samples_per_second": "{sample}/s",
         "flops_per_second": "{flop}/s", "seconds": "s", "bytes": "By", "joules": "J",
         "watts": "W", "ratio": "1"}


def otlp_unit(name: str) -> str:
    """A series' OTLP unit, from its name's suffix; none for a count (steps, calls, a sweep's sizes). A Prometheus
    fed by OTLP appends the unit's words to the name unless the name holds them, and "1" becomes "_ratio": a count
    with unit "1" was fabric_harness_sweep_sizes_ratio_total there, not the name scraped (the OpenTelemetry
    specification, compatibility/prometheus_and_openmetrics.md)."""
    return next((u for suffix, u in UNITS.items() if name.endswith(suffix)), "")


class _Pusher:
    what = "push"

    def __init__(self, series: RunSeries, url: str, interval_s: float):
        self.series, self.url, self.interval_s = series, url, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"fabric-harness-{self.what}", daemon=True)
        self.failures = 0
        self.pushes = 0

    def start(self):
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._safe_push()

    def _safe_push(self) -> None:
        try:  # a rank line of an unexpected shape is a failed push too, never a dead thread
            self.series.refresh()
            self.push()
            self.pushes += 1
        except Exception as exc:  # the job goes on without its live series; said once, counted
            self.failures += 1
            if self.failures == 1:
                print(f"[telemetry] warning: {self.what} to {self.url} failed ({type(exc).__name__}: {exc}); "
                      "retrying every interval", file=sys.stderr, flush=True)

    def push(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)  # a push in flight has its own 10 s timeout
        self._safe_push()  # the last lines, with run_finished
        self.shutdown()

    def shutdown(self) -> None:
        pass


class PushgatewayPusher(_Pusher):
    """PUT of the whole group job/<job>/host/<host>/run/<run>: each push replaces the last."""
    what = "Pushgateway push"

    def __init__(self, series: RunSeries, url: str, interval_s: float):
        super().__init__(series, url, interval_s)
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(series))
        self.grouping = {"run": series.ident["run"], "host": series.ident["host"]}

    def push(self) -> None:
        from prometheus_client import push_to_gateway

        push_to_gateway(self.url, job=self.series.ident["job"], registry=self.registry, grouping_key=self.grouping,
                        timeout=10)


class _Families:
    """The series' families without reading the files again (the pusher has just refreshed them)."""

    def __init__(self, series: RunSeries):
        self.series = series

    def collect(self):
        yield from self.series.families()


class OtlpPusher(_Pusher):
    """The same series as OTLP metrics: counters as cumulative monotonic sums, gauges as gauges, with the
    job, run, host (and rank, group, scope, op, ...) as attributes."""
    what = "OTLP push"

    def __init__(self, series: RunSeries, url: str, interval_s: float):
        super().__init__(series, url, interval_s)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        ident = series.ident
        exporter = OTLPMetricExporter(endpoint=url, timeout=10)
        self._results: list = []  # what each export of the current push returned
        self._sdk_said: list[str] = []  # the SDK's own log lines of the current push, said once in our warning
        inner = exporter.export

        def export(metrics_data, *args, **kwargs):
            result = inner(metrics_data, *args, **kwargs)
            self._results.append(result)
            return result
        exporter.export = export
        self._quiet = _SdkLines(self._sdk_said)
        # collected only when this thread flushes (infinite interval): one read of the files per push
        self.reader = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
        # Prometheus's OTLP receiver (and Mimir) write service.name over a point's `job` label and
        # service.instance.id as `instance`: the job's own name keeps the label a scrape would give
        resource = Resource.create({"service.name": ident["job"], "service.instance.id": ident["host"]})
        self.provider = MeterProvider(resource=resource, metric_readers=[self.reader])
        meter = self.provider.get_meter("fabric_harness.live")
        base = {"job": ident["job"], "run": ident["run"], "host": ident["host"]}
        self._current: dict = {}

        def observer(name: str):
            labels = BY_NAME[name].labels

            def callback(options: CallbackOptions):
                return [Observation(v, {**base, **dict(zip(labels, vals))}) for vals, v in self._current.get(name, [])]
            return callback

        for s in BY_NAME.values():
            make = meter.create_observable_counter if s.kind == "counter" else meter.create_observable_gauge
            make(PREFIX + s.name, callbacks=[observer(s.name)], unit=otlp_unit(s.name), description=s.help)

    def push(self) -> None:
        """One export. The SDK's force_flush says True whatever the export did and its exporter logs its own
        lines each time: the export's result decides, and the SDK's words go into our one warning."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        self._current = self.series.samples()
        self._results.clear()
        self._sdk_said.clear()
        with self._quiet:
            flushed = self.provider.force_flush(timeout_millis=15000)
        if not flushed or any(r is not MetricExportResult.SUCCESS for r in self._results):
            # the first cause and the outcome (a retried export logs a line per attempt)
            said = "; ".join(dict.fromkeys(x[:300] for x in self._sdk_said[:1] + self._sdk_said[-1:]))
            said = said or "the export did not complete"
            raise RuntimeError(f"the collector did not take the export: {said}")

    def shutdown(self) -> None:
        with self._quiet:
            self.provider.shutdown(timeout_millis=5000)


class _SdkLines(logging.Filter):
    """While active: the OpenTelemetry SDK's log records are kept (for our one warning), not printed."""

    LOGGERS = ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "opentelemetry.exporter.otlp.proto.http._common",
               "opentelemetry.exporter.otlp.proto.common._internal",
               "opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder",
               "opentelemetry.sdk.metrics._internal.export")

    def __init__(self, said: list):
        super().__init__()
        self.said = said

    def filter(self, record: logging.LogRecord) -> bool:
        self.said.append(record.getMessage())
        return False

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)
