"""Reading a run directory back (tolerant of killed jobs: a truncated last line is skipped)."""
from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime

from telemetry.errors import InputError
# the run directory's owner: its reader and the older names (re-exported: analysis reads through here)
from telemetry.rundir import (  # noqa: F401
    LAB, METRICS, RANK_TELEMETRY, RENAMED_FIELDS, RENAMED_UNITS, RUN_JSON, RunKey, StepKey, is_step_record, rank_files,
    rename_fields, read_jsonl, upgrade_record,
)


class RunError(InputError):
    """A run directory that cannot be read (bad input: exit 2); one line naming the path and the problem."""


def upgrade_sweep(sweep: dict) -> dict:
    """A collectives.json (sweep or nccl-tests JSON) under the current unit names."""
    for op in (sweep.get("ops") or {}).values():
        rename_fields(op, RENAMED_UNITS)
        for row in op.get("rows") or []:
            for block in row.values():
                if isinstance(block, dict):
                    rename_fields(block, RENAMED_UNITS)
                    if isinstance(block.get("spread"), dict):  # repeats: min and max over them
                        rename_fields(block["spread"], RENAMED_UNITS)
    return sweep


@dataclass
class Run:
    path: str
    info: dict
    metrics: list[dict]
    ranks: dict[int, list[dict]] = field(default_factory=dict)
    damaged: dict[str, list[int]] = field(default_factory=dict)  # file -> numbers of lines left out as damage
    repeated_steps: list[int] = field(default_factory=list)  # steps whose earlier lines a later one replaced
    superseded_steps: list[int] = field(default_factory=list)  # an earlier attempt's, past the later one's last

    @property
    def name(self) -> str:
        return self.info.get("name") or os.path.basename(os.path.normpath(self.path))

    def timed_steps(self) -> list[dict]:
        """Steps fit for timing statistics: not the warm-up step, nor a resumed attempt's first step (it warms
        up again), not profiled steps, not steps in which torch.compile compiled (`compile_s` > 0,
        train.compile=blocks)."""
        warm = {id(r) for r in self._resumed_first_steps()}
        rows = [r for r in self.metrics if not r.get(StepKey.PROFILED)]
        rows = rows[1:] if len(rows) > 1 else rows
        rows = [r for r in rows if id(r) not in warm] or rows
        if (since := self.lab_since()) is not None:  # kept steps of an attempt on another fabric lab
            rows = [r for r in rows if _started(r) is not None and _started(r) >= since] or rows
        steady = [r for r in rows if not r.get(StepKey.COMPILE_S)]
        return steady or rows

    def lab_since(self) -> float | None:
        """When the fabric lab the run's lab.json describes took the run over (epoch seconds), where an earlier
        attempt ran on another lab (its `earlier_labs`, launch/lab.py): a run resumed at 20mbit from a 5mbit
        checkpoint kept step 2 at 5mbit (0.47 s) among steps at 0.19 s. None otherwise."""
        try:
            with open(os.path.join(self.path, LAB), encoding="utf-8") as f:
                earlier = json.load(f).get("earlier_labs") or []
            times = [e.get("replaced_at") for e in earlier if isinstance(e, dict)]
        except (OSError, ValueError, AttributeError, TypeError):
            return None
        times = [t for t in times if isinstance(t, (int, float)) and not isinstance(t, bool)]
        return max(times) if times else None

    def _resumed_first_steps(self) -> list[dict]:
        """The first step of every attempt after the first (run.json `attempts` and this attempt's start_time):
        the first row that started at or after the attempt's start."""
        starts = set()
        for a in [*(self.info.get(RunKey.ATTEMPTS) or []), self.info]:
            t = _epoch(a.get(RunKey.START_TIME)) if isinstance(a, dict) else None
            if t is not None:
                starts.add(t)
        out = []
        for t in sorted(starts)[1:]:
            first = next((r for r in self.metrics if isinstance(r.get(StepKey.TIME), (int, float))
                          and r[StepKey.TIME] - (r.get(StepKey.STEP_TIME_S) or 0.0) >= t), None)
            if first is not None and first is not self.metrics[0]:
                out.append(first)
        return out


def _started(row: dict) -> float | None:
    """When a step began (epoch seconds): its recorded time less its step time."""
    t = row.get(StepKey.TIME)
    return t - (row.get(StepKey.STEP_TIME_S) or 0.0) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _epoch(text) -> float | None:
    """Seconds since the epoch of a run.json time (UTC ISO), None where it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# run.json's sections the readers walk into: each an object (hosts a list) or null
_SECTIONS = {**{k: dict for k in (RunKey.RECIPE, RunKey.LAYOUT, RunKey.FABRIC, RunKey.TELEMETRY, RunKey.FINAL,
                                  RunKey.THROUGHPUT, RunKey.MODEL, RunKey.DATA, RunKey.SOFTWARE, RunKey.INVENTORY,
                                  RunKey.ENVIRONMENT, RunKey.SWITCH_METRICS, RunKey.COMPILE, RunKey.DEVICE)},
             RunKey.HOSTS: list, RunKey.ATTEMPTS: list, RunKey.COMMAND: list, RunKey.OVERRIDES: list,
             # the texts the reports print and the exports write as columns (a list as `name` failed the
             # Parquet export with exit 1; a number as `status` or `error` was shown as is)
             **{k: str for k in (RunKey.NAME, RunKey.STATUS, RunKey.ERROR, RunKey.RECIPE_PATH, RunKey.START_TIME,
                                 RunKey.END_TIME, RunKey.BACKEND)}}


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean"}.get(type(value), "number")


def read_run_json(run_json: str) -> dict:
    """run.json as the JSON object a run writes (atomically: a damaged one is damage, never a half-written file)."""
    try:
        with open(run_json, encoding="utf-8") as f:
            info = json.load(f)
    except json.JSONDecodeError as exc:
        raise RunError(f"{run_json}: not valid JSON ({exc}); allowed: the JSON object a run writes") from None
    except UnicodeDecodeError as exc:
        raise RunError(f"{run_json}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                       "allowed: the JSON object a run writes") from None
    except ValueError as exc:  # an integer of more digits than int() converts (sys.get_int_max_str_digits())
        raise RunError(f"{run_json}: not readable as JSON ({exc.args[0].split(';')[0]}); allowed: the JSON object "
                       "a run writes (its integers have at most 20 digits)") from None
    except RecursionError:
        raise RunError(f"{run_json}: nested too deeply to read (thousands of levels); allowed: the JSON object a "
                       "run writes") from None
    except OSError as exc:
        raise RunError(f"{run_json}: cannot read: {exc.strerror or exc}; allowed: the {RUN_JSON} a run writes, "
                       "readable by this user") from None
    if not isinstance(info, dict):
        raise RunError(f"{run_json}: holds a JSON {_json_type(info)}; allowed: the JSON object a run writes")
    return info


# objects inside run.json's sections that the readers walk into (each an object or null)
_SUBSECTIONS = {RunKey.TELEMETRY: ("counters", StepKey.COMM_HEALTH, "stragglers", "comm_outside_steps", "server_power",
                                   "cross_rank", "energy", "rdma_ports"),
                RunKey.FABRIC: ("expectation",)}
# layout's counts: an integer >= 1 or null; the batch counts 0 too (a collective sweep has no batch)
_LAYOUT_COUNTS = {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "global_batch_size": 0, "micro_batch_size": 0,
                  "grad_accum_steps": 0}


def shape_problem(info: dict) -> str | None:
    """What in run.json is not shaped as a run writes it (a section of the wrong JSON type, a host that is
    not an object, a layout count that is not a positive integer), or None. Said as `'KEY' is ...; allowed:
    ...` for the caller to name the file."""
    for key, kind in _SECTIONS.items():
        if info.get(key) is not None and not isinstance(info[key], kind):
            return (f"'{key}' is a JSON {_json_type(info[key])}; allowed: "
                    f"{ {dict: 'an object', list: 'a list', str: 'a string'}[kind]} (or null)")
    for key, names in _SUBSECTIONS.items():
        section = info.get(key) or {}
        for name in names:
            if section.get(name) is not None and not isinstance(section[name], dict):
                return f"'{key}.{name}' is a JSON {_json_type(section[name])}; allowed: an object (or null)"
    for i, host in enumerate(info.get(RunKey.HOSTS) or []):
        if not isinstance(host, dict):
            return f"'{RunKey.HOSTS}[{i}]' is {json.dumps(host)[:40]}; allowed: an object per rank"
    layout = info.get(RunKey.LAYOUT) or {}
    for name, low in _LAYOUT_COUNTS.items():
        value = layout.get(name)
        if value is not None and (type(value) is not int or value < low):
            sweep = " (0: a collective sweep)" if low == 0 else ""
            return f"'{RunKey.LAYOUT}.{name}' is {json.dumps(value)}; allowed: an integer >= {low}{sweep} (or null)"
    return None


def load_run(path: str) -> Run:
    run_json = os.path.join(path, RUN_JSON)
    allowed = f"allowed: a run directory (a run's output_dir, holding {RUN_JSON} and {METRICS})"
    if not os.path.isdir(path):
        what = "is a file" if os.path.isfile(path) else "not a directory"
        raise RunError(f"{path}: {what}; {allowed}")
    if not os.path.isfile(run_json):
        try:
            os.listdir(path)
        except PermissionError as exc:  # its entries cannot be seen: run.json may well be there
            raise RunError(f"{path}: not readable by this user ({exc.strerror}); allowed: a run directory this user "
                           "can list and read") from None
        if os.path.exists(run_json):  # /dev/zero, a FIFO, a directory: a reader would never end, or fail
            raise RunError(f"{run_json}: not a regular file; allowed: the JSON object a run writes")
        raise RunError(f"{path}: no {RUN_JSON} (is this a run directory?); {allowed}")
    info = read_run_json(run_json)
    problem = shape_problem(info)
    if problem:
        raise RunError(f"{run_json}: {problem}, as a run writes it")
    ranks, damaged = {}, {}
    try:
        for p in rank_files(path, RANK_TELEMETRY):
            m = re.fullmatch(rf"rank(\d+)\.{re.escape(RANK_TELEMETRY)}", os.path.basename(p))
            if m:  # another file that happens to match the glob is not a rank's
                bad: list[int] = []
                ranks[int(m.group(1))] = _last_line_of_each_step(read_jsonl(p, bad, _step))[0]
                if bad:
                    damaged[os.path.relpath(p, path)] = bad
        final = info.get(RunKey.FINAL) or {}
        rename_fields(final, RENAMED_UNITS)  # a sweep's avg_busbw per collective
        metrics_path = os.path.join(path, METRICS)
        bad = []
        metrics, repeated, superseded = _last_line_of_each_step(read_jsonl(metrics_path, bad, _step))
    except InputError as exc:  # a directory or FIFO where a rank file or metrics.jsonl goes
        raise RunError(str(exc)) from None
    if not metrics and _has_text(metrics_path):
        raise RunError(f"{metrics_path}: no line is a step record; allowed: one JSON object per line with a "
                       "step from 1, a finite number or null in each number field and a step_time_s above 0, as a run "
                       "writes (a truncated last line is skipped)")
    if bad:
        damaged[METRICS] = bad
    return Run(path, info, metrics, ranks, damaged, repeated, superseded)


def _step(record: dict) -> bool:
    """A line that holds a readable step (telemetry.rundir.is_step_record), renamed in place to the current
    names first: the reader returns the rows this check passed, so they come back upgraded."""
    return is_step_record(upgrade_record(record))


def _last_line_of_each_step(rows: list[dict]) -> tuple[list[dict], list[int], list[int]]:
    """The rows of the last attempt, in step order, one per step, with the steps written more than once and the
    steps left out. A step not after the line before is a restart from there (an engine's own resume appends from
    its checkpoint, telemetry.integrations.recorder; our own resume appends to each rank's file; two runs' lines in
    one file): every earlier line at or past it is the superseded attempt's, also those past the later attempt's
    last step (a resumed attempt stopped again earlier: its model never reached them). Each was counted twice
    (steps 12 of 6), and the last line of each step kept the superseded attempt's tail."""
    kept, dropped, lowest = [], set(), None
    for r in reversed(rows):  # a line stays when every later line is past it
        if lowest is None or r[StepKey.STEP] < lowest:
            kept.append(r)
            lowest = r[StepKey.STEP]
        else:
            dropped.add(r[StepKey.STEP])
    steps = {r[StepKey.STEP] for r in kept}
    return kept[::-1], sorted(dropped & steps), sorted(dropped - steps)


def damage_warning(run: Run) -> str | None:
    """One line naming the lines a reader left out as damage (not a killed job's cut last line) and the steps
    written more than once, or None."""
    again = (f"steps written more than once (a resumed attempt, or two runs' lines in one file), the last line of each "
             f"kept: {_numbers(run.repeated_steps)}") if run.repeated_steps else None
    if run.superseded_steps:
        past = ("steps of an earlier attempt past the later attempt's last step, left out: "
                f"{_numbers(run.superseded_steps)}")
        again = f"{again}; {past}" if again else past
    if not run.damaged:
        return again

    parts = [f"{name} line{'s' if len(nums) > 1 else ''} {_numbers(nums)}" for name, nums in sorted(run.damaged.items())]
    damage = f"left out as damaged (not one JSON step record each): {'; '.join(parts)}"
    return f"{damage}; {again}" if again else damage


def _numbers(nums: list[int]) -> str:
    return ", ".join(str(n) for n in nums[:5]) + (f" and {len(nums) - 5} more" if len(nums) > 5 else "")


def _has_text(path: str) -> bool:
    """Whether the file holds something other than one torn JSON line (a run killed in its first step)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 16)
    except OSError:
        return False
    head = raw.strip()  # a whole line ends with a newline; a torn one does not
    return bool(head) and (b"\n" in head or raw.rstrip(b" \t\r").endswith(b"\n") or not head.startswith(b"{"))


def given_twice(paths: list[str]) -> str | None:
    """The first path that names the same file or directory as an earlier one, else None."""
    seen = set()
    for path in paths:
        key = os.path.realpath(path)
        if key in seen:
            return path
        seen.add(key)
    return None


def percentile(values: list[float], q: float) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
