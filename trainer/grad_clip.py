"""The global gradient norm and clipping to train.grad_clip, on the device, without a host sync.

Gradients may be plain tensors (DDP, replicated LoRA A), FSDP2 shards or TP shards (DTensor): squares
are summed locally, then reduced once per group of ranks a shard is split across. The local work is one
multi-tensor call per bucket (the ranks a gradient is split over, its device and dtype) - torch's
`_foreach_norm`, as `torch.nn.utils.clip_grad_norm_(foreach=True)` does - and one `_foreach_mul_` to
clip, instead of three kernels per tensor (a 7-target LoRA on 32 layers has ~450 gradients).
"""
from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist


def _split_groups(g: torch.Tensor) -> tuple[tuple, torch.Tensor]:
    """(the process groups g's squared norm must be summed over, g's local tensor)."""
    if not hasattr(g, "placements"):  # a plain tensor is whole on this rank
        return (), g
    mesh = g.device_mesh
    # FSDP's dp placement over a TP-sharded dim is a _StridedShard, for which is_shard() is False
    groups = tuple(mesh.get_group(i) for i, pl in enumerate(g.placements)
                   if not (pl.is_replicate() or pl.is_partial()))
    return groups, g.to_local()


def clip_grads(params: list[torch.nn.Parameter], max_norm: float | None, device: torch.device,
               pipeline_group=None) -> torch.Tensor:
    """Global 2-norm of the gradients (before clipping) as a 0-d fp32 device tensor; when max_norm is set
    and the norm is finite and above it, every gradient is scaled by max_norm / (norm + 1e-6), as a
    host-side `if` would decide but on the device. `pipeline_group`: each stage holds other parameters."""
    buckets: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    for p in params:
        if p.grad is None:
            continue
        groups, local = _split_groups(p.grad)
        buckets[(groups, local.device, local.dtype)].append(local.detach())
    by_groups: dict[tuple, torch.Tensor] = {}
    for (groups, _, _), tensors in buckets.items():
        # norms in fp32 whatever the gradient dtype (bf16 squares would lose the small ones)
        norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
        sq = torch.stack(norms).square().sum()
        by_groups[groups] = by_groups[groups] + sq.to(by_groups[groups].device) if groups in by_groups else sq
    total = torch.zeros((), device=device)
    for groups, sq in by_groups.items():
        for group in groups:
            dist.all_reduce(sq, group=group)
        total = total + sq.to(device)
    if pipeline_group is not None:
        dist.all_reduce(total, group=pipeline_group)
    norm = total.sqrt()
    if max_norm is not None and buckets:
        # scale only when the norm is finite and above the limit
        coef = torch.where(torch.isfinite(norm) & (norm > max_norm), max_norm / (norm + 1e-6), torch.ones_like(norm))
        for tensors in buckets.values():
            torch._foreach_mul_(tensors, coef.to(tensors[0].device))
    return norm
