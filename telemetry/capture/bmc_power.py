"""Whole-server power from the BMC, sampled in a background thread (docs/evidence.md).

Two sources, both the node's own BMC:
- Redfish (HTTP or HTTPS): the chassis' EnvironmentMetrics `PowerWatts.Reading` (and `EnergyJoules.Reading`
  where the BMC keeps an energy counter), else the older Power resource's
  `PowerControl[0].PowerConsumedWatts`, else the sum of the power supplies' `InputPowerWatts` from
  PowerSubsystem/PowerSupplies/*/Metrics.
- `ipmitool dcmi power reading` (in-band, through the local BMC interface): the instantaneous reading.

Credentials come from the environment only (FABRIC_HARNESS_BMC_USER, FABRIC_HARNESS_BMC_PASSWORD) and are
never written anywhere: run.json records the URL without them and which source answered.
BMCs refresh their power sensors every second or so and answer slowly, so the default interval is 1 s;
a step shorter than that gets the average of the samples around it, and says how many there were.
"""
from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import threading
import time
import warnings
from urllib.parse import urlsplit, urlunsplit
from telemetry.errors import HarnessError

USER_ENV, PASSWORD_ENV, VERIFY_ENV = "FABRIC_HARNESS_BMC_USER", "FABRIC_HARNESS_BMC_PASSWORD", "FABRIC_HARNESS_BMC_VERIFY"
HTTP_TIMEOUT_S = 5.0


class BmcError(HarnessError):
    """A BMC that cannot be read; one line naming what is wrong."""


# ------------------------------------------------------------------ ipmitool

_WATTS = {"instantaneous_w": r"Instantaneous power reading:\s*(\d+)\s*Watts",
          "minimum_w": r"Minimum during sampling period:\s*(\d+)\s*Watts",
          "maximum_w": r"Maximum during sampling period:\s*(\d+)\s*Watts",
          "average_w": r"Average power reading over sample period:\s*(\d+)\s*Watts"}


def parse_dcmi_power(text: str) -> dict:
    """`ipmitool dcmi power reading` as numbers. Searched over the whole text, not line by line: since
    ipmitool 1.8.19 the timestamp has no newline and `Sampling period` follows on the same line.

    A reading of 0 W is no reading (a running server draws power): BMCs without a power sensor behind DCMI
    answer 0 for everything, usually with the state deactivated. Those figures come back None, and
    'reason' says why."""
    out: dict = {}
    for key, pattern in _WATTS.items():
        m = re.search(pattern, text)
        out[key] = float(m.group(1)) if m else None
    if out["instantaneous_w"] is None:
        said = " | ".join(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
        raise BmcError("ipmitool printed no 'Instantaneous power reading' (does this BMC support DCMI power?)"
                       + (f"; it said: {said[:300]}" if said else ""))
    m = re.search(r"Sampling period:\s*(\d+)\s*Seconds", text)
    out["sampling_period_s"] = int(m.group(1)) if m else None
    m = re.search(r"IPMI timestamp:\s*(.*?)(?:\s{2,}Sampling period|\s*$)", text, re.M)
    out["timestamp"] = m.group(1).strip() if m and m.group(1).strip() else None
    m = re.search(r"Power reading state is:[ \t]*(\w+)", text)
    out["state"] = m.group(1) if m else None
    out["reason"] = None
    if out["instantaneous_w"] == 0:
        for key in _WATTS:
            if out[key] == 0:
                out[key] = None
        out["reason"] = ("the BMC reports 0 W" + (f" with power reading {out['state']}" if out["state"] else "") +
                         ": it has no power sensor behind DCMI, not a server drawing nothing")
    return out


class IpmitoolSource:
    """`ipmitool dcmi power reading` on this host."""
    kind = "ipmitool"

    def __init__(self, ipmitool: str = "ipmitool"):
        self.exe = shutil.which(ipmitool)
        if self.exe is None:
            raise BmcError("ipmitool is not installed (Debian/Ubuntu: apt-get install ipmitool; RHEL: dnf install "
                           "ipmitool)")

    def describe(self) -> dict:
        return {"source": "ipmitool dcmi power reading", "path": self.exe}

    def read(self) -> dict:
        proc = subprocess.run([self.exe, "dcmi", "power", "reading"], capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            raise BmcError(f"ipmitool dcmi power reading failed: {(proc.stderr or proc.stdout).strip()[:200]}")
        r = parse_dcmi_power(proc.stdout)
        if r["instantaneous_w"] is None:  # counted as a failed read by the sampler, never a sample of 0 W
            raise BmcError(f"ipmitool dcmi power reading: {r['reason']}")
        return {"watts": r["instantaneous_w"], "energy_j": None}


# ------------------------------------------------------------------ Redfish

def redact_url(url: str) -> str:
    """The URL as recorded: any user:password@ part removed."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def _reading(obj) -> float | None:
    v = obj.get("Reading") if isinstance(obj, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def power_from_environment_metrics(doc: dict) -> dict:
    return {"watts": _reading(doc.get("PowerWatts")), "energy_j": _reading(doc.get("EnergyJoules"))}


def power_from_power(doc: dict) -> dict:
    controls = doc.get("PowerControl") or []
    w = controls[0].get("PowerConsumedWatts") if controls and isinstance(controls[0], dict) else None
    return {"watts": float(w) if isinstance(w, (int, float)) else None, "energy_j": None}


class _NoReading(BmcError):
    """A chassis that answers but links no power reading; the message says what it has instead."""


class RedfishSource:
    """One chassis' power over Redfish. `base` is the BMC's address (https://bmc or http://127.0.0.1:port);
    `chassis` the chassis Id, or None for the first member of /redfish/v1/Chassis that has a power reading
    (an enclosure, a GPU baseboard or the BMC itself may come first and have none)."""
    kind = "redfish"

    def __init__(self, base: str, chassis: str | None = None, session=None):
        import requests  # a dependency of transformers; imported here so capture stays light

        self.base = base.rstrip("/")
        self.session = session or requests.Session()
        user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
        if user is not None:
            self.session.auth = (user, password or "")
        verify = os.environ.get(VERIFY_ENV)  # a CA bundle path, or 0 for a BMC's self-signed certificate
        # given with each request: a session-wide setting loses to REQUESTS_CA_BUNDLE in the environment
        self.verify = None if verify is None else False if verify in ("0", "false", "no") else verify
        if chassis:
            self.chassis = chassis
            self.path, self._parse = self._pick_resource(chassis)
        else:
            self.chassis, self.path, self._parse = self._first_chassis_with_power()

    def _get(self, path: str) -> dict:
        import requests

        try:
            with warnings.catch_warnings():
                if self.verify is False:  # asked for (FABRIC_HARNESS_BMC_VERIFY=0): said once in run.json, not per read
                    warnings.simplefilter("ignore", requests.packages.urllib3.exceptions.InsecureRequestWarning)
                resp = self.session.get(self.base + path, timeout=HTTP_TIMEOUT_S, verify=self.verify)
        except requests.RequestException as exc:
            raise BmcError(f"Redfish {redact_url(self.base)}{path}: {type(exc).__name__}: {exc}") from None
        if resp.status_code in (401, 403):
            raise BmcError(f"Redfish {redact_url(self.base)}{path}: HTTP {resp.status_code}; set {USER_ENV} and "
                           f"{PASSWORD_ENV} to the BMC's credentials")
        if resp.status_code != 200:
            raise BmcError(f"Redfish {redact_url(self.base)}{path}: HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError:
            raise BmcError(f"Redfish {redact_url(self.base)}{path}: the answer is not JSON") from None

    def _first_chassis_with_power(self):
        members = self._get("/redfish/v1/Chassis").get("Members") or []
        if not members:
            raise BmcError(f"Redfish {redact_url(self.base)}: /redfish/v1/Chassis lists no chassis")
        tried = []
        for member in members:
            cid = member["@odata.id"].rstrip("/").rsplit("/", 1)[-1]
            try:
                return (cid, *self._pick_resource(cid))
            except (_NoReading, BmcError) as exc:  # an enclosure's broken link must not hide the next chassis
                tried.append(f"{cid} ({exc})")
        raise BmcError(f"Redfish {redact_url(self.base)}: no chassis has a power reading: " + "; ".join(tried)
                       + "; name one with telemetry.bmc_chassis if this is wrong")

    def _pick_resource(self, chassis_id: str):
        """The newest power resource the chassis links to that holds a reading."""
        root = f"/redfish/v1/Chassis/{chassis_id}"
        chassis = self._get(root)
        link = lambda name, default: ((chassis.get(name) or {}).get("@odata.id") or default)  # noqa: E731
        missing = []
        if "EnvironmentMetrics" in chassis:
            if power_from_environment_metrics(self._get(link("EnvironmentMetrics", root + "/EnvironmentMetrics")))["watts"] is not None:
                return link("EnvironmentMetrics", root + "/EnvironmentMetrics"), power_from_environment_metrics
            missing.append("EnvironmentMetrics has no PowerWatts reading")
        if "Power" in chassis:
            doc = self._get(link("Power", root + "/Power"))
            if power_from_power(doc)["watts"] is not None:
                return link("Power", root + "/Power"), power_from_power
            outputs = [p for p in doc.get("PowerSupplies") or [] if isinstance(p, dict) and "LastPowerOutputWatts" in p]
            missing.append("Power has no PowerControl PowerConsumedWatts" + (
                " (its supplies give LastPowerOutputWatts only: what they deliver, not what the chassis draws)"
                if outputs else ""))
        if "PowerSubsystem" in chassis:
            return link("PowerSubsystem", root + "/PowerSubsystem"), self._power_supplies
        raise _NoReading("; ".join(missing) or "links no EnvironmentMetrics, Power or PowerSubsystem")

    def _power_supplies(self, subsystem: dict) -> dict:
        supplies = self._get((subsystem.get("PowerSupplies") or {}).get("@odata.id", ""))
        total, known = 0.0, False
        for member in supplies.get("Members") or []:
            metrics = self._get(member["@odata.id"].rstrip("/") + "/Metrics")
            w = _reading(metrics.get("InputPowerWatts"))
            if w is not None:
                total, known = total + w, True
        return {"watts": total if known else None, "energy_j": None}

    def describe(self) -> dict:
        return {"source": "redfish", "url": redact_url(self.base) + self.path, "chassis": self.chassis,
                **({"tls_verified": False} if self.verify is False else {})}

    def read(self) -> dict:
        return self._parse(self._get(self.path))


def bmc_for_host(spec, host: str, first_host: bool, hosts: int | None = None) -> tuple[str | None, str | None]:
    """This host's BMC address from telemetry.bmc, so that each BMC is read once, by its own node:
    'ipmitool' (every node its local BMC), a template with {host} (https://{host}-bmc), a {host: address}
    map (the host as `hostname` says, or its short name), or one address. One address on a job of several
    hosts is one BMC: only the first host reads it, the others say why. (address, None) or (None, reason)."""
    if not spec:
        return None, "telemetry.bmc is not set"
    short = host.split(".")[0]
    if isinstance(spec, dict):
        address = spec.get(host) or spec.get(short)
        if not address:
            return None, f"telemetry.bmc has no address for host {host} (its map names {', '.join(sorted(spec))})"
        return str(address), None
    if spec == "ipmitool":
        return spec, None
    if "{host}" in spec:
        return spec.format(host=short), None
    if hosts is not None and hosts > 1 and not first_host:
        return None, (f"telemetry.bmc is one address for {hosts} hosts: one BMC, read by the first host only; give a "
                      "{host} template or a host -> address map to read every server's own")
    return spec, None


def open_bmc_source(spec: str | None, chassis: str | None = None):
    """`spec`: 'ipmitool', a Redfish base URL (http:// or https://), or None (no BMC)."""
    if not spec:
        return None
    if spec == "ipmitool":
        return IpmitoolSource()
    if spec.startswith(("http://", "https://")):
        if urlsplit(spec).password:
            raise BmcError(f"telemetry.bmc: credentials in the URL ({redact_url(spec)}) would be recorded; set "
                           f"{USER_ENV} and {PASSWORD_ENV} instead")
        return RedfishSource(spec, chassis)
    raise BmcError(f"telemetry.bmc: got {spec!r}; allowed: 'ipmitool', an http:// or https:// Redfish address, or null")


# ------------------------------------------------------------------ sampling

def _time(sample: tuple) -> float:
    return sample[0]


class PowerSampler:
    """Reads `source` every `interval_s` in a daemon thread; `window(t0, t1)` gives the average watts and
    the energy over any span of time.monotonic(), `step()` the span since the last call."""

    def __init__(self, source, interval_s: float = 1.0, clock=time.monotonic):
        self.source, self.interval_s, self.clock = source, interval_s, clock
        self.samples: list[tuple[float, float, float | None]] = []  # (time, watts, energy counter J)
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._last = clock()
        self._begun = False
        self._thread = threading.Thread(target=self._loop, name="bmc-power", daemon=True)

    def start(self) -> "PowerSampler":
        self.sample()
        self._last = self.clock()  # the first step starts with a reading in hand
        self._thread.start()
        return self

    def sample(self) -> None:
        try:
            r = self.source.read()
        except Exception as exc:  # a BMC that stops answering: the run goes on, the gap is counted
            self.errors += 1
            self.last_error = str(exc)[:200]
            return
        if r.get("watts") is not None:
            with self._lock:
                self.samples.append((self.clock(), r["watts"], r.get("energy_j")))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def window(self, t0: float, t1: float) -> dict:
        """Average power and energy over [t0, t1]: the BMC's energy counter where it has one, else
        time-weighted watts (each sample holds until the next). None with a reason when no sample
        falls in or before the window."""
        with self._lock:  # in time order (each appended as it is read, under the lock): the span by bisection,
            # not a scan of every sample kept (a window per sweep size or training step, over hours of samples)
            first = bisect.bisect_left(self.samples, t0, key=_time)
            inside = self.samples[first:bisect.bisect_right(self.samples, t1, key=_time)]
            pts = self.samples[first - 1:first] + inside if first else inside
            any_sample = bool(self.samples)
        if not pts or t1 <= t0:
            return {"watts": None, "energy_j": None, "samples": 0,
                    "reason": "no BMC sample yet" if not any_sample else "no BMC sample in or before this window"}
        energy = 0.0
        covered_from = max(pts[0][0], t0)  # before the first sample ever taken nothing is known
        for i, (t, w, _) in enumerate(pts):
            start = max(t, t0)
            end = pts[i + 1][0] if i + 1 < len(pts) else t1
            energy += w * max(0.0, min(end, t1) - start)
        if covered_from > t0 and t1 > covered_from:  # the mean over what was seen, held over the window
            energy *= (t1 - t0) / (t1 - covered_from)
        counters = [s for s in pts if s[2] is not None]
        method = "watts x time"
        if len(counters) >= 2 and counters[-1][2] >= counters[0][2] and counters[-1][0] > counters[0][0]:
            # the counter's own rate over the samples, applied to the window
            rate = (counters[-1][2] - counters[0][2]) / (counters[-1][0] - counters[0][0])
            energy, method = rate * (t1 - t0), "BMC energy counter"
        return {"watts": energy / (t1 - t0), "energy_j": energy, "seconds": t1 - t0, "samples": len(inside),
                "method": method}

    def begin(self) -> None:
        """The first step starts now: its window opens here, not when the sampler started (model build, data
        loading and checkpoint loads are no step's). Later calls do nothing, so that consecutive steps meet."""
        if not self._begun:
            self._begun = True
            self._last = self.clock()

    def step(self) -> dict:
        now = self.clock()
        out = self.window(self._last, now)
        self._last = now
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + HTTP_TIMEOUT_S)
