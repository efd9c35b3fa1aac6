"""One run's lifecycle, for every training loop: ours (trainer/run.py), NeMo 2 / Lightning, Megatron-Bridge,
AutoModel. The run directory is the one `python -m trainer` writes (docs/run-directory.md, owned by
telemetry/rundir.py): run.json (layout, hosts, software, redacted environment, fabric identity and NCCL
transport, telemetry summary, status), metrics.jsonl (one line per optimizer step, rank 0), ranks/ and logs/
(NCCL's INFO log), so `python -m telemetry report` and `compare` read it unchanged. The loops only translate
their step boundaries into the recorder's:

    rec = RunRecorder("runs/x", ...)   # before the process group: NCCL reads its log settings at init
    rec.open(...)                      # the run directory and run.json's first version (start() does it if not)
    rec.start(rank, layout)            # every rank, once the process group exists: hosts, fabric, capture on
    rec.on_step_start(step)            # every rank
    rec.on_step_end(step, record)      # every rank (collective): the capture fields, filled into `record`
    rec.write_step(record)             # rank 0's metrics line, in step order once no longer held
    rec.close("completed")             # or rec.fail(exc): summary, exports, the end's status

`begin_step(step)` / `end_step(step, loss=..., lr=...)` do the step calls for a loop that has no record of its
own. On NCCL a step's communication fields are held for the watchdog's late completion reports
(`telemetry.hold_reports_s`) in every loop alike: the line is written once they are in.

Constructing an adapter's recorder refuses (ImportOrderError) when megatron/nemo bound their collectives before
the tracer was installed (telemetry/capture/early.py).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from importlib import metadata

import torch
import torch.distributed as dist

from telemetry.analysis.exports import export_after_close
from telemetry.capture import early, fabric, force_network, live_export
from telemetry.capture.collective_calls import own_hook_reason
from telemetry.capture.collectives import harness_traffic, set_host_map
from telemetry.capture.counters import merge_verdicts
from telemetry.capture.environment import redact_text, redacted_env, software_versions
from telemetry.capture.hooks import Hooks
from telemetry.capture.session import Telemetry, TelemetrySettings, cuda_device_in_use
from telemetry.rundir import RunDir, RunKey, StepKey, now_iso

_ACTIVE: set[str] = set()  # run directories a recorder of this process is writing

ENGINE_PACKAGES = ("nemo-toolkit", "megatron-core", "megatron-bridge", "nemo-automodel", "lightning",
                   "pytorch-lightning", "transformer-engine")
ENDED_TOGETHER = ("completed", "target_reached")  # every rank closes these together: collectives still work


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def number(value) -> float | None:
    """A finite float from a tensor or number; None for anything else (unknown, never 0)."""
    try:
        out = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return out if out == out and abs(out) != float("inf") else None


def ending(exc: BaseException) -> tuple[str, int, str]:
    """run.json's status, exit code and error for a loop that ended by `exc` (a loop that knows more, such as
    ours, classifies its own)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130, f"{type(exc).__name__}: {exc}"
    if _is_sigterm(exc):  # preemption, as the harness's own trainer records it (trainer/run.py)
        return "interrupted", 130, "interrupted by SIGTERM"
    return "failed", 1, f"{type(exc).__name__}: {exc}"


# Lightning stops its loop on SIGTERM by raising its own SIGTERMException (a SystemExit) at a batch's end
_SIGTERM_EXCEPTIONS = ("lightning.pytorch.utilities.exceptions", "pytorch_lightning.utilities.exceptions")


def _is_sigterm(exc: BaseException) -> bool:
    """Whether `exc` is an engine's own SIGTERM stop (looked up where the engine is loaded; nothing imported)."""
    for module in _SIGTERM_EXCEPTIONS:
        cls = getattr(sys.modules.get(module), "SIGTERMException", None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


class RunRecorder(Hooks):
    """The one owner of a run's lifecycle. `harness`: the harness's own trainer (attempts counted across
    reruns, no engine packages); otherwise an engine's loop. `rundir`: the writer to use (the trainer's turns
    a failed write into its own fault); `backend`: known before the process group (else guessed)."""

    def __init__(self, run_dir: str, name: str | None = None, settings: TelemetrySettings | None = None,
                 expect: str = "any", recipe: dict | None = None, layout: dict | None = None,
                 engine: str | None = None, *, harness: bool = False, rundir: RunDir | None = None):
        if expect not in fabric.EXPECTATIONS:
            raise ValueError(f"expect: got {expect!r}; allowed: {', '.join(fabric.EXPECTATIONS)}")
        self.run_dir = run_dir
        self.name = name or os.path.basename(os.path.normpath(run_dir))
        self.settings = settings or TelemetrySettings()
        self.expect, self.recipe, self.layout, self.engine, self.harness = expect, recipe, layout, engine, harness
        # an engine may bind torch.distributed at import: the process tracer must exist before that
        self.tracer = None if harness else early.require_early()
        self.rundir = rundir if rundir is not None else RunDir(run_dir, 0)  # run.json, metrics.jsonl, reserve
        self.rank = self.rundir.rank
        self.telemetry: Telemetry | None = None
        self.hosts: list = []
        self.previous: dict = {}  # the earlier attempt's run.json (harness runs that resume)
        self.attempt: int | None = None
        self.backend: str | None = None
        self.forced: dict | None = None
        self.switch = None  # telemetry.capture.switch_metrics.SwitchWatch: read again at close
        self.opened = self.closed = False
        self._t0: float | None = None
        self._started: float | None = None
        self._checked = False
        self._device = torch.device("cpu")
        if not harness:
            self.prepare("nccl" if torch.cuda.is_available() else "gloo")

    @property
    def started(self) -> bool:
        return self.telemetry is not None

    @property
    def info(self) -> dict:
        return self.rundir.info

    # ------------------------------------------------------------ before the process group

    def open(self, resume: bool = False, **fields) -> dict:
        """Create the run directory and write run.json's first version (`fields` as given, in order). A
        harness run keeps the earlier attempt's run.json under logs/ and counts attempts (one that died
        unclosed recorded as such); `resume`: the earlier run.json is returned (and kept in `previous`)."""
        key = os.path.abspath(self.run_dir)
        if self.opened:
            return self.previous
        if key in _ACTIVE:  # e.g. a script's own callback and the attach entry point's: one writer only
            print(f"[telemetry] {self.run_dir}: already recorded by another callback in this process; this one "
                  "stays idle", file=sys.stderr, flush=True)
            return self.previous
        _ACTIVE.add(key)
        self.opened = True
        if not self.harness:  # an engine may end without a hook of ours running (at_exit)
            atexit.register(self.at_exit)
        self.rundir.create()
        self._started = time.time()
        head = {"name": self.name} if self.harness else {"name": self.name, "engine": self.engine}
        head.update(status="running", exit_code=None, error=None, start_time=now_iso(), end_time=None)
        software = software_versions()
        if self.harness:
            self.previous = self.rundir.load_previous() if resume else {}
            self.rundir.keep_previous()  # this attempt rewrites run.json: the last one's record stays under logs/
            prior = list(self.previous.get("attempts", []))
            if self.previous.get("status") == "running":  # that attempt died without closing (SIGKILL, node loss)
                prior.append({RunKey.ATTEMPT: self.previous.get(RunKey.ATTEMPT),
                              RunKey.START_TIME: self.previous.get(RunKey.START_TIME), RunKey.END_TIME: None,
                              RunKey.STATUS: "died"})
            self.attempt = len(prior) + 1
            fields.update(attempt=self.attempt, attempts=prior)
        else:
            software.update({k: _version(k) for k in ENGINE_PACKAGES})
        self.rundir.update(**head, **fields, software=software, environment=redacted_env())
        return self.previous

    def open_live(self) -> None:
        """The node's live exporter (its port taken) before the device is picked: a port in use is one error
        line before any GPU work. prepare() opens it too, for owners that do not call this."""
        live_export.open_exporter(self.settings, self.run_dir)

    def prepare(self, backend: str, force: bool = False) -> None:
        """The environment NCCL reads once, at process-group init: its log files, timing, and `force`
        (fabric.force_network: every byte over the network)."""
        self.backend = backend
        Telemetry.prepare_environment(self.settings, self.run_dir, backend)
        self.forced = force_network.apply(force, backend)

    # ------------------------------------------------------------ after the process group

    def start(self, rank: int | None = None, layout: dict | None = None, *, device: torch.device | None = None,
              capture: bool = True, inventory: bool = False) -> None:
        """Every rank, after init_process_group: every rank's host, the fabric's identity and expectation, and
        (`capture`) the telemetry. `layout`: what an adapter read from its engine, used when none was given."""
        if self.started:
            return
        self.rank = rank if rank is not None else (dist.get_rank() if dist.is_initialized() else 0)
        self.rundir.rank = self.rank
        if not self.opened:
            self.open(command=list(sys.argv), recipe=self.recipe, layout=self._layout_for_this_world(layout))
        if not self.opened:
            return
        if device is None:
            device = (cuda_device_in_use(int(os.environ.get("LOCAL_RANK", "0"))) if torch.cuda.is_available()
                      else torch.device("cpu"))
        # the harness chose its backend (it may name one per device type); an engine's is read back
        backend = self.backend if self.harness or not dist.is_initialized() else dist.get_backend()
        self.hosts = fabric.exchange_hosts(self.rank)
        set_host_map([h.get("hostname") if isinstance(h, dict) else None for h in self.hosts])  # groups' scopes
        self.rundir.update(backend=backend, device={"type": device.type, "name": torch.cuda.get_device_name(device)
                                                    if device.type == "cuda" else None},
                           hosts=self.hosts, environment=redacted_env())
        if inventory:
            self.rundir.update(inventory=self._inventory())
        if self.rank == 0 and self.settings.enabled and self.settings.switch_metrics_url:
            from telemetry.capture.switch_metrics import SwitchWatch
            self.switch = SwitchWatch(self.settings.switch_metrics_url)  # read again when the run ends
        fab = fabric.describe(backend, self.info["software"].get("nccl"))
        fab["expectation"] = fabric.check_expectation(self.expect, fab["transport"])
        if self.forced:
            fab["force_network"] = self.forced
        self.rundir.update(fabric=fab)
        self._device = device
        if capture:
            self.start_capture()

    def _layout_for_this_world(self, read: dict | None) -> dict | None:
        """The layout given at construction (launch.nemo's translation), unless the process group has another
        world size: then the layout the engine reports (`read`), or where it reports none (automodel_recipe) the process
        group's world size alone, with a note and a warning naming both sizes."""
        given = self.layout
        if given is None:
            return read
        planned = given.get("world_size") if isinstance(given, dict) else None
        world = dist.get_world_size() if dist.is_initialized() else None
        if self.harness or planned is None or world is None or planned == world:
            return given
        text = (f"the given layout is for world_size {planned} but the job's process group has {world} "
                f"rank{'s' if world != 1 else ''}: the layout recorded is "
                + ("the one the engine reports" if read is not None else
                   "the process group's world size alone (the engine reports none)"))
        self.note(text)
        if self.rank == 0:
            print(f"[telemetry] WARNING: {self.run_dir}: {text}", file=sys.stderr, flush=True)
        return read if read is not None else {"world_size": world, "source": "the job's process group"}

    def start_capture(self, trace: bool = True) -> None:
        """Telemetry on. trace=False: the meters only (energy, power, counters), for a job that times its own
        collectives. Before a model is wrapped: DDP's buckets are traced through a comm hook, and DeepSpeed
        binds torch.distributed's collectives when it is initialised."""
        if self.started or not self.opened:
            return
        self.telemetry = Telemetry(self.settings, self.run_dir, self._device)
        self.telemetry.start(trace=trace)
        if not self.harness:
            self.rundir.open_metrics(append=True)  # an engine's own resume continues the same file

    def attach_ddp(self, model) -> str | None:
        """Trace a DDP model's gradient buckets; the reason when they cannot be (the job has its own comm hook)."""
        if self.telemetry is None:
            return None
        try:
            self.telemetry.attach_ddp(model)
        except RuntimeError as exc:
            return own_hook_reason(exc)
        return None

    def _inventory(self) -> dict:
        """Every host's inventory, collected once by its first rank (collective: call on every rank)."""
        mine = None
        if self.settings.enabled and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            from telemetry.capture.environment import host_info
            from telemetry.capture.inventory import collect
            mine = {"host": host_info()["hostname"], **collect(interfaces=self.settings.interfaces,
                                                               cuda_runtime=torch.version.cuda)}
        every: list = [None] * (dist.get_world_size() if dist.is_initialized() else 1)
        if dist.is_initialized():
            with harness_traffic():
                dist.all_gather_object(every, mine)
        else:
            every = [mine]
        return {h.pop("host"): h for h in every if h is not None}

    def note(self, text: str) -> None:
        self.info.setdefault("notes", []).append(text)

    # ------------------------------------------------------------ steps: the hooks every loop drives

    def on_train_start(self, context: dict) -> None:
        """A resumed run (`start_step` > 0): the steps recorded before its checkpoint count in run.json's tracer
        health and straggler check, which a resume with nothing left to do replaced with empty ones ("no
        collectives traced", "no cross-rank step times")."""
        start = int(context.get("start_step") or 0)
        if self.telemetry is not None and not self.closed and start > 0 and self.rundir.rank == 0:
            self.telemetry.carry_steps(self.rundir.metrics_up_to(start))

    def on_step_start(self, step: int) -> None:
        if self.telemetry is not None and not self.closed:
            self.telemetry.start_step(step)

    def on_step_end(self, step: int, record: dict) -> None:
        """The step's capture fields, filled into `record` (every rank: the cross-rank reduction is collective).
        On NCCL its communication fields may follow a step later (`_held` until then: write_step waits)."""
        if self.telemetry is not None and not self.closed:
            self.telemetry.end_step(step, record.get(StepKey.STEP_TIME_S), into=record)
        if not self._checked:  # NCCL builds its communicators lazily: the transport is known after step 1
            self._checked = True
            self.check_fabric(final=False)

    def write_step(self, record: dict) -> None:
        """The step's metrics line (rank 0), written in step order once its held fields are in."""
        self.rundir.write_metrics(record)

    def on_eval_start(self, step: int) -> None:
        if self.telemetry is not None:
            self.telemetry.start_eval(step)

    def on_eval_end(self, step: int, record: dict) -> None:
        if self.telemetry is not None:
            record.update(self.telemetry.end_eval(step))

    # phase boundaries: the exposed-communication estimate and the trace export read them
    def before_backward(self, step: int, micro_batch: int) -> None:
        self._mark("backward_begin")

    def after_backward(self, step: int, micro_batch: int) -> None:
        self._mark("backward_end")

    def before_optimizer_step(self, step: int) -> None:
        self._mark("optimizer_begin")

    def after_optimizer_step(self, step: int) -> None:
        self._mark("optimizer_end")

    def _mark(self, name: str) -> None:
        if self.telemetry is not None:
            self.telemetry.mark(name)

    def on_steps_done(self) -> None:
        # inside the loop's error handling: a peer lost at the very end fails the run with one line
        if self.telemetry is not None and not self.closed:
            self.telemetry.flush(collective=True)

    def on_train_end(self, status: str) -> None:
        # every rank ends a completed run here together: the held last step is reduced across ranks as usual
        if self.telemetry is not None:
            self.telemetry.flush(collective=status in ENDED_TOGETHER)

    # ------------------------------------------------------------ for a loop with no record of its own

    def begin_step(self, step: int) -> None:
        if self.started and not self.closed:
            self.on_step_start(step)
            self._t0 = time.perf_counter()

    def end_step(self, step: int, loss=None, lr=None, extra: dict | None = None) -> dict | None:
        """The step's record, through on_step_end and write_step; call on every rank."""
        if not self.started or self.closed or self._t0 is None:
            return None
        step_time = time.perf_counter() - self._t0
        self._t0 = None
        gbs = (self.info.get("layout") or {}).get("global_batch_size")
        record = {StepKey.STEP: step, StepKey.LOSS: number(loss), StepKey.LR: number(lr),
                  StepKey.STEP_TIME_S: step_time,
                  StepKey.SAMPLES_PER_S: gbs / step_time if gbs and step_time > 0 else None,
                  # the engine's data pipeline pads and packs: our token count is not known here
                  StepKey.TOKENS_PER_S: None, **(extra or {})}
        self.on_step_end(step, record)
        record[StepKey.TIME] = time.time()
        self.write_step(record)
        return record

    # ------------------------------------------------------------ the fabric

    def check_fabric(self, final: bool = True) -> dict:
        """Record the transport NCCL used and compare it with the expectation; a mismatch is loud. Only rank 0
        reads NCCL logs: after step 1 its own host's (bounded, whatever the world), at the end every rank's."""
        fab = self.info.get("fabric")
        if self.rank != 0 or fab is None:  # run.json and the banner are rank 0's
            return {}
        if fab["backend"] == "nccl":
            nccl = fabric.detect_nccl_transport(self.rundir.logs, None if final else fabric.nccl_log_host())
            fab["nccl"], fab["transport"] = nccl, nccl["transport"] if nccl else None
        fab["expectation"] = fabric.check_expectation(self.expect, fab["transport"])
        forced = fab.get("force_network")
        if forced and forced.get("applied"):
            forced["check"] = force_network.check(fab.get("nccl"))
            if forced["check"].get("warning") and not fab["expectation"].get("warning"):
                fab["expectation"] = {**fab["expectation"], "warning": forced["check"]["warning"]}
        self.rundir.update(fabric=fab)
        if not final and fab["expectation"].get("warning"):
            bar = "!" * 78
            print(f"{bar}\n[telemetry] WARNING: {fab['expectation']['warning']}\n{bar}", file=sys.stderr, flush=True)
        return fab["expectation"]

    # ------------------------------------------------------------ the end

    def at_exit(self) -> None:
        """The process exits with the run still open: an engine whose callbacks have no failure event
        (Megatron-Bridge) raised, or a job stopped without its end hook. The run ends failed, with the exception
        the interpreter reported (sys.last_value) where there is one, and the telemetry is closed."""
        if self.closed or not self.opened:
            return
        exc = getattr(sys, "last_value", None)
        self._close_quietly(*(ending(exc) if isinstance(exc, BaseException) else
                              ("failed", 1, "the process exited before the engine ended the run")))

    def fail(self, exc: BaseException) -> None:
        """Record the loop's failure `exc`. Called while `exc` propagates (an engine's exception hook): a failure
        of the telemetry's own here is one stderr line, never raised in its place, and run.json keeps `exc`."""
        self._close_quietly(*ending(exc))

    def _close_quietly(self, status: str, code: int, error: str) -> None:
        try:
            self.close(status, code, error)
        except Exception as own:
            print(f"[telemetry] {self.run_dir}: recording the run's failure: {type(own).__name__}: {own}",
                  file=sys.stderr, flush=True)

    def close(self, status: str = "completed", code: int = 0, error: str | None = None, *,
              resumed: bool = False, summary: dict | None = None) -> None:
        """Always, error or not: the held steps, the final fabric check, the telemetry summary and exports,
        run.json's status (and this attempt's record). `resumed`: the loss verdict covers the attempts before
        the resume too; `summary`: fields a job measured itself, over the telemetry's own. Whatever fails on
        the way, the telemetry is closed (its tracer off torch.distributed) and run.json gets its end."""
        if self.closed or not self.opened:
            return
        self.closed = True
        _ACTIVE.discard(os.path.abspath(self.run_dir))
        atexit.unregister(self.at_exit)
        try:
            if self.switch is not None:
                self.rundir.update(switch_metrics=self.switch.finish())
            self.on_train_end(status)
            if dist.is_initialized():
                self.check_fabric(final=True)  # the whole run's NCCL logs, not only the first step's
            if self.rank == 0:  # what the fabric was: fabric.config, the hosts' readings, the switch's labels
                from telemetry.analysis.fabric_config import resolve
                self.rundir.update(fabric_config=resolve(self.rundir.info))
            if self.telemetry is not None:
                out = self.telemetry.summary()
                out.update(summary or {})
                if resumed and out.get("enabled"):
                    out["counters"] = merge_verdicts((self.previous.get("telemetry") or {}).get("counters"),
                                                     out.get("counters"))
                self.rundir.update(telemetry=out)
                self.telemetry.close(live=False)  # the exporter reads the last lines after the run directory's close
                export_after_close(self.telemetry)
        except Exception as exc:
            # a run that ended well, failing at its end (a peer lost in the end-of-run exchange): not "completed";
            # a failure being recorded keeps its own error
            if status in ENDED_TOGETHER:
                status, code, error = ending(exc)
            raise
        finally:
            self._close_telemetry()
            # the error line names the input it refuses, which may hold a credential (a URL's password)
            end = {RunKey.STATUS: status, RunKey.EXIT_CODE: code,
                   RunKey.ERROR: redact_text(error) if isinstance(error, str) else error, RunKey.END_TIME: now_iso(),
                   RunKey.DURATION_S: round(time.time() - self._started, 3) if self._started else None}
            if self.attempt is not None:
                end["attempts"] = self.info.get("attempts", []) + [
                    {RunKey.ATTEMPT: self.attempt, RunKey.START_TIME: self.info[RunKey.START_TIME],
                     RunKey.END_TIME: end[RunKey.END_TIME], RunKey.STATUS: status}]
            self.rundir.update(**end)
            self.rundir.close()
            # its last push reads every line (the other local ranks' last ones waited for), marks the run finished
            tel = self.telemetry
            live_export.close_exporter(getattr(tel, "last_step_written", None),
                                       live_export.final_wait_s(getattr(getattr(tel, "s", None), "hold_reports_s",
                                                                        None)))

    def _close_telemetry(self) -> None:
        """The telemetry still open when close() failed before closing it: closed now, without its exports. A
        failure here is that same failure's echo (the held lines' write, again): the one propagating says why."""
        tel = self.telemetry
        if not getattr(tel, "started", False):
            return
        with contextlib.suppress(Exception):
            tel.close(live=False)  # its tracer off torch.distributed, its files and meters closed, even so
