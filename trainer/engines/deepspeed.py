"""DeepSpeed ZeRO (stage 1, 2 or 3) as the data-parallel engine, built with `deepspeed.initialize`.

The model stays the workload's single-device model; DeepSpeed wraps it together with the recipe's own
torch optimizer (trainer/optim.py) over the whole world (dp only). The harness keeps its loss
normalisation, schedule, logging and checkpoints; DeepSpeed owns gradient reduction, partitioning,
clipping (`gradient_clipping` from train.grad_clip) and the optimizer step.

Order matters for telemetry: DeepSpeed's communication backend binds torch.distributed's
all-gather/reduce-scatter functions when `initialize` builds it, so the collective tracer must be
installed before `wrap` is called (trainer/run.py starts telemetry before the model is built).
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

import torch
import torch.distributed as dist

from telemetry.capture.group_timeout import carry_job_timeout_to_all

from ..hook_list import Hooks
from .deepspeed_config import build


def _import_deepspeed(device: torch.device):
    # DeepSpeed picks its accelerator at import; on a CPU-only host it would otherwise probe for CUDA
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if device.type == "cuda" else "cpu")
    try:
        import deepspeed
    except ImportError as exc:
        from ..error_report import InputError
        raise InputError(f"parallel.data_parallel: 'deepspeed' needs the deepspeed package ({exc}); "
                         "install it with `pip install deepspeed` (or the project's test extra), or use "
                         "ddp, fsdp or replicate") from None
    return deepspeed


def is_engine(model) -> bool:
    """Whether `model` is a DeepSpeed engine (without importing deepspeed where it is not in use)."""
    ds = sys.modules.get("deepspeed")
    return ds is not None and isinstance(model, ds.DeepSpeedEngine)


def wrap(model: torch.nn.Module, optimizer: torch.optim.Optimizer, recipe, layout, device: torch.device,
         compute_dtype: torch.dtype):
    """`deepspeed.initialize` on the model and the recipe's optimizer; returns the engine, which stands
    in for the model (its forward is the model's). The recipe's schedule keeps driving the lr: ZeRO's
    optimizer keeps the client optimizer's param_groups dicts."""
    deepspeed = _import_deepspeed(device)
    # torch 2.13 deprecates the names DeepSpeed calls (they delegate to the *_single ones): not the user's concern
    warnings.filterwarnings("ignore", message=r".*(all_gather_into_tensor|reduce_scatter_tensor)` is deprecated",
                            category=FutureWarning)
    config = build(recipe, layout, bf16=compute_dtype == torch.bfloat16)
    # DeepSpeed's communication backend over the process group already made (its config check reads
    # the world size from it); this is where it binds the all-gather/reduce-scatter functions
    deepspeed.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)
    _check_values(config)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                           dist_init_required=False)
    carry_job_timeout_to_all()  # its data-parallel group is a world clone made with torch's default timeout
    return engine


def zero3_partitioner(recipe, layout, device: torch.device, compute_dtype: torch.dtype):
    """DeepSpeed's ZeRO-3 partitioner for the recipe's configuration (`deepspeed.zero.Init`, not entered:
    it converts parameters one by one in `make_zero3_param`), or None where partitions cannot be
    filled one by one (parameters offloaded to NVMe, hierarchical partitions): those build whole."""
    deepspeed = _import_deepspeed(device)
    config = build(recipe, layout, bf16=compute_dtype == torch.bfloat16)
    deepspeed.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)
    _check_values(config)
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    init = deepspeed.zero.Init(config_dict_or_path=config)
    carry_job_timeout_to_all()  # the partitioner's groups, made without the job's timeout
    if init.remote_device == OffloadDeviceEnum.nvme or init.zero_param_process_group is not None:
        return None
    return init


def make_zero3_param(init, meta: torch.nn.Parameter, dtype: torch.dtype, fill) -> torch.nn.Parameter:
    """A ZeRO-3 parameter standing for the meta-device parameter `meta`, never allocated whole: this
    rank's partition (a range of the flattened tensor, DeepSpeed's layout) is allocated and
    `fill(partition, first_element)` writes it, as `zero.Init` would have after building the
    parameter whole. Written against DeepSpeed 0.19.8's parameter attributes (`ds_tensor` and its
    bookkeeping); the ZeRO-3 tests fail loudly if a release moves them."""
    from deepspeed.runtime.zero.partition_parameters import PartitionedParamStatus

    # a meta tensor cannot take real data: a new, empty parameter that records the full shape
    param = torch.nn.Parameter(torch.empty(0, dtype=dtype, device=init.local_device),
                               requires_grad=meta.requires_grad)
    init._convert_to_deepspeed_param(param)  # ds_id and the gather/partition methods
    param.ds_shape, param.ds_numel = meta.shape, meta.numel()
    aligned = init._aligned_size(param)
    size = aligned // init._partition_world_size(param)
    part = torch.empty(size, dtype=dtype, device=init.remote_device)
    fill(part, size * init._partition_rank(param))
    if init.pin_memory and part.device.type == "cpu":
        from deepspeed.accelerator import get_accelerator

        part = get_accelerator().pin_memory(part)
    part.requires_grad = False
    part.ds_numel, part.status, part.final_location = size, PartitionedParamStatus.AVAILABLE, None
    param.ds_tensor, param.ds_numel_aligned = part, aligned
    param.partition()  # the partition exists already: this only marks the parameter as partitioned
    return param


def _check_values(config: dict) -> None:
    """The block's keys were checked with the recipe; its values are DeepSpeed's to judge. Its config
    parser raises on a bad one: one error: line naming it, not a traceback."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from ..error_report import InputError

    try:
        DeepSpeedConfig(config)
    except (ValueError, TypeError, AssertionError, KeyError) as exc:
        reason = " ".join(str(exc).split())[:400]
        raise InputError(f"deepspeed: DeepSpeed refuses the configuration built from the recipe: {reason}") from None


def backward(engine, loss: torch.Tensor, last: bool) -> None:
    """One micro-batch's backward. The loss is already divided by the global item count (times dp,
    as DeepSpeed averages over dp), so DeepSpeed must not divide it by the accumulation steps again.
    DeepSpeed counts micro-batches in `step()`: every micro-batch but the last steps here, the last
    one steps in `step`, where the harness's optimizer step belongs."""
    engine.backward(loss, scale_wrt_gas=False)
    if not last:
        engine.step()


def step(engine) -> torch.Tensor:
    """The optimizer step at the accumulation boundary (reduce, clip, update, zero the gradients);
    returns the global gradient norm before clipping (NaN where DeepSpeed gives none)."""
    engine.step()
    norm = engine.get_global_grad_norm()
    if norm is None:
        return torch.tensor(float("nan"))
    return norm.detach().reshape(()) if torch.is_tensor(norm) else torch.tensor(float(norm), dtype=torch.float64)


def gathered(model):
    """Context in which every trainable parameter of the engine's module is whole on every rank
    (ZeRO-3 partitions them; stages 1 and 2 keep them whole already)."""
    if not is_engine(model) or model.zero_optimization_stage() != 3:
        return contextlib.nullcontext()
    import deepspeed

    params = [p for p in model.module.parameters() if p.requires_grad]
    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def local_numel(param: torch.nn.Parameter) -> int:
    """Elements this rank holds of a parameter (its ZeRO-3 partition, or the whole tensor)."""
    part = getattr(param, "ds_tensor", None)
    return part.numel() if part is not None else param.numel()


# ------------------------------------------------------------------ checkpoint state
#
# Saved through the harness's own checkpoint (DCP + plain data), never through DeepSpeed's
# save_checkpoint/load_checkpoint, which pickle whole objects (loss scaler, enums) and unpickle them on
# resume. Each rank saves its own ZeRO partitions under keys of its own, so a checkpoint resumes at the
# same world size and stage (DeepSpeed's universal checkpoint would be the way to change them).

def _optimizer(engine):
    return engine.optimizer


def _inner_state(engine) -> dict:
    """The wrapped torch optimizer's state_dict over this rank's flat fp32 partitions."""
    opt = _optimizer(engine)
    if engine.zero_optimization_stage() == 3:  # ZeRO-3 hands the partitions to the optimizer only in step
        opt._set_fp32_optimizer_param_groups()
        try:
            return opt.optimizer.state_dict()
        finally:
            opt._clear_fp32_optimizer_param_groups()
    return opt.optimizer.state_dict()


def _partitions(engine) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(this rank's fp32 master partitions, its bit16/module-weight partitions), one per group."""
    opt = _optimizer(engine)
    if engine.zero_optimization_stage() == 3:
        return list(opt.fp32_partitioned_groups_flat), list(opt.fp16_partitioned_groups_flat)
    bit16 = [parts[dist.get_rank(group=opt.real_dp_process_group[g])]
             for g, parts in enumerate(opt.parallel_partitioned_bit16_groups)]
    return list(opt.single_partition_of_fp32_groups), bit16


def prefix() -> str:
    return f"deepspeed/rank{dist.get_rank()}/"


def checkpoint_state(engine) -> tuple[dict[str, torch.Tensor], dict]:
    """This rank's tensors (keys under `prefix()`) and its plain data (JSON-able)."""
    fp32, bit16 = _partitions(engine)
    inner = _inner_state(engine)
    tensors: dict[str, torch.Tensor] = {}
    for g, t in enumerate(fp32):
        tensors[f"fp32/{g}"] = t
    for g, t in enumerate(bit16):
        tensors[f"bit16/{g}"] = t
    plain_state: dict[str, dict] = {}
    for idx, values in inner["state"].items():
        plain_state[str(idx)] = {}
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"optim/{idx}/{name}"] = value
            else:
                plain_state[str(idx)][name] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()} for group in inner["param_groups"]]
    plain = {"zero_stage": engine.zero_optimization_stage(), "world_size": dist.get_world_size(),
             "param_groups": groups, "state": plain_state}
    return {prefix() + k: v for k, v in tensors.items()}, plain


def load_checkpoint_state(engine, tensors: dict[str, torch.Tensor], plain: dict) -> None:
    """Restore what `checkpoint_state` saved (same world size and stage), then make the module's
    weights match the restored partitions."""
    from ..error_report import InputError

    stage, world = engine.zero_optimization_stage(), dist.get_world_size()
    if plain.get("zero_stage") != stage or plain.get("world_size") != world:
        raise InputError(f"train.resume: the checkpoint was taken with ZeRO stage {plain.get('zero_stage')} on "
                         f"{plain.get('world_size')} ranks, this run is stage {stage} on {world}; allowed: the same "
                         "stage and world size (or train.resume=never)")
    own = {k[len(prefix()):]: v for k, v in tensors.items() if k.startswith(prefix())}
    fp32, bit16 = _partitions(engine)
    with torch.no_grad():
        for g, t in enumerate(fp32):
            t.copy_(own[f"fp32/{g}"])
        for g, t in enumerate(bit16):
            t.copy_(own[f"bit16/{g}"])
    state: dict = {}
    for key, value in own.items():
        if key.startswith("optim/"):
            _, idx, name = key.split("/", 2)
            state.setdefault(int(idx), {})[name] = value
    for idx, values in plain.get("state", {}).items():
        state.setdefault(int(idx), {}).update(values)
    inner = {"state": state, "param_groups": plain["param_groups"]}
    opt = _optimizer(engine)
    if stage == 3:
        opt._set_fp32_optimizer_param_groups()
        try:
            opt.optimizer.load_state_dict(inner)
        finally:
            opt._clear_fp32_optimizer_param_groups()
        with torch.no_grad():  # as DeepSpeed's own load: module partitions point at the restored flat buffers
            for sub, flat in enumerate(opt.fp16_partitioned_groups_flat):
                for part, q in zip(opt.fp16_partitioned_groups[sub], opt.unflatten(flat, opt.fp16_partitioned_groups[sub])):
                    part.data = q.data
        if opt.persistent_parameters:  # small parameters ZeRO-3 keeps whole: gather them again
            opt.persistent_parameters[0].all_gather(opt.persistent_parameters)
    else:
        opt.optimizer.load_state_dict(inner)
        # stages 1 and 2 keep the whole module on every rank: gather every rank's restored partition
        with torch.no_grad():
            for g, flat in enumerate(opt.bit16_groups_flat):
                group = opt.real_dp_process_group[g]
                parts = opt.parallel_partitioned_bit16_groups[g]
                mine = parts[dist.get_rank(group=group)]
                assert sum(p.numel() for p in parts) == flat.numel()
                dist.all_gather_into_tensor(flat, mine.clone(), group=group)


# ------------------------------------------------------------------ DeepSpeed's own comms logger

# DeepSpeed's logged op names -> the collective types of the harness's telemetry (telemetry/formulas.py)
_LOGGED_TYPES = {
    "all_gather_into_tensor": "all_gather", "all_gather": "all_gather", "allgather_fn": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_fn": "reduce_scatter", "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier", "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all", "send": "send", "recv": "recv", "isend": "send", "irecv": "recv",
}


def comms_logger_enabled(recipe) -> bool:
    block = recipe.deepspeed.get("comms_logger") or {}
    return isinstance(block, dict) and bool(block.get("enabled"))


class CommsLog(Hooks):
    """With `deepspeed.comms_logger.enabled`: each step's record gets `deepspeed_comm`, what DeepSpeed's
    own comms logger saw in that step, {type: {count, msg_bytes, ops: {logged name: count}}}, next to the
    tracer's `comm`. `msg_bytes` is DeepSpeed's message size (its tensor argument; for all-gather and
    reduce-scatter a rank's shard, which DeepSpeed multiplies by the world size for bandwidth). The
    logger synchronises after every collective: a cross-check, not for timing runs."""

    def _logger(self):
        from deepspeed.comm import comm

        return comm.comms_logger

    def on_step_start(self, step: int) -> None:
        self._logger().comms_dict.clear()

    def on_step_end(self, step: int, record: dict) -> None:
        out: dict[str, dict] = {}
        for name, sizes in self._logger().comms_dict.items():
            kind = _LOGGED_TYPES.get(name.split(" | ")[0], name)
            entry = out.setdefault(kind, {"count": 0, "msg_bytes": 0, "ops": {}})
            for size, (count, *_timings) in sizes.items():
                entry["count"] += count
                entry["msg_bytes"] += count * size
                entry["ops"][name] = entry["ops"].get(name, 0) + count
        record["deepspeed_comm"] = out
