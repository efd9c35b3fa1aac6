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
"""
from __future__ import annotations

import torch


def _closure_loss(closure):
    """torch.optim's closure convention: re-evaluate the loss with gradients enabled, if asked."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr: float, momentum: float = 0.9, eta: float = 0.001, weight_decay: float = 0.0,
                 eps: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        super().__init__(params, dict(lr=lr, momentum=momentum, eta=eta, weight_decay=weight_decay, eps=eps,
                                      lars_exclude=False))

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            lr, momentum, eta = group["lr"], group["momentum"], group["eta"]
            wd, eps, exclude = group["weight_decay"], group["eps"], group["lars_exclude"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if exclude:
                    update = g * lr
                else:
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(g)
                    trust = torch.where((w_norm > 0) & (g_norm > 0), eta * w_norm / (g_norm + wd * w_norm + eps),
                                        torch.ones_like(w_norm))
                    update = (g + wd * p) * (lr * trust)
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                v = state["momentum_buffer"]
                v.mul_(momentum).add_(update)
                p.sub_(v)
        return loss


def lars_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Batch-norm parameters and biases (every 1-d parameter) skip weight decay and trust scaling."""
    adapt, exclude = [], []
    for p in model.parameters():
        if p.requires_grad:
            (exclude if p.ndim <= 1 else adapt).append(p)
    return [{"params": adapt, "weight_decay": weight_decay},
            {"params": exclude, "weight_decay": 0.0, "lars_exclude": True}]


class LAMB(torch.optim.Optimizer):
    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v = state["m"], state["v"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps) + wd * p
                w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.sub_(update * (lr * trust))
        return loss


def decay_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Biases and normalisation weights (every 1-d parameter) take no weight decay (BERT's rule)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: torch.nn.Module, train, max_steps: int):
    """The recipe's optimizer over the trainable parameters, and its warm-up + decay schedule.

    Parameter groups follow each optimizer's MLPerf rule: LARS excludes batch-norm and biases from
    weight decay and trust scaling; LAMB and SGD exclude biases and norms from weight decay.
    """
    from transformers import (get_constant_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup,
                              get_linear_schedule_with_warmup, get_polynomial_decay_schedule_with_warmup)

    kind, wd = train.optimizer, train.weight_decay
    if kind == "adamw":
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=train.lr, betas=tuple(train.betas), eps=train.eps, weight_decay=wd)
    elif kind == "lamb":
        opt = LAMB(decay_param_groups(model, wd), lr=train.lr, betas=tuple(train.betas), eps=train.eps,
                   weight_decay=wd)
    elif kind == "lars":
        opt = LARS(lars_param_groups(model, wd), lr=train.lr, momentum=train.momentum, eta=train.lars_eta,
                   weight_decay=wd)
    elif kind == "sgd":
        opt = torch.optim.SGD(decay_param_groups(model, wd), lr=train.lr, momentum=train.momentum, weight_decay=wd)
    else:
        raise ValueError(f"train.optimizer: got {kind!r}; allowed: adamw, lamb, lars, sgd")
    warm = train.warmup_steps
    if train.schedule == "cosine":
        sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=warm, num_training_steps=max_steps,
                                                            min_lr=train.min_lr)
    elif train.schedule == "poly":
        sched = get_polynomial_decay_schedule_with_warmup(opt, num_warmup_steps=warm, num_training_steps=max_steps,
                                                          lr_end=train.min_lr, power=train.poly_power)
    elif train.schedule == "linear":
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=warm, num_training_steps=max_steps)
    else:
        sched = get_constant_schedule_with_warmup(opt, num_warmup_steps=warm)
    return opt, sched
