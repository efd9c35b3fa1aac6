"""A run's `:::MLLOG` lines, as MLPerf Training logs them, written with MLCommons' own logger
(mlperf_logging.mllog, `pip install mlperf-logging`) from what the run directory recorded, so that
MLCommons' compliance checker (`python -m mlperf_logging.compliance_checker`) reads them.

Times are the run's own: init_start at run.json `start_time` (its first attempt's for a resumed run), run_start at the start of the first step
(its `time` less its step time), each block from one evaluation to the next (`samples_count` metadata),
eval_accuracy at the evaluation's step end, run_stop at the last step's end with status `success` when the
target was reached, else `aborted`. Which MLPerf benchmark a workload is and what MLPerf calls its quality:

| workload | benchmark | eval_accuracy | epoch_num |
| bert_pretraining | bert | masked-LM accuracy | samples seen (as MLPerf BERT logs it) |
| image_classification | resnet | top-1 | epochs: samples seen / training samples |
| llm_lora | llama2_70b_lora | eval loss (MLPerf's LoRA quality is the loss; target 0.925) | samples seen |

The division is `open` (a harness run is not a closed submission); MLCommons' rule sets that accept each
benchmark in it: ResNet 4.0.0 (its last), BERT and Llama 2 70B LoRA 5.0.0 (RULESETS).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from datetime import datetime

from telemetry.errors import InputError
from telemetry.rundir import MLLOG, RUN_JSON, RunKey, StepKey

BENCHMARKS = {"bert_pretraining": "bert", "image_classification": "resnet", "llm_lora": "llama2_70b_lora"}
RULESETS = {"bert": "5.0.0", "resnet": "4.0.0", "llama2_70b_lora": "5.0.0"}


class MllogError(InputError, ValueError):
    """A run that cannot be written as MLPerf lines; one line."""


def _ms(t: float) -> int:
    return int(round(t * 1000))


def _start_s(info: dict) -> float | None:
    """When the run began: its first attempt's start. A resumed run's run.json `start_time` is its last
    attempt's, after every step the earlier attempts trained (init_start came after run_stop)."""
    attempts = info.get(RunKey.ATTEMPTS)
    first = attempts[0] if isinstance(attempts, list) and attempts and isinstance(attempts[0], dict) else {}
    text = first.get(RunKey.START_TIME) or info.get(RunKey.START_TIME)
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def write(run_dir: str, out: str | None = None, org: str = "fabric-harness", platform: str | None = None) -> dict:
    """Write RUN/mllog.txt (or `out`); returns {"path", "benchmark", "ruleset", "lines"}."""
    try:
        from mlperf_logging.mllog import constants as c
        from mlperf_logging.mllog.mllog import MLLogger
    except ImportError:
        raise MllogError("the mlperf-logging package is not installed (pip install 'fabric-harness[mlperf]' or "
                         "pip install mlperf-logging)") from None
    from telemetry.analysis.runs import load_run
    run = load_run(run_dir)
    recipe = run.info.get("recipe") or {}
    workload = recipe.get("workload")
    bench = BENCHMARKS.get(workload)
    if bench is None:
        raise MllogError(f"{run_dir}: workload {workload!r} has no MLPerf Training benchmark; allowed: "
                         + ", ".join(f"{w} ({b})" for w, b in BENCHMARKS.items()))
    # in step order: lines out of order (a file put together by hand) would start the run at its last step
    steps = sorted((r for r in run.metrics if r.get(StepKey.STEP) is not None and r.get(StepKey.TIME) is not None),
                   key=lambda r: r[StepKey.STEP])
    if not steps:
        raise MllogError(f"{run_dir}: metrics.jsonl has no step with its wall clock (`time`): nothing to time")
    first = steps[0]
    run_start = first[StepKey.TIME] - (first.get(StepKey.STEP_TIME_S) or 0.0)
    init_start = _start_s(run.info) or run_start
    layout = run.info.get("layout") or {}
    train = recipe.get("train") if isinstance(recipe.get("train"), dict) else {}
    data = run.info.get("data") or {}
    where = os.path.join(run_dir, RUN_JSON)
    gbs = layout.get("global_batch_size") or _count(train.get("global_batch_size"), "recipe.train.global_batch_size",
                                                    1, where)
    train_samples = _count(data.get("train_samples"), "data.train_samples", 1, where) or (
        steps[-1]["step"] * gbs if gbs else None)
    eval_samples = _count(data.get("eval_samples"), "data.eval_samples", 0, where) or 0
    _count(recipe.get("seed"), "recipe.seed", 0, where)
    scored = StepKey.EVAL_ACCURACY if bench != "llama2_70b_lora" else StepKey.EVAL_LOSS
    evals = [r for r in steps if r.get(scored) is not None]

    path = out or os.path.join(run_dir, MLLOG)
    # a logger of our own with one file handler (mllog's shared one also prints to stdout and keeps handlers)
    sink = logging.getLogger("fabric_harness.mllog")
    sink.propagate, sink.handlers = False, []
    sink.setLevel(logging.INFO)
    handler = _RaisingFileHandler(path, mode="w", encoding="utf-8")
    sink.addHandler(handler)
    logger = MLLogger(logger=sink, root_dir=os.path.dirname(os.path.abspath(__file__)))  # "file": this module
    try:
        def event(key, value=None, t=None, **meta):
            logger.event(key=key, value=value, time_ms=_ms(t if t is not None else run_start), metadata=meta or None)

        def start(key, value=None, t=None, **meta):
            logger.start(key=key, value=value, time_ms=_ms(t), metadata=meta or None)

        def end(key, value=None, t=None, **meta):
            logger.end(key=key, value=value, time_ms=_ms(t), metadata=meta or None)

        event(c.CACHE_CLEAR, True, init_start)
        start(c.INIT_START, t=init_start)
        event(c.SUBMISSION_ORG, org, init_start)
        event(c.SUBMISSION_PLATFORM, platform or _platform(run.info), init_start)
        event(c.SUBMISSION_DIVISION, "open", init_start)
        event(c.SUBMISSION_STATUS, "research", init_start)
        event(c.SUBMISSION_BENCHMARK, bench, init_start)
        if gbs:
            event(c.GLOBAL_BATCH_SIZE, gbs, init_start)
        event(c.TRAIN_SAMPLES, train_samples, init_start)
        event(c.EVAL_SAMPLES, eval_samples, init_start)
        event(c.SEED, recipe.get("seed"), init_start)
        end(c.INIT_STOP, t=run_start)
        start(c.RUN_START, t=run_start)
        block_from, samples_from = run_start, 0
        for e in evals:
            samples = e.get(StepKey.SAMPLES_SEEN) or (e["step"] * gbs if gbs else e["step"])
            epoch = samples / train_samples if bench == "resnet" and train_samples else samples
            start(c.BLOCK_START, t=block_from, samples_count=samples_from, first_epoch_num=samples_from,
                  epoch_count=max(samples - samples_from, 1))
            end(c.BLOCK_STOP, t=e["time"], samples_count=samples, first_epoch_num=samples_from)
            start(c.EVAL_START, t=e["time"], epoch_num=epoch, samples_count=samples)
            value = e[StepKey.EVAL_ACCURACY] if bench != "llama2_70b_lora" else e[StepKey.EVAL_LOSS]
            event(c.EVAL_ACCURACY, value, e["time"], epoch_num=epoch, samples_count=samples)
            end(c.EVAL_STOP, t=e["time"], epoch_num=epoch, samples_count=samples)
            block_from, samples_from = e["time"], samples
        reached = (run.info.get("final") or {}).get("target_reached_step") or run.info.get("status") == "target_reached"
        end(c.RUN_STOP, t=steps[-1]["time"], status="success" if reached else "aborted")
    except OSError as exc:  # the place passed the checks before the read, but did not take the lines (a full disk)
        with contextlib.suppress(OSError):
            handler.close()
        if os.path.isfile(path):  # no half-written log is left to be taken for a whole one
            os.remove(path)
        raise MllogError(f"--out: {path!r} could not be written ({exc.strerror or exc}); allowed: a file on a "
                         "filesystem with free space that this user can write") from None
    finally:
        with contextlib.suppress(OSError):
            handler.close()
        sink.handlers = []
    with open(path, encoding="utf-8") as f:
        lines = sum(1 for line in f if line.startswith(":::MLLOG"))
    return {"path": path, "benchmark": bench, "ruleset": RULESETS[bench], "lines": lines, "evaluations": len(evals)}


def _count(value, key: str, low: int, run_json: str) -> int | None:
    """A count the log states (a batch, samples, the seed): an integer >= low, or None when not recorded."""
    if value is None or (type(value) is int and value >= low):
        return value
    raise MllogError(f"{run_json}: '{key}' is {json.dumps(value)[:60]}; allowed: an integer >= {low} (or null), "
                     "as a run writes it")


class _RaisingFileHandler(logging.FileHandler):
    """A FileHandler whose write errors reach the caller: logging's own handler prints a 'Logging error'
    traceback per line to stderr and goes on (a full disk gave 16 of them and exit 0)."""

    def handleError(self, record) -> None:  # noqa: N802 - logging's name
        raise  # the OSError emit() is handling


def _platform(info: dict) -> str:
    hosts = {h.get("hostname") for h in info.get("hosts") or [] if isinstance(h, dict)}
    dev = (info.get("device") or {}).get("name") or (info.get("device") or {}).get("type") or "unknown device"
    world = (info.get("layout") or {}).get("world_size")
    return f"{len(hosts) or 1}x node, {world or '?'} x {dev}"


def check(path: str, benchmark: str) -> tuple[bool, str]:
    """MLCommons' compliance checker on the file (its rule set for the benchmark): (passed, its output)."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                           "--ruleset", RULESETS[benchmark], "--log_output", os.devnull, path],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def lines(path: str) -> list[dict]:
    """The file's records as dicts (":::MLLOG {json}"); MllogError naming the first line whose record is not a
    JSON object (a cut or damaged log)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if ":::MLLOG" not in line:
                continue
            try:
                record = json.loads(line.split(":::MLLOG", 1)[1])
            except (ValueError, RecursionError):
                record = None
            if not isinstance(record, dict):
                raise MllogError(f"{path}:{n}: not a :::MLLOG record (a JSON object after ':::MLLOG'); allowed: "
                                 "lines that MLPerf's logger (mlperf_logging.mllog) writes")
            out.append(record)
    return out
