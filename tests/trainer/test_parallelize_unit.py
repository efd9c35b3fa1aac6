"""trainer.parallelize in-process, in a gloo group of one: the Llama tensor-parallel plan applied over a
one-rank tp mesh (DTensors with the plan's placements; on one rank the sharded model must compute exactly
what the plain one does), the divisibility check, and the gradient-sync helpers."""
from __future__ import annotations

import types

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from tests.conftest import TINY
from trainer.config import load_recipe
from trainer.error_report import InputError
from trainer.parallelize import block_classes, _check_divisible, apply_tensor_parallel, grad_sync, \
    reduce_trainable_grads, unwrap
from trainer.workloads import get_workload


@pytest.fixture(scope="module")
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,), mesh_dim_names=("tp",))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def workload():
    recipe = load_recipe(TINY, ["data.seq_len=32", "train.eval_every_samples=null", "lora.dropout=0.0"])
    return get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)


def fresh_model(workload):
    return workload._materialize(workload.build_model())  # the same seeded weights every time


def dims_for(mesh, tp):
    # the plan reads the degree from the layout and shards over the mesh; a one-rank mesh holds every shard
    return types.SimpleNamespace(layout=types.SimpleNamespace(tp=tp), mesh=lambda name: mesh)


def test_degree_one_leaves_the_model_alone(group_of_one, workload):
    model = fresh_model(workload)
    assert apply_tensor_parallel(model, dims_for(group_of_one, 1)) is False
    assert not any(isinstance(p, DTensor) for p in model.parameters())


def test_tp_must_divide_the_heads():
    config = types.SimpleNamespace(num_attention_heads=4, num_key_value_heads=2, intermediate_size=352)
    _check_divisible(config, 2)
    # the recipe check's line (trainer/workloads/hf.py tp_problem): one rule, one wording
    with pytest.raises(InputError, match=r"^parallel.tp: 4 does not divide the model's num_key_value_heads \(2\); "
                                         r"allowed: 1, 2 \(what divides num_attention_heads, num_key_value_heads, "
                                         r"intermediate_size\)$"):
        _check_divisible(config, 4)


def test_plan_placements_and_identical_loss(group_of_one, workload):
    batch = workload.build_data(False)[0].batch([0, 1])
    plain = fresh_model(workload)
    expected_loss = workload.loss_sums(plain, batch)["loss"]
    expected_loss.backward()
    expected = expected_loss.item()
    lora_b = "layers.0.self_attn.q_proj.lora_B.default.weight"
    expected_grad = next(p.grad for n, p in plain.named_parameters() if n.endswith(lora_b))
    assert expected_grad.abs().sum() > 0  # lora_B starts at zero, so its gradient is the first to move

    model = fresh_model(workload)
    head_split = apply_tensor_parallel(model, dims_for(group_of_one, 2), sequence_parallel=True)
    assert head_split is True  # vocabulary 260 divides by 2 and the embeddings are not tied
    params = dict(model.named_parameters())

    def placement(suffix):
        (name,) = [n for n in params if n.endswith(suffix)]
        assert isinstance(params[name], DTensor), name
        return params[name].placements[0]

    layer = "layers.0."
    assert placement(layer + "self_attn.q_proj.base_layer.weight") == Shard(0)  # column-wise: output rows
    assert placement(layer + "self_attn.q_proj.lora_B.default.weight") == Shard(0)
    assert not isinstance(params[next(n for n in params if n.endswith(layer + "self_attn.q_proj.lora_A.default.weight"))],
                          DTensor)  # column-wise LoRA: lora_A stays whole
    assert placement(layer + "self_attn.o_proj.base_layer.weight") == Shard(1)  # row-wise: input columns
    assert placement(layer + "self_attn.o_proj.lora_A.default.weight") == Shard(1)
    assert placement("embed_tokens.weight") == Shard(0) and placement("lm_head.weight") == Shard(0)

    workload.loss_parallel = head_split
    try:
        with workload.loss_context():  # lm_head's logits are split over the vocabulary: loss-parallel CE
            loss = workload.loss_sums(model, batch)["loss"]
            loss.backward()
    finally:
        workload.loss_parallel = False
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    grad = params[next(n for n in params if n.endswith(lora_b))].grad
    assert isinstance(grad, DTensor) and torch.allclose(grad.full_tensor(), expected_grad, rtol=1e-4, atol=1e-7)


def test_block_classes_come_from_the_hf_model(workload):
    assert block_classes(workload.build_model()) == ("LlamaDecoderLayer",)


def test_grad_sync_and_reductions_of_a_group_of_one(group_of_one):
    layer = torch.nn.Linear(2, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(layer)
    assert unwrap(ddp) is layer and unwrap(layer) is layer
    with grad_sync(ddp, enabled=False):  # DDP's no_sync: gradients accumulate locally
        assert ddp.require_backward_grad_sync is False
    assert ddp.require_backward_grad_sync is True
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 4.0)
    reduce_trainable_grads([p], None, dp=1)  # nothing to average over
    assert p.grad.tolist() == [4.0, 4.0, 4.0]
    reduce_trainable_grads([p], dist.group.WORLD, dp=2)  # the sum over a world of one, divided by dp
    assert p.grad.tolist() == [2.0, 2.0, 2.0]
