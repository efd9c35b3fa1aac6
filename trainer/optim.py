"""Optimizers PyTorch does not ship, written once and tested against their published update rules.

LARS (You et al. 2017), as the MLPerf ResNet-50 reference applies it: for every weight that is not
excluded (batch-norm parameters and biases are),

    trust = eta * ||w|| / (||g|| + weight_decay * ||w|| + eps)      (1 where ||w|| or ||g|| is 0)
    v     = momentum * v + lr * trust * (g + weight_decay * w)
    w     = w - v

and for excluded parameters plain momentum SGD without weight decay: v = momentum * v + lr * g.

LAMB (You et al. 2019), as MLPerf BERT uses it (bias-corrected Adam moments, decoupled weight decay
inside the trust ratio):

    m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
    u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * w
    w = w - lr * trust * u,        trust = ||w|| / ||u||   (1 where either norm is 0)

Both steps are multi-tensor: a fixed number of torch._foreach_* calls per bucket of parameters (one
device, dtype and sharding each) instead of a dozen kernels per parameter (bench/optim_launches.py).
Sharded parameters (DTensor: FSDP2, tensor parallel) keep the rules' meaning: ||w|| is the norm of the
whole tensor, as DTensor's own norm gives it; the bucket's local squared norms are summed over each
sharded mesh dimension in one all-reduce, and the elementwise work runs on the local shards.
"""
from __future__ import annotations

from collections import defaultdict
from functools import partial

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def _closure_loss(closure):
    """torch.optim's closure convention: re-evaluate the loss with gradients enabled, if asked."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _local(t: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    """This rank's part of a DTensor (in-place ops on it update the DTensor), a plain tensor as it is.
    `like`: lay a gradient out as its parameter first, so that shard i of both is the same slice."""
    if not isinstance(t, DTensor):
        return t
    if like is not None and (t.device_mesh, t.placements) != (like.device_mesh, like.placements):
        t = t.redistribute(like.device_mesh, like.placements)
    return t.to_local()


def _sharding(p: torch.Tensor):
    """(mesh, sharded mesh dims) over which p's local squared norm must be summed; None when the local
    tensor is the whole tensor (plain, or replicated on every mesh dim)."""
    if not isinstance(p, DTensor):
        return None
    dims = []
    for dim, placement in enumerate(p.placements):
        if placement.is_partial():
            raise ValueError(f"LARS/LAMB: parameter placement {placement} is not supported; "
                             f"expected Shard or Replicate")
        if not placement.is_replicate():  # Shard, or FSDP2's _StridedShard over a TP-sharded dim (is_shard() False)
            dims.append(dim)
    return (p.device_mesh, tuple(dims)) if dims else None


def _buckets(params):
    """Parameters that have a gradient, bucketed so that each bucket's foreach calls see one device and
    one dtype (CUDA's multi-tensor kernels need both) and its norms reduce over one set of groups."""
    buckets = defaultdict(list)
    for p in params:
        if p.grad is not None:
            buckets[(p.device, p.dtype, _sharding(p))].append(p)
    return [(key[2], bucket) for key, bucket in buckets.items()]


def _norm_pairs(first: list[torch.Tensor], second: list[torch.Tensor], sharding):
    """Whole-tensor 2-norms of two lists, as two 1-d tensors, with one foreach call and at most one
    all-reduce per sharded mesh dim for the pair: sqrt(sum over shards of local norm^2)."""
    norms = torch.stack(torch._foreach_norm([*first, *second]))
    if sharding is not None:
        mesh, dims = sharding
        norms = norms.square()
        for dim in dims:
            dist.all_reduce(norms, group=mesh.get_group(dim))
        norms = norms.sqrt()
    return norms.view(2, len(first)).unbind()


class BucketedOptimizer(torch.optim.Optimizer):
    """A layer-wise optimizer's step: each group's parameters in buckets of one sharding (their norms are
    reduced together), each bucket updated by the subclass's `_step_bucket`."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            for sharding, params in _buckets(group["params"]):
                self._step_bucket(group, params, sharding)
        return loss

    def _step_bucket(self, group: dict, params: list, sharding) -> None:
        raise NotImplementedError


class LARS(BucketedOptimizer):
    def __init__(self, params, lr: float, momentum: float = 0.9, eta: float = 0.001, weight_decay: float = 0.0,
                 eps: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        super().__init__(params, dict(lr=lr, momentum=momentum, eta=eta, weight_decay=weight_decay, eps=eps,
                                      lars_exclude=False))

    def _step_bucket(self, group: dict, params: list, sharding) -> None:
        lr, momentum, eta = group["lr"], group["momentum"], group["eta"]
        wd, eps = group["weight_decay"], group["eps"]
        ws = [_local(p) for p in params]
        gs = [_local(p.grad, like=p) for p in params]
        if group["lars_exclude"]:
            updates = torch._foreach_mul(gs, lr)
        else:
            w_norm, g_norm = _norm_pairs(ws, gs, sharding)
            trust = torch.where((w_norm > 0) & (g_norm > 0), eta * w_norm / (g_norm + wd * w_norm + eps),
                                torch.ones_like(w_norm))
            scale = (lr * trust).unbind()
            if wd:
                updates = torch._foreach_mul(ws, wd)
                torch._foreach_add_(updates, gs)
                torch._foreach_mul_(updates, scale)
            else:  # g + 0 * w is g
                updates = torch._foreach_mul(gs, scale)
        buffers = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            buffers.append(_local(state["momentum_buffer"]))
        torch._foreach_mul_(buffers, momentum)
        torch._foreach_add_(buffers, updates)
        torch._foreach_sub_(ws, buffers)


def lars_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Batch-norm parameters and biases (every 1-d parameter) skip weight decay and trust scaling."""
    adapt, exclude = [], []
    for p in model.parameters():
        if p.requires_grad:
            (exclude if p.ndim <= 1 else adapt).append(p)
    return [{"params": adapt, "weight_decay": weight_decay},
            {"params": exclude, "weight_decay": 0.0, "lars_exclude": True}]


class LAMB(BucketedOptimizer):
    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def _step_bucket(self, group: dict, params: list, sharding) -> None:
        (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
        ms, vs, bias1, bias2 = [], [], [], []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["m"] = torch.zeros_like(p)
                state["v"] = torch.zeros_like(p)
            state["step"] += 1  # per parameter: one that had no gradient on some steps lags behind
            ms.append(_local(state["m"]))
            vs.append(_local(state["v"]))
            bias1.append(1 - b1 ** state["step"])
            bias2.append(1 - b2 ** state["step"])
        ws = [_local(p) for p in params]
        gs = [_local(p.grad, like=p) for p in params]
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, gs, alpha=1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
        updates = torch._foreach_div(ms, bias1)
        denom = torch._foreach_div(vs, bias2)
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, eps)
        torch._foreach_div_(updates, denom)
        del denom
        if wd:  # + 0 * w changes nothing
            torch._foreach_add_(updates, torch._foreach_mul(ws, wd))
        w_norm, u_norm = _norm_pairs(ws, updates, sharding)
        trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        # one 0-d scale per tensor: on CUDA this call loops over the tensors (the multi-tensor kernel
        # needs equal shapes); a host list of scales would need a device sync instead
        torch._foreach_mul_(updates, (lr * trust).unbind())
        torch._foreach_sub_(ws, updates)


def decay_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Biases and normalisation weights (every 1-d parameter) take no weight decay (BERT's rule)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def split_by_mesh(groups: list[dict]) -> list[dict]:
    """Every param group split so that its parameters share one device mesh (plain tensors apart).

    torch's foreach optimizers hand a group's tensors (per device and dtype) to one multi-tensor call, and
    DTensor in torch 2.6 refuses a call that mixes meshes ("cross-mesh operation"): LoRA under FSDP2 over
    tensor parallelism has tp-sharded adapters on the (dp, tp) mesh and the others on the dp mesh. A group
    already on one mesh is kept as it is, so single-mesh runs keep their groups and checkpoints.
    """
    out = []
    for group in groups:
        parts: dict = {}
        for p in group["params"]:
            parts.setdefault(p.device_mesh if isinstance(p, DTensor) else None, []).append(p)
        if len(parts) <= 1:
            out.append(group)
        else:
            out.extend({**group, "params": params} for params in parts.values())
    return out


class _Schedule(torch.optim.lr_scheduler.LambdaLR):
    """One lr multiplier for every param group. A state saved with another number of groups (a
    checkpoint from before the split by mesh, or from another tp degree) loads onto the current
    groups: every group of a recipe has the same base lr, so group 0's values stand for all."""

    def load_state_dict(self, state_dict: dict) -> None:
        n = len(self.optimizer.param_groups)
        if len(state_dict["base_lrs"]) != n:
            state_dict = {**state_dict, **{key: [state_dict[key][0]] * n
                                           for key in ("base_lrs", "_last_lr", "lr_lambdas") if key in state_dict}}
        super().load_state_dict(state_dict)


def keep_fp32_master(model: torch.nn.Module) -> int:
    """Every trainable parameter stored below fp32 (bf16/fp16) becomes fp32; returns how many changed.

    The optimizer updates what it is given: AdamW over bf16 parameters keeps bf16 moments and adds an
    update of lr * m / sqrt(v) to a bf16 weight, which rounds away whenever it is below half a bf16 ulp of
    the weight (|update| < |w| / 256): at lr 1e-5 most updates of a pretraining run vanish. As torchtitan
    and NeMo do, the trainable weights are fp32 (the master copy, with fp32 AdamW state) and the compute
    is bf16: autocast casts them for each matmul, FSDP2's MixedPrecisionPolicy gathers them in bf16 and
    reduces gradients in fp32. Frozen weights (a LoRA base) keep model.dtype; peft's adapters are fp32
    already. Works on meta parameters (before sharding and filling) and on loaded ones."""
    changed, seen = 0, set()
    for module in model.modules():
        cast = False
        for p in module.parameters(recurse=False):
            if id(p) in seen:  # tied weights: one parameter, several modules
                continue
            seen.add(id(p))
            if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
                p.data = p.data.float()
                changed, cast = changed + 1, True
        if cast:  # its statistics (batch norm's running mean) in the dtype of the weights they meet
            for name, b in module.named_buffers(recurse=False):
                if b.dtype in (torch.bfloat16, torch.float16):
                    setattr(module, name, b.float())
    return changed


def build_optimizer(model: torch.nn.Module, train, max_steps: int):
    """The recipe's optimizer over the trainable parameters, and its warm-up + decay schedule.

    Parameter groups follow each optimizer's MLPerf rule: LARS excludes batch-norm and biases from
    weight decay and trust scaling; LAMB and SGD exclude biases and norms from weight decay. Each group
    is then split by device mesh (split_by_mesh); the schedule drives every group.
    """
    from transformers import (get_constant_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup,
                              get_linear_schedule_with_warmup, get_polynomial_decay_schedule_with_warmup)

    kind, wd = train.optimizer, train.weight_decay
    if kind == "adamw":
        groups = split_by_mesh([{"params": [p for p in model.parameters() if p.requires_grad]}])
        opt = torch.optim.AdamW(groups, lr=train.lr, betas=tuple(train.betas), eps=train.eps, weight_decay=wd)
    elif kind == "lamb":
        opt = LAMB(split_by_mesh(decay_param_groups(model, wd)), lr=train.lr, betas=tuple(train.betas),
                   eps=train.eps, weight_decay=wd)
    elif kind == "lars":
        opt = LARS(split_by_mesh(lars_param_groups(model, wd)), lr=train.lr, momentum=train.momentum,
                   eta=train.lars_eta, weight_decay=wd)
    elif kind == "sgd":
        opt = torch.optim.SGD(split_by_mesh(decay_param_groups(model, wd)), lr=train.lr, momentum=train.momentum,
                              weight_decay=wd)
    else:
        raise ValueError(f"train.optimizer: got {kind!r}; allowed: adamw, lamb, lars, sgd")
    # no empty group (a LoRA model has no 1-d parameter for the no-decay group): a checkpoint keys the groups'
    # settings by parameter (trainer/checkpoint.py), and an empty group has none to be found by
    opt.param_groups[:] = [g for g in opt.param_groups if g["params"]] or opt.param_groups[:1]
    warm, steps = train.warmup_steps, max_steps
    if train.schedule == "cosine":
        make = partial(get_cosine_with_min_lr_schedule_with_warmup, num_warmup_steps=warm, num_training_steps=steps,
                       min_lr=train.min_lr)
    elif train.schedule == "poly":
        make = partial(get_polynomial_decay_schedule_with_warmup, num_warmup_steps=warm, num_training_steps=steps,
                       lr_end=train.min_lr, power=train.poly_power)
    elif train.schedule == "linear":
        make = partial(get_linear_schedule_with_warmup, num_warmup_steps=warm, num_training_steps=steps)
    else:
        make = partial(get_constant_schedule_with_warmup, num_warmup_steps=warm)
    # transformers' multiplier, read off a scheduler built on a stand-in optimizer with the same lr (the
    # polynomial and cosine ones read optimizer.defaults["lr"]), so the real optimizer gets one scheduler
    stand_in = torch.optim.SGD([torch.zeros(1)], lr=train.lr)
    return opt, _Schedule(opt, make(stand_in).lr_lambdas[0])
