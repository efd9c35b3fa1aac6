"""Ops dispatched per optimizer step: LAMB over BERT-Large's parameters, LARS over ResNet-50's, for the
per-parameter loops trainer/optim.py had (kept in tests/trainer/test_optim.py) and its foreach steps.

Method: the models are built on the meta device (BERT-Large from recipes/bert_large.yaml's model.config,
torchvision's resnet50) to get the parameter list; every parameter is then replaced by a small real CPU
tensor of the same rank (each dimension cut to at most 2), so the count, order, grouping and ranks of
the tensors are the real ones. The optimizer is built as the trainer builds it (build_optimizer with the
recipe's train section; the reference gets the same param groups). A TorchDispatchMode counts every ATen
op dispatched during the second optimizer.step() (the first also creates the state, one tensor at a time).

On a GPU every non-view op is at least one kernel launch. A foreach op is one multi-tensor launch per
batch of chunks (65,536 elements per chunk; more than one launch for lists as large as BERT-Large's) when
CUDA's fast-path conditions hold (one device and dtype, equal shapes and strides across the lists), else
it loops over the tensors: the script checks those conditions on every foreach call and reports such
calls, counting them as one launch per tensor in the launch estimate. The estimate is a lower bound; no
GPU was used.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from collections import Counter

import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from trainer.compat import ensure_torchvision_importable  # noqa: E402

ensure_torchvision_importable()

from bench.support.reference_optim import PerParamLAMB, PerParamLARS  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.optim import build_optimizer  # noqa: E402


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.views = 0
        self.foreach_looping: list[tuple[str, int]] = []  # foreach calls CUDA would run tensor by tensor

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if func.is_view:
            self.views += 1
        else:
            self.ops[name] += 1
            if name.startswith("aten._foreach"):
                lists = [a for a in list(args) + list((kwargs or {}).values())
                         if isinstance(a, (list, tuple)) and a and all(torch.is_tensor(t) for t in a)]
                if not _fast_path(lists):
                    self.foreach_looping.append((name, len(lists[0])))
        return func(*args, **(kwargs or {}))


def _fast_path(lists: list) -> bool:
    """CUDA's multi-tensor conditions (ATen's ForeachUtils.h): one device and dtype, and the i-th tensors of
    all lists of equal shape and strides (dims of size 1 aside)."""
    tensors = tree_leaves(lists)
    if len({(t.device, t.dtype) for t in tensors}) > 1:
        return False
    for column in zip(*lists):
        first = column[0]
        for t in column[1:]:
            if t.shape != first.shape or any(n != 1 and a != b for n, a, b in zip(first.shape, first.stride(), t.stride())):
                return False
    return True


def stand_in(meta_model: torch.nn.Module) -> torch.nn.Module:
    """The model's parameters (tied ones once), as small real tensors of the same rank, in the same order."""
    module = torch.nn.Module()
    gen = torch.Generator().manual_seed(0)
    small = [torch.nn.Parameter(torch.randn(*[min(n, 2) for n in p.shape], generator=gen))
             for p in meta_model.parameters()]
    module.params = torch.nn.ParameterList(small)
    return module


def bert_large():
    from transformers import BertConfig, BertForPreTraining

    with open(os.path.join(REPO, "recipes", "bert_large.yaml")) as f:
        recipe = yaml.safe_load(f)
    with torch.device("meta"):
        model = BertForPreTraining(BertConfig(**recipe["model"]["config"]))
    return model, recipe["train"]


def resnet50():
    import torchvision

    with open(os.path.join(REPO, "recipes", "resnet50.yaml")) as f:
        recipe = yaml.safe_load(f)
    with torch.device("meta"):
        model = torchvision.models.resnet50()
    return model, recipe["train"]


def measure(model_fn, reference_cls) -> dict:
    meta, train_section = model_fn()
    train = TrainConfig(**train_section)
    numel = sum(p.numel() for p in meta.parameters())
    result = {"tensors": len(list(meta.parameters())), "numel": numel, "optimizer": train.optimizer}
    for label in ("before", "after"):
        model = stand_in(meta)
        opt, _ = build_optimizer(model, train, max_steps=10)
        if label == "before":  # the same param groups and hyperparameters, stepped by the per-parameter loop
            opt = reference_cls(opt.param_groups, **{k: v for k, v in opt.defaults.items() if k != "lars_exclude"})
        gen = torch.Generator().manual_seed(1)
        for step in range(2):
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=gen)
            if step == 0:
                opt.step()
                continue
            with Count() as count:
                opt.step()
        launching = sum(count.ops.values())
        foreach = sum(n for name, n in count.ops.items() if name.startswith("aten._foreach"))
        looping_tensors = sum(n for _, n in count.foreach_looping)
        result[label] = {
            "aten_ops": launching + count.views, "view_ops": count.views, "non_view_ops": launching,
            "foreach_calls": foreach, "foreach_calls_looping_on_cuda": len(count.foreach_looping),
            "cuda_launches_lower_bound": launching - len(count.foreach_looping) + looping_tensors,
            "param_groups": len(opt.param_groups), "top_ops": dict(count.ops.most_common(6))}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "optim_launches.jsonl"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {"lamb_bert_large": measure(bert_large, PerParamLAMB),
               "lars_resnet50": measure(resnet50, PerParamLARS)}
    for name, r in results.items():
        b, a = r["before"], r["after"]
        print(f"{name}: {r['tensors']} tensors, {r['numel']:,} elements")
        print(f"  ATen ops per step      before {b['aten_ops']:>6,}  after {a['aten_ops']:>5,}  "
              f"({b['aten_ops'] / a['aten_ops']:.0f}x fewer)")
        print(f"  non-view ops           before {b['non_view_ops']:>6,}  after {a['non_view_ops']:>5,}  "
              f"(foreach calls {a['foreach_calls']}, {a['foreach_calls_looping_on_cuda']} looping on CUDA)")
        print(f"  CUDA launches (>=)     before {b['cuda_launches_lower_bound']:>6,}  "
              f"after {a['cuda_launches_lower_bound']:>5,}")
    line = {"benchmark": "optim_launches", "date": datetime.date.today().isoformat(),
            "command": "python -m bench.optim_launches",
            "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
            "device": "cpu (op counts; no GPU)", "torch": torch.__version__,
            "method": "TorchDispatchMode count of ATen ops in the second optimizer.step(), real-count small "
                      "tensors of the real ranks; CUDA launch lower bound = non-view ops, foreach calls that "
                      "fail CUDA's fast-path checks counted once per tensor",
            **results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
