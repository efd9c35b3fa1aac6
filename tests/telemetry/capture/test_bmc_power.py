"""Whole-server power: ipmitool text from public reports, Redfish from a real HTTP server on loopback
serving DMTF's mockup documents (evidence_fixtures/README.md)."""
from __future__ import annotations

import base64
import json
import os

import pytest

from telemetry.capture import bmc_power as bp

from .loopback import LoopbackServer, QuietHandler

FIX = os.path.join(os.path.dirname(__file__), "..", "evidence_fixtures")


def text(name: str) -> str:
    with open(os.path.join(FIX, name), encoding="utf-8") as f:
        return f.read()


def mock(name: str) -> dict:
    with open(os.path.join(FIX, "redfish", name), encoding="utf-8") as f:
        return json.load(f)


def test_dcmi_reading_classic_layout():
    r = bp.parse_dcmi_power(text("ipmitool_dcmi_exporter_issue18.txt"))
    assert r["instantaneous_w"] == 215 and r["minimum_w"] == 162 and r["maximum_w"] == 276 and r["average_w"] == 176
    assert r["sampling_period_s"] == 1131466 and r["state"] == "activated"
    assert r["timestamp"] == "Wed Feb 15 12:49:51 2017"


def test_dcmi_reading_timestamp_and_sampling_period_on_one_line():
    r = bp.parse_dcmi_power(text("ipmitool_dcmi_supermicro_sameline.txt"))
    assert r["instantaneous_w"] == 109 and r["average_w"] == 102
    assert r["timestamp"] == "10/12/23 13:29:17 CEST" and r["sampling_period_s"] == 65530
    assert r["state"] is None  # the published comment ends before the state's value


def test_dcmi_reading_deactivated_and_garbage():
    r = bp.parse_dcmi_power(text("ipmitool_dcmi_openbmc_deactivated.txt"))
    assert r["instantaneous_w"] == 319 and r["state"] == "deactivated" and r["sampling_period_s"] == 0
    with pytest.raises(bp.BmcError, match="Instantaneous power reading"):
        bp.parse_dcmi_power("Error: Unable to establish IPMI v2 / RMCP+ session")


def test_dcmi_reading_of_zero_watts_is_no_reading():
    r = bp.parse_dcmi_power(text("ipmitool_dcmi_ampere_zero_deactivated.txt"))
    assert r["instantaneous_w"] is None and r["average_w"] is None and r["state"] == "deactivated"
    assert "0 W with power reading deactivated" in r["reason"] and r["timestamp"] == "Thu Jan  1 00:00:00 1970"
    ok = bp.parse_dcmi_power(text("ipmitool_dcmi_radiorabe_activated.txt"))
    assert (ok["instantaneous_w"], ok["minimum_w"], ok["maximum_w"], ok["average_w"]) == (197, 175, 242, 190)
    assert ok["sampling_period_s"] == 123893 and ok["state"] == "activated" and ok["reason"] is None


def test_dcmi_failure_carries_what_ipmitool_said():
    with pytest.raises(bp.BmcError, match=r"it said: Could not open device at /dev/ipmi0"):
        bp.parse_dcmi_power(text("ipmitool_dcmi_error_no_device_ha27.txt"))


def test_ipmitool_source_counts_a_zero_reading_as_a_failed_read(tmp_path, monkeypatch):
    """IpmitoolSource given the published 0 W answer as ipmitool's output: the sampler records an error,
    not a 0 W sample."""
    import subprocess

    exe = tmp_path / "ipmitool"
    exe.write_text("")
    exe.chmod(0o755)
    answer = text("ipmitool_dcmi_ampere_zero_deactivated.txt")
    monkeypatch.setattr(bp.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, answer, ""))
    src = bp.IpmitoolSource(str(exe))
    with pytest.raises(bp.BmcError, match="0 W with power reading deactivated"):
        src.read()
    sampler = bp.PowerSampler(src)
    sampler.sample()
    assert sampler.samples == [] and sampler.errors == 1 and "no power sensor" in sampler.last_error


class Bmc(LoopbackServer):
    """A Redfish service on 127.0.0.1 that needs basic auth and serves the given documents."""

    def __init__(self, docs: dict[str, dict], user="admin", password="s3cret-pw"):
        self.docs, self.seen_auth, self.hits = docs, [], []
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        bmc = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802
                bmc.hits.append(self.path)
                auth = self.headers.get("Authorization")
                bmc.seen_auth.append(auth)
                if auth != expected:
                    self.reply(401)
                    return
                doc = bmc.docs.get(self.path)
                body = json.dumps(doc).encode() if doc is not None else b"{}"
                self.reply(200 if doc is not None else 404, body, "application/json")

        super().__init__(Handler)


CHASSIS = "/redfish/v1/Chassis/1U"


def chassis_docs(links: list[str]) -> dict:
    docs = {"/redfish/v1/Chassis": {"Members": [{"@odata.id": CHASSIS}]},
            CHASSIS: {"Id": "1U", **{name: {"@odata.id": f"{CHASSIS}/{name}"} for name in links}}}
    if "Power" in links:
        docs[CHASSIS + "/Power"] = mock("Power.json")
    if "EnvironmentMetrics" in links:
        docs[CHASSIS + "/EnvironmentMetrics"] = mock("EnvironmentMetrics.json")
    if "PowerSubsystem" in links:
        supplies = CHASSIS + "/PowerSubsystem/PowerSupplies"
        docs[CHASSIS + "/PowerSubsystem"] = {"PowerSupplies": {"@odata.id": supplies}}
        docs[supplies] = {"Members": [{"@odata.id": supplies + "/Bay1"}]}
        docs[supplies + "/Bay1/Metrics"] = mock("PowerSupplyBay1Metrics.json")
    return docs


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv(bp.USER_ENV, "admin")
    monkeypatch.setenv(bp.PASSWORD_ENV, "s3cret-pw")


@pytest.mark.parametrize("links,watts,path", [
    (["Power", "EnvironmentMetrics"], 374.0, "/EnvironmentMetrics"),  # the newer resource wins
    (["Power"], 344.0, "/Power"),
    (["PowerSubsystem"], 937.4, "/PowerSubsystem"),
])
def test_redfish_over_http_on_loopback(creds, links, watts, path):
    bmc = Bmc(chassis_docs(links))
    try:
        src = bp.open_bmc_source(bmc.url)
        assert src.chassis == "1U" and src.read() == {"watts": watts, "energy_j": None}
        described = src.describe()
        assert described["url"].endswith(path) and "s3cret" not in json.dumps(described)
        assert all(a and a.startswith("Basic ") for a in bmc.seen_auth)
    finally:
        bmc.close()


def test_redfish_energy_counter_and_wrong_credentials(monkeypatch, creds):
    docs = chassis_docs(["EnvironmentMetrics"])
    docs[CHASSIS + "/EnvironmentMetrics"]["EnergyJoules"] = {"Reading": 5_000_000}
    bmc = Bmc(docs)
    try:
        assert bp.open_bmc_source(bmc.url, chassis="1U").read() == {"watts": 374.0, "energy_j": 5_000_000.0}
        monkeypatch.setenv(bp.PASSWORD_ENV, "wrong")
        with pytest.raises(bp.BmcError, match=r"HTTP 401; set FABRIC_HARNESS_BMC_USER and FABRIC_HARNESS_BMC_PASSWORD"):
            bp.open_bmc_source(bmc.url)
    finally:
        bmc.close()


def test_bad_specs():
    with pytest.raises(bp.BmcError, match="credentials in the URL"):
        bp.open_bmc_source("https://root:calvin@10.0.0.1")
    with pytest.raises(bp.BmcError, match="allowed: 'ipmitool'"):
        bp.open_bmc_source("bmc.local")
    assert bp.open_bmc_source(None) is None


class Steady:
    def __init__(self, watts, energy=None):
        self.watts, self.energy = watts, energy

    def read(self):
        return {"watts": self.watts, "energy_j": self.energy}


def test_sampler_windows_weight_by_time():
    now = [0.0]
    src = Steady(100.0)
    s = bp.PowerSampler(src, interval_s=1.0, clock=lambda: now[0])
    s.sample()                      # 100 W from t=0
    now[0] = 2.0
    src.watts = 300.0
    s.sample()                      # 300 W from t=2
    w = s.window(1.0, 4.0)          # 1 s at 100 W + 2 s at 300 W
    assert w["energy_j"] == pytest.approx(700.0) and w["watts"] == pytest.approx(700.0 / 3) and w["samples"] == 1
    assert s.window(-5.0, -1.0)["watts"] is None


def test_sampler_prefers_the_bmc_energy_counter():
    now = [0.0]
    src = Steady(100.0, energy=1000.0)
    s = bp.PowerSampler(src, clock=lambda: now[0])
    s.sample()
    now[0], src.energy = 10.0, 3000.0  # 200 W by the counter, while the instantaneous reading says 100
    s.sample()
    w = s.window(0.0, 10.0)
    assert w["method"] == "BMC energy counter" and w["energy_j"] == pytest.approx(2000.0)


def test_sampler_thread_against_the_loopback_bmc(creds):
    bmc = Bmc(chassis_docs(["Power"]))
    try:
        s = bp.PowerSampler(bp.open_bmc_source(bmc.url), interval_s=0.05).start()
        import time
        time.sleep(0.3)
        out = s.step()
        s.close()
        assert out["watts"] == pytest.approx(344.0) and out["samples"] >= 2 and s.errors == 0
    finally:
        bmc.close()


def test_session_steps_carry_server_power_and_the_summary_its_mean(creds, tmp_path):
    import time

    from telemetry.capture.session import Telemetry, TelemetrySettings

    bmc = Bmc(chassis_docs(["EnvironmentMetrics"]))
    try:
        tel = Telemetry(TelemetrySettings(bmc=bmc.url, bmc_sample_interval_s=0.02, cross_rank_every=0,
                                          link_probe_every=0, sysfs=str(tmp_path)), run_dir=str(tmp_path / "run"))
        tel.start()
        records = []
        for step in range(3):
            tel.start_step(step)
            time.sleep(0.05)
            records.append(tel.end_step(step))
        summary = tel.summary()
        tel.close()
    finally:
        bmc.close()
    assert all(r["host"]["server_power"]["watts"] == pytest.approx(374.0) for r in records)
    assert records[-1]["job_server_power_w"] == pytest.approx(374.0)
    sp = summary["server_power"]
    assert sp["source"] == "redfish" and sp["mean_w"] == pytest.approx(374.0) and sp["energy_j"] > 0
    assert "s3cret" not in json.dumps(summary)


def test_session_without_a_bmc_says_why(tmp_path):
    from telemetry.capture.session import Telemetry, TelemetrySettings

    tel = Telemetry(TelemetrySettings(cross_rank_every=0, link_probe_every=0, sysfs=str(tmp_path)))
    tel.start()
    tel.start_step(0)
    rec = tel.end_step(0)
    summary = tel.summary()
    tel.close()
    assert rec["job_server_energy_j"] is None
    assert summary["server_power"] == {"source": None, "reason": "telemetry.bmc is not set", "energy_j": None,
                                       "mean_w": None}


def test_redfish_over_https_with_the_bmcs_own_certificate(creds, monkeypatch, tmp_path):
    """A BMC's certificate is usually its own: FABRIC_HARNESS_BMC_VERIFY names it (or 0); without it the
    TLS check fails and says so."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test certificate")
    key, cert = tmp_path / "bmc.key", tmp_path / "bmc.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    bmc = Bmc(chassis_docs(["Power"]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    bmc.server.socket = ctx.wrap_socket(bmc.server.socket, server_side=True)
    url = bmc.url.replace("http://", "https://")
    try:
        with pytest.raises(bp.BmcError, match="SSLError"):
            bp.open_bmc_source(url)
        monkeypatch.setenv(bp.VERIFY_ENV, str(cert))
        assert bp.open_bmc_source(url).read()["watts"] == 344.0
        monkeypatch.setenv(bp.VERIFY_ENV, "0")
        unverified = bp.open_bmc_source(url)
        assert unverified.read()["watts"] == 344.0 and unverified.describe()["tls_verified"] is False
    finally:
        bmc.close()


class MockupBmc(Bmc):
    """Serves a DMTF mockup's documents as they are stored: /redfish/v1/X/Y -> <mockup>/X/Y/index.json."""

    def __init__(self, mockup: str):
        root = os.path.join(FIX, "redfish", mockup)
        docs = {}
        for here, _, files in os.walk(root):
            if "index.json" in files:
                rel = os.path.relpath(here, root).replace(os.sep, "/")
                with open(os.path.join(here, "index.json"), encoding="utf-8") as f:
                    docs["/redfish/v1" + ("" if rel == "." else "/" + rel)] = json.load(f)
        super().__init__(docs)


def test_tower_mockup_prefers_environment_metrics_over_the_older_resources(creds):
    """DMTF public-tower: EnvironmentMetrics 974 W, Power PowerControl 926 W, two supplies of 487.4 W input."""
    bmc = MockupBmc("public-tower")
    try:
        src = bp.open_bmc_source(bmc.url)
        assert src.chassis == "Tower" and src.read() == {"watts": 974.0, "energy_j": None}
        assert src.describe()["url"].endswith("/redfish/v1/Chassis/Tower/EnvironmentMetrics")
        supplies = src._power_supplies(src._get("/redfish/v1/Chassis/Tower/PowerSubsystem"))
        assert supplies == {"watts": pytest.approx(974.8), "energy_j": None}
        assert bp.power_from_power(src._get("/redfish/v1/Chassis/Tower/Power"))["watts"] == 926.0
    finally:
        bmc.close()


def test_bladed_mockup_has_no_power_reading_and_says_why(creds):
    """DMTF public-bladed: the enclosure's Power has supplies with output watts only, the blades no power
    resource; every chassis is named with what it had."""
    bmc = MockupBmc("public-bladed")
    try:
        with pytest.raises(bp.BmcError) as err:
            bp.open_bmc_source(bmc.url)
        msg = str(err.value)
        assert "no chassis has a power reading" in msg and "telemetry.bmc_chassis" in msg
        assert "MultiBladeEncl (Power has no PowerControl PowerConsumedWatts (its supplies give LastPowerOutputWatts" in msg
        assert all(f"Blade{i} (links no EnvironmentMetrics, Power or PowerSubsystem)" in msg for i in range(1, 5))
        assert "s3cret" not in msg
    finally:
        bmc.close()


def test_cooling_unit_environment_metrics_without_power_watts(creds):
    bmc = MockupBmc("public-cooling-unit")
    try:
        with pytest.raises(bp.BmcError, match=r"CDU \(EnvironmentMetrics has no PowerWatts reading\)"):
            bp.open_bmc_source(bmc.url)
        with pytest.raises(bp.BmcError, match="EnvironmentMetrics has no PowerWatts reading"):
            bp.open_bmc_source(bmc.url, chassis="CDU")
    finally:
        bmc.close()


def test_a_chassis_whose_link_fails_does_not_hide_the_next(creds):
    """An enclosure listed first links a Power resource that answers 404: the walk goes on to the chassis
    that has a reading, and the broken one is only named if none has."""
    docs = chassis_docs(["Power"])
    enclosure = "/redfish/v1/Chassis/Enclosure"
    docs["/redfish/v1/Chassis"] = {"Members": [{"@odata.id": enclosure}, {"@odata.id": CHASSIS}]}
    docs[enclosure] = {"Id": "Enclosure", "Power": {"@odata.id": enclosure + "/Power"}}  # not served: 404
    bmc = Bmc(docs)
    try:
        src = bp.open_bmc_source(bmc.url)
        assert src.chassis == "1U" and src.read()["watts"] == 344.0
    finally:
        bmc.close()


def test_a_window_reads_the_samples_around_it_not_every_sample():
    """window() scanned every sample kept: a sweep reads one window per size (a linear sweep: 4,096 sizes per
    collective) and a training run one per step, over hours of 1 s samples, so the work grew as sizes x samples
    (the sweep's end waited minutes on it while the other ranks waited at its gather). The samples are in time
    order: a window finds its span by bisection, and gives what the scan gave."""
    compared = [0]

    class Time(float):  # a sample's time that counts how often it is compared
        def _count(self, other, op):
            compared[0] += 1
            return op(float(self), float(other))
        __lt__ = lambda self, o: self._count(o, float.__lt__)  # noqa: E731
        __le__ = lambda self, o: self._count(o, float.__le__)  # noqa: E731
        __gt__ = lambda self, o: self._count(o, float.__gt__)  # noqa: E731
        __ge__ = lambda self, o: self._count(o, float.__ge__)  # noqa: E731

    now = [Time(0.0)]
    src = Steady(100.0)
    s = bp.PowerSampler(src, clock=lambda: now[0])
    for i in range(20000):
        now[0], src.watts = Time(float(i)), 100.0 + i % 7
        s.sample()
    compared[0] = 0
    w = s.window(10000.5, 10003.5)
    assert compared[0] < 200  # about 2 x log2(20,000) x 2, not 2 x 20,000
    # 0.5 s at the sample of t=10000, then 1 s at each of t=10001..10003
    watts = [100.0 + i % 7 for i in (10000, 10001, 10002, 10003)]
    assert w["energy_j"] == pytest.approx(0.5 * watts[0] + watts[1] + watts[2] + 0.5 * watts[3])
    assert w["samples"] == 3
    assert s.window(-5.0, -1.0)["watts"] is None and s.window(30000.0, 30001.0)["samples"] == 0
    assert s.window(30000.0, 30001.0)["watts"] == pytest.approx(100.0 + 19999 % 7)  # the last sample holds


def test_the_first_steps_server_energy_counts_from_its_start_not_from_the_samplers():
    """A BMC sampler started 60 s before training (model build, data loading at 500 W), then 1000 W in a 1 s
    step 1 (a stand-in source and clock): step 1's server energy is the step's own, as the GPU and CPU
    meters count it, not the build's 30 kJ as well."""
    now = [0.0]
    src = Steady(500.0)
    s = bp.PowerSampler(src, interval_s=1.0, clock=lambda: now[0])  # samples taken by hand, no thread
    s.sample()
    now[0] = 60.0
    src.watts = 1000.0
    s.sample()
    s.begin()  # step 1 starts
    now[0] = 60.5
    s.begin()  # a later call changes nothing
    now[0] = 61.0
    first = s.step()
    assert first["energy_j"] == pytest.approx(1000.0) and first["seconds"] == pytest.approx(1.0)
