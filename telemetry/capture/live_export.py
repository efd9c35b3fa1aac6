"""The live exporter: one per node, in the process of its local rank 0.

    telemetry.prometheus: 9400 | auto | null     serve http://HOST:PORT/metrics (auto: a free port)
    telemetry.pushgateway: http://gw:9091        push there every push_interval_s
    telemetry.otlp: http://collector:4318/v1/metrics   the same series over OTLP/HTTP

How a node serves its ranks: local rank 0 serves (or pushes) every local rank's series, read from the rank
files they write anyway (telemetry/capture/live_series.py), so the other ranks do nothing for it and one
port per node is scraped, whatever the GPUs per node. The port is taken in `open_exporter`, which
Telemetry.prepare_environment calls before the process group and any GPU work: a port in use or a bad
value is one error line at start. The address (with `auto`, a free port) is printed and written as a
Prometheus file_sd target list, logs/prometheus-targets.HOST.json, and into `prometheus_targets_dir` when
set, for a scrape config that watches that directory (docs/live.md).
"""
from __future__ import annotations

import atexit
import math
import os
import re
import time
import sys

from telemetry.capture.live_series import RunSeries, identity
from telemetry.errors import InputError
from telemetry.rundir import LOGS, write_json_atomic
from telemetry.settings import TelemetrySettings

PUSH_INTERVAL_MIN_S = 1.0


def prometheus_problem(value) -> str | None:
    """None when `telemetry.prometheus` is usable: null (off), a port 1-65535, or "auto"."""
    if value is None or value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return None
    return f"telemetry.prometheus: got {value!r}; allowed: {TelemetrySettings.ALLOWED['prometheus']}"


def _address_problem(value) -> str | None:
    """What is wrong with a push address (None when usable): an http(s) URL with a host, a port 1-65535 if
    given, no spaces. The push itself only failed, with a warning every interval for the whole run, on an
    address that cannot name a server (`http://`, `http://gw:port`, `http://c:99999/v1/metrics`)."""
    from urllib.parse import urlsplit

    if not (isinstance(value, str) and value.startswith(("http://", "https://"))):
        return "expected an http:// or https:// address, or null"
    if any(c.isspace() or not c.isprintable() for c in value):
        return "holds a space or control character; allowed: an http:// or https:// address without spaces"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:  # a port that is not a number, or out of range; a malformed [IPv6] host
        return f"not an address ({exc}); allowed: http://HOST:PORT with a port from 1 to 65535"
    if not parts.hostname:
        return "names no host; allowed: http://HOST:PORT (e.g. http://gw:9091)"
    if port == 0:
        return "port 0; allowed: a port from 1 to 65535"
    return None


def _gateway_path_problem(url: str) -> str | None:
    """prometheus_client's push_to_gateway appends /metrics/job/JOB/LABEL/VALUE... to the address: a query or
    fragment would end up before that path, and a grouping path of the user's own would nest a second one."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        return ("holds a ?query or #fragment, which the push would put before the /metrics/job/... it appends; "
                "allowed: http://HOST:PORT (or a proxy's path prefix) without ? or #")
    if "/metrics/job/" in parts.path + "/" or parts.path.rstrip("/").endswith("/metrics"):
        return ("holds /metrics (the scrape path) or a /metrics/job/... grouping path; the push appends "
                "/metrics/job/JOB and the run and host labels itself; allowed: the gateway's address alone, "
                "http://HOST:PORT (or a proxy's path prefix)")
    return None


def push_problems(pushgateway, otlp, interval_s) -> list[str]:
    p = []
    for key, value in (("pushgateway", pushgateway), ("otlp", otlp)):
        if value is None:
            continue
        if isinstance(value, str) and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
            p.append(f"telemetry.{key}: credentials in the address would be recorded; allowed: an address without "
                     "user:password@")
        elif problem := _address_problem(value):
            p.append(f"telemetry.{key}: got {value!r}; {problem}")
        elif key == "pushgateway" and (problem := _gateway_path_problem(value)):
            p.append(f"telemetry.pushgateway: got {value!r}; {problem}")
    if (not isinstance(interval_s, (int, float)) or isinstance(interval_s, bool) or not math.isfinite(interval_s)
            or interval_s < PUSH_INTERVAL_MIN_S):
        p.append(f"telemetry.push_interval_s: got {interval_s!r}; expected seconds >= {PUSH_INTERVAL_MIN_S:g} "
                 "(a finite number)")
    return p


def settings_problems(s) -> list[str]:
    """Every problem of the live settings of a TelemetrySettings (the recipe check and the library's)."""
    problem = prometheus_problem(s.prometheus)
    p = [problem] if problem else []
    targets = getattr(s, "prometheus_targets_dir", None)
    if targets is not None and s.prometheus is None:  # else silently nothing: no target list, no error
        p.append(f"telemetry.prometheus_targets_dir: got {targets!r} while telemetry.prometheus is null, so no "
                 "node serves a port to list there; allowed: telemetry.prometheus set (a port, or auto) with it, "
                 "or prometheus_targets_dir: null")
    return p + push_problems(s.pushgateway, s.otlp, s.push_interval_s)


def local_ranks(environ=os.environ) -> list[int]:
    """This node's ranks as torchrun (and our Slurm launch) number them: local ranks are consecutive."""
    rank, local = int(environ.get("RANK", "0")), int(environ.get("LOCAL_RANK", "0"))
    size = int(environ.get("LOCAL_WORLD_SIZE", "1"))
    return list(range(rank - local, rank - local + size))


def lab_node_address(environ=os.environ) -> tuple[str, str] | None:
    """(address, namespace) of this node when it is a node of the fabric lab (launch.lab sets
    FABRIC_HARNESS_LAB and FABRIC_HARNESS_NODE=lab-nodeI), else None. Its host name (lab-nodeI) resolves
    nowhere, and its address is reachable only from inside the lab's namespaces, not from the host's own."""
    import json

    m = re.fullmatch(r"lab-node(\d+)", environ.get("FABRIC_HARNESS_NODE", ""))
    try:
        lab = json.loads(environ.get("FABRIC_HARNESS_LAB") or "null")
        return (str(lab["addresses"][int(m.group(1))]), str(lab["namespaces"][int(m.group(1))])) if m else None
    except (ValueError, TypeError, KeyError, IndexError):
        return None


class LiveExporter:
    def __init__(self, settings, run_dir: str, environ=os.environ):
        self.s, self.run_dir = settings, run_dir
        self.lab_node = lab_node_address(environ)
        self.ident = identity(run_dir, environ)
        rank = int(environ.get("RANK", "0"))
        ranks = local_ranks(environ)
        self.series = RunSeries(run_dir, ranks, self.ident, job_metrics=0 in ranks or rank == 0)
        self.server = None
        self.port: int | None = None
        self.pushers: list = []

    def serve(self) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.series)
        port = 0 if self.s.prometheus == "auto" else int(self.s.prometheus)
        try:
            self.server, _ = start_http_server(port, addr="0.0.0.0", registry=registry)
        except OSError as exc:
            raise InputError(f"telemetry.prometheus: cannot serve on port {port} of {self.ident['host']}: "
                             f"{exc.strerror or exc}; allowed: a free port, or auto") from None
        self.port = self.server.server_port
        self.registry = registry
        os.makedirs(os.path.join(self.run_dir, LOGS), exist_ok=True)
        # a lab node: its address on the lab's links (any lab namespace reaches it), not its name, which resolves nowhere
        target = f"{self.lab_node[0] if self.lab_node else self.ident['host']}:{self.port}"
        for path in self.targets_paths:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                write_json_atomic(path, [{"targets": [target], "labels": {"run": self.ident["run"]}}])
            except OSError as exc:
                self.close()
                raise InputError(f"telemetry.prometheus_targets_dir: cannot write {path}: {exc.strerror or exc}; "
                                 "allowed: a writable directory, or null") from None
        where = (f" (fabric lab node {self.ident['host']}: reachable from inside the lab's namespaces only; from the host, "
                 f"ip netns exec {self.lab_node[1]} curl -s http://{target}/metrics)" if self.lab_node else "")
        print(f"[telemetry] Prometheus metrics of ranks {self.series.ranks[0]}-{self.series.ranks[-1]} at "
              f"http://{target}/metrics{where}", file=sys.stderr, flush=True)

    @property
    def targets_paths(self) -> list[str]:
        """The run's own target list, and one in `telemetry.prometheus_targets_dir` (a directory Prometheus'
        file_sd watches: its globs match file names only, not directories of runs)."""
        paths = [os.path.join(self.run_dir, LOGS, f"prometheus-targets.{self.ident['host']}.json")]
        if self.s.prometheus_targets_dir:
            name = "-".join(re.sub(r"[^\w.-]", "_", self.ident[k]) for k in ("job", "run", "host"))
            paths.append(os.path.join(self.s.prometheus_targets_dir, f"{name}.json"))
        return paths

    def start_push(self) -> None:
        """Every pusher built before any starts: one that cannot be built leaves no other pushing (and no
        run_finished for a run that never started)."""
        from telemetry.capture.live_push import OtlpPusher, PushgatewayPusher

        pushers = []
        if self.s.pushgateway:
            pushers.append(PushgatewayPusher(self.series, self.s.pushgateway, self.s.push_interval_s))
        if self.s.otlp:
            try:
                pushers.append(OtlpPusher(self.series, self.s.otlp, self.s.push_interval_s))
            except ImportError as exc:
                self.close()
                raise InputError(f"telemetry.otlp: the OpenTelemetry SDK is not installed ({exc.name}); allowed: "
                                 "pip install -e '.[otlp]', or telemetry.otlp: null") from None
        self.pushers = [p.start() for p in pushers]

    def set_hosts(self, hosts: list[str]) -> None:
        """Every rank's host, once known: serve exactly the ranks on this host."""
        mine = [r for r, h in enumerate(hosts) if h == self.ident["host"]]
        if mine:
            self.series.set_ranks(mine)

    def close(self) -> None:
        """The last lines read, the run marked finished in a last push; the server stops. Never raises: the
        caller still has ranks to wait for (a failure here is one warning line)."""
        try:
            self.series.refresh()
        except Exception as exc:
            self._warn(exc)
        self.series.finished = True
        for pusher in self.pushers:
            try:
                pusher.close()
            except Exception as exc:
                self._warn(exc)
        if self.server is not None:
            try:
                self.server.shutdown()
                self.server.server_close()
            except Exception as exc:
                self._warn(exc)
            self.server = None
        if self.port is not None:
            for path in self.targets_paths:
                try:
                    os.remove(path)  # no scraping of a port that is gone (or reused)
                except OSError:
                    pass

    def _warn(self, exc: Exception) -> None:
        if not getattr(self, "_warned", False):
            self._warned = True
            print(f"[telemetry] warning: closing the live exporter failed ({type(exc).__name__}: {exc}); "
                  "the run goes on", file=sys.stderr, flush=True)

    def wait_final(self, final_step: int, timeout_s: float) -> bool:
        """Wait (bounded) until every served rank's file has reached `final_step`: the other local ranks
        write their last (held) step lines a moment after this one, and the finished push should carry
        them. True when all arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.series.refresh()
                if all(s >= final_step for s in self.series.last_steps().values()):
                    return True
            except Exception as exc:
                self._warn(exc)
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


_EXPORTER: list[LiveExporter | None] = [None]  # the process's one exporter (a port is a process-wide thing)


def open_exporter(settings, run_dir: str | None, environ=os.environ) -> LiveExporter | None:
    """On a node's local rank 0, when a live setting is on: take the port, start the pushers. Before any
    GPU work; raises InputError with one line for a bad value or a port in use."""
    problems = settings_problems(settings)
    if problems:
        raise InputError("; ".join(problems))
    wanted = settings.prometheus is not None or settings.pushgateway or settings.otlp
    if not wanted or not settings.enabled or int(environ.get("LOCAL_RANK", "0")) != 0:
        return None
    if _EXPORTER[0] is not None:
        return _EXPORTER[0]
    if not run_dir:
        raise InputError("telemetry.prometheus/pushgateway/otlp: the live series are read from the run directory; "
                         "give the telemetry a run_dir")
    exporter = LiveExporter(settings, run_dir, environ)
    if settings.prometheus is not None:
        exporter.serve()
    exporter.start_push()
    _EXPORTER[0] = exporter
    atexit.register(close_exporter)  # a run that fails before its telemetry closes leaves no stale target
    return exporter


def current() -> LiveExporter | None:
    return _EXPORTER[0]


# beyond the other ranks' hold_reports_s: their last held lines are written when their own close flushes them
FINAL_WAIT_MARGIN_S = 3.0


def close_exporter(final_step: int | None = None, wait_s: float = 0.0) -> None:
    """Close this process's exporter. `final_step`: the run's last step; the other local ranks' last (held)
    lines are waited for, up to `wait_s`, so that the finished push carries them."""
    exporter, _EXPORTER[0] = _EXPORTER[0], None
    if exporter is None:
        return
    if final_step is not None and wait_s > 0:
        exporter.wait_final(final_step, wait_s)
    exporter.close()


def final_wait_s(hold_reports_s: float | None) -> float:
    """How long local rank 0 waits for the other local ranks' last lines at the end."""
    return float(hold_reports_s or 0.0) + FINAL_WAIT_MARGIN_S


def exposition() -> bytes:
    """The current exposition text of this process's exporter (for tests and promtool)."""
    from prometheus_client import generate_latest

    exporter = _EXPORTER[0]
    return generate_latest(exporter.registry) if exporter is not None and exporter.server is not None else b""

