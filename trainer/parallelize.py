"""Parallelism applied from outside the single-device model, in one fixed order:
tensor parallel (tp mesh) first, then data parallel (DDP or FSDP2 over the dp mesh)."""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from .distributed import ParallelDims


def block_classes(model: torch.nn.Module) -> tuple[str, ...]:
    """Transformer block class names, from the HF model's own `_no_split_modules`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return tuple(getattr(base, "_no_split_modules", None) or ())


# Llama tensor-parallel plan, as data: projections that split their output (column-wise) and those that
# split their input (row-wise). Attention heads and MLP columns split across tp; HF Llama reshapes with
# -1 heads, so each rank runs its local heads (grouped-query attention included).
LLAMA_COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
LLAMA_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def _check_divisible(config, tp: int) -> None:
    """The built model's config (a checkpoint's too) against tp: the recipe check's rule and line."""
    from .workloads.hf import tp_problem

    line = tp_problem(config, tp)
    if line:
        from .error_report import InputError

        raise InputError(line)


def apply_tensor_parallel(model: torch.nn.Module, dims: ParallelDims, sequence_parallel: bool = False,
                          shard_head: bool = True, stage_head: bool = False, norm_sequence_parallel: bool = False) -> bool:
    """Shard a LoRA-wrapped Llama over the tp mesh, in place. LoRA must already be applied: a
    column-parallel projection shards its base layer and lora_B by output and keeps lora_A replicated; a
    row-parallel one shards its base layer and lora_A by input and keeps lora_B replicated. (peft
    applied *after* parallelize_module trains wrongly without any error.)

    The vocabulary layers split too, so no rank holds or runs the whole vocabulary: the embedding by
    rows (each rank looks up its part of the vocabulary, outputs are all-reduced) and, with
    `shard_head`, lm_head by output columns, leaving the logits split over the vocabulary for
    loss-parallel cross-entropy (`torch.distributed.tensor.parallel.loss_parallel`). They stay whole when
    the embeddings are tied, or the vocabulary does not divide by tp. Returns whether lm_head was split
    (the caller must then compute the loss under loss_parallel).

    `stage_head`: the module is a pipeline stage (trainer/pipeline.py), which hands plain tensors to the
    schedule: its lm_head returns this rank's vocabulary slice of the logits as a local tensor, and the
    pipeline's loss function rebuilds the split logits for loss_parallel. With `norm_sequence_parallel` the
    last stage's final norm runs on this rank's slice of the sequence (sliced locally, no communication) and
    lm_head all-gathers the sequence before its vocabulary-split matmul: the output layer and the final
    norm are sharded over tp on the last stage as in the unpipelined sequence-parallel plan. Only for a
    frozen norm (LoRA): a trainable one would get a partial gradient per rank."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = dims.layout.tp
    if tp == 1:
        return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    _check_divisible(config, tp)
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
    vocab = not getattr(config, "tie_word_embeddings", False) and config.vocab_size % tp == 0
    head_split = False
    if vocab:
        seq = Shard(1) if sequence_parallel else Replicate()
        for name, module in model.named_modules():
            if name.endswith("embed_tokens") and isinstance(module, torch.nn.Embedding):
                plan[name] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
            elif shard_head and name.endswith("lm_head") and isinstance(module, torch.nn.Linear):
                head_in = Shard(1) if norm_sequence_parallel else seq
                plan[name] = ColwiseParallel(input_layouts=head_in, output_layouts=Shard(-1),
                                             use_local_output=stage_head)
                head_split = True
        if head_split and stage_head and norm_sequence_parallel:
            from torch.distributed.tensor.parallel import PrepareModuleInput

            for name, module in model.named_modules():
                if name == "norm":  # the last stage's final norm: this rank's sequence slice, as a plain tensor
                    plan[name] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                                    use_local_output=True)
    if sequence_parallel:
        plan.update(_sequence_parallel_plan(model, plan))
    parallelize_module(model, dims.mesh("tp"), plan)
    return head_split


def _sequence_parallel_plan(model: torch.nn.Module, tp_plan: dict) -> dict:
    """Sequence parallelism between the tensor-parallel regions: the residual stream and the norms hold
    each rank's slice of the sequence (dim 1) as plain local tensors, so norm activations shrink by tp.
    The embedding output is sliced (no communication), attention and MLP inputs are all-gathered, and
    row-parallel outputs are reduce-scattered instead of all-reduced. Norms are per-token and stay
    unsharded modules (frozen under LoRA: no weight gradients to reduce). The loss needs full logits, so
    lm_head's input is gathered. HF Llama derives positions and the causal mask from the hidden states,
    so callers pass position_ids for the whole sequence and no padding mask (workloads/llm_lora.py)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, PrepareModuleOutput, RowwiseParallel

    seq, full = Shard(1), Replicate()
    plan = {}
    for name, style in tp_plan.items():
        if not isinstance(style, RowwiseParallel) or name.endswith("embed_tokens"):  # embed: set by the caller
            continue
        if ".lora_A." in name:
            # the low-rank path stays whole-sequence: lora_A's small output is all-reduced as before, so
            # the replicated lora_B sees every token and gets the full gradient on every rank; its output
            # is then sliced to this rank's part of the sequence (no communication)
            plan[name.replace(".lora_A.", ".lora_B.")] = PrepareModuleOutput(
                output_layouts=full, desired_output_layouts=seq, use_local_output=True)
        else:  # row-parallel base outputs: reduce-scatter along the sequence instead of all-reduce
            plan[name] = RowwiseParallel(output_layouts=seq)
    for name, _ in model.named_modules():
        if name in tp_plan:  # vocabulary layers split over tp already read and write sequence slices
            continue
        if name.endswith("model.embed_tokens"):
            plan[name] = PrepareModuleOutput(output_layouts=full, desired_output_layouts=seq)
        elif name.endswith(".self_attn"):  # called with hidden_states as a keyword
            plan[name] = PrepareModuleInput(input_kwarg_layouts={"hidden_states": seq},
                                            desired_input_kwarg_layouts={"hidden_states": full}, use_local_output=True)
        elif name.endswith(".mlp") or name.endswith("lm_head"):
            plan[name] = PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(full,), use_local_output=True)
    return plan


def apply_data_parallel(model: torch.nn.Module, dims: ParallelDims, mode: str, device: torch.device,
                        compute_dtype: torch.dtype, sync_buffers: bool = False) -> torch.nn.Module:
    """DDP, FSDP2 or plain replicas over the dp mesh. `sync_buffers`: DDP broadcasts rank 0's buffers
    before a forward that follows a synced training forward (LoRA models have only constant buffers and
    skip it). `replicate` leaves the model as it is: the loop reduces the trainable gradients
    (`reduce_trainable_grads`), and the replicas start equal because every rank builds the same model."""
    mesh = dims.mesh("dp")
    if mode in ("replicate", "deepspeed"):  # deepspeed: the trainer wraps it with its optimizer (engines/)
        return model
    if mode == "ddp":
        if dims.layout.tp > 1 or dims.layout.pp > 1:  # allowed only at dp 1: nothing to replicate
            return model
        ids = [device.index] if device.type == "cuda" else None
        # torch 2.13 renamed the switch
        sync = ({"forward_sync_buffers": sync_buffers} if "forward_sync_buffers" in inspect.signature(DDP).parameters
                else {"broadcast_buffers": sync_buffers})
        return DDP(model, process_group=mesh.get_group(), device_ids=ids, **sync)
    # FSDP2: shard each transformer block, then the root; reduce gradients in fp32. On a pipeline stage a
    # step runs every micro-batch's forward through the same layers: keeping them gathered after forward
    # costs one gather per step instead of one per micro-batch (the schedule defers resharding after
    # backward and the gradient reduce-scatter to the last micro-batch itself)
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    reshard = dims.layout.pp == 1
    blocks = block_classes(model)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    return model


def grad_sync(model: torch.nn.Module, enabled: bool):
    """Skip the gradient collective on all but the last micro-batch of an accumulation."""
    if isinstance(model, DDP):
        return contextlib.nullcontext() if enabled else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(enabled)
    return contextlib.nullcontext()


# At most this many bytes of gradients are flattened into one all-reduce (a bound on the extra memory).
BUCKET_BYTES = 256 * 2**20


@torch.no_grad()
def reduce_trainable_grads(params: list[torch.nn.Parameter], group, dp: int) -> None:
    """`data_parallel: replicate`: average the trainable gradients over dp, a few flat all-reduces per
    step. Tensor-parallel shards (DTensor) are reduced as their local pieces: every dp replica holds
    the same piece of the same parameter, so the frozen base never moves across dp."""
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    if dp == 1:
        return
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    buckets: dict[tuple, list[list[torch.Tensor]]] = {}
    for g in grads:  # one flat buffer per dtype and device, split at BUCKET_BYTES
        runs = buckets.setdefault((g.dtype, g.device), [[]])
        if runs[-1] and sum(t.numel() * t.element_size() for t in runs[-1]) + g.numel() * g.element_size() > BUCKET_BYTES:
            runs.append([])
        runs[-1].append(g)
    for runs in buckets.values():
        for bucket in runs:
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat, group=group)
            flat.div_(dp)
            for g, reduced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                g.copy_(reduced)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    from .engines.deepspeed import is_engine

    return model.module if isinstance(model, DDP) or is_engine(model) else model
