"""LARS and LAMB against their published update rules (by hand) and against the per-parameter loops
they replaced; param groups split by device mesh; the schedule over every group."""
from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainer.config import TrainConfig
from bench.support.reference_optim import PerParamLAMB, PerParamLARS
from trainer.optim import LAMB, LARS, build_optimizer, lars_param_groups


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


# ---------------------------------------------------------------------------------------------------
# The per-parameter implementations the multi-tensor steps replaced (trainer/optim.py before the foreach
# rewrite): their loop bodies verbatim, as the reference. bench/optim_launches.py counts their ops as "before".

def _variant_params(seed: int = 0) -> dict[str, torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, dtype=torch.float32):
        return torch.nn.Parameter(torch.randn(*shape, generator=gen, dtype=dtype))

    return {"w": rand(4, 3), "w2": rand(2, 5), "zero_w": torch.nn.Parameter(torch.zeros(3, 3)),
            "zero_g": rand(3, 2), "f64": rand(2, 2, dtype=torch.float64), "never": rand(2, 3),
            "late": rand(3, 3), "w_nowd": rand(3, 4), "bias": rand(5), "bn": rand(3), "bias_late": rand(2)}


def _variant_groups(p: dict, kind: str) -> list[dict]:
    """Every group variant: decayed, not decayed, excluded (LARS), in one optimizer."""
    adapt = [p[k] for k in ("w", "w2", "zero_w", "zero_g", "f64", "never", "late")]
    if kind == "lars":
        return [{"params": adapt, "weight_decay": 0.01}, {"params": [p["w_nowd"]], "weight_decay": 0.0},
                {"params": [p["bias"], p["bn"], p["bias_late"]], "weight_decay": 0.0, "lars_exclude": True}]
    return [{"params": adapt, "weight_decay": 0.1},
            {"params": [p["w_nowd"], p["bias"], p["bn"], p["bias_late"]], "weight_decay": 0.0}]


def _set_grads(p: dict, step: int, gen: torch.Generator) -> None:
    for name, param in p.items():
        if name == "never" or (name in ("late", "bias_late") and step < 2):
            param.grad = None  # no gradient at all / only from the third step on
        elif name == "zero_g":
            param.grad = torch.zeros_like(param)
        else:
            param.grad = torch.randn(param.shape, generator=gen, dtype=param.dtype)


def _run(opt_cls, kind: str, steps: int = 4, **kwargs):
    p = _variant_params()
    opt = opt_cls(_variant_groups(p, kind), **kwargs)
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        _set_grads(p, step, gen)
        opt.step()
    return p, opt


KINDS = {"lars": (LARS, PerParamLARS, dict(lr=0.5, momentum=0.9, eta=0.02, eps=1e-9)),
         "lamb": (LAMB, PerParamLAMB, dict(lr=0.01, betas=(0.60466, 0.85437), eps=1e-6))}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_foreach_step_equals_the_per_parameter_loop_bit_for_bit(kind):
    new_cls, ref_cls, kwargs = KINDS[kind]
    got, got_opt = _run(new_cls, kind, **kwargs)
    want, want_opt = _run(ref_cls, kind, **kwargs)
    for name in want:
        assert torch.equal(got[name], want[name]), name
        assert not torch.equal(got[name], _variant_params()[name]) or name == "never", name  # it moved
        got_state, want_state = got_opt.state[got[name]], want_opt.state[want[name]]
        assert got_state.keys() == want_state.keys(), name
        for key in want_state:
            assert (torch.equal(got_state[key], want_state[key]) if torch.is_tensor(want_state[key])
                    else got_state[key] == want_state[key]), (name, key)
    if kind == "lamb":  # a parameter that missed steps counts its own steps
        assert got_opt.state[got["late"]]["step"] == 2 and got_opt.state[got["w"]]["step"] == 4
    assert got_opt.state[got["never"]] == {}


class OpCounter(TorchDispatchMode):
    """ATen ops dispatched, as (name, is_view) pairs."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func), func.is_view))
        return func(*args, **(kwargs or {}))


def _ops_per_step(opt_cls, n: int, **kwargs) -> int:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 2, generator=gen)) for _ in range(n)]
    opt = opt_cls(params, weight_decay=0.01, **kwargs)
    for step in range(2):  # the second step: state exists (the first creates it, one tensor at a time)
        for q in params:
            q.grad = torch.randn(q.shape, generator=gen)
        if step == 1:
            with OpCounter() as counter:
                opt.step()
            return len(counter.ops)
        opt.step()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ops_per_step_do_not_grow_with_the_number_of_parameters(kind):
    new_cls, ref_cls, kwargs = KINDS[kind]
    assert _ops_per_step(new_cls, 4, **kwargs) == _ops_per_step(new_cls, 40, **kwargs) < 40
    assert _ops_per_step(ref_cls, 40, **kwargs) > 10 * 40  # the loop it replaced: a dozen and more per tensor


# ---------------------------------------------------------------------------------------------------
# The schedule drives every group, also after loading a state saved with another number of groups.

@pytest.mark.parametrize("schedule", ["cosine", "poly", "linear", "constant"])
def test_schedule_equals_transformers_on_every_group(schedule):
    from transformers import (get_constant_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup,
                              get_linear_schedule_with_warmup, get_polynomial_decay_schedule_with_warmup)

    train = TrainConfig(optimizer="lamb", schedule=schedule, lr=2e-3, min_lr=1e-4, warmup_steps=3, poly_power=2.0)
    opt, sched = build_optimizer(torch.nn.Linear(3, 3), train, max_steps=10)
    plain = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=train.lr)
    ref = {"cosine": lambda: get_cosine_with_min_lr_schedule_with_warmup(plain, 3, 10, min_lr=1e-4),
           "poly": lambda: get_polynomial_decay_schedule_with_warmup(plain, 3, 10, lr_end=1e-4, power=2.0),
           "linear": lambda: get_linear_schedule_with_warmup(plain, 3, 10),
           "constant": lambda: get_constant_schedule_with_warmup(plain, 3)}[schedule]()
    for _ in range(10):
        assert [g["lr"] for g in opt.param_groups] == [plain.param_groups[0]["lr"]] * 2
        opt.step()
        sched.step()
        plain.step()
        ref.step()


def test_schedule_state_from_another_number_of_groups_drives_every_group():
    adamw = TrainConfig(optimizer="adamw", schedule="linear", lr=0.1, warmup_steps=2)
    sgd = TrainConfig(optimizer="sgd", schedule="linear", lr=0.1, warmup_steps=2)
    one, one_sched = build_optimizer(torch.nn.Linear(3, 3), adamw, max_steps=10)
    assert len(one.param_groups) == 1
    for _ in range(4):
        one.step()
        one_sched.step()
    two, two_sched = build_optimizer(torch.nn.Linear(3, 3), sgd, max_steps=10)  # weights and biases apart
    assert len(two.param_groups) == 2
    two_sched.load_state_dict(one_sched.state_dict())  # 1 group saved, 2 now (a checkpoint from before a split)
    two.step()
    two_sched.step()
    assert [g["lr"] for g in two.param_groups] == pytest.approx([0.1 * 5 / 8] * 2)  # linear: (10 - 5) / (10 - 2)
    back, back_sched = build_optimizer(torch.nn.Linear(3, 3), adamw, max_steps=10)
    back_sched.load_state_dict(two_sched.state_dict())  # and 2 saved, 1 now
    back.step()
    back_sched.step()
    assert back.param_groups[0]["lr"] == pytest.approx(0.1 * 4 / 8)


# ---------------------------------------------------------------------------------------------------
# DTensor parameters on 2 gloo ranks (spawned, bounded): shard norms, meshes, checkpoints.

def _spawn(fn, tmp_path: Path, timeout_s: float = 240) -> None:
    import time

    import torch.multiprocessing as mp

    ctx = mp.start_processes(fn, args=(str(tmp_path),), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=5):  # raises with the child's traceback if a rank failed
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            pytest.fail(f"ranks did not finish in {timeout_s} s")


def _init(rank: int, tmp: str) -> None:
    import torch.distributed as dist

    from trainer.compat import ensure_torchvision_importable

    ensure_torchvision_importable()  # build_optimizer imports transformers
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))


class CrossMeshRule(TorchDispatchMode):
    """torch 2.6's DTensor rule on any torch: a foreach op given DTensors on different meshes raises (later
    torch allows it; the NGC 25.01 image ships 2.6)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor
        from torch.utils._pytree import tree_leaves

        if str(func).startswith("aten._foreach"):
            meshes = {a.device_mesh for a in tree_leaves((args, kwargs)) if isinstance(a, DTensor)}
            if len(meshes) > 1:
                raise NotImplementedError(f"{func}: DTensor does not support cross-mesh operation yet!")
        return func(*args, **(kwargs or {}))


def _two_mesh_model(seed: int):
    """Parameters as LoRA under FSDP2 over TP has them: some on the dp mesh, some on the (dp, tp) mesh
    (FSDP2's dp placement over a dim TP shards too is a _StridedShard, whose is_shard() is False), plus a
    plain tensor. Shapes are uneven so that shards differ in size (one rank's is empty)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    world = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
    dp = world["dp"]
    gen = torch.Generator().manual_seed(seed)
    full = {"a": torch.randn(5, 3, generator=gen), "a_bias": torch.randn(3, generator=gen),
            "one_row": torch.randn(1, 4, generator=gen), "b": torch.randn(4, 6, generator=gen),
            "b_bias": torch.randn(4, generator=gen), "rep": torch.randn(2, 2, generator=gen),
            "plain": torch.randn(3, 2, generator=gen), "strided": torch.randn(6, 2, generator=gen)}
    layout = {"a": (dp, [Shard(0)]), "a_bias": (dp, [Shard(0)]), "one_row": (dp, [Shard(0)]),
              "b": (world, [Shard(0), Shard(1)]), "b_bias": (world, [Shard(0), Replicate()]),
              "rep": (world, [Replicate(), Replicate()]),
              "strided": (world, [_StridedShard(0, split_factor=1), Shard(0)])}  # even: distribute_tensor needs it
    model = torch.nn.Module()
    for name, tensor in full.items():
        value = distribute_tensor(tensor, *layout[name]) if name in layout else tensor.clone()
        model.register_parameter(name, torch.nn.Parameter(value))
    return model, full


def _grads(model, full: dict, step: int) -> dict:
    from torch.distributed.tensor import DTensor, distribute_tensor

    gen = torch.Generator().manual_seed(100 + step)
    grads = {}
    for name, p in model.named_parameters():
        g = torch.randn(full[name].shape, generator=gen)
        if name == "a_bias" and step == 0:
            g = None  # no gradient on the first step
        grads[name] = g
        p.grad = None if g is None else (distribute_tensor(g, p.device_mesh, p.placements)
                                         if isinstance(p, DTensor) else g.clone())
    return grads


def _full(t) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t.detach()


def _sharded_worker(rank: int, tmp: str) -> None:
    """New steps on DTensor shards == the per-parameter loop on the same DTensors (DTensor's own global
    norms) == the per-parameter loop on the whole tensors, one process."""
    _init(rank, tmp)
    for kind, (new_cls, ref_cls, kwargs) in KINDS.items():
        runs, start = {}, None
        for label, cls, sharded in (("new", new_cls, True), ("ref_dtensor", ref_cls, True), ("ref_whole", ref_cls, False)):
            model, full = _two_mesh_model(seed=0)
            start = full
            if not sharded:
                model = torch.nn.Module()
                for name, tensor in full.items():
                    model.register_parameter(name, torch.nn.Parameter(tensor.clone()))
            groups = (lars_param_groups(model, 0.01) if kind == "lars"
                      else [{"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.1},
                            {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0}])
            opt = cls(groups, **kwargs)
            for step in range(3):
                _grads(model, full, step)
                with CrossMeshRule():
                    opt.step()
            runs[label] = {n: _full(p) for n, p in model.named_parameters()}
        for name, want in runs["ref_whole"].items():
            assert not torch.equal(want, start[name]), (kind, name)  # it moved
            for label in ("new", "ref_dtensor"):
                torch.testing.assert_close(runs[label][name], want, rtol=1e-6, atol=1e-7,
                                           msg=lambda m: f"{kind} {label} {name}: {m}")


@pytest.mark.integration
def test_sharded_parameters_use_whole_tensor_norms_like_the_per_parameter_loop(tmp_path):
    _spawn(_sharded_worker, tmp_path)


def _meshes_worker(rank: int, tmp: str) -> None:
    from torch.distributed.tensor import DTensor

    from trainer import checkpoint

    _init(rank, tmp)
    for kind in ("adamw", "sgd", "lamb", "lars"):
        train = TrainConfig(optimizer=kind, lr=0.01, weight_decay=0.01, warmup_steps=2, schedule="linear")
        model, full = _two_mesh_model(seed=0)
        opt, sched = build_optimizer(model, train, max_steps=10)
        meshes = [{p.device_mesh if isinstance(p, DTensor) else None for p in g["params"]} for g in opt.param_groups]
        assert all(len(m) == 1 for m in meshes), (kind, meshes)  # no group mixes meshes
        assert sum(len(g["params"]) for g in opt.param_groups) == len(full)
        for group in opt.param_groups:
            group["foreach"] = kind in ("adamw", "sgd")  # as on CUDA, where foreach is torch's default
        for step in range(2):
            _grads(model, full, step)
            with CrossMeshRule():  # torch 2.6 raised "cross-mesh operation" here before the split
                opt.step()
            sched.step()
        assert len({g["lr"] for g in opt.param_groups}) == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.01)
        # a DCP checkpoint round trip (FQN-keyed optimizer state) restores every group and the schedule
        root = os.path.join(tmp, f"ckpt-{kind}")
        checkpoint.save(root, 2, model, opt, sched, {"step": 2})
        _grads(model, full, 2)
        opt.step()
        sched.step()
        after = {n: _full(p) for n, p in model.named_parameters()}
        model2, _ = _two_mesh_model(seed=7)
        opt2, sched2 = build_optimizer(model2, train, max_steps=10)
        checkpoint.load(checkpoint.find_latest(root), model2, opt2, sched2)
        assert [len(g["params"]) for g in opt2.param_groups] == [len(g["params"]) for g in opt.param_groups]
        _grads(model2, full, 2)
        opt2.step()
        sched2.step()
        for name, p in model2.named_parameters():
            torch.testing.assert_close(_full(p), after[name], rtol=0, atol=0, msg=lambda m: f"{kind} {name}: {m}")
        assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]


@pytest.mark.integration
def test_param_groups_never_mix_meshes_and_resume_through_dcp(tmp_path):
    _spawn(_meshes_worker, tmp_path)
