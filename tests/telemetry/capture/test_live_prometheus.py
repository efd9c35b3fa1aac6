"""The live series against the real thing: Debian's Prometheus scrapes a 2-rank CPU torchrun run of
tiny_llama_lora (found through the file_sd target list the run writes with telemetry.prometheus=auto),
Debian's Pushgateway receives the pushed series, promtool validates the exposition text, and every query
of the Grafana dashboard returns data from that Prometheus (or, for the series only hardware has, none).

Without the binaries these tests skip with the reason, except under CI (CI set, as .ci/run is run), where
they fail: .ci/run installs the prometheus and prometheus-pushgateway packages."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.integration

DASHBOARD = REPO / "launch" / "monitoring" / "grafana-dashboard.json"
JOB = "livetest"
# series only real hardware produces (GPU, RDMA, switches' congestion counters, a BMC, RAPL): on this CPU
# machine their queries must return nothing (unknown is no sample, never a made-up 0)
HARDWARE_ONLY = ("gpu_", "rdma_", "pfc_", "ecn_", "cnp_", "mfu_", "server_", "cpu_energy")


def _binaries() -> dict:
    found = {name: shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
             for name in ("prometheus", "prometheus-pushgateway", "promtool")}
    missing = [n for n, p in found.items() if p is None]
    if missing:
        problem = f"{', '.join(missing)} not installed (apt-get install prometheus prometheus-pushgateway)"
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI must check the live series against a real Prometheus (.ci/run installs it)")
        pytest.skip(problem)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {seconds} s")


class Prom:
    def __init__(self, base: str):
        self.base = base

    def get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        body = json.loads(urllib.request.urlopen(url, timeout=20).read())
        assert body["status"] == "success", body
        return body["data"]

    def last(self, expr: str) -> list[dict]:
        """Each series' last scraped sample (range selectors skip the staleness markers of a finished run)."""
        return self.get("/api/v1/query", query=f"last_over_time({expr}[30m])")["result"]


def _servers(bins: dict, tmp: Path, out: Path) -> tuple[list, int, int]:
    """Debian's Prometheus, scraping what file_sd finds in OUT/logs (the target list a run writes), and a
    Pushgateway: (processes, Prometheus port, Pushgateway port)."""
    (out / "logs").mkdir(parents=True)  # the directory file_sd watches
    prom_port, gw_port = _free_port(), _free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: fabric_harness\n"
        "    honor_labels: true\n"  # the series keep the job label they carry (docs/live.md)
        "    file_sd_configs:\n"
        f"      - files: ['{out}/logs/prometheus-targets.*.json']\n"
        "        refresh_interval: 1s\n")
    procs = [subprocess.Popen([bins["prometheus"], f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{prom_port}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "w")),
             # Debian's build persists to /var/lib/prometheus by default: another run's groups came back
             subprocess.Popen([bins["prometheus-pushgateway"], f"--web.listen-address=127.0.0.1:{gw_port}",
                               f"--persistence.file={tmp / 'pushgateway.data'}"],
                              stdout=subprocess.DEVNULL, stderr=open(tmp / "pushgateway.log", "w"))]
    try:
        _wait_http(f"http://127.0.0.1:{prom_port}/-/ready")
        _wait_http(f"http://127.0.0.1:{gw_port}/-/ready")
    except BaseException:
        for p in procs:
            p.terminate()
        raise
    return procs, prom_port, gw_port


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    bins = _binaries()
    tmp = tmp_path_factory.mktemp("live")
    out = tmp / "run"
    procs, prom_port, gw_port = _servers(bins, tmp, out)
    try:
        texts: list[str] = []
        stop = threading.Event()

        def capture():  # the exposition text while the run is live, for promtool
            while not stop.is_set():
                for path in glob.glob(str(out / "logs" / "prometheus-targets.*.json")):
                    try:
                        target = json.loads(Path(path).read_text())[0]["targets"][0]
                        text = urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read().decode()
                    except (OSError, ValueError, IndexError, KeyError):
                        continue
                    if "fabric_harness_collective_bytes_total" in text and "fabric_harness_loss" in text:
                        texts.append(text)
                stop.wait(0.5)

        watcher = threading.Thread(target=capture, daemon=True)
        watcher.start()
        # the terminal view following the live run (plain lines: a pipe), ending by itself when the run ends
        follow = subprocess.Popen([sys.executable, "-m", "telemetry", "watch", str(out), "--interval", "0.5"],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        t0 = time.time()
        res = run_cli(out, "max_steps=40", "data.seq_len=128", "train.log_every=10", "train.eval_every_samples=null",
                      "distributed.timeout_s=60", "telemetry.prometheus=auto",
                      f"telemetry.pushgateway=http://127.0.0.1:{gw_port}", "telemetry.push_interval_s=1",
                      nproc=2, env={"FABRIC_HARNESS_JOB": JOB}, timeout=400)
        stop.set()
        watcher.join()
        assert res.returncode == 0, res.stderr[-3000:]
        followed = follow.communicate(timeout=60)
        time.sleep(1)
        yield {"out": out, "prom": Prom(f"http://127.0.0.1:{prom_port}"), "gw": f"http://127.0.0.1:{gw_port}",
               "texts": texts, "followed": (follow.returncode, *followed), "t0": t0, "t1": time.time(), "res": res, "promtool": bins["promtool"]}
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def _lines(out: Path, rank: int) -> list[dict]:
    path = out / "ranks" / f"rank{rank:05d}.telemetry.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_prometheus_scrapes_every_rank_with_values_from_the_run_directory(live_run):
    prom, out = live_run["prom"], live_run["out"]
    steps = prom.last("fabric_harness_step")
    assert {s["metric"]["rank"] for s in steps} == {"0", "1"}, steps
    for s in steps:
        labels = s["metric"]
        assert labels["job"] == JOB and labels["run"] == out.name and labels["host"] == socket.gethostname()
        rank, step = int(labels["rank"]), int(float(s["value"][1]))
        lines = _lines(out, rank)
        line = next(x for x in lines if x["step"] == step)
        # gauges: the scraped step's own values
        got = prom.last(f'fabric_harness_step_seconds{{rank="{rank}"}}')
        assert float(got[0]["value"][1]) == pytest.approx(line["step_time_s"], rel=1e-9)
        # counters: the sum over the steps up to the scraped one
        n = prom.last(f'fabric_harness_steps_total{{rank="{rank}"}}')
        assert float(n[0]["value"][1]) == step
        expr = f'fabric_harness_collective_bytes_total{{rank="{rank}",group="dp",scope="intra",op="all_reduce"}}'
        want = sum(x["comm_groups"]["dp"]["by_op"]["all_reduce"]["bytes"] for x in lines if x["step"] <= step)
        assert float(prom.last(expr)[0]["value"][1]) == want
        # the tracer's health (comm_health): calls the tracer saw and timed, per group
        expr = f'fabric_harness_tracer_calls_total{{rank="{rank}",group="dp",outcome="timed"}}'
        want = sum(x["comm_health"]["by_group"]["dp"]["timed"] for x in lines if x["step"] <= step)
        assert float(prom.last(expr)[0]["value"][1]) == want > 0
        # the outcomes partition the calls: their sum is every call the tracer saw, counted once
        outcomes = prom.last(f'fabric_harness_tracer_calls_total{{rank="{rank}",group="dp"}}')
        want = sum(x["comm_health"]["by_group"]["dp"]["calls"] for x in lines if x["step"] <= step)
        assert sum(float(o["value"][1]) for o in outcomes) == want
        assert not prom.last('fabric_harness_tracer_calls_total{outcome="all"}')
        assert not prom.last('fabric_harness_tracer_calls_total{group="all"}')
    # the job's figures, from metrics.jsonl (rank 0's node)
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    n = int(float(prom.last("fabric_harness_job_steps_total")[0]["value"][1]))
    assert n >= 1
    loss = prom.last("fabric_harness_loss")[0]
    assert loss["metric"]["job"] == JOB
    assert float(loss["value"][1]) == pytest.approx(metrics[n - 1]["loss"], rel=1e-9)
    assert float(prom.last("fabric_harness_tokens_total")[0]["value"][1]) == sum(m["tokens"] for m in metrics[:n])


def test_the_exposition_text_passes_promtool(live_run):
    assert live_run["texts"], "no exposition text was read while the run was live"
    proc = subprocess.run([live_run["promtool"], "check", "metrics"], input=live_run["texts"][-1],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_pushgateway_holds_the_pushed_series_marked_finished(live_run):
    text = urllib.request.urlopen(f"{live_run['gw']}/metrics", timeout=10).read().decode()
    run = live_run["out"].name
    finished = [x for x in text.splitlines() if x.startswith("fabric_harness_run_finished{")]
    assert finished and f'run="{run}"' in finished[0] and f'job="{JOB}"' in finished[0] and finished[0].endswith(" 1")
    metrics = [json.loads(x) for x in (live_run["out"] / "metrics.jsonl").read_text().splitlines()]
    pushed = [x for x in text.splitlines() if x.startswith("fabric_harness_job_steps_total{")]
    assert pushed and float(pushed[0].rsplit(" ", 1)[1]) == len(metrics)  # the last push read every line
    ranks = {m.group(1) for m in re.finditer(r'fabric_harness_steps_total\{[^}]*rank="(\d+)"', text)}
    assert ranks == {"0", "1"}


def _dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def _variable_values(prom: Prom, job: str, run: str, t0: float, t1: float) -> dict[str, list[str]]:
    """The dashboard's job, run and host variables as Grafana fills them: label_values(SELECTOR, LABEL), the
    selector with the variables already chosen, through Prometheus' label values API."""
    board = json.loads(DASHBOARD.read_text())
    out = {}
    for var in board["templating"]["list"]:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query or "")
        if m:
            selector = m.group(1).replace("$job", job).replace("$run", run)
            out[var["name"]] = prom.get(f"/api/v1/label/{m.group(2)}/values", **{"match[]": selector},
                                        start=t0, end=t1)
    return out


def test_the_dashboards_variables_list_the_scraped_run(live_run):
    got = _variable_values(live_run["prom"], JOB, live_run["out"].name, live_run["t0"], live_run["t1"])
    assert JOB in got["job"] and live_run["out"].name in got["run"] and got["host"], got


def test_every_dashboard_query_returns_data_from_the_scraped_run(live_run):
    prom = live_run["prom"]
    empty, wrong = [], []
    for title, expr in _dashboard_queries():
        q = (expr.replace("$job", JOB).replace("$run", live_run["out"].name).replace("$host", ".*")
             .replace("$__rate_interval", "5s").replace("$__interval", "2s"))
        data = prom.get("/api/v1/query_range", query=q, start=live_run["t0"], end=live_run["t1"], step="1")
        hardware = any(f"fabric_harness_{h}" in expr for h in HARDWARE_ONLY)
        has = any(r["values"] for r in data["result"])
        if "fabric_harness_sweep_" in expr:  # a sweep's panels: data from a sweep only (the test below)
            if has:
                wrong.append(f"{title}: {expr} returned data for a training run")
            continue
        if hardware and has:
            wrong.append(f"{title}: {expr} returned data on a machine without that hardware")
        elif not hardware and not has:
            empty.append(f"{title}: {expr}")
    assert not wrong, wrong
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert len(_dashboard_queries()) >= 10


def test_watch_followed_the_live_run_and_ended_with_it(live_run):
    code, out, err = live_run["followed"]
    assert code == 0 and "Traceback" not in err, err
    running = [x for x in out.splitlines() if ": running | step " in x]
    assert len(running) >= 2, out  # redrawn as steps were added
    heads = [x for x in out.splitlines() if not x.startswith(" ")]
    assert heads[-1].startswith(f"{live_run['res'].run_json()['name']}: completed | step 40/40 |"), out


def test_watch_once_reads_the_finished_run(live_run):
    proc = subprocess.run([sys.executable, "-m", "telemetry", "watch", str(live_run["out"]), "--once"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert "step 40/40" in proc.stdout and "rank 1" in proc.stdout, proc.stdout


def test_the_slurm_scrape_config_passes_promtool():
    promtool = _binaries()["promtool"]
    proc = subprocess.run([promtool, "check", "config", "--syntax-only",
                           str(REPO / "launch" / "monitoring" / "prometheus-slurm.yml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_port_in_use_stops_the_run_with_one_error_line_before_training(tmp_path):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run_cli(tmp_path / "run", "max_steps=2", f"telemetry.prometheus={port}", nproc=2, timeout=300)
    assert res.returncode != 0
    lines = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert lines and all(f"telemetry.prometheus: cannot serve on port {port}" in x for x in lines), res.stderr[-2000:]
    assert "live_export.py" not in res.stderr  # no traceback of ours (torchrun prints its own for a failed child)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()


# ---- a collective sweep (a job without steps): its sizes as live series ----------------------------------

SWEEP_RECIPE = str(REPO / "recipes" / "collectives.yaml")


@pytest.fixture(scope="module")
def live_sweep(tmp_path_factory):
    """A real 2-rank gloo sweep with telemetry.prometheus=auto and a Pushgateway: scraped while it measures
    (each size held 0.3 s so several scrapes fall inside it), pushed at the end after sweep.jsonl's rewrite."""
    bins = _binaries()
    tmp = tmp_path_factory.mktemp("live-sweep")
    out = tmp / "sweep"
    procs, prom_port, gw_port = _servers(bins, tmp, out)
    try:
        t0 = time.time()
        texts: list[str] = []
        stop = threading.Event()

        def capture():  # the exposition text while the sweep runs, read from the target list it writes
            while not stop.is_set():
                for path in glob.glob(str(out / "logs" / "prometheus-targets.*.json")):
                    try:
                        port = json.loads(Path(path).read_text())[0]["targets"][0].rsplit(":", 1)[1]
                        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                    except (OSError, ValueError, IndexError, KeyError):
                        continue
                    if "fabric_harness_sweep_sizes_total" in text:
                        texts.append(text)
                stop.wait(0.3)

        watcher = threading.Thread(target=capture, daemon=True)
        watcher.start()
        res = run_cli(out, "sweep.ops=[all_reduce,all_gather]", "sweep.max_bytes=8K", "sweep.iters=2",
                      "sweep.warmup=1", "sweep.min_seconds_per_size=0.3", "sweep.latency_table=false",
                      "sweep.pairs=false", "telemetry.prometheus=auto",
                      f"telemetry.pushgateway=http://127.0.0.1:{gw_port}", "telemetry.push_interval_s=1",
                      recipe=SWEEP_RECIPE, nproc=2, env={"FABRIC_HARNESS_JOB": "livesweep"}, timeout=400)
        stop.set()
        watcher.join()
        assert res.returncode == 0, res.stderr[-3000:]
        pushed = urllib.request.urlopen(f"http://127.0.0.1:{gw_port}/metrics", timeout=10).read().decode()
        time.sleep(1)
        yield {"out": out, "texts": texts, "pushed": pushed, "promtool": bins["promtool"],
               "prom": Prom(f"http://127.0.0.1:{prom_port}"), "t0": t0, "t1": time.time()}
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


def _samples(text: str, name: str) -> dict[frozenset, float]:
    from prometheus_client.parser import text_string_to_metric_families
    return {frozenset((k, v) for k, v in s.labels.items() if k in ("op", "placement")): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name}


def test_a_sweeps_sizes_are_served_while_it_measures(live_sweep):
    """A sweep served no series at all (it writes no step lines): a scrape during an hour-long sweep was empty."""
    texts, out = live_sweep["texts"], live_sweep["out"]
    assert len(texts) >= 2, "no exposition text with the sweep's series was read while it ran"
    table = json.loads((out / "collectives.json").read_text())["ops"]
    rows = {op: {row["size"]: row for row in r["rows"]} for op, r in table.items()}
    grew = []
    for text in texts:
        done = _samples(text, "fabric_harness_sweep_sizes_total")
        sizes = _samples(text, "fabric_harness_sweep_size_bytes")
        for key, n in done.items():
            op = dict(key)["op"]
            assert 1 <= n <= len(rows[op]) and _samples(text, "fabric_harness_sweep_sizes_planned")[key] == 11
            size = int(sizes[key])
            assert size == sorted(rows[op])[int(n) - 1]  # the newest size measured is the n-th of the table
            busbw = _samples(text, "fabric_harness_sweep_busbw_bytes_per_second")
            for placement in ("out_of_place", "in_place"):
                block = rows[op][size][placement]
                got = busbw.get(frozenset({("op", op), ("placement", placement)}))
                assert (got is None) == (block is None), (op, placement)
                if block is not None:
                    assert got == pytest.approx(block["busbw_GBps"] * 1e9, rel=1e-6)
        grew.append(sum(done.values()))
    assert grew == sorted(grew) and grew[-1] > grew[0]  # followed as the sweep went
    proc = subprocess.run([live_sweep["promtool"], "check", "metrics"], input=texts[-1], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_last_push_counts_each_size_once_after_the_rewrite(live_sweep):
    """sweep.jsonl is renamed over at the end with the same lines and the transport: each size counted once."""
    pushed, out = live_sweep["pushed"], live_sweep["out"]
    lines = [json.loads(x) for x in (out / "sweep.jsonl").read_text().splitlines()]
    assert all(x["transport"] == "loopback" for x in lines)  # the rewritten file
    done = _samples(pushed, "fabric_harness_sweep_sizes_total")
    assert done == {frozenset({("op", "all_reduce")}): 11.0, frozenset({("op", "all_gather")}): 11.0}
    assert _samples(pushed, "fabric_harness_sweep_size_bytes") == {k: 8192.0 for k in done}
    assert _samples(pushed, "fabric_harness_sweep_wrong_elements_total") == {k: 0.0 for k in done}
    # no GPU here: GPU power and energy are unknown, so no sample (never a made-up 0)
    assert not _samples(pushed, "fabric_harness_sweep_gpu_power_watts")
    assert not _samples(pushed, "fabric_harness_sweep_gpu_energy_joules_total")
    assert "fabric_harness_run_finished{" in pushed


def test_the_dashboards_sweep_panels_show_a_sweep_scraped_by_prometheus(live_sweep):
    prom = live_sweep["prom"]
    # the job, run and host to pick: a sweep has no fabric_harness_step, which the variables were read from, so
    # Grafana offered no job, run or host of a sweep and its panels stayed empty
    got = _variable_values(prom, "livesweep", live_sweep["out"].name, live_sweep["t0"], live_sweep["t1"])
    assert "livesweep" in got["job"] and live_sweep["out"].name in got["run"] and got["host"], got
    queries = [(title, expr) for title, expr in _dashboard_queries() if "fabric_harness_sweep_" in expr]
    assert len(queries) >= 3
    for title, expr in queries:
        q = expr.replace("$job", "livesweep").replace("$run", live_sweep["out"].name).replace("$host", ".*")
        data = prom.get("/api/v1/query_range", query=q, start=live_sweep["t0"], end=live_sweep["t1"], step="1")
        ops = {r["metric"].get("op") for r in data["result"] if r["values"]}
        assert ops == {"all_reduce", "all_gather"}, (title, expr, data["result"][:2])
    progress = prom.last('fabric_harness_sweep_sizes_total{op="all_reduce"}')
    assert 1 <= float(progress[0]["value"][1]) <= 11
