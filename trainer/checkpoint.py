"""Checkpoint and resume with torch.distributed.checkpoint (DCP).

A checkpoint holds the trainable (adapter) weights, the optimizer, the LR scheduler, the trainer's
data position and every rank's RNG streams. Frozen base weights are not saved: they come from the
checkpoint or seed the run started from. DCP reshards on load, so dp may change between attempts.
"""
from __future__ import annotations

import io
import os
import pickle
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from .errors import InputError
from .rundir import now_iso, write_json_atomic

OPTIONS = StateDictOptions(ignore_frozen_params=True)
# Frozen weights are absent on purpose; dcp.load itself still fails on a missing trainable key.
LOAD_OPTIONS = StateDictOptions(ignore_frozen_params=True, strict=False)
LATEST = "latest.json"


def _rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _blob(obj) -> io.BytesIO:
    # Non-tensor state travels as one pickled blob so DCP does not try to flatten it.
    return io.BytesIO(pickle.dumps(obj))


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:07d}")


def save(root: str, step: int, model, optimizer, scheduler, trainer_state: dict) -> str:
    path = step_dir(root, step)
    msd, osd = get_state_dict(model, optimizer, options=OPTIONS)
    rank = dist.get_rank()
    state = {"model": msd, "optim": osd, "scheduler": _blob(scheduler.state_dict()),
             "trainer": _blob(trainer_state), f"rng/rank{rank}": _blob(_rng_state())}
    dcp.save(state, checkpoint_id=path)
    dist.barrier()
    if rank == 0:  # the pointer moves only once every rank has written its part
        write_json_atomic(os.path.join(root, LATEST), {"step": step, "path": os.path.basename(path),
                                                       "world_size": dist.get_world_size(), "time": now_iso()})
    return path


def find_latest(root: str) -> str | None:
    pointer = os.path.join(root, LATEST)
    if not os.path.exists(pointer):
        return None
    import json
    with open(pointer, encoding="utf-8") as f:
        return os.path.join(root, json.load(f)["path"])


def load(path: str, model, optimizer, scheduler) -> tuple[dict, bool]:
    """Restore in place; returns the trainer state and whether this rank's RNG was restored."""
    if not os.path.isfile(os.path.join(path, ".metadata")):
        raise InputError(f"train.resume: {path!r} is not a checkpoint directory (no DCP .metadata)")
    rank = dist.get_rank()
    saved_keys = dcp.FileSystemReader(path).read_metadata().state_dict_metadata.keys()
    msd, osd = get_state_dict(model, optimizer, options=OPTIONS)
    state = {"model": msd, "optim": osd, "scheduler": io.BytesIO(), "trainer": io.BytesIO()}
    rng_key = f"rng/rank{rank}"
    if rng_key in saved_keys:
        state[rng_key] = io.BytesIO()
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=LOAD_OPTIONS)
    scheduler.load_state_dict(_unblob(state["scheduler"]))
    if rng_key in state:
        _set_rng_state(_unblob(state[rng_key]))
    return _unblob(state["trainer"]), rng_key in state


def _unblob(buf: io.BytesIO):
    buf.seek(0)
    return pickle.loads(buf.read())
