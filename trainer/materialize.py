"""Build a model without memory, shard it, then give each rank only its own pieces of the weights.

A 70B model built whole in every process (and moved whole to one GPU) does not fit: the model is built on
the meta device (`empty_model`, buffers stay real), parallelized there (tensor parallel, FSDP2, pipeline
stages), and `materialize` then allocates each rank's local pieces on its device and fills them:

- from a safetensors checkpoint (`SafetensorsSource`): each rank reads only the slices it owns (tensor
  parallel slices, FSDP shards, FSDP's strided shards of tensor-parallel slices, its pipeline stage's
  layers), never the whole file; under DeepSpeed ZeRO-3 (`materialize_zero3`) each parameter becomes a
  ZeRO-3 parameter whose partition, a range of the flattened tensor, is read from the rows it covers;
- else by the initialisation rule of the parameter's module (normal(0, initializer_range) for linear and
  embedding weights, ones for norms, zeros for biases, and peft's rule for LoRA: kaiming-uniform A, zero B),
  drawn from a generator seeded by (seed, parameter name). Values therefore depend only on the seed and
  the name, never on the layout: every rank draws the same LoRA weights, and a sharded run starts from
  exactly the single-process weights. A full parameter is drawn on the device, one at a time, then sliced.

Parameter names are taken before parallelizing (`name_modules`), so wrappers and stage splits do not change
them.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import zlib

import torch
from torch import nn

from .error_report import InputError

_NAME = "_fh_name"  # attribute each module carries: its name in the model as built


@contextlib.contextmanager
def empty_model():
    """Parameters on the meta device (no memory, no init work), buffers real (rotary tables and such).
    Tied weights come out untied (each registration makes a new meta tensor): call `tie` on the model."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        yield


def tie(model: nn.Module) -> nn.Module:
    """Re-tie a Hugging Face model's shared weights after an empty build, outside `empty_model` (a no-op
    when untied); peft models are tied through their base model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if hasattr(base, "tie_weights"):
        base.tie_weights()
    return model


def name_modules(model: nn.Module) -> None:
    for name, module in model.named_modules():
        object.__setattr__(module, _NAME, name)


def is_meta(model: nn.Module) -> bool:
    return any(_local(p).is_meta for p in model.parameters())


def checkpoint_key(name: str) -> str:
    """The Hugging Face checkpoint key of a parameter of the (peft-wrapped) model."""
    if name.startswith("base_model.model."):
        name = name[len("base_model.model."):]
    return name.replace(".base_layer.", ".")


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _seed(seed: int, name: str) -> int:
    return (seed * 0x9E3779B1 + zlib.crc32(name.encode())) % (2**63)


def init_value(module: nn.Module, pname: str, name: str, shape: tuple, device: torch.device, seed: int,
               std: float) -> torch.Tensor:
    """The full fp32 initial value of parameter `name` (module-type rule, seeded by the name)."""
    out = torch.empty(shape, device=device, dtype=torch.float32)
    gen = torch.Generator(device=device).manual_seed(_seed(seed, name))
    kind = type(module).__name__
    if ".lora_B." in f".{name}":
        return out.zero_()
    if ".lora_A." in f".{name}":  # peft's default: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), +)
        bound = 1.0 / math.sqrt(shape[1])
        return out.uniform_(-bound, bound, generator=gen)
    if pname == "bias":
        return out.zero_()
    if "Norm" in kind:
        return out.fill_(1.0)
    if isinstance(module, (nn.Linear, nn.Embedding)) and pname == "weight":
        out.normal_(0.0, std, generator=gen)
        pad = getattr(module, "padding_idx", None)
        if isinstance(module, nn.Embedding) and pad is not None:
            out[pad] = 0.0
        return out
    raise InputError(f"model: no initialisation rule for parameter {name!r} ({kind}); "
                     "give model.path (a checkpoint) instead")


CHUNK_BYTES = 8 * 2**20  # a slice is read and copied in pieces of at most this many bytes


class SafetensorsSource:
    """Reads slices of tensors by checkpoint key from a directory of safetensors shards.

    Each chunk maps the shard file and unmaps it again: the pages a slice touches (a column slice
    touches every row) never stay resident beyond one chunk."""

    def __init__(self, path: str):
        from safetensors import safe_open

        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    weight_map = json.load(f)["weight_map"]
            except (ValueError, KeyError) as exc:
                raise InputError(f"model.path: {index!r} is not a safetensors index ({exc})") from None
        elif os.path.isfile(os.path.join(path, "model.safetensors")):
            try:
                with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
                    weight_map = {k: "model.safetensors" for k in f.keys()}
            except Exception as exc:  # noqa: BLE001 - SafetensorError: a truncated or damaged header
                raise InputError(f"model.path: {os.path.join(path, 'model.safetensors')!r} is damaged "
                                 f"({' '.join(str(exc).split())}); expected a complete safetensors file") from None
        else:
            raise InputError(f"model.path: {path!r} has no model.safetensors or model.safetensors.index.json")
        self.path, self.weight_map = path, weight_map
        self._open = safe_open
        self.bytes_read = 0

    @staticmethod
    def available(path: str) -> bool:
        return any(os.path.isfile(os.path.join(path, f))
                   for f in ("model.safetensors.index.json", "model.safetensors"))

    def copy_into(self, key: str, shape: tuple, target: torch.Tensor, offset: tuple | None = None) -> None:
        """Copy the block of tensor `key` at `offset` (the whole tensor when None) into `target`, in
        chunks along the first dimension; the stored shape is checked against the model's."""
        fname = self.weight_map.get(key)
        if fname is None:
            raise InputError(f"model.path: the checkpoint in {self.path!r} has no tensor {key!r}")
        offset = offset or (0,) * len(shape)
        file = os.path.join(self.path, fname)
        with self._open(file, "pt") as f:
            stored = tuple(f.get_slice(key).get_shape())
        if stored != tuple(shape):
            raise InputError(f"model.path: tensor {key!r} has shape {list(stored)} in the checkpoint, the "
                             f"model expects {list(shape)} (config.json does not match the weights)")
        if target.dim() == 0:
            with self._open(file, "pt") as f:
                target.copy_(f.get_slice(key)[:])
            self.bytes_read += target.element_size()
            return
        row = max(target[0].numel(), 1) * 4
        step = max(1, CHUNK_BYTES // row)
        rest = tuple(slice(o, o + n) for o, n in zip(offset[1:], target.shape[1:]))
        for start in range(0, target.shape[0], step):
            stop = min(start + step, target.shape[0])
            # the file is mapped per chunk: the pages a chunk touched count as this process's
            # memory until they are unmapped
            with self._open(file, "pt") as f:
                value = f.get_slice(key)[(slice(offset[0] + start, offset[0] + stop), *rest)]
            target[start:stop].copy_(value)
            self.bytes_read += value.numel() * value.element_size()


    def copy_flat(self, key: str, shape: tuple, target: torch.Tensor, start: int) -> None:
        """Copy elements [start, start + target.numel()) of the flattened tensor `key` into the 1-D
        `target` (a ZeRO-3 partition): whole rows straight into it (in chunks), the range's part of a
        first or last row through a buffer of one row. At most two rows more than the range are read."""
        n = target.numel()
        if n == 0:
            return
        if len(shape) <= 1:  # a vector (or scalar): the range itself
            self.copy_into(key, shape, target.view(tuple(shape) and (n,)), (start,) * len(shape))
            return
        width, zeros = math.prod(shape[1:]), (0,) * (len(shape) - 1)
        done = 0
        while done < n:  # a part of a row, then whole rows straight into the target, then a part
            row, within = divmod(start + done, width)
            take = min(n - done, width - within) if within or n - done < width else (n - done) // width * width
            if take % width == 0 and within == 0:
                self.copy_into(key, shape, target[done:done + take].view(take // width, *shape[1:]), (row, *zeros))
            else:  # one row through host memory of its size
                one = torch.empty((1, *shape[1:]), dtype=target.dtype)
                self.copy_into(key, shape, one, (row, *zeros))
                target[done:done + take].copy_(one.view(-1)[within:within + take])
            done += take


def _block(param: torch.Tensor) -> tuple[tuple, tuple] | None:
    """(global offset, local shape) of this rank's piece when it is one contiguous block of the full
    tensor (plain tensors, Shard/Replicate placements); None otherwise (strided shards)."""
    if not hasattr(param, "placements"):
        return (0,) * param.dim(), tuple(param.shape)
    from torch.distributed.tensor import Replicate, Shard

    if not all(type(p) in (Shard, Replicate) for p in param.placements):
        return None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return tuple(offset), tuple(local)


def _runs(param: torch.Tensor) -> list[list[tuple[int, int, int]]]:
    """Per dimension, the runs (global start, local start, length) of indices this rank's piece holds,
    for any placement (strided shards included: FSDP's shard of a tensor-parallel shard). Each
    dimension's indices come from sharding an index vector with the placements that act on it, so the
    layout is DTensor's own, not recomputed here."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    out = []
    for d, size in enumerate(param.shape):
        places = [p if getattr(p, "dim", None) == d else Replicate() for p in param.placements]
        shape = [1] * param.dim()
        shape[d] = size
        index = torch.arange(size, device=_local(param).device).view(shape)
        mine = distribute_tensor(index, param.device_mesh, places, src_data_rank=None).to_local().reshape(-1).tolist()
        runs: list[tuple[int, int, int]] = []
        for local, g in enumerate(mine):
            if runs and runs[-1][0] + runs[-1][2] == g:
                runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
            else:
                runs.append((g, local, 1))
        out.append(runs)
    return out


def _place(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a full tensor, for a parameter that may be a DTensor of any placement."""
    if not hasattr(param, "placements"):
        return full
    from torch.distributed.tensor import distribute_tensor

    # every rank holds the same full value: no communication (src_data_rank=None)
    return distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None).to_local()


def _copy_runs(source: "SafetensorsSource", key: str, shape: tuple, target: torch.Tensor,
               runs: list[list[tuple[int, int, int]]]) -> None:
    """Fill `target` block by block: every combination of one run per dimension is a contiguous block
    of the stored tensor, read on its own (through host memory of its size for a device target)."""
    import itertools

    for combo in itertools.product(*runs):
        view = target[tuple(slice(local, local + n) for _, local, n in combo)]
        offset = tuple(g for g, _, _ in combo)
        if view.device.type == "cpu":
            source.copy_into(key, shape, view, offset)
        else:
            host = torch.empty(tuple(view.shape), dtype=view.dtype)
            source.copy_into(key, shape, host, offset)
            view.copy_(host)


def rss() -> tuple[int | None, int | None]:
    """(current, peak) resident set of this process in bytes, from /proc (None elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None, None


def piece_digests(model: nn.Module) -> dict:
    """{checkpoint key: {offset, shape, sha256}} of this rank's piece of every parameter the checkpoint
    holds (all but LoRA's), right after loading: a load can be checked against the checkpoint without a
    second load (FABRIC_HARNESS_LOAD_DIGESTS=1)."""
    import hashlib

    out, seen = {}, set()
    for module in model.modules():
        base = getattr(module, _NAME, None)
        for pname, param in module.named_parameters(recurse=False):
            if base is None or ".lora_" in f"{base}." or id(param) in seen:
                continue
            seen.add(id(param))
            key = checkpoint_key(f"{base}.{pname}" if base else pname)
            part = getattr(param, "ds_tensor", None)
            if part is not None:  # a ZeRO-3 partition: a range of the flattened tensor
                start, n = zero3_range(param)
                data = part[:n].detach().cpu().contiguous()
                out[key] = {"flat_offset": start, "shape": [n], "sha256": _sha(hashlib, data)}
                continue
            data = _local(param).detach().cpu().contiguous()
            block = _block(param)
            runs = None if block is not None else _runs(param)
            if runs is not None and all(len(r) == 1 for r in runs):  # a strided shard that is one block
                block, runs = (tuple(r[0][0] for r in runs), None), None
            out[key] = {"offset": list(block[0]) if block else None, "shape": list(data.shape),
                        "sha256": _sha(hashlib, data)}
            if runs is not None:  # [global start, length] per run, per dimension
                out[key]["runs"] = [[[g, n] for g, _, n in r] for r in runs]
    return out


def _sha(hashlib, data: torch.Tensor) -> str:
    # the array's own buffer: a partition is hashed without a copy of it
    return hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy()).hexdigest()


def zero3_range(param: torch.Tensor) -> tuple[int, int]:
    """(first element, element count) of the flattened parameter that this rank's ZeRO-3 partition
    holds: DeepSpeed pads the flat tensor to a multiple of the partition count and gives rank r the
    r-th equal range; the padding past the end holds no value."""
    size = param.ds_tensor.ds_numel
    start = size * param.ds_zero_partition_rank
    return start, max(0, min(size, param.ds_numel - start))


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device, seed: int, std: float,
                source: SafetensorsSource | None = None) -> dict:
    """Allocate this rank's pieces on `device` and fill them (from `source`, else by the init rule).
    Returns {"tensors", "bytes_read", "seconds", "rss_before_bytes", "rss_peak_bytes"} for the run's
    records (the peak is the process's high-water mark so far)."""
    import time

    t0, (rss_before, _) = time.perf_counter(), rss()
    buffers = [(m, n, b) for m in model.modules() for n, b in m._buffers.items() if b is not None]
    slots: dict[int, list[tuple[nn.Module, str]]] = {}  # a tied weight sits in several modules' slots
    for m in model.modules():
        for n, p in m._parameters.items():
            if p is not None:
                slots.setdefault(id(p), []).append((m, n))
    model.to_empty(device=device)
    for places in slots.values():  # to_empty makes one new tensor per slot: tie them again
        first = places[0][0]._parameters[places[0][1]]
        for m, n in places[1:]:
            m._parameters[n] = first
    for module, name, buf in buffers:  # to_empty emptied them too; they were real all along
        module._buffers[name] = buf.to(device)
    stats = {"tensors": 0}
    seen: set[int] = set()
    for module in model.modules():
        base = getattr(module, _NAME, None)
        if base is None:
            continue
        for pname, param in module.named_parameters(recurse=False):
            if id(param) in seen:  # tied weights: filled once
                continue
            seen.add(id(param))
            name = f"{base}.{pname}" if base else pname
            shape = tuple(param.shape)
            target = _local(param)
            key = checkpoint_key(name)
            if source is not None and ".lora_" not in name:
                block = _block(param)
                if block is None:  # strided shards (FSDP over tensor parallel): each run of indices
                    _copy_runs(source, key, shape, target, _runs(param))
                elif target.device.type == "cpu":
                    source.copy_into(key, shape, target, block[0])
                else:  # this rank's block through host memory of its own size
                    host = torch.empty(block[1], dtype=target.dtype)
                    source.copy_into(key, shape, host, block[0])
                    target.copy_(host)
            else:
                value = _place(param, init_value(module, pname, name, shape, device, seed, std))
                target.copy_(value.to(dtype=target.dtype))
            stats["tensors"] += 1
    stats["bytes_read"] = source.bytes_read if source is not None else 0
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    stats["rss_before_bytes"], stats["rss_peak_bytes"] = rss_before, rss()[1]
    return stats


@torch.no_grad()
def materialize_zero3(model: nn.Module, init, device: torch.device, seed: int, std: float,
                      source: SafetensorsSource | None = None) -> dict:
    """DeepSpeed ZeRO-3: replace every meta parameter by a ZeRO-3 parameter of which this rank holds
    only its partition, filled from `source` (the rows the partition covers, never the whole tensor)
    or by the init rule (a full parameter drawn at a time, then cut). `init` is DeepSpeed's partitioner
    (trainer/engines/deepspeed.py `zero3_partitioner`). Returns the same records as `materialize`."""
    import time

    from .engines.deepspeed import make_zero3_param

    t0, (rss_before, _) = time.perf_counter(), rss()
    for module in model.modules():  # buffers were real all along
        for name, buf in module._buffers.items():
            if buf is not None:
                module._buffers[name] = buf.to(device)
    made: dict[int, nn.Parameter] = {}  # a tied weight is converted once and put in each of its slots
    for module in model.modules():
        base = getattr(module, _NAME, None)
        for pname, meta in list(module._parameters.items()):
            if meta is None:
                continue
            if id(meta) not in made:
                name = f"{base}.{pname}" if base else pname
                # ZeRO-3 keeps parameters in the configured precision (bf16/fp16), else as built
                dtype = init.dtype if init.dtype in (torch.bfloat16, torch.half) else meta.dtype
                fill = _zero3_fill(module, pname, name, tuple(meta.shape), seed, std, source)
                made[id(meta)] = make_zero3_param(init, meta, dtype, fill)
            module._parameters[pname] = made[id(meta)]
    stats = {"tensors": len(made), "bytes_read": source.bytes_read if source is not None else 0,
             "seconds": round(time.perf_counter() - t0, 3)}
    stats["rss_before_bytes"], stats["rss_peak_bytes"] = rss_before, rss()[1]
    return stats


def _zero3_fill(module: nn.Module, pname: str, name: str, shape: tuple, seed: int, std: float,
                source: SafetensorsSource | None):
    """The function that writes a ZeRO-3 partition (elements [start, start + size) of the flattened
    tensor, zero past its end)."""
    numel = math.prod(shape)

    def fill(part: torch.Tensor, start: int) -> None:
        n = max(0, min(part.numel(), numel - start))
        part[n:].zero_()
        if n == 0:
            return
        if source is not None and ".lora_" not in name:
            source.copy_flat(checkpoint_key(name), shape, part[:n], start)
        else:  # the same full value on every rank, then this rank's range
            value = init_value(module, pname, name, shape, part.device, seed, std)
            part[:n].copy_(value.reshape(-1)[start:start + n])
    return fill


def refuse_whole_load(path: str, model_class: str) -> None:
    """A checkpoint without safetensors (only pytorch_model.bin, a pickle) cannot be read in slices: every
    rank would load the whole model into host memory (a 70B model: 140 GB per rank, 1.1 TB for 8 ranks on a
    node). One rank alone may; several are refused, with the one-time conversion to safetensors."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if world == 1:
        return
    from .workloads.hf import WEIGHT_FILES, ModelError, weight_files

    found = weight_files(path)
    if not found:  # check_checkpoint says this first in a run; a direct caller gets the same line
        raise ModelError(f"model.path: {path!r} has no weights; expected one of {', '.join(WEIGHT_FILES)}")
    raise ModelError(
        f"model.path: {path!r} has no safetensors weights (only {' and '.join(found)}), which each of the {world} "
        "ranks would load whole into host memory instead of its own slices; convert it once: python -c "
        f"\"from transformers import {model_class} as M; M.from_pretrained('{path}', dtype='auto')"
        f".save_pretrained('{path.rstrip('/')}-safetensors')\" (writes model.safetensors shards and config.json; "
        "copy the tokenizer files beside them), then set model.path to the new directory")
