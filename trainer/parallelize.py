"""Parallelism applied from outside the single-device model, in one fixed order:
tensor parallel (tp mesh) first, then data parallel (DDP or FSDP2 over the dp mesh)."""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from .distributed import ParallelDims


def _block_classes(model: torch.nn.Module) -> tuple[str, ...]:
    """Transformer block class names, from the HF model's own `_no_split_modules`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return tuple(getattr(base, "_no_split_modules", None) or ())


# Llama tensor-parallel plan, as data: projections that split their output (column-wise) and those that
# split their input (row-wise). Attention heads and MLP columns split across tp; HF Llama reshapes with
# -1 heads, so each rank runs its local heads (grouped-query attention included).
LLAMA_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
LLAMA_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def _check_divisible(config, tp: int) -> None:
    from .errors import InputError

    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        value = getattr(config, key, None)
        if value is not None and value % tp:
            raise InputError(f"parallel.tp: {tp} does not divide the model's {key} ({value}); "
                             f"allowed: divisors of {value}")


def apply_tensor_parallel(model: torch.nn.Module, dims: ParallelDims) -> torch.nn.Module:
    """Shard a LoRA-wrapped Llama over the tp mesh. LoRA must already be applied: a column-parallel
    projection shards its base layer and lora_B by output and keeps lora_A replicated; a row-parallel
    one shards its base layer and lora_A by input and keeps lora_B replicated. (peft applied *after*
    parallelize_module trains wrongly without any error - REFERENCE.md section 8.)"""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = dims.layout.tp
    if tp == 1:
        return model
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    _check_divisible(base.config, tp)
    plan = {}
    for name, module in model.named_modules():
        suffix = next((s for s in LLAMA_COLWISE + LLAMA_ROWWISE if name.endswith(s)), None)
        if suffix is None:
            continue
        colwise = suffix in LLAMA_COLWISE
        if hasattr(module, "base_layer"):  # a peft LoRA layer
            plan[f"{name}.base_layer"] = ColwiseParallel() if colwise else RowwiseParallel()
            for adapter in module.lora_A:
                if colwise:
                    plan[f"{name}.lora_B.{adapter}"] = ColwiseParallel()
                else:
                    plan[f"{name}.lora_A.{adapter}"] = RowwiseParallel()
        else:
            plan[name] = ColwiseParallel() if colwise else RowwiseParallel()
    parallelize_module(model, dims.mesh("tp"), plan)
    return model


def apply_data_parallel(model: torch.nn.Module, dims: ParallelDims, mode: str, device: torch.device,
                        compute_dtype: torch.dtype, sync_buffers: bool = False) -> torch.nn.Module:
    """DDP or FSDP2 over the dp mesh. `sync_buffers`: DDP re-broadcasts rank 0's buffers every forward
    (batch-norm running statistics; LoRA models have only constant buffers and skip it)."""
    mesh = dims.mesh("dp")
    if mode == "ddp":
        if dims.layout.tp > 1 or dims.layout.pp > 1:  # allowed only at dp 1: nothing to replicate
            return model
        ids = [device.index] if device.type == "cuda" else None
        # torch 2.13 renamed the switch
        sync = ({"forward_sync_buffers": sync_buffers} if "forward_sync_buffers" in inspect.signature(DDP).parameters
                else {"broadcast_buffers": sync_buffers})
        return DDP(model, process_group=mesh.get_group(), device_ids=ids, **sync)
    # FSDP2: shard each transformer block, then the root; reduce gradients in fp32.
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    blocks = _block_classes(model)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def grad_sync(model: torch.nn.Module, enabled: bool):
    """Skip the gradient collective on all but the last micro-batch of an accumulation."""
    if isinstance(model, DDP):
        return contextlib.nullcontext() if enabled else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(enabled)
    return contextlib.nullcontext()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DDP) else model
