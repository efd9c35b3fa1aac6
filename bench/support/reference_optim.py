"""LARS and LAMB written per parameter, the plain loop the foreach optimizers in trainer/optim.py must equal
bit for bit (tests/trainer/test_optim.py) and are timed against (bench/optim_launches.py)."""
from __future__ import annotations

import torch

from trainer.optim import LAMB, LARS


class PerParamLARS(LARS):
    @torch.no_grad()
    def step(self, closure=None):
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


class PerParamLAMB(LAMB):
    @torch.no_grad()
    def step(self, closure=None):
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
