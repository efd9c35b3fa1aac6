"""The run directory: its one owner. Layout, the fields of run.json, metrics.jsonl and the rank files
(named here once), the atomic writer, the disk reserve, and the reading of older layouts.

Everything that writes a run directory goes through `RunDir` (our trainer, telemetry.integrations.recorder
for NeMo/Lightning/Bridge loops); everything that reads one uses `read_jsonl` / `upgrade_record`
(telemetry.analysis.runs). docs/run-directory.md is generated from this module
(`python -m telemetry.rundir > docs/run-directory.md`) and a test checks that it is current. Pure Python:
the offline analysis imports it without torch.
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import glob
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable

from telemetry.errors import HarnessError, InputError

# ---------------------------------------------------------------------------------------- layout
RUN_JSON, METRICS = "run.json", "metrics.jsonl"
RANKS, LOGS, CHECKPOINTS, REPORT, EXPORTS = "ranks", "logs", "checkpoints", "report", "exports"
RESERVE = ".reserve"
LAB = "lab.json"  # written by python -m launch.lab beside the run's own files
MLLOG = "mllog.txt"  # written by python -m telemetry mllog RUN
# a collective sweep's nccl-tests table, written line by line as each size is measured (what watch follows)
SWEEP_TABLE = "collectives.txt"
SWEEP_SIZES = "sweep.jsonl"  # a sweep's energy, power and counters per size, a line as each size is measured
SWEEP_JSON, SWEEP_CSV, SWEEP_NCCL_TESTS = "collectives.json", "collectives.csv", "nccl-tests"  # written at its end
# a sweep's whole record: a rerun moves an earlier attempt's to logs/sweep.attempt-N/ before it writes its own
SWEEP_RECORD = (SWEEP_TABLE, SWEEP_JSON, SWEEP_CSV, SWEEP_NCCL_TESTS, SWEEP_SIZES)
RANK_TELEMETRY, RANK_EVENTS, RANK_FINAL = "telemetry.jsonl", "events.jsonl", "final.json"  # ranks/rankNNNNN.<name>
RANK_ERROR = "error.json"  # why a rank other than 0 stopped (bad input, a crash): what rank 0 records in run.json

LAYOUT = (
    (RUN_JSON, "resolved recipe, layout, hosts, software versions, environment (fabric settings only, secrets "
               "redacted), fabric identity and expectation check, telemetry summary, start/end, status, exit "
               "code, error, attempts (fields below)"),
    (METRICS, "one flushed JSON line per optimizer step, rank 0's view (fields below)"),
    (f"{RANKS}/", "per rank: rankNNNNN.telemetry.jsonl (that rank's per-step telemetry, same fields), "
                  "rankNNNNN.final.json (hash and norm of the trainable weights), rankNNNNN.events.jsonl "
                  "(phase marks and calls, only when the trace export is asked for), rankNNNNN.error.json (why "
                  "that rank stopped, maybe alone - bad input or a crash: rank 0 records it as run.json's error)"),
    (f"{CHECKPOINTS}/", "DCP checkpoints and latest.json"),
    (f"{LOGS}/", "NCCL debug logs (nccl.HOST.PID.log), metrics lines set aside on resume, each earlier "
                 "attempt's run.json (run.attempt-N.json; run.damaged-TIME.json when it could not be read) and "
                 "collective sweep's record (sweep.attempt-N/), "
                 "profiler traces, flight_recorder/ (what each rank last entered, written on a failure or hang), "
                 "prometheus-targets.HOST.json (while a run with telemetry.prometheus is live: the node's "
                 "metrics address as a Prometheus file_sd target list, docs/live.md)"),
    (f"{SWEEP_TABLE}, {SWEEP_JSON}, .csv", "a collective sweep's tables (nccl-tests layout); the text table is "
                                           "written as each size is measured, so a sweep cut short keeps its rows"),
    (f"{SWEEP_NCCL_TESTS}/, {SWEEP_SIZES}", "a collective sweep's nccl-tests/<op>.json (each collective in nccl-tests' "
                                            "-J JSON schema) and sweep.jsonl (a line per size and collective as it "
                                            "is measured: energy, power, NIC/RDMA counter deltas; docs/nccl-tests.md)"),
    (LAB, "a run in the fabric lab (python -m launch.lab): the emulated nodes, link rates and MTU, each shaped "
          "link, and the links' tc tbf counters read before tear-down (qdisc, tbf_drops, tbf_drops_after_first_step)"),
    (f"run.lock, {RESERVE}", "while a run is live: who holds the directory; 1 MiB given back if the disk fills"),
    (f"{REPORT}/", "written by python -m telemetry report RUN"),
    (f"{EXPORTS}/", "TensorBoard, W&B, Parquet and trace exports (telemetry.export or python -m telemetry export)"),
    (MLLOG, "the run's :::MLLOG lines, written by python -m telemetry mllog RUN (docs/reports.md)"),
)


# what a run itself writes at the top of its directory (files, and folders with everything in them); a collective
# sweep's record too (trainer/sweep/output.py write_sweep_files), which `nccl-tests RUN --json` must not replace
RUN_OWN = frozenset({RUN_JSON, METRICS, RANKS, LOGS, CHECKPOINTS, "run.lock", RESERVE, LAB, *SWEEP_RECORD})


def looks_like_run_dir(path: str) -> bool:
    """Empty (a run about to start) or holding something of a run directory's own: what `watch` follows."""
    try:
        entries = set(os.listdir(path))
    except OSError:
        return False
    return not entries or bool(entries & RUN_OWN)


def recorded_by_run(path: str, run_dir: str) -> bool:
    """Whether `path` is something the run in `run_dir` wrote (run.json, metrics.jsonl, a rank file, a
    checkpoint, ...): a command's output written there would replace the record."""
    real, top = os.path.realpath(path), os.path.realpath(run_dir)
    rel = os.path.relpath(real, top)
    return not rel.startswith(os.pardir) and rel != os.curdir and rel.split(os.sep)[0] in RUN_OWN


def rank_file(rank: int, name: str) -> str:
    """ranks/rankNNNNN.<name> (name with its extension: RANK_TELEMETRY, RANK_FINAL, RANK_EVENTS, RANK_ERROR)."""
    return os.path.join(RANKS, f"rank{rank:05d}.{name}")


def rank_files(run_dir: str, name: str) -> list[str]:
    """Every rank's file of that name in a run directory, in rank order."""
    return sorted(glob.glob(os.path.join(run_dir, RANKS, f"rank*.{name}")))


# ---------------------------------------------------------------------------------------- fields
@dataclass(frozen=True)
class Field:
    names: tuple[str, ...]
    meaning: str


# metrics.jsonl (and ranks/rankNNNNN.telemetry.jsonl, the same names from each rank's view). Units are in
# the name: _s seconds, _bytes bytes, _j joules, _w watts, _GBps 1e9 bytes/s, _bps bits/s. Unknown: null.
STEP_FIELDS: tuple[Field, ...] = (
    Field(('step',), 'optimizer step, from 1'),
    Field(('loss',), "llm_lora: mean token loss over the global batch's answer tokens; llm_full: the same over labelled tokens (every next token when pretraining); bert_pretraining: mean masked-LM loss + mean next-sentence loss; image_classification: mean (label-smoothed) cross-entropy per image"),
    Field(('mlm_loss', 'nsp_loss'), 'bert_pretraining: the two terms of `loss`'),
    Field(('lr',), 'learning rate used for this step'),
    Field(('grad_norm',), 'global gradient norm before clipping (null if not finite)'),
    Field(('step_time_s',), 'wall time of the step on rank 0, data to optimizer'),
    Field(('samples_per_s',), 'global batch / step time'),
    Field(('tokens_per_s',), 'non-padding input tokens of the global batch / step time; null where tokens do not apply (images)'),
    Field(('tokens', 'label_tokens', 'masked_tokens', 'sequences', 'images'), 'non-padding tokens, and the count each loss term averages over, in the global batch'),
    Field(('padded_tokens',), 'positions the model computed in the global batch, padding included (`data.padding`: each micro-batch cut to its longest sequence, or every sequence at `data.seq_len`); MFU counts these, `tokens_per_s` only the real ones; null where tokens do not apply'),
    Field(('epoch',), 'fractional passes over the training set'),
    Field(('tflops_per_device', 'mfu'), "model TFLOP/s per device (padded_tokens x FLOPs per token, or samples x FLOPs per sample for images, / step time / world size) and its share of the device's dense peak; `mfu` is null off-GPU or for an unknown device. Formula and peak table: `trainer/throughput.py`; run.json `throughput` records both and why MFU is null"),
    Field(('eval_loss', 'eval_accuracy', 'samples_seen'), 'on evaluation steps only; `eval_accuracy` is masked-LM accuracy (BERT) or top-1 (images), named in run.json `data.eval_accuracy_is`'),
    Field(('time',), 'wall clock (Unix seconds) at the end of the step, to line steps up with switch or BMC counters'),
    Field(('comm',), "per collective type (`all_reduce`, `reduce_scatter`, `all_gather`, `all_to_all`, `broadcast`, `reduce`, `gather`, `scatter`, `send`, `recv`, `sendrecv`, `barrier`): `count`, `bytes` (nccl-tests S), `time_s` (the type's call durations summed; null if none timed), `untimed` (calls without a time), `untimed_bytes`, `busbw_GBps`"),
    Field(('comm_groups',), "per process group (its name: the mesh dimension dp, tp, pp, ... or g[ranks] for a group another framework made): `dim`, `size`, `ranks`, `scope` (intra: one host; inter: spans hosts, the fabric's part), `count`, `bytes`, `time_s`, `untimed`, `busbw_GBps` at that group's size, `by_op`"),
    Field(('comm_health',), "tracer health (telemetry/coverage.py): `calls`, `bytes`, `timed`, `timed_bytes`, `calls_pct`, `bytes_pct`; why the rest has no time: `late` (no completion report when the step closed), `no_duration` (a report without a duration), `captured` (CUDA graph capture), `compiled` (traced by torch.compile), `no_timing` (a group with neither a completion hook nor CUDA events), `other_untimed` (with the group's `other_reasons`); since the previous step: `reported_after_close` (earlier steps' late calls reported after all), `never_reported` (late calls given up on), `unclaimed_reports` (reports no traced call claimed: collectives the tracer did not see), `queue_full` (a group's report queue found full: its oldest reports lost); `by_group` the same per process group with its `timing` (completion_hook, cuda_events, host); `verdict` (\"timing covers 100% of calls and bytes\" or what is missing, by group)"),
    Field(('comm_bytes',), 'bytes over `comm`'),
    Field(('comm_time_s',), "wall time within the step with at least one collective in flight (concurrent calls count once), so never more than `step_time_s`; null if the step's calls all lack a time"),
    Field(('exposed_comm_s', 'exposed_comm_reason'), 'every step: the part of `comm_time_s` in which the training thread waited (blocking calls, issuing calls, the end of a backward pass waiting for its buckets), so never more than `comm_time_s`; null with the reason on NCCL (device-timed calls)'),
    Field(('compile_s',), "`train.compile: blocks` only: seconds torch.compile spent compiling during the step (dynamo and its backend, a lazily compiled backward included); part of `step_time_s`, so steady-state figures take the steps where it is 0 (run.json `compile` lists the steps that compiled)"),
    Field(('harness_s',), "rank 0's own per-step work after `step_time_s` ends, not in it: the end-of-step hooks (telemetry's cross-rank reduction, counters, energy, events), the stop vote (held only on the steps rank 0 schedules, about once a second) and the previous step's metrics write and progress line (a record cannot time its own write); evaluation and checkpoints are not in it"),
    Field(('optimizer_s',), "host time between the loop's optimizer_begin and optimizer_end marks (the optimizer step and scheduler; on a GPU the launches, not the kernels)"),
    Field(('overlap_window_s',), "backward compute between the first and the last asynchronous collective the pass issued (DDP's buckets), less the time spent issuing: the compute that communication can hide behind"),
    Field(('ranks',), "across ranks: `step_time_s`, `comm_time_s`, `comm_time_s_by_op.<op>`, `compute_s` (step time outside collectives) and, on link-probe steps of multi-host jobs, `link_in_s` (the probe's receive time at each host's first rank), each `{min, mean, max, max_rank, ranks, median}` (a fixed-size reduction to rank 0; with `telemetry.cross_rank_pipelined` a tree level per step, and rank 0 writes step s's line at step s + run.json `telemetry.cross_rank.lag_steps`; `median` is exact on sampled steps, `telemetry.cross_rank_median_every`, else null)"),
    Field(('gpu_energy_j', 'gpu_power_w', 'gpu_energy_reason'), "rank 0's own GPU: NVML's energy counter delta since the previous step's end (step 1: since its start), power as the mean of the samples taken in that interval or, in a step shorter than the sampler's period with none, the energy delta over the interval's duration (null where the counter did not advance in it); and why it is null when it is"),
    Field(('job_gpu_energy_j', 'job_gpu_power_w', 'job_gpu_energy_reason'), "the same summed over all the job's GPUs; null without NVML, and null where some ranks' GPU energy is unknown in the step (never the other GPUs' sum), with the reason"),
    Field(('job_cpu_energy_j',), 'CPU package energy (RAPL) summed over hosts; null where unreadable'),
    Field(('job_net_tx_bytes', 'job_net_rx_bytes'), 'NIC byte counters of the interfaces in use, summed over hosts'),
    Field(('job_rdma_tx_bytes', 'job_rdma_rx_bytes'), "RDMA port data counters (x 4 bytes; EFA: its hw_counters tx_bytes/rx_bytes) of the ports NCCL uses (its log's device list, else NCCL_IB_HCA; run.json telemetry.rdma_ports), summed over hosts; null without RDMA devices"),
    Field(('job_loss_events',), 'growth of drop, discard, error and retransmission counters, summed over hosts'),
    Field(('job_reorder_events',), 'packets that arrived out of sequence (mlx5 `out_of_sequence`: reordering, not loss), summed over hosts'),
    Field(('job_server_energy_j', 'job_server_power_w'), "whole-server energy and mean power from each host's BMC (`telemetry.bmc`), summed over hosts; null without a BMC ([evidence.md](evidence.md))"),
    Field(('job_host_reason',), "where some hosts' value of a `job_` host sum above (CPU energy, NIC and RDMA bytes, loss and reorder events, server energy and power) is unknown in the step: that sum is null (never the other hosts' sum) and this names each such field with the count of hosts it lacks; absent when every host knew"),
    Field(('host',), "rank 0's host: `cpu_energy_j`, the raw per-device counter deltas, `congestion` (PFC pauses per priority, ECN marks, CNPs) and `server_power`"),
    Field(('link_in_s',), "on link-probe steps of a multi-host job: seconds rank 0 took to receive the probe from the previous host (`ranks.link_in_s` has every host's)"),
    Field(('eval_time_s', 'eval_comm_bytes', 'eval_comm_time_s'), "on evaluation steps: the evaluation after the step, and its own collectives (never counted in the step's `comm` or `step_time_s`)"),
    Field(('profiled', 'exposed'), "on profiled steps (`telemetry.profile_every`): the profiler's view of the step `{window_s, comm_s, compute_s, exposed_s, exposed_share, comm_share, by_op}`, shares of the profiled window"),
)

RUN_FIELDS: tuple[Field, ...] = (
    Field(("name", "recipe_path", "recipe", "overrides"), "the run's name, its recipe file, the resolved recipe and the overrides given"),
    Field(("layout",), "world size, dp x tp x pp, data-parallel engine, batch arithmetic"),
    Field(("model", "data"), "what the workload built: parameter counts, LoRA, data set and its size; `model.kernels`: what `model.kernels` resolved to (`requested`, `used`, the liger `kernels` applied, why auto fell back to none, why the fused cross-entropy is off)"),
    Field(("compile",), "`train.compile: blocks` only: `blocks` compiled, `compile_s` in total, `compiles` (torch.compile's compile events), `steps_compiling` (the steps whose `compile_s` is above 0)"),
    Field(("hosts",), "every rank's host, address and local rank"),
    Field(("software", "device", "backend"), "torch, CUDA, NCCL, transformers, peft versions; the device; the process-group backend"),
    Field(("environment",), "the fabric-related environment (NCCL_*, GLOO_*, ...), secrets redacted"),
    Field(("fabric",), "fabric identity: backend, transport detected from NCCL's log, interfaces/HCAs, GPUDirect RDMA, the expectation check"),
    Field(("telemetry",), "the run's telemetry summary: energy, counter verdict, stragglers (a resumed run's include its earlier attempts' steps of the same world size; another layout's ranks and hosts are not this one's), cross-rank settings, `rdma_ports` (rank 0's host: the RDMA ports whose counters are summed - `counted`, the ones NCCL's log lists or NCCL_IB_HCA selects - the `excluded` ones with a reason, such as a storage HCA, and the `basis`); `comm_health`: the tracer health of every step added up (same keys as metrics.jsonl `comm_health`; calls still unreported at the end count as `never_reported`) with the run's verdict; `comm_outside_steps`: rank 0's collectives outside every step (setup, DDP's first broadcast, checkpoint saves and loads, a loop's work between steps; evaluations are recorded apart, in their step's `eval_comm_*`), per collective type `count` and `bytes` (nccl-tests S, untimed); `counter_sampling`: how NIC counters were sampled (interval, samples, ethtool's time per read)"),
    Field(("throughput", "final"), "run-level throughput and the final step's figures"),
    Field(("command",), "the command line of rank 0"),
    Field(("status", "exit_code", "error"), "running, completed, target_reached, failed (exit 2 bad input, 1 fault), interrupted (130); the one error line"),
    Field(("start_time", "end_time", "duration_s", "attempt", "attempts"), "UTC ISO times; every attempt of a resumed run"),
    Field(("inventory",), "every host's GPU, driver, CUDA, NICs and firmware, OFED/rdma-core, OS, kernel, CPU, container image and GPU-to-NIC topology; each unknown null with a reason"),
    Field(("fabric_config",), "what the fabric was: each of topology, oversubscription, routing, pfc_priority, ecn, dcqcn, switch_model, switch_os, nic_firmware, port_speed, fec with its value and source (recipe fabric.config, the hosts' NIC tools and sysfs, the switch exporter's labels) or null with the reason"),
    Field(("switch_metrics",), "switch counter deltas from the Prometheus endpoint `telemetry.switch_metrics_url`, read at start and end"),
    Field(("engine", "notes"), "runs recorded for another loop (NeMo, Lightning, Bridge): the engine, and what it could not provide"),
)


def field_names(fields: tuple[Field, ...]) -> set[str]:
    return {n for f in fields for n in f.names}


# The names code reads and writes through: `record[StepKey.STEP_TIME_S]`, `info[RunKey.STATUS]`.
class StepKey:
    """metrics.jsonl's (and the rank files') field names, one constant per name in STEP_FIELDS."""
    STEP = "step"
    LOSS = "loss"
    MLM_LOSS, NSP_LOSS = "mlm_loss", "nsp_loss"
    LR = "lr"
    GRAD_NORM = "grad_norm"
    STEP_TIME_S = "step_time_s"
    SAMPLES_PER_S = "samples_per_s"
    TOKENS_PER_S = "tokens_per_s"
    TOKENS, LABEL_TOKENS, MASKED_TOKENS, SEQUENCES = "tokens", "label_tokens", "masked_tokens", "sequences"
    IMAGES = "images"
    PADDED_TOKENS = "padded_tokens"
    EPOCH = "epoch"
    TFLOPS_PER_DEVICE, MFU = "tflops_per_device", "mfu"
    EVAL_LOSS, EVAL_ACCURACY, SAMPLES_SEEN = "eval_loss", "eval_accuracy", "samples_seen"
    TIME = "time"
    COMM = "comm"
    COMM_GROUPS = "comm_groups"
    COMM_HEALTH = "comm_health"
    COMM_BYTES = "comm_bytes"
    COMM_TIME_S = "comm_time_s"
    EXPOSED_COMM_S, EXPOSED_COMM_REASON = "exposed_comm_s", "exposed_comm_reason"
    COMPILE_S = "compile_s"
    HARNESS_S = "harness_s"
    OPTIMIZER_S = "optimizer_s"
    OVERLAP_WINDOW_S = "overlap_window_s"
    RANKS = "ranks"
    GPU_ENERGY_J, GPU_POWER_W, GPU_ENERGY_REASON = "gpu_energy_j", "gpu_power_w", "gpu_energy_reason"
    JOB_GPU_ENERGY_J, JOB_GPU_POWER_W = "job_gpu_energy_j", "job_gpu_power_w"
    JOB_GPU_ENERGY_REASON = "job_gpu_energy_reason"
    JOB_CPU_ENERGY_J = "job_cpu_energy_j"
    JOB_NET_TX_BYTES, JOB_NET_RX_BYTES = "job_net_tx_bytes", "job_net_rx_bytes"
    JOB_RDMA_TX_BYTES, JOB_RDMA_RX_BYTES = "job_rdma_tx_bytes", "job_rdma_rx_bytes"
    JOB_LOSS_EVENTS = "job_loss_events"
    JOB_REORDER_EVENTS = "job_reorder_events"
    JOB_SERVER_ENERGY_J, JOB_SERVER_POWER_W = "job_server_energy_j", "job_server_power_w"
    JOB_HOST_REASON = "job_host_reason"
    HOST = "host"
    LINK_IN_S = "link_in_s"
    EVAL_TIME_S, EVAL_COMM_BYTES, EVAL_COMM_TIME_S = "eval_time_s", "eval_comm_bytes", "eval_comm_time_s"
    PROFILED, EXPOSED = "profiled", "exposed"


class RunKey:
    """run.json's field names, one constant per name in RUN_FIELDS."""
    NAME, RECIPE_PATH, RECIPE, OVERRIDES = "name", "recipe_path", "recipe", "overrides"
    LAYOUT = "layout"
    MODEL, DATA = "model", "data"
    COMPILE = "compile"
    HOSTS = "hosts"
    SOFTWARE, DEVICE, BACKEND = "software", "device", "backend"
    ENVIRONMENT = "environment"
    FABRIC = "fabric"
    TELEMETRY = "telemetry"
    THROUGHPUT, FINAL = "throughput", "final"
    COMMAND = "command"
    STATUS, EXIT_CODE, ERROR = "status", "exit_code", "error"
    START_TIME, END_TIME, DURATION_S, ATTEMPT, ATTEMPTS = "start_time", "end_time", "duration_s", "attempt", "attempts"
    INVENTORY = "inventory"
    FABRIC_CONFIG = "fabric_config"
    SWITCH_METRICS = "switch_metrics"
    ENGINE, NOTES = "engine", "notes"

def key_names(keys: type) -> set[str]:
    """The field names a key class declares."""
    return {v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str)}


# The constants are the names in the tables above, no more and no fewer: a field added to one and not the other
# fails at import, so the code's names cannot drift from the documented ones.
def check_keys() -> None:
    for keys, fields in ((StepKey, STEP_FIELDS), (RunKey, RUN_FIELDS)):
        misnamed = [k for k, v in vars(keys).items() if k.isupper() and k != v.upper()]
        if key_names(keys) != field_names(fields) or misnamed:
            raise AssertionError(f"telemetry.rundir: {keys.__name__} and its field table differ: "
                                 f"{sorted(key_names(keys) ^ field_names(fields)) or misnamed}")


check_keys()


# Names before the scope and unit rules: job-wide sums now carry job_, bandwidths in bytes/s _GBps. Older
# run directories are read under the new names.
RENAMED_FIELDS = {"energy_j": "job_gpu_energy_j", "power_w": "job_gpu_power_w", "cpu_energy_j": "job_cpu_energy_j",
                  "net_tx_bytes": "job_net_tx_bytes", "net_rx_bytes": "job_net_rx_bytes",
                  "rdma_tx_bytes": "job_rdma_tx_bytes", "rdma_rx_bytes": "job_rdma_rx_bytes",
                  "loss_events": "job_loss_events"}
RENAMED_UNITS = {"busbw_gbps": "busbw_GBps", "algbw_gbps": "algbw_GBps", "avg_busbw_gbps": "avg_busbw_GBps",
                 "busbw_min_gbps": "busbw_min_GBps", "busbw_max_gbps": "busbw_max_GBps"}


def rename_fields(d: dict, names: dict) -> dict:
    for old, new in names.items():
        if old in d and new not in d:
            d[new] = d.pop(old)
    return d


def upgrade_record(record: dict) -> dict:
    """A metrics.jsonl (or ranks/) line under the current names; current lines pass unchanged."""
    rename_fields(record, RENAMED_FIELDS)
    comm = record.get("comm")
    for stats in (comm.values() if isinstance(comm, dict) else ()):  # another shape is damage: is_step_record
        if isinstance(stats, dict):
            rename_fields(stats, RENAMED_UNITS)
    return record


# ---------------------------------------------------------------------------------------- reading, writing
def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# metrics.jsonl's fields that hold one finite number or null (the writers make a non-finite value null)
NUMBER_STEP_FIELDS: tuple[str, ...] = (
    StepKey.LOSS, StepKey.MLM_LOSS, StepKey.NSP_LOSS, StepKey.LR, StepKey.GRAD_NORM, StepKey.STEP_TIME_S,
    StepKey.SAMPLES_PER_S, StepKey.TOKENS_PER_S, StepKey.TOKENS, StepKey.LABEL_TOKENS, StepKey.MASKED_TOKENS,
    StepKey.SEQUENCES, StepKey.IMAGES, StepKey.PADDED_TOKENS, StepKey.EPOCH, StepKey.TFLOPS_PER_DEVICE, StepKey.MFU,
    StepKey.EVAL_LOSS, StepKey.EVAL_ACCURACY, StepKey.SAMPLES_SEEN, StepKey.TIME, StepKey.COMM_BYTES,
    StepKey.COMM_TIME_S, StepKey.EXPOSED_COMM_S, StepKey.COMPILE_S, StepKey.HARNESS_S, StepKey.OPTIMIZER_S,
    StepKey.OVERLAP_WINDOW_S, StepKey.GPU_ENERGY_J, StepKey.GPU_POWER_W, StepKey.JOB_GPU_ENERGY_J,
    StepKey.JOB_GPU_POWER_W, StepKey.JOB_CPU_ENERGY_J, StepKey.JOB_NET_TX_BYTES, StepKey.JOB_NET_RX_BYTES,
    StepKey.JOB_RDMA_TX_BYTES, StepKey.JOB_RDMA_RX_BYTES, StepKey.JOB_SERVER_ENERGY_J, StepKey.JOB_SERVER_POWER_W,
    StepKey.LINK_IN_S, StepKey.EVAL_TIME_S, StepKey.EVAL_COMM_BYTES, StepKey.EVAL_COMM_TIME_S)


# per-collective tables (`comm`, `comm_groups`, their `by_op`): each entry's counts, bytes and times are
# finite numbers >= 0 or null; `ranks`: each spread's figures finite numbers or null
_TABLE_NUMBERS = ("count", "bytes", "time_s", "untimed", "untimed_bytes", "busbw_GBps")
_SPREAD_NUMBERS = ("min", "mean", "max", "median")
_OBJECT_STEP_FIELDS = (StepKey.COMM_HEALTH, StepKey.HOST, StepKey.EXPOSED)
_INT_LIMIT = 1 << 63  # what numpy (plots, medians) holds; a bigger integer is no count a run wrote


def _number(value, low: float | None = None) -> bool:
    return value is None or (type(value) in (int, float) and math.isfinite(value) and abs(value) < _INT_LIMIT
                             and (low is None or value >= low))


def _table(table) -> bool:
    """null, or {name: {count, bytes, time_s, ...: number >= 0 or null, by_op: the same table}}."""
    if table is None:
        return True
    return isinstance(table, dict) and all(
        isinstance(entry, dict) and all(_number(entry.get(k), 0) for k in _TABLE_NUMBERS)
        and _table(entry.get("by_op")) for entry in table.values())


def _spreads(ranks) -> bool:
    """null, or {field: {min, mean, max, median: number or null, ...} or {op: such a spread} (by op)}."""
    if ranks is None:
        return True
    if not isinstance(ranks, dict):
        return False
    for spread in ranks.values():
        if spread is None:
            continue
        if not isinstance(spread, dict):
            return False
        inner = [v for k, v in spread.items() if k not in _SPREAD_NUMBERS and isinstance(v, dict)]
        if not all(_number(spread.get(k)) for k in _SPREAD_NUMBERS) or not all(_spreads({0: v}) for v in inner):
            return False
    return True


def is_size_record(record: dict) -> bool:
    """Whether a sweep.jsonl line can be read as one size's interval, as the sweep writes it: `op` a name, `size`
    a whole number of bytes, `ranks` (if any) a list of objects, `gpu_power_w_sum` (if any) a number."""
    size, ranks, power = record.get("size"), record.get("ranks"), record.get("gpu_power_w_sum")
    return (isinstance(record.get("op"), str) and isinstance(size, int) and not isinstance(size, bool) and size >= 0
            and (ranks is None or (isinstance(ranks, list) and all(isinstance(r, dict) for r in ranks)))
            and (power is None or (isinstance(power, (int, float)) and not isinstance(power, bool))))


def is_step_record(record: dict) -> bool:
    """Whether a metrics line can be read as a step: `step` an integer from 1, each number field a finite
    number or null, `step_time_s` above 0, and the nested fields shaped as a run writes them (`comm`
    and `comm_groups` tables of counts, bytes and times >= 0, `ranks` spreads of numbers, objects where
    objects go). A line written by hand or by another program that fails this is damage (left out and named),
    not a value the report computes with (a missing step or a string in `comm` was a traceback)."""
    step = record.get(StepKey.STEP)
    if type(step) is not int or not 1 <= step < _INT_LIMIT:
        return False
    if not all(_number(record.get(key)) for key in NUMBER_STEP_FIELDS):
        return False
    if not (_table(record.get(StepKey.COMM)) and _table(record.get(StepKey.COMM_GROUPS))
            and _spreads(record.get(StepKey.RANKS))):
        return False
    if any(record.get(key) is not None and not isinstance(record[key], dict) for key in _OBJECT_STEP_FIELDS):
        return False
    step_time = record.get(StepKey.STEP_TIME_S)
    return step_time is None or step_time > 0  # a step takes time: 0 (or less) was never measured


def read_jsonl(path: str, damaged: list[int] | None = None, check=None) -> list[dict]:
    """Every complete line that is a JSON object; a truncated last line (a killed job) is skipped. Any other
    line that is not an object is skipped too, and its number (from 1) added to `damaged` if given; so is an
    object that `check` (a function of the row, e.g. is_step_record) refuses."""
    rows = []
    if not os.path.exists(path):
        return rows
    if not os.path.isfile(path):  # a FIFO would block the reader forever, a directory fail in open()
        raise InputError(f"{path}: not a regular file; allowed: the JSON-lines file a run writes")
    with open(path, encoding="utf-8", errors="replace") as f:  # a damaged byte spoils its line, not the file
        for number, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            # ValueError: JSONDecodeError, or an integer of more digits than int() converts (4300);
            # RecursionError: arrays nested thousands deep
            except (ValueError, RecursionError):
                row = None
                if not line.endswith("\n"):  # the last line, cut off by a killed job: not damage
                    continue
            if isinstance(row, dict) and (check is None or check(row)):  # anything else is damage, skipped
                rows.append(row)
            elif damaged is not None and line.strip():
                damaged.append(number)
    return rows


FOLLOW_CHECK_BYTES = 4096  # what a follower compares of a file with a new inode number: a few lines' worth


class JsonlFollower:
    """The complete JSON-object lines appended to a file since the last read (a live run's metrics.jsonl or
    rank file); a torn last line waits for its end; a file replaced (renamed over, or truncated and shorter) is
    read again whole, unless it holds the bytes last read where they were (then it is read on), so a reader
    that must not count a line twice keys its lines (a sweep's sweep.jsonl is rewritten at the end with the
    same lines and one field more)."""

    def __init__(self, path: str, from_end: bool, last_bytes: int | None = None):
        """`from_end`: only lines written from now on; `last_bytes`: start that far before the end (the
        recent lines of a long file), the line cut there skipped."""
        self.path = path
        size = os.path.getsize(path) if os.path.exists(path) else 0
        self.offset = size if from_end else max(0, size - last_bytes) if last_bytes else 0
        self._skip_first = self.offset > 0 and not from_end
        self._partial = b""
        self._inode = _inode(path)
        self._seen = b""  # the last bytes read (up to `offset`): whether a file with a new inode continues them
        self.replaced = 0  # times the file was found replaced and read again from its start

    def new(self) -> list[dict]:
        if not os.path.isfile(self.path):  # not written yet; a FIFO or directory is none of a run's (open blocks)
            return []
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                # replaced (a resume set the file aside, a writer renamed a new one over it): read the new one
                # whole; a longer file renamed over the old one would otherwise be read from the old offset. A
                # new inode number whose file holds what was read (a FUSE mount without stable numbers, a copy
                # with lines added) is read on: read whole, every line would come twice
                if st.st_size < self.offset or (self._inode is not None and st.st_ino != self._inode
                                                and not self._continues(f)):
                    self.offset, self._partial, self._skip_first, self._seen = 0, b"", False, b""
                    self.replaced += 1
                self._inode = st.st_ino
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        self._seen = (self._seen + data)[-FOLLOW_CHECK_BYTES:]
        *lines, self._partial = (self._partial + data).split(b"\n")
        if self._skip_first and lines:
            lines, self._skip_first = lines[1:], False
        out = []
        for line in lines:
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                out.append(row)
        return out


    def _continues(self, f) -> bool:
        """Whether the open file holds, just before `offset`, the bytes last read there."""
        if not self._seen or self.offset < len(self._seen):
            return False
        f.seek(self.offset - len(self._seen))
        return f.read(len(self._seen)) == self._seen


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def write_json_atomic(path: str, data: Any) -> None:
    """Readers never see a half-written file: write beside it, then rename over it."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # nothing half-written stays behind (a full disk)
        raise


# Space set aside at the start of a run, given back when the disk fills, so the final run.json
# (status failed, the error) can still be written.
RESERVE_BYTES = 1 << 20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class MetricsWriteError(HarnessError):
    """metrics.jsonl could not be written (a full disk): one line naming the file and the step."""


class InOrder:
    """Step lines released in step order: a record marked `_held` (telemetry completing its communication fields
    from NCCL's late completion reports) waits, and the later ones behind it, until the mark is gone."""

    def __init__(self, write: Callable[[dict], None]):
        self._write = write
        self._queue: collections.deque = collections.deque()

    def put(self, record: dict) -> None:
        self._queue.append(record)
        while self._queue and not self._queue[0].get("_held"):
            self._write(self._queue.popleft())

    def drain(self) -> None:
        """Everything still waiting (a run that ended with a step never released: written as it is)."""
        while self._queue:
            with contextlib.suppress(HarnessError):  # MetricsWriteError, or the caller's own
                self._write(self._queue.popleft())


class RunDir:
    """The one writer of a run directory. run.json is owned by rank 0; other ranks write under ranks/."""

    def __init__(self, path: str, rank: int):
        self.path, self.rank = path, rank
        self.run_json = os.path.join(path, RUN_JSON)
        self.metrics_path = os.path.join(path, METRICS)
        self.checkpoints = os.path.join(path, CHECKPOINTS)
        self.ranks = os.path.join(path, RANKS)
        self.logs = os.path.join(path, LOGS)
        self.info: dict = {}
        self._metrics = None
        self._lines = InOrder(lambda record: self._write_line(record))  # a subclass may wrap _write_line

    def create(self) -> None:
        for d in (self.path, self.ranks, self.logs):
            os.makedirs(d, exist_ok=True)
        if self.rank == 0:
            self._reserve()

    @property
    def reserve_path(self) -> str:
        return os.path.join(self.path, RESERVE)

    def _reserve(self) -> None:
        try:
            with open(self.reserve_path, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)  # real blocks, not a sparse file
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(self.reserve_path)

    def release_reserve(self) -> bool:
        try:
            os.remove(self.reserve_path)
            return True
        except OSError:
            return False

    def update(self, **fields) -> None:
        self.info.update(fields)
        if self.rank == 0:
            try:
                write_json_atomic(self.run_json, self.info)
            except OSError as exc:
                if exc.errno not in _DISK_FULL or not self.release_reserve():
                    raise
                write_json_atomic(self.run_json, self.info)

    def load_previous(self) -> dict:
        """An earlier attempt's run.json, {} when there is none. A damaged one (not JSON, not an object, not
        UTF-8) is set aside under logs/ by rank 0 before this attempt writes its own: nothing recorded is lost."""
        if not os.path.exists(self.run_json):
            return {}
        try:
            with open(self.run_json, encoding="utf-8") as f:
                info = json.load(f)
        except OSError:
            return {}
        except ValueError:  # JSONDecodeError and UnicodeDecodeError both
            info = None
        if isinstance(info, dict):
            if not isinstance(info.get("attempts", []), list):
                info["attempts"] = []
            info["attempts"] = [a for a in info.get("attempts", []) if isinstance(a, dict)]
            return info
        if self.rank == 0:
            aside = os.path.join(self.logs, f"run.damaged-{now_iso().replace(':', '')}.json")
            with contextlib.suppress(OSError):
                os.makedirs(self.logs, exist_ok=True)
                os.replace(self.run_json, aside)
                print(f"warning: {self.run_json} was damaged (not a JSON object); kept as {aside}, this attempt "
                      "starts a new one", file=sys.stderr, flush=True)
        return {}

    def keep_previous(self) -> str | None:
        """Rank 0, before this attempt writes run.json: the earlier attempt's copied to logs/run.attempt-N.json,
        so an attempt that fails at once (bad input on a rerun) does not take the completed run's summary
        (final, throughput, model, data) with it. Returns the copy's path, None when there was none."""
        if self.rank != 0 or not os.path.isfile(self.run_json):
            return None
        try:
            with open(self.run_json, encoding="utf-8") as f:
                attempt = json.load(f).get("attempt")
        except (OSError, ValueError, AttributeError):
            attempt = None
        n = attempt if isinstance(attempt, int) and attempt >= 1 else 0
        try:
            os.makedirs(self.logs, exist_ok=True)
            copy = os.path.join(self.logs, f"run.attempt-{n}.json")
            k = 1
            while os.path.exists(copy):  # attempts restart at 1 without resume: never overwrite a kept copy
                copy = os.path.join(self.logs, f"run.attempt-{n}.{k}.json")
                k += 1
            shutil.copyfile(self.run_json, copy)
        except OSError as exc:
            print(f"warning: could not keep a copy of the earlier {self.run_json} under {self.logs}: {exc}",
                  file=sys.stderr, flush=True)
            return None
        return copy

    def open_metrics(self, resume_step: int = 0, append: bool = False) -> None:
        """Per-step lines from rank 0. On resume, the lines past the checkpoint are set aside first; a fresh
        run sets aside an earlier run's lines, unless `append` (a loop that does not resume by steps)."""
        if self.rank != 0:
            return
        rows = [] if append else read_jsonl(self.metrics_path)
        if resume_step and any(r.get("step", 0) > resume_step for r in rows):
            n = 1
            while os.path.exists(os.path.join(self.logs, f"metrics.before-resume-{n}.jsonl")):
                n += 1
            os.replace(self.metrics_path, os.path.join(self.logs, f"metrics.before-resume-{n}.jsonl"))
            with open(self.metrics_path, "w", encoding="utf-8") as f:
                for r in rows:
                    if r.get("step", 0) <= resume_step:
                        f.write(json.dumps(r) + "\n")
        elif not resume_step and rows:
            os.replace(self.metrics_path, os.path.join(self.logs, f"metrics.replaced-{now_iso()}.jsonl"))
        self._metrics = open(self.metrics_path, "a", encoding="utf-8")

    def metrics_up_to(self, step: int) -> list[dict]:
        """The recorded steps up to `step` (what a resume from that step's checkpoint continues)."""
        return [r for r in read_jsonl(self.metrics_path) if r.get("step", 0) <= step]

    def write_metrics(self, record: dict) -> None:
        """Append a step's line. A record marked `_held` (telemetry completing its communication fields from
        NCCL's late completion reports) waits, and later ones behind it, until the mark is gone."""
        self._lines.put(record)

    def _write_line(self, record: dict) -> None:
        record.pop("_held", None)
        if self._metrics is not None:
            try:
                self._metrics.write(json.dumps(record, default=str) + "\n")
                self._metrics.flush()  # a killed job keeps every completed step
            except OSError as exc:
                stream, self._metrics = self._metrics, None
                with contextlib.suppress(OSError):
                    stream.close()  # closes the file even when its flush fails again
                raise MetricsWriteError(f"{self.metrics_path}: cannot write step {record.get('step')}: "
                                        f"{exc.strerror or exc}") from None

    def write_rank_file(self, name: str, data: Any) -> None:
        write_json_atomic(os.path.join(self.path, rank_file(self.rank, f"{name}.json")), data)

    def close(self) -> None:
        self._lines.drain()  # never released (a failed run): written as they are
        if self._metrics is not None:
            with contextlib.suppress(OSError):  # a full disk: the error is already recorded
                self._metrics.close()
            self._metrics = None
        if self.rank == 0:
            self.release_reserve()


# ---------------------------------------------------------------------------------------- the document
def markdown() -> str:
    """docs/run-directory.md, from the definitions above."""
    out = ["# The run directory", "",
           "<!-- generated by `python -m telemetry.rundir > docs/run-directory.md` from telemetry/rundir.py; "
           "edit that module, not this file -->", "",
           "Every run (ours, or a NeMo/Lightning/Bridge loop recorded by `telemetry.integrations.recorder`) "
           "writes one directory. Lines are flushed as written, so a killed job leaves every completed step "
           "readable, and readers skip a truncated last line (any other line that is not one JSON object is "
           "left out too, and `telemetry report` names it in a warning at the top); run.json is replaced "
           "atomically. Unknown values "
           "are null, never 0. How each figure is measured: [telemetry.md](telemetry.md).", "",
           "| path | what it holds |", "| --- | --- |"]
    out += [f"| `{p}` | {d} |" for p, d in LAYOUT]
    out += ["", "## run.json", "", "| field | meaning |", "| --- | --- |"]
    out += [f"| {', '.join(f'`{n}`' for n in f.names)} | {f.meaning} |" for f in RUN_FIELDS]
    out += ["", "## metrics.jsonl (and ranks/rankNNNNN.telemetry.jsonl)", "",
            "Whose value: a field without a prefix is the writing rank's own; `job_*` are sums over the whole "
            "job's GPUs or hosts (metrics.jsonl only); `ranks.*` are spreads across ranks. Units are in the "
            "name: `_s` seconds, `_bytes` bytes, `_j` joules, `_w` watts, `_GBps` 1e9 bytes/s (nccl-tests' "
            "GB/s), `_bps` bits/s.", "", "| field | meaning |", "| --- | --- |"]
    out += [f"| {', '.join(f'`{n}`' for n in f.names)} | {f.meaning} |" for f in STEP_FIELDS]
    out += ["", "## Status", "",
            "`run.json` is rewritten atomically; a job that died without closing still says `\"status\": \"running\"`, "
            "and the next attempt records it as `died` in `attempts`. Status values: `running`, `completed`, "
            "`target_reached`, `failed` (exit 2 for bad input, 1 for a fault or a crash), `interrupted` (a signal "
            "or a lost torchrun agent, exit 130; with `train.save_on_signal` after checkpointing the step it was in).",
            "", "## Rules of the record", "",
            "- `exposed_comm_s` <= `comm_time_s` <= `step_time_s` on every step and rank; reports take each share "
            "as the median over the same steps divided by the median step time, so the shares keep that order.",
            "- `job_net_tx_bytes` (every host's NICs) goes with the whole job's traffic, not with one rank's "
            "`comm_bytes`."]
    out += ["", "## Older run directories", "",
            "Read under today's names (`python -m telemetry report|compare|export`):", ""]
    out += [f"- `{old}` -> `{new}`" for old, new in {**RENAMED_FIELDS, **RENAMED_UNITS}.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    from telemetry.errors import print_errors

    if sys.argv[1:]:  # e.g. an output path meant for the shell's redirection
        sys.exit(print_errors(f"got {' '.join(sys.argv[1:])!r}; python -m telemetry.rundir takes no arguments: it "
                              "prints the run directory's documentation (> docs/run-directory.md to write it)"))
    print(markdown(), end="")
