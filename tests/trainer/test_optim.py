"""LARS against its published update rule, by hand."""
from __future__ import annotations

import pytest
import torch

from trainer.optim import LARS, lars_param_groups


def test_lars_step_by_hand():
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))  # ||w|| = 5
    opt = LARS([w], lr=0.1, momentum=0.9, eta=0.001, weight_decay=0.01)
    w.grad = torch.tensor([0.3, 0.4])  # ||g|| = 0.5
    opt.step()
    trust1 = 0.001 * 5 / (0.5 + 0.01 * 5)  # 0.0090909...
    v1 = 0.1 * trust1 * torch.tensor([0.3 + 0.03, 0.4 + 0.04])
    assert w.detach() == pytest.approx(torch.tensor([3.0, 4.0]) - v1, abs=1e-7)
    w1 = w.detach().clone()
    opt.step()  # same gradient again: momentum carries v1
    trust2 = 0.001 * float(w1.norm()) / (0.5 + 0.01 * float(w1.norm()))
    v2 = 0.9 * v1 + 0.1 * trust2 * (torch.tensor([0.3, 0.4]) + 0.01 * w1)
    assert w.detach() == pytest.approx(w1 - v2, abs=1e-7)


def test_excluded_parameters_are_plain_momentum_sgd_without_decay():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    groups = lars_param_groups(model, weight_decay=5e-5)
    assert [len(g["params"]) for g in groups] == [1, 3]  # the Linear weight; its bias and both BN params
    b = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = LARS([{"params": [b], "weight_decay": 0.0, "lars_exclude": True}], lr=0.5, momentum=0.9)
    for _ in range(2):
        b.grad = torch.tensor([0.2, 0.2])
        opt.step()
    # v1 = 0.1, v2 = 0.9 * 0.1 + 0.1 = 0.19: w = 1 - 0.1 - 0.19
    assert b.detach() == pytest.approx(torch.tensor([0.71, -1.29]), abs=1e-7)


def test_zero_norms_use_trust_one():
    w = torch.nn.Parameter(torch.zeros(3))
    opt = LARS([w], lr=0.1, weight_decay=0.0)
    w.grad = torch.ones(3)
    opt.step()
    assert w.detach() == pytest.approx(torch.full((3,), -0.1))


def test_lamb_two_steps_by_hand():
    from trainer.optim import LAMB

    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    b1, b2, eps, wd, lr = 0.6, 0.85, 1e-6, 0.1, 0.01  # MLPerf BERT's betas are 0.60466 / 0.85437
    opt = LAMB([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    m = v = torch.zeros(2)
    ref = torch.tensor([3.0, 4.0])
    for t, g in ((1, torch.tensor([0.5, -1.0])), (2, torch.tensor([0.1, 0.2]))):
        w.grad = g.clone()
        opt.step()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps) + wd * ref
        ref = ref - lr * (ref.norm() / u.norm()) * u
        assert w.detach() == pytest.approx(ref, abs=1e-6), t


def test_decay_groups_exclude_biases_and_norms():
    from trainer.optim import decay_param_groups

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    groups = decay_param_groups(model, 0.01)
    assert [len(g["params"]) for g in groups] == [1, 3] and groups[1]["weight_decay"] == 0.0
