"""One training run: set up, build, train, and always close (run.json, metrics, process group)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from telemetry.capture.environment import host_info, redact_tree
from telemetry.errors import InputError as BadInput  # the base: telemetry raises it too
from telemetry.integrations.recorder import RunRecorder

from .compat import ensure_torchvision_importable
from .config import Recipe
from .data.sampler import StepSampler
from .distributed import (ParallelDims, describe_timeout, dump_flight_recorder, init_process_group, is_timeout,
                          pick_backend, pick_device, prepare_flight_recorder)
from .engines import deepspeed as deepspeed_engine
from .error_report import (FaultError, InputError, forget_left, leave_for_rank0, no_room, no_room_line, one_line, peer_error,
                           print_errors, report)
from .hook_list import HookList
from .kernels import apply as apply_kernels, resolve as resolve_kernels
from .layout import Layout
from .loop import Trainer, TrainerParts
from .optim import keep_fp32_master
from .parallelize import unwrap
from .run_writer import RunDir, record_for_lost_rank0
from .runlock import RunLock, pid_alive
from .seeding import seed_training_streams
from .stop import Interrupted, StopRequests
from .throughput import peak_tflops
from .workloads import get_workload
from telemetry.rundir import StepKey

ensure_torchvision_importable()  # an in-process caller that did not decide first (python -m trainer decides in cli.py)

# transformers' own deprecation chatter about its internals, raised from inside peft: not the user's concern
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _resolve_dtype(choice: str, device: torch.device) -> torch.dtype:
    if choice == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[choice]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def trainable_fingerprint(model: torch.nn.Module) -> dict:
    """Hash and norm of every trainable tensor (full tensors, also when sharded): equal hashes across
    ranks prove the replicas did not diverge. Collective under FSDP2, so every rank must call it."""
    digest, squares, count = hashlib.sha256(), 0.0, 0
    with deepspeed_engine.gathered(model):  # ZeRO-3 partitions: whole for the hash
        for name, param in sorted(unwrap(model).named_parameters()):
            if not param.requires_grad:
                continue
            full = param.full_tensor() if hasattr(param, "full_tensor") else param
            data = full.detach().float().cpu().contiguous()
            digest.update(name.encode())
            digest.update(data.numpy().tobytes())
            squares += float(data.double().pow(2).sum())
            count += data.numel()
    return {"sha256": digest.hexdigest(), "norm": squares ** 0.5, "numel": count}


def _local_bytes(params) -> int:
    """Bytes of this rank's own pieces of the given parameters (tensor-parallel/FSDP shards counted locally)."""
    return sum(deepspeed_engine.local_numel(p.to_local() if hasattr(p, "to_local") else p) * p.element_size()
               for p in params)


def _peak_memory_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    except (ImportError, OSError):
        return None


@dataclass
class RunState:
    """What the phases of one run share; the close phase reads whatever was reached before a failure."""
    recipe: Recipe
    layout: Layout
    rank: int
    lock: RunLock
    rec: RunRecorder
    stops: StopRequests | None = None
    hooks: HookList = field(default_factory=HookList)
    status: str = "failed"
    code: int = 1
    error: str | None = None
    device: torch.device | None = None
    backend: str | None = None
    dims: ParallelDims | None = None
    trainer: Trainer | None = None
    swept: dict = field(default_factory=dict)  # a sweep's own telemetry summary

    @property
    def rundir(self) -> RunDir:
        return self.rec.rundir

    @property
    def hosts(self) -> list:
        return self.rec.hosts


def run(recipe: Recipe, layout: Layout, argv: list[str], overrides: list[str]) -> int:
    """Open the run directory, then set up, build and train; close always, whatever happened."""
    rank = int(os.environ.get("RANK", "0"))
    lock = RunLock(recipe.output_dir, rank)
    problem = lock.acquire()  # before anything is written: the directory may be a live run's
    if problem:
        report(problem)
        return 2
    try:
        st = open_run(recipe, layout, rank, lock, argv, overrides)
    except OSError as exc:  # run.json's first version not written: output_dir on a full or read-only filesystem
        lock.release()
        if not no_room(exc):
            raise
        report(no_room_line(recipe.output_dir, exc))
        return 2
    except BaseException:  # open_run ended run.json's record; the lock is not this failed run's to keep
        lock.release()
        raise
    try:
        set_up(st)
        JOBS[recipe.job](st)
        st.status = st.status if st.status != "failed" else "completed"
        st.code = 0
    except BaseException as exc:  # BaseException: torch's CheckpointException is not an Exception
        # torchrun's SIGTERM, while this rank says why, must not cut it short. It may already be on its way
        # (sent when another rank died of the same fault): its handler then runs as closing() is entered,
        # and its Interrupted would replace this failure, unclassified. It is the failure's echo: closing()
        # again, and the failure is what is recorded. Inline, not in a function: entering one runs handlers.
        while st.stops is not None:
            try:
                st.stops.closing()
                break
            except Interrupted:
                pass
        if classify_failure(st, exc):
            raise  # SystemExit: the finally below records it first
    finally:
        # the same after a run that ended well: a signal now waits for run.json's final status (close())
        while st.stops is not None:
            try:
                st.stops.closing()
                break
            except Interrupted:
                pass
        close(st)
    return st.code


def open_run(recipe: Recipe, layout: Layout, rank: int, lock: RunLock, argv: list[str],
             overrides: list[str]) -> RunState:
    """The run directory, this attempt's number (an earlier attempt that died unclosed recorded as such),
    and run.json's first version."""
    rec = RunRecorder(recipe.output_dir, recipe.name, recipe.telemetry, recipe.fabric.expect, harness=True,
                      rundir=RunDir(recipe.output_dir, rank))
    rec.open(resume=recipe.train.resume != "never", command=redact_tree(argv), overrides=redact_tree(overrides),
             recipe_path=recipe.recipe_path, recipe=redact_tree(recipe.to_dict()), layout=layout.to_dict())
    st = RunState(recipe, layout, rank, lock, rec)
    forget_left(rec.rundir.path, rank)
    try:
        st.stops = StopRequests(recipe.train.save_on_signal, peers_gone=lambda: _peers_gone(st)).install()
    except BaseException as exc:  # run.json says 'running' now: it gets its end (signal handlers off the main thread)
        rec.fail(exc)
        raise
    return st


def set_up(st: RunState) -> None:
    """Device, backend, the process group, every rank's host, the fabric check and the meshes."""
    recipe, rundir = st.recipe, st.rundir
    st.rec.open_live()  # the live exporter's port, before pick_device makes a CUDA context (docs/live.md)
    st.device = pick_device()
    st.backend = pick_backend(recipe.distributed.backend, st.device)
    st.rec.prepare(st.backend, recipe.fabric.force_network)  # NCCL reads its environment at init
    prepare_flight_recorder(rundir.logs)
    init_process_group(st.backend, st.device, recipe.distributed.timeout_s)
    st.rec.start(st.rank, device=st.device, capture=False, inventory=True)
    st.dims = ParallelDims(st.layout, st.device.type)
    st.dims.world_mesh  # made once, up front: a mismatch fails here, not mid-step


def train_job(st: RunState) -> None:
    build(st)
    train(st)


def sweep_job(st: RunState) -> None:
    from .sweep.measure import run_job

    st.swept = run_job(st.recipe, st.rec, st.device)


JOBS = {"train": train_job, "sweep": sweep_job}  # the recipe's job kind (Recipe.job)


def build(st: RunState) -> None:
    """Telemetry on, then the workload's single-device model and data, parallelism applied from outside,
    and the loop that will train it."""
    recipe, layout, rundir, device, dims = st.recipe, st.layout, st.rundir, st.device, st.dims
    # before the model is wrapped: DDP's buckets are traced through a comm hook, and DeepSpeed binds
    # torch.distributed's all-gather/reduce-scatter when it is initialised (trainer/engines/deepspeed.py)
    st.rec.start_capture()
    st.hooks.hooks.append(st.rec)
    seed_everything(recipe.seed)
    weight_dtype = _resolve_dtype(recipe.model.dtype, device)
    compute_dtype = _resolve_dtype(recipe.train.precision, device)
    workload = get_workload(recipe.workload)(recipe, device, weight_dtype)
    # fused kernels: decided (an explicit liger that cannot run stops here, one line) and patched into
    # transformers before the data is read and the model built (trainer/kernels.py)
    kernels = resolve_kernels(recipe, device.type, workload.model_type())
    apply_kernels(kernels)
    workload.use_kernels(kernels)
    need_eval = recipe.train.eval_every_samples is not None
    train_set, eval_set = workload.build_data(need_eval)
    if need_eval and (eval_set is None or len(eval_set) == 0):
        raise InputError("data: the evaluation set is empty; check data.split / data.eval_dataset")
    model = workload.build_model()
    if layout.data_parallel != "deepspeed":  # DeepSpeed's bf16 mode keeps its own fp32 master copy
        keep_fp32_master(model)  # fp32 master weights and AdamW state, compute in train.precision
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    per_unit, unit, formula = workload.flops(model)
    peak, peak_reason = peak_tflops(device, compute_dtype, workload.peak_ops)
    rundir.update(throughput={f"flops_per_{unit}": per_unit, "formula": formula,
                              "peak_tflops_per_device": peak, "peak_reason": peak_reason})
    model = workload.parallelize(model, dims, device, compute_dtype)
    if os.environ.get("FABRIC_HARNESS_LOAD_DIGESTS") == "1":  # check a load against the checkpoint
        from .materialize import piece_digests
        rundir.write_rank_file("load", piece_digests(model))
    for part in model.modules():  # the model, or each pipeline stage
        if isinstance(part, torch.nn.parallel.DistributedDataParallel):
            unseen = st.rec.attach_ddp(part)
            if unseen:
                raise RuntimeError(unseen)
    vocab_parallel = bool(workload.loss_parallel)
    if layout.pp > 1 and layout.tp > 1:  # only the last stage holds lm_head: say whether it is split there
        flag = torch.tensor([float(vocab_parallel)], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        vocab_parallel = bool(flag.item())
    sampler = StepSampler(len(train_set), recipe.seed, layout.global_batch_size, layout.dp, dims.dp_rank,
                          layout.micro_batch_size)
    rundir.update(model={"parameters": total, "trainable_parameters": trainable,
                         "weight_dtype": str(next(model.parameters()).dtype), "compute_dtype": str(compute_dtype),
                         # lm_head split over tp, loss-parallel cross-entropy (no full-vocabulary logits)
                         "vocab_parallel_loss": vocab_parallel,
                         "kernels": kernels.to_dict()},
                  data={"train_samples": len(train_set),
                        "eval_samples": len(eval_set) if eval_set is not None else None,
                        "synthetic": recipe.data.synthetic if recipe.workload != "llm_lora" else False,
                        **({"seq_len": recipe.data.seq_len} if workload.has_tokens else {}),
                        "eval_accuracy_is": workload.accuracy})
    if recipe.train.compile == "blocks":  # compile time per step, apart from the steady state
        from .compile import CompileWatch
        st.hooks.hooks.append(CompileWatch(rundir, workload.compiled_blocks))
    autocast = compute_dtype if compute_dtype != torch.float32 else None
    trainer = st.trainer = Trainer(TrainerParts(recipe, layout, dims, model, workload, train_set, eval_set, sampler,
                                                rundir, st.hooks, device, autocast, flops_per_unit=per_unit,
                                                flops_unit=unit, peak_tflops=peak, stops=st.stops))
    load = workload.load_stats
    if load is not None and trainer.engine is not None:  # deepspeed.initialize must not gather the model
        from .materialize import rss
        load["rss_peak_engine_bytes"] = rss()[1]
    # after the model is built and filled (the same numbers on every rank), before the first step:
    # dropout per data-parallel replica, shared within a tensor-parallel group (trainer/seeding.py)
    seed_training_streams(recipe.seed, dims.dp_rank, dims.mesh("pp").get_local_rank())
    trainer.progress.info(f"{recipe.name}: {layout.describe()}; backend {st.backend} on {device.type}")
    trainer.progress.info(f"model {total:,} parameters, {trainable:,} trainable; {workload.describe(train_set)}")
    if kernels.used == "liger":
        trainer.progress.info(f"model.kernels: liger {kernels.liger_version} ({', '.join(kernels.kernels)})")
        if kernels.fallback:  # said once, on rank 0
            trainer.progress.info(f"model.kernels: fused linear cross-entropy off: {kernels.fallback}")


def train(st: RunState) -> None:
    """The loop, then what the run ends with: each rank's trainable fingerprint and the final figures."""
    trainer, rundir, dims = st.trainer, st.rundir, st.dims
    state = trainer.run()
    fingerprint = trainable_fingerprint(trainer.model)
    rundir.write_rank_file("final", {"rank": dist.get_rank(), "dp_rank": dims.dp_rank, **host_info(),
                                     "step": state.step, "trainable": fingerprint,
                                     "trainable_local_bytes": _local_bytes(trainer.params),
                                     "load": trainer.workload.load_stats,
                                     "peak_memory_bytes": _peak_memory_bytes(st.device)})
    st.status = "target_reached" if state.target_reached_step else "completed"
    rundir.update(final={StepKey.STEP: state.step, StepKey.LOSS: state.last_loss,
                         StepKey.EVAL_LOSS: state.last_eval_loss, StepKey.EVAL_ACCURACY: state.last_eval_accuracy,
                         "target_reached_step": state.target_reached_step, "trainable": fingerprint})
    loss = f", final loss {state.last_loss:.4f}" if state.last_loss is not None else ""
    trainer.progress.info(f"done: {state.step} steps{loss}; run directory {os.path.abspath(st.recipe.output_dir)}")


# how long a rank whose collective failed on a closed connection waits for the peer's process to be gone
# (to name it): a peer saving or writing its record under load takes seconds; torchrun allows 30 s
PEER_EXIT_S = 10.0


def classify_failure(st: RunState, exc: BaseException) -> bool:
    """What went wrong, as run.json's status, exit code and one error line: bad input (2), a signal (130),
    a fault recognised for what it is or a lost peer (1, one line), a crash (1, traceback). Returns True
    when the exception must propagate (SystemExit)."""
    rank, rundir = st.rank, st.rundir
    if isinstance(exc, BadInput):  # a live exporter's port in use, too
        # any rank may find it first, or alone (a file missing on one host): the first to fail says it,
        # before torchrun stops the others (trainer/error_report.py)
        st.code, st.error = 2, str(exc)
        leave_for_rank0(rundir.path, rank, st.error, st.trainer.state.step if st.trainer is not None else None)
        report(exc)
        return False
    # rank 0, torn down or cut off because another rank stopped on bad input: that input is the run's error
    peer, peer_code = (peer_error(rundir.path, st.hosts) if rank == 0 and len(st.hosts) > 1 else None) or (None, 1)
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        # a KeyboardInterrupt (SIGINT before the handler is installed, or a library's own) has no message
        st.status, st.code, st.error = "interrupted", 130, f"interrupted by {str(exc) or 'SIGINT'}"
        lost = _lost_ranks(st.hosts, st.trainer, rundir.run_json)
        if peer:
            st.status, st.code, st.error = "failed", peer_code, peer
        elif lost:
            st.status, st.code, st.error = "failed", 1, f"{lost}; {st.error}"
        if lost and not peer and _rank0_lost(st):
            _say(st, st.error)
        else:
            print(f"[trainer] rank {rank}: {st.error}; completed steps stay in metrics.jsonl", file=sys.stderr,
                  flush=True)
        return False
    if no_room(exc):  # a rank's file or an export refused by a filesystem that filled up: a fault, one line
        st.error = no_room_line(st.recipe.output_dir, exc)
        report(st.error)
        return False
    if isinstance(exc, FaultError):  # a fault recognised for what it is: one line, no traceback
        st.error = str(exc)
        if not exc.everywhere:
            print_errors(exc)
        else:
            report(exc)
        return False
    if peer and (_peer_gone(exc) or is_timeout(exc)):
        st.code, st.error = peer_code, peer
        _say(st, peer)  # said already on the peer's host (one line per host)
        return False
    # a crash: keep the traceback on stderr, the summary in run.json (SystemExit is recorded too)
    st.error = one_line(exc)
    # its own failure, left for rank 0; not a failed collective (a consequence: a peer gone, a timeout, NCCL's
    # errors when a peer went), which would name this rank for another's loss
    if not (_peer_gone(exc) or is_timeout(exc) or isinstance(exc, (SystemExit, getattr(dist, "DistError", ())))):
        leave_for_rank0(rundir.path, rank, st.error, st.trainer.state.step if st.trainer is not None else None, False)
    lost = _lost_ranks(st.hosts, st.trainer, rundir.run_json) if not isinstance(exc, SystemExit) else None
    deadline = time.monotonic() + PEER_EXIT_S
    while not lost and _peer_gone(exc) and time.monotonic() < deadline:
        time.sleep(0.1)  # the peer's sockets close while it is still exiting: give it a moment
        lost = _lost_ranks(st.hosts, st.trainer, rundir.run_json)
    if not lost and _peer_gone(exc):
        lost = _lost_remote_ranks(exc, st.hosts, st.trainer)
    if lost:  # a collective failed because a peer died: say which, not the transport's words
        st.error = f"{lost}; {st.error}"
        _say(st, st.error, exc)
        return False
    if _peer_gone(exc) and not isinstance(exc, SystemExit):  # a peer still exiting, or none named: no traceback
        st.error = f"a peer closed its connection (its own log says why); {st.error}"
        _say(st, st.error, exc)
        return False
    if is_timeout(exc) and dist.is_initialized():  # a peer that does not answer: a cut link, a hung rank
        state = st.trainer.state if st.trainer is not None else None
        step = (state.step if state.steps_done else state.step + 1) if state is not None else None
        st.error = describe_timeout(dump_flight_recorder(rundir.logs, rank), rank, step,
                                    st.recipe.distributed.timeout_s, st.hosts, dist.get_backend(), exc=exc,
                                    after=state is not None and state.steps_done, sweeping=_sweeping(st))
        _say(st, st.error, exc)
        return False
    if isinstance(exc, SystemExit):
        st.code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        st.status = "completed" if st.code == 0 else "failed"
        return True
    traceback.print_exc()
    return False


def _sweeping(st: RunState) -> str | None:
    """The sweep's case in progress where the job is a sweep (trainer/sweep/measure.py), else None."""
    if st.recipe is None or st.recipe.job != "sweep":
        return None
    from .sweep.measure import sweep_position
    return sweep_position()


def close(st: RunState) -> None:
    """Always, error or not: flight-recorder dumps after a failure, the other hooks' end, then the recorder's
    close (telemetry summary and exports, run.json's final status), the lock, the process group. run() has
    made a signal wait meanwhile (StopRequests.closing)."""
    if st.code != 0 and dist.is_initialized():
        dump_flight_recorder(st.rundir.logs, st.rank)  # what every rank last entered, for telemetry report
    try:
        st.hooks.on_train_end(st.status)
    finally:
        try:
            resumed = bool(st.trainer is not None and st.trainer.state.resumed_from)
            try:
                st.rec.close(st.status, st.code, st.error, resumed=resumed, summary=st.swept)
            except Exception as exc:
                if isinstance(exc, OSError) and no_room(exc):  # run.json's last version refused: said once
                    if st.code == 0:  # a failure before this has said its line; run.json keeps its last version
                        st.code = 1
                        report(no_room_line(st.recipe.output_dir, exc))
                elif st.code == 0:
                    raise
                else:  # the run's own failure has said its line and set the exit code: they stand
                    print(f"[trainer] rank {st.rank}: recording the run's end: {one_line(exc)}", file=sys.stderr,
                          flush=True)
        finally:
            st.lock.release()
            if dist.is_initialized():
                dist.destroy_process_group()
            if st.stops is not None:
                st.stops.remove()


def _say(st: RunState, error: str, exc: BaseException | None = None) -> None:
    """A fault every rank may see: rank 0 says the `error:` line, the others a note in their own log. Rank 0
    says it through `report`, so a peer that already said why it left (bad input found on that rank alone)
    keeps the one line: rank 0 would only add that the peer is gone. With rank 0 itself gone, the survivors
    say it (once per host) and record it in run.json: no line was said and run.json stayed `running`."""
    if st.rank == 0:
        report(error)
    elif _rank0_lost(st, exc):
        report(error)
        record_for_lost_rank0(st.rundir.run_json, error)
    else:
        print(f"[trainer] rank {st.rank}: {error}", file=sys.stderr, flush=True)


def _rank0_lost(st: RunState, exc: BaseException | None = None) -> bool:
    """Rank 0 gone without recording how the run ended (killed, crashed hard). On its host its pid tells;
    elsewhere a connection closed from its address (run.json `hosts`)."""
    if st.rank == 0 or _closed_by_rank0(st.rundir.run_json):
        return False
    zero = next((h for h in st.hosts if isinstance(h, dict) and h.get("rank") == 0), None)
    if zero is None:
        return False
    if zero.get("hostname") == host_info()["hostname"]:
        return isinstance(zero.get("pid"), int) and not pid_alive(zero["pid"])
    return exc is not None and _peer_gone(exc) and zero.get("address") in _IPV4.findall(str(exc))


def _peer_gone(exc: BaseException) -> bool:
    """A transport error that means a peer process went away (gloo's and NCCL's words for it)."""
    text = str(exc)
    return any(k in text for k in ("Connection closed by peer", "Connection reset by peer", "remote worker",
                                   "Broken pipe"))


def _peers_gone(st: RunState) -> str | None:
    """For the stop requests: a signal need not wait for the step's end when a peer on this host is gone or
    rank 0 has already ended the run (before the hosts are exchanged there is no peer to name)."""
    run_json = st.rundir.run_json
    return _lost_ranks(st.hosts, st.trainer, run_json) or (
        "rank 0 ended the run" if st.rank != 0 and _closed_by_rank0(run_json) else None)


def _closed_by_rank0(run_json: str | None) -> bool:
    """Rank 0 gone after recording how the run ended (its own failure): it ended, it was not lost."""
    try:
        with open(run_json, encoding="utf-8") as f:
            return json.load(f).get("status") != "running"
    except (OSError, TypeError, ValueError, AttributeError):
        return False


_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")


def _lost_remote_ranks(exc: BaseException, hosts: list, trainer) -> str | None:
    """A peer on another host whose connection closed: its process ids cannot be checked from here, but
    the transport error names its address, which every rank recorded at start-up."""
    here = host_info()["hostname"]
    named = set(_IPV4.findall(str(exc)))
    lost = [h for h in hosts if isinstance(h, dict) and h.get("address") in named and h.get("hostname") != here]
    if not lost:
        return None
    step = f" after step {trainer.state.step}" if trainer is not None else ""
    by_host: dict = {}
    for h in lost:
        by_host.setdefault((h["hostname"], h["address"]), []).append(h["rank"])
    # one address per host: with several ranks there, the error cannot tell which of them went
    names = ", ".join(f"rank {ranks[0]} (host {host}, address {addr})" if len(ranks) == 1 else
                      f"one of ranks {', '.join(map(str, ranks))} (host {host}, address {addr})"
                      for (host, addr), ranks in by_host.items())
    return f"{names} lost{step}: its connection closed (process or host gone; its own log says which)"


def _lost_ranks(hosts: list, trainer, run_json: str | None = None) -> str | None:
    """'rank 1 (host h, pid 123) was lost after step 4': ranks on this host whose process is gone.
    Ranks on other hosts cannot be checked from here (docs/reliability.md)."""
    here = host_info()["hostname"]
    lost = [h for h in hosts if isinstance(h, dict) and h.get("hostname") == here and h.get("pid") != os.getpid()
            and isinstance(h.get("pid"), int) and not pid_alive(h["pid"])
            and not (h.get("rank") == 0 and _closed_by_rank0(run_json))]
    if not lost:
        return None
    step = f" after step {trainer.state.step}" if trainer is not None else ""
    names = ", ".join(f"rank {h['rank']} (host {h['hostname']}, pid {h['pid']})" for h in lost)
    return f"{names} {'was' if len(lost) == 1 else 'were'} lost{step}"
