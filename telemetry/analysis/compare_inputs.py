"""The inputs of a fabric comparison: loading runs (run directories, nccl-tests text files), the fabric label
each run derives, their recipes' differences, the collective sweeps that belong to them, and each fabric's
line rate."""
from __future__ import annotations

import json
import os
from dataclasses import replace

from telemetry.analysis import nccl_tests
from telemetry.analysis.fabric_summary import given_bucket
from telemetry.analysis.line_rate import LineRate, job_line_rate
from telemetry.analysis.runs import Run, RunError, load_run, upgrade_sweep
from telemetry.errors import InputError
from telemetry.input_files import InputFileError, read_limited
from telemetry.rundir import SWEEP_TABLE

# Recipe parts that legitimately differ between runs of one fabric comparison.
IGNORED_KEYS = {"output_dir", "name", "recipe_path", "telemetry", "fabric", "distributed"}
# and single settings that change where a run starts or what it prints, not what a step does
IGNORED_SETTINGS = {"train.resume", "train.log_every"}


class CompareError(InputError):
    """Runs that cannot be compared; the message says why and what to do."""


def _flatten(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def recipe_differences(a: Run, b: Run) -> list[str]:
    def kept(run: Run) -> dict:
        return {k: v for k, v in _flatten(run.info.get("recipe")).items()
                if k.split(".")[0] not in IGNORED_KEYS and k not in IGNORED_SETTINGS}
    ra, rb = kept(a), kept(b)
    diffs = [f"{k} ({ra.get(k)!r} vs {rb.get(k)!r})" for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)]
    wa, wb = (a.info.get("layout") or {}).get("world_size"), (b.info.get("layout") or {}).get("world_size")
    if wa != wb:
        diffs.append(f"world size ({wa} vs {wb})")
    return diffs


def label(run: Run) -> str:
    """The fabric a run used, as a short label: runs with the same label are repeats of one fabric."""
    fab = run.info.get("fabric") or {}
    lab = fab.get("lab") or {}
    if lab:
        return _lab_label(run, lab)
    if "nccl_tests" in run.info:  # a text table says nothing of its fabric: it is its own label
        return f"{fab.get('backend')}: {run.name}"
    rate = _link_speed(fab)
    return f"{fab.get('transport') or fab.get('backend') or 'unknown transport'}" + (f" {rate}" if rate else "")


def _lab_label(run: Run, lab: dict) -> str:
    """`10mbit lab` for the lab's default of 2 nodes x 1 rank; another layout or a slow node is part of the
    fabric too (`10mbit lab 4x1`, `10mbit lab 2x2`, `100mbit lab, node 1 at 2mbit`): a 2 x 2 and a 4 x 1 run
    at one rate were called one fabric, and a run with a slow node a repeat of the healthy one."""
    text = f"{lab.get('rate')} lab" if lab.get("rate_bps") else "unshaped lab"
    nodes = lab.get("nodes")
    world = (run.info.get("layout") or {}).get("world_size") or len(run.info.get("hosts") or []) or None
    per_node = world // nodes if isinstance(nodes, int) and nodes > 0 and world and world % nodes == 0 else None
    if nodes and (nodes, per_node) != (2, 1):
        text += f" {nodes}x{per_node if per_node else '?'}"
    if lab.get("slow_rate_bps"):
        text += f", node {lab.get('slow_node')} at {lab.get('slow_rate')}"
    # the frame size and a bucket or queue given by hand shape the link too: runs at one rate with MTU 1500 and
    # 9000, or with the default queue and a one-frame one (10,345 drops), were labelled alike and taken as repeats
    if lab.get("mtu") and lab.get("mtu") != 1500:
        text += f", MTU {lab.get('mtu')}"
    burst, queue = given_bucket(lab)
    if burst:
        text += f", burst {burst} B"
    if queue:
        text += f", queue {queue} B"
    return text


def _link_speed(fab: dict) -> str | None:
    """The used NIC's speed (Mb/s from sysfs), or the used HCA port's rate, as a label suffix."""
    gloo = (fab.get("gloo") or {})
    if gloo.get("speed_mbps"):
        return f"{gloo['speed_mbps'] / 1000:g}G"
    used = {d.get("device") for d in ((fab.get("nccl") or {}).get("devices") or [])}
    rates = {h.get("rate") for h in fab.get("hcas") or [] if h.get("device") in used and h.get("rate")}
    return rates.pop().split(" (")[0].replace(" Gb/sec", "G") if len(rates) == 1 else None



def nccl_tests_run(path: str) -> Run:
    """A text file as a run for `telemetry compare`: no recipe, no metrics, the tables as its sweep."""
    result = nccl_tests.read(path)
    if result["source"] != "nccl-tests":  # the harness's own sweep (a slow lab link prints 0.00 GB/s in every row);
        nccl_tests.bandwidths_from_times(result)  # nccl-tests' own tables are shown as printed
    # the `#  Rank N ... on HOST device D [BUS] NAME` lines name the hosts and the GPU model: the largest
    # table's (a sendrecv pair test names two ranks only)
    devices = max((op.get("devices") or [] for op in result["ops"].values()), key=len, default=[])
    name = os.path.basename(path)
    if name == SWEEP_TABLE:  # every sweep's table has this name: two runs' read `#1` and `#2`; their directory says
        name = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}/{name}"
    info = {"name": name, "status": f"{result['source']} output",
            "fabric": {"transport": None, "backend": "nccl-tests" if result["source"] == "nccl-tests"
                       else "sweep text"},
            "layout": {"world_size": result["world_size"]}, "nccl_tests": result,
            "hosts": [{"rank": d.get("rank"), "hostname": d.get("host")} for d in devices if d.get("host")],
            "devices": [{"rank": d.get("rank"), "name": d.get("name"), "bus_id": d.get("bus_id")} for d in devices]}
    return Run(path, info, [], {})


def load_input(path: str) -> Run:
    """A run directory, or an nccl-tests text file (the user's own nccl-tests run, a vendor's published table)."""
    if not os.path.exists(path):
        raise CompareError(f"{path}: does not exist; allowed: a run directory (a run's output_dir, holding "
                           "run.json) or an nccl-tests output file")
    if os.path.isfile(path):
        try:
            return nccl_tests_run(path)
        except nccl_tests.NcclTestsError as exc:
            raise CompareError(str(exc)) from None
    return load_run(path)


def sweep_of(run: Run) -> dict | None:
    if "nccl_tests" in run.info:  # read from a text file
        return run.info["nccl_tests"]
    path = os.path.join(run.path, "collectives.json")
    return _read_sweep(path) if os.path.exists(path) else None


SWEEP_JSON_LIMIT = 256 << 20  # a full sweep of every op at every size is a few MiB


def _read_sweep(path: str) -> dict:
    """A sweep's collectives.json; RunError (one line) when it is not the JSON object the sweep writes: a FIFO
    waited forever, a half-written file was a JSONDecodeError traceback."""
    allowed = ("allowed: the JSON object the sweep writes at its end (a sweep cut short has none: remove the file "
               f"and its {SWEEP_TABLE} is read)")
    try:
        doc = json.loads(read_limited(path, SWEEP_JSON_LIMIT).decode("utf-8"))
    except InputFileError as exc:
        raise RunError(f"{path}: {exc}; {allowed}") from None
    except OSError as exc:
        raise RunError(f"{path}: cannot read: {exc.strerror or exc}; {allowed}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunError(f"{path}: not valid JSON ({str(exc)[:120]}); {allowed}") from None
    if not isinstance(doc, dict):
        raise RunError(f"{path}: holds a JSON {type(doc).__name__}, not an object; {allowed}")
    return upgrade_sweep(doc)  # older sweeps' unit names too


def sweep_cut_short(run: Run) -> dict | None:
    """A sweep that failed or was killed: the sizes its table holds (written as each was measured), or None."""
    path = os.path.join(run.path, SWEEP_TABLE)
    if not os.path.isfile(path):
        return None
    try:
        sweep = nccl_tests.read(path, being_written=True)  # the sweep writes whole lines: a torn one is being written
    except (OSError, nccl_tests.NcclTestsError):
        return None
    sweep["ops"] = {op: r for op, r in sweep["ops"].items() if r.get("rows")}
    nccl_tests.bandwidths_from_times(sweep)  # a slow link's rows print 0.00 GB/s: not 0% of its line rate
    params = next(iter(sweep["ops"].values()), {}).get("params") or {}
    sweep.setdefault("min_bytes", params.get("minBytes"))  # the overview's range, from nccl-tests' own line
    sweep.setdefault("max_bytes", params.get("maxBytes"))
    return sweep if sweep["ops"] else None


def cut_short_words(run: Run) -> tuple[str, str]:
    """How to say a sweep without collectives.json: ('did not finish', 'before it stopped'), or for one whose
    run.json still says running (live, or killed before it could say so) ('has not finished', 'so far')."""
    if run.info.get("status") == "running":
        return "has not finished", "so far"
    return "did not finish", "before it stopped"


def is_sweep(run: Run) -> bool:
    """A collective sweep (the collectives workload, or an nccl-tests text file) rather than training."""
    workload = (run.info.get("recipe") or {}).get("workload")
    return "nccl_tests" in run.info or workload == "collectives" or (workload is None and sweep_of(run) is not None)


def sweep_of_training_run(run: Run) -> tuple[dict, str] | None:
    """A sweep that belongs to a training run: collectives.json in its directory, or a sweep run directory
    inside it (e.g. output_dir=RUN/sweep). (sweep, where) or None."""
    if os.path.isfile(os.path.join(run.path, "collectives.json")):
        return sweep_of(run), os.path.join(run.path, "collectives.json")
    for sub in sorted(os.listdir(run.path)) if os.path.isdir(run.path) else []:
        path = os.path.join(run.path, sub, "collectives.json")
        if os.path.isfile(path):
            return _read_sweep(path), path
    return None



def line_rates(groups: list, labels: list[str], given: dict[str, LineRate] | None = None) -> list[LineRate]:
    """Per fabric, the NICs its job used per host x their rates (telemetry/analysis/line_rate.py):
    --line-rate first, else what its runs recorded (all its runs agreeing)."""
    out = []
    for lab, group in zip(labels, groups):
        found = [job_line_rate(r) for r in group]
        rate = found[0] if len({f.total_bps for f in found}) == 1 else LineRate(None, 1, "its runs differ in link rate")
        if given and lab in given:
            rate = given[lab]
        per_host = _ranks_per_host(group[0])
        if rate.total_bps and per_host and per_host > rate.nics:
            # busbw counts every hop of the algorithm, the intra-host ones (NVLink, PCIe) too
            rate = replace(rate, why=rate.why + f"; {per_host} ranks per host: busbw counts intra-host hops too, so "
                                                f"it can exceed {'one link' if rate.nics == 1 else 'the NICs'}")
        out.append(rate)
    return out


def _ranks_per_host(run: Run) -> int | None:
    hosts = [h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")]
    return round(len(hosts) / len(set(hosts))) if hosts else None

