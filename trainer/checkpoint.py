"""Checkpoint and resume with torch.distributed.checkpoint (DCP), without executing anything on load.

A checkpoint holds the trainable (adapter) weights, the optimizer, the LR scheduler, the trainer's
data position and every rank's RNG streams. Frozen base weights are not saved: they come from the
checkpoint or seed the run started from. DCP reshards on load, so dp may change between attempts.
Under DeepSpeed each rank saves its own ZeRO partitions and optimizer state instead (tensors under keys of
its own, its optimizer settings as JSON; trainer/engines/deepspeed.py): those resume at the same world
size and stage.

Nothing read back is unpickled with plain pickle (docs/reliability.md):
- the harness's own state (trainer position, scheduler, RNG) is JSON, carried inside DCP as byte
  tensors, so DCP's collective error handling covers it like the weights;
- DCP's `.metadata` is a pickle: it is read by an unpickler that resolves only DCP's metadata classes;
- DCP's non-tensor leaves (optimizer hyper-parameters) are read with torch's `weights_only` loader.

A save goes to `step-NNNNNNN.partial/`, is renamed to `step-NNNNNNN/` once every rank has written its
part, and only then does `latest.json` move: a failed save (disk full) never leaves a checkpoint that
`latest.json` could point to, and the partial directory is removed.
"""
from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import random
import shutil

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from .engines import deepspeed as ds
from .error_report import FaultError, InputError
from .run_writer import now_iso, write_json_atomic

# The optimizer's state flattened by parameter name: its param groups' settings are saved per parameter
# (optim.param_groups.<fqn>.lr), not per group index (optim.param_groups.0.lr, ...params). Pipeline ranks hold
# different parameters: index-keyed groups collided across them, one rank's were kept, and every other rank's
# resume failed (as torchtitan does for the same reason). Keyed by parameter, a checkpoint also loads onto
# another split of the layers.
OPTIONS = StateDictOptions(ignore_frozen_params=True, flatten_optimizer_state_dict=True)
# Frozen weights are absent on purpose; missing trainable keys are checked against the metadata first.
LOAD_OPTIONS = StateDictOptions(ignore_frozen_params=True, strict=False, flatten_optimizer_state_dict=True)
# checkpoints written before: param groups by index (they load wherever every rank held the same parameters)
LEGACY_OPTIONS = StateDictOptions(ignore_frozen_params=True)
LEGACY_LOAD_OPTIONS = StateDictOptions(ignore_frozen_params=True, strict=False)
LEGACY_KEY = "optim.param_groups.0.params"  # only the by-index layout stores a group's parameter list
LATEST = "latest.json"
PARTIAL = ".partial"
HARNESS = "harness/"  # keys of the harness's own JSON state inside the checkpoint


# ------------------------------------------------------------------ harness state as JSON

def host_rng() -> tuple:
    """The host's RNG streams as they stand (python, numpy, torch's CPU generator), kept as they are: cheap
    enough to take at every step. The loop takes them before it draws the next step's batches ahead of
    time (an image set's crops draw from torch's generator), and a checkpoint saved after that draw holds
    these, so a resumed run draws that step's batches as the uninterrupted run did."""
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def host_rng_moved(before: tuple) -> bool:
    """Whether any of the host's RNG streams drew since `before` (host_rng) was taken."""
    (py, (_, keys, pos, has_gauss, gauss), cpu), now = before, host_rng()
    return (py != now[0] or not np.array_equal(keys, now[1][1]) or (pos, has_gauss, gauss) != tuple(now[1][2:])
            or not torch.equal(cpu, now[2]))


def _rng_state(host: tuple | None = None) -> dict:
    """Every RNG stream as JSON: the host's from `host` (host_rng) or as they stand, CUDA's as it stands."""
    (version, internal, gauss_next), (kind, keys, pos, has_gauss, gauss), cpu = host or host_rng()
    state = {"python": [version, list(internal), gauss_next],
             "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
             "torch": cpu.tolist()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state().tolist()
    return state


def _set_rng_state(state: dict) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8))


def _json_tensor(obj) -> torch.Tensor:
    return torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)


def _from_json_tensor(t: torch.Tensor, where: str):
    try:
        return json.loads(bytes(t.numpy().tobytes()).decode())
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, an integer int() refuses (4300+ digits)
        raise InputError(f"train.resume: {where} is damaged ({exc}); use an earlier checkpoint "
                         "or train.resume=never") from None


# ------------------------------------------------------------------ safe reading

# Every class a DCP .metadata pickle names (torch 2.6-2.13); anything else is refused.
_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name): getattr(dcp_metadata, name)
    for name in ("Metadata", "TensorStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING",
                 "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex", "StorageMeta")
    if hasattr(dcp_metadata, name)}
_METADATA_GLOBALS.update({
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,  # a lookup in torch's layouts
    ("pathlib", "PosixPath"): pathlib.PosixPath,
    ("pathlib", "WindowsPath"): pathlib.PurePosixPath,  # only a name; never touched on load
    ("collections", "OrderedDict"): __import__("collections").OrderedDict,
})


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only DCP's metadata classes and torch dtypes: a crafted .metadata cannot name os.system,
    builtins.eval or any other callable, so unpickling it cannot run code."""

    def find_class(self, module, name):
        if (module, name) in _METADATA_GLOBALS:
            return _METADATA_GLOBALS[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id")


def read_metadata(path: str) -> dcp_metadata.Metadata:
    """The DCP metadata of checkpoint `path`, read safely; a damaged file is one InputError line."""
    meta_path = os.path.join(path, ".metadata")
    try:
        with open(meta_path, "rb") as f:
            meta = _MetadataUnpickler(f).load()
    except OSError as exc:
        raise InputError(f"train.resume: {meta_path}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a damaged or foreign file
        raise InputError(f"train.resume: {meta_path} is damaged or not DCP metadata "
                         f"({type(exc).__name__}: {exc}); use an earlier checkpoint or train.resume=never") from None
    if not isinstance(meta, dcp_metadata.Metadata) or not isinstance(meta.state_dict_metadata, dict):
        raise InputError(f"train.resume: {meta_path} is not DCP metadata (holds {type(meta).__name__})")
    for info in (meta.storage_data or {}).values():  # data files must be plain names inside the checkpoint
        rel = getattr(info, "relative_path", None)
        if not isinstance(rel, str) or os.path.basename(rel) != rel or rel in ("", ".", ".."):
            raise InputError(f"train.resume: {meta_path} names a data file outside the checkpoint: {rel!r}")
    return meta


class _SafeReader(dcp.FileSystemReader):
    def read_metadata(self, *args, **kwargs):
        if kwargs.get("rank") is not None:  # per-rank metadata files are not written by this harness
            raise InputError(f"train.resume: {self.path}: per-rank metadata is not supported")
        meta = read_metadata(str(self.path))
        if getattr(meta, "storage_meta", None) is None:
            meta.storage_meta = dcp_metadata.StorageMeta()
        meta.storage_meta.load_id = self.load_id
        return meta


class _SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        # DCP's default uses torch.load(weights_only=False): plain pickle. Non-tensor leaves here are
        # numbers, strings and tuples (optimizer hyper-parameters), which weights_only accepts.
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


# ------------------------------------------------------------------ save

def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:07d}")


def _describe_failure(exc: BaseException) -> str:
    """One line from DCP's CheckpointException (a BaseException holding each rank's error) or an OSError."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, wrapped = sorted(failures.items())[0]
        inner = getattr(wrapped, "exception", wrapped)
        if isinstance(inner, tuple) and inner:  # (exception, traceback frames) on some paths
            inner = inner[0]
        return f"rank {rank}: {_describe_failure(inner)}"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def _nearly_full(path: str, below: int = 1 << 20) -> bool:
    """Whether the file system holding `path` has less than `below` bytes left (checked before the failed
    save's files are removed)."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < below


def _no_room(why: str) -> bool:
    """A write refused for the filesystem's sake: full, over quota, or read-only."""
    return any(text in why for text in ("No space left", "Disk quota exceeded", "Read-only file system"))


def _free(path: str) -> str:
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or ".")
    except OSError:
        return "free space unknown"
    return f"{st.f_bavail * st.f_frsize >> 10} KiB free there now"


def _remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def save(root: str, step: int, model, optimizer, scheduler, trainer_state: dict, rng: tuple | None = None) -> str:
    """Write the checkpoint of `step`; `rng`: the host's RNG streams to save (host_rng) instead of the
    current ones."""
    final = step_dir(root, step)
    partial = final + PARTIAL
    rank = dist.get_rank()
    if rank == 0:
        _remove(partial)  # left by a save that died
    dist.barrier()
    if ds.is_engine(model):  # this rank's ZeRO partitions and optimizer tensors, its settings as JSON
        tensors, plain = ds.checkpoint_state(model)
        state = {"deepspeed": tensors, f"{HARNESS}deepspeed/rank{rank}": _json_tensor(plain)}
    else:
        msd, osd = get_state_dict(model, optimizer, options=OPTIONS)
        state = {"model": msd, "optim": osd}
    state.update({HARNESS + "scheduler": _json_tensor(scheduler.state_dict()),
                  HARNESS + "trainer": _json_tensor(trainer_state),
                  f"{HARNESS}rng/rank{rank}": _json_tensor(_rng_state(rng))})
    try:
        dcp.save(state, checkpoint_id=partial)
    except BaseException as exc:  # DCP raises CheckpointException (not an Exception) with every rank's error
        why = _describe_failure(exc)
        if "No space left" not in why and _nearly_full(partial):
            # torch's zip writer reports a short write on a full disk as a position mismatch: name the cause
            why = f"{why}; No space left on device (the checkpoint's file system is full)"
        if rank == 0:
            _remove(partial)  # frees what the failed save took (a full disk) and leaves nothing to resume from
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        previous = find_latest_step(root)
        kept = f"latest.json still points at step {previous}" if previous is not None else "no earlier checkpoint"
        # a filesystem that filled up is a fault of the run's (exit 1), but the line says what would make room
        room = (f"; allowed: an output_dir on a filesystem with room for the checkpoints ({_free(root)}), or "
                "train.save_final=false with train.save_every=0 (no checkpoint)") if _no_room(why) else ""
        raise FaultError(f"checkpoint at step {step} not written ({why}); "
                         f"partial checkpoint removed, {kept}{room}") from None
    dist.barrier()
    if rank == 0:  # the pointer moves only once every rank has written its part
        try:
            _remove(final)
            os.replace(partial, final)
            write_json_atomic(os.path.join(root, LATEST), {"step": step, "path": os.path.basename(final),
                                                           "world_size": dist.get_world_size(), "time": now_iso()})
        except OSError as exc:
            _remove(partial)
            raise FaultError(f"checkpoint at step {step} not written ({_describe_failure(exc)})") from None
    return final


# ------------------------------------------------------------------ find and load

def _read_pointer(root: str) -> dict | None:
    pointer = os.path.join(root, LATEST)
    if not os.path.exists(pointer):
        return None
    try:
        with open(pointer, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON, an integer of 4300+ digits
        reason = str(exc).split("; use sys.set_int_max_str_digits()")[0]  # advice for programmers, not users
        raise InputError(f"train.resume: {pointer} is damaged ({reason}); expected JSON with 'step' and 'path' "
                         "(remove it to start fresh, or set train.resume to a step directory)") from None
    path = data.get("path") if isinstance(data, dict) else None
    step = data.get("step") if isinstance(data, dict) else None
    if not isinstance(path, str) or os.path.basename(path) != path or not path.startswith("step-") \
            or not isinstance(step, int) or isinstance(step, bool):
        raise InputError(f"train.resume: {pointer} is damaged: expected 'step' (an integer) and 'path' "
                         f"(a step-NNNNNNN directory beside it); got {str(data)[:120]}")
    return data


def find_latest_step(root: str) -> int | None:
    try:
        data = _read_pointer(root)
    except InputError:
        return None
    return data["step"] if data else None


def find_latest(root: str) -> str | None:
    data = _read_pointer(root)
    if data is None:
        return None
    path = os.path.join(root, data["path"])
    if not os.path.isdir(path):
        raise InputError(f"train.resume: {os.path.join(root, LATEST)} points at step {data['step']}, "
                         f"but {path} does not exist; set train.resume to another step directory or never")
    return path


def _shape_problems(meta, state: dict, path: str) -> list[str]:
    """Tensors of the model and optimizer whose global shape differs from the checkpoint's, or are missing."""
    flat, _ = flatten_state_dict(state)
    saved = meta.state_dict_metadata
    problems = []
    for key, value in flat.items():
        if not isinstance(value, torch.Tensor):
            continue
        entry = saved.get(key)
        if entry is None:
            problems.append(f"{key} is not in the checkpoint")
        elif not hasattr(entry, "size"):
            problems.append(f"{key} is not a tensor in the checkpoint")
        elif tuple(entry.size) != tuple(value.shape):
            problems.append(f"{key} has shape {list(entry.size)} in the checkpoint, {list(value.shape)} in the model")
    return problems


def _step_of(path: str) -> str:
    name = os.path.basename(os.path.normpath(path))
    return f"step {int(name[5:])}" if name.startswith("step-") and name[5:].isdigit() else f"checkpoint {path}"


def load(path: str, model, optimizer, scheduler) -> tuple[dict, bool]:
    """Restore in place; returns the trainer state and whether this rank's RNG was restored."""
    if not os.path.isfile(os.path.join(path, ".metadata")):
        raise InputError(f"train.resume: {path!r} is not a checkpoint directory (no DCP .metadata); allowed: a "
                         "step directory (RUN/checkpoints/step-NNNNNNN), auto (the latest in output_dir) or never")
    where = f"{_step_of(path)} ({path})"
    meta = read_metadata(path)
    saved = meta.state_dict_metadata
    rank = dist.get_rank()
    for key in ("scheduler", "trainer"):
        if HARNESS + key not in saved:
            raise InputError(f"train.resume: {where} has no {HARNESS}{key}: written by an older harness "
                             "(pickled state, refused) or another program; use train.resume=never")
    engine, legacy = ds.is_engine(model), LEGACY_KEY in saved
    if engine:
        state = {"deepspeed": _deepspeed_templates(saved, rank, where)}
    else:
        msd, osd = get_state_dict(model, optimizer, options=LEGACY_OPTIONS if legacy else OPTIONS)
        state = {"model": msd, "optim": osd}
        problems = _shape_problems(meta, state, path)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(f"train.resume: {where} does not fit this model: {problems[0]}{more}; resume with "
                             "the recipe that wrote it (model, lora, parallel.pp) or train.resume=never")
    rng_key = f"{HARNESS}rng/rank{rank}"
    for key in ("scheduler", "trainer", f"rng/rank{rank}", f"deepspeed/rank{rank}"):
        entry = saved.get(HARNESS + key)
        if entry is not None:
            state[HARNESS + key] = torch.empty(tuple(entry.size), dtype=torch.uint8)
    try:
        dcp.load(state, storage_reader=_SafeReader(path), planner=_SafePlanner())
    except InputError:
        raise
    except BaseException as exc:  # CheckpointException is a BaseException: truncated or damaged data files
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise InputError(f"train.resume: {where} cannot be read: {_describe_failure(exc)}; use an earlier "
                         "checkpoint or train.resume=never") from None
    if engine:
        plain = _from_json_tensor(state[f"{HARNESS}deepspeed/rank{rank}"], f"{where} DeepSpeed state")
        ds.load_checkpoint_state(model, state["deepspeed"], plain)
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=LEGACY_LOAD_OPTIONS if legacy else LOAD_OPTIONS)
    scheduler.load_state_dict(_from_json_tensor(state[HARNESS + "scheduler"], f"{where} scheduler state"))
    restored = rng_key in state
    if restored:
        _set_rng_state(_from_json_tensor(state[rng_key], f"{where} RNG state"))
    trainer_state = _from_json_tensor(state[HARNESS + "trainer"], f"{where} trainer state")
    if not isinstance(trainer_state, dict) or not isinstance(trainer_state.get("step"), int):
        raise InputError(f"train.resume: {where} trainer state has no integer 'step'")
    return trainer_state, restored


def _deepspeed_templates(saved: dict, rank: int, where: str) -> dict:
    """Empty tensors shaped as this rank's saved DeepSpeed tensors (a fresh optimizer has no state yet to
    load into). A checkpoint without them was not taken with DeepSpeed, or on fewer ranks."""
    mine = "deepspeed." + ds.prefix()  # DCP flattens nested keys with dots
    out = {key[len("deepspeed."):]: torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
           for key, meta in saved.items() if key.startswith(mine) and hasattr(meta, "size")}
    if not out or f"{HARNESS}deepspeed/rank{rank}" not in saved:
        raise InputError(f"train.resume: {where} holds no DeepSpeed state for rank {rank}: it was taken with another "
                         "parallel.data_parallel or on fewer ranks; allowed: a checkpoint of the same DeepSpeed run, "
                         "or train.resume=never")
    return out
