"""trainer.grad_clip in-process: the global norm and clipping match torch.nn.utils.clip_grad_norm_, with
one multi-tensor norm call per bucket instead of kernels per gradient, and no host read."""
from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from trainer.grad_clip import clip_grads


def _params(dtype=torch.float32, scale=1.0, n=12):
    gen = torch.Generator().manual_seed(0)
    ps = []
    for i in range(n):
        p = torch.nn.Parameter(torch.zeros(3 + i, 5, dtype=dtype))
        p.grad = (torch.randn(3 + i, 5, generator=gen) * scale).to(dtype)
        ps.append(p)
    return ps


def _copy(ps):
    out = []
    for p in ps:
        q = torch.nn.Parameter(p.detach().clone())
        q.grad = p.grad.clone() if p.grad is not None else None
        out.append(q)
    return out


@pytest.mark.parametrize("max_norm", [None, 0.5, 1e6])
def test_norm_and_clipping_match_torch(max_norm):
    ours, ref = _params(), None
    ref = _copy(ours)
    norm = clip_grads(ours, max_norm, torch.device("cpu"))
    expected = torch.nn.utils.clip_grad_norm_(ref, max_norm if max_norm is not None else math.inf, foreach=True)
    assert norm.shape == () and norm.dtype == torch.float32
    torch.testing.assert_close(norm, expected)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad)


def test_one_foreach_norm_per_bucket_not_kernels_per_tensor():
    ps = _params(n=40) + _params(dtype=torch.bfloat16, n=10)  # two buckets: fp32 and bf16
    with torch.profiler.profile() as prof:
        clip_grads(ps, 1.0, torch.device("cpu"))
    calls = {e.key: e.count for e in prof.key_averages()}
    assert calls.get("aten::_foreach_norm") == 2 and calls.get("aten::_foreach_mul_") == 2
    # the per-tensor loop squared each of the 50 gradients; now one square per bucket's stacked norms
    # (on CPU _foreach_norm runs per tensor inside; on CUDA it is one multi-tensor kernel)
    assert calls.get("aten::pow", 0) == 2
    assert calls.get("aten::_local_scalar_dense", 0) == 0  # no host read: the norm stays on the device


def test_bf16_gradients_are_normed_in_fp32():
    small = _params(dtype=torch.bfloat16, scale=1e-3)
    norm = clip_grads(small, None, torch.device("cpu"))
    exact = torch.stack([p.grad.float().norm() for p in small]).norm()
    assert norm.dtype == torch.float32
    torch.testing.assert_close(norm, exact, rtol=1e-6, atol=0)


def test_non_finite_norm_is_not_applied_and_missing_grads_skipped():
    ps = _params(n=3)
    ps[1].grad[0, 0] = float("inf")
    ps.append(torch.nn.Parameter(torch.zeros(2)))  # no gradient: skipped
    before = [p.grad.clone() for p in ps[:3]]
    norm = clip_grads(ps, 1.0, torch.device("cpu"))
    assert math.isinf(norm.item())
    for p, b in zip(ps[:3], before):
        assert torch.equal(p.grad, b)
    assert clip_grads([torch.nn.Parameter(torch.zeros(2))], 1.0, torch.device("cpu")).item() == 0.0


def test_sharded_gradients_reduce_over_their_mesh():
    """A DTensor gradient (FSDP2/TP shard) on a mesh of one: its squares are summed over the shard's group."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        plain = _params(n=2)
        sharded = torch.nn.Parameter(distribute_tensor(torch.zeros(4, 3), mesh, [Shard(0)]))
        sharded.grad = distribute_tensor(torch.full((4, 3), 2.0), mesh, [Shard(0)])
        norm = clip_grads([*plain, sharded], None, torch.device("cpu"))
        expected = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in plain) + 12 * 4.0)
        assert norm.item() == pytest.approx(expected, rel=1e-6)
    finally:
        dist.destroy_process_group()
