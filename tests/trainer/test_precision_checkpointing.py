"""Activation checkpointing (`model.activation_checkpointing`) and bf16 autocast (`train.precision`) on
CPU: checkpointing recomputes each decoder layer in backward and leaves the losses of the same batches
unchanged; bf16 autocast runs the matmuls in bf16 (recorded in run.json) with losses close to fp32's.
tests/gpu/ checks both on a GPU."""
from __future__ import annotations

import pytest
import torch

from ..conftest import run_cli

# lr warm-up off, so step 2 onwards depend on the gradients (the recomputed activations); dropout on,
# so the recomputation must replay the same random masks
FAST = ["max_steps=3", "data.seq_len=64", "train.log_every=1", "train.eval_every_samples=null",
        "train.warmup_steps=0", "train.save_final=false", "distributed.timeout_s=60"]


def _decoder_calls(checkpointing: bool) -> int:
    """Forward calls of decoder layer 0's MLP during one forward and backward of the workload's own model
    (transformers checkpoints the layer's forward, inside the module call: its children show the replay)."""
    from trainer.compat import ensure_torchvision_importable
    ensure_torchvision_importable()
    from trainer.config import load_recipe
    from trainer.workloads import get_workload

    recipe = load_recipe(str(__import__("tests.conftest", fromlist=["TINY"]).TINY),
                         [f"model.activation_checkpointing={str(checkpointing).lower()}"])
    model = get_workload(recipe.workload)(recipe, torch.device("cpu"), torch.float32).build_model()
    model = model.to_empty(device="cpu")  # built on the meta device; values do not matter here
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    model.train()
    mlp = model.get_base_model().model.layers[0].mlp
    calls = []
    forward = mlp.forward  # counted by a wrapper: torch runs the replay without module hooks

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)
    mlp.forward = counted
    ids = torch.randint(3, 250, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    return len(calls)


def test_checkpointing_recomputes_decoder_layers_in_backward():
    assert _decoder_calls(False) == 1
    assert _decoder_calls(True) == 2  # once in forward, once more in backward


@pytest.mark.integration
def test_checkpointing_and_bf16_autocast_through_the_cli(tmp_path):
    runs = {}
    for name, extra in {"plain": [], "ac": ["model.activation_checkpointing=true"],
                        "bf16": ["train.precision=bf16"],
                        "bf16_ac": ["train.precision=bf16", "model.activation_checkpointing=true"]}.items():
        res = run_cli(tmp_path / name, *FAST, *extra, timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
        runs[name] = res
    losses = {name: [r["loss"] for r in res.metrics()] for name, res in runs.items()}
    grads = {name: [r["grad_norm"] for r in res.metrics()] for name, res in runs.items()}
    assert len(losses["plain"]) == 3
    # checkpointing changes memory, not numbers: the same losses and gradient norms on the same batches
    assert losses["ac"] == pytest.approx(losses["plain"], rel=1e-5, abs=1e-6)
    assert grads["ac"] == pytest.approx(grads["plain"], rel=1e-4, abs=1e-6)
    assert losses["bf16_ac"] == pytest.approx(losses["bf16"], rel=1e-3, abs=1e-4)
    # bf16 autocast: recorded, active (the numbers move), and close to fp32
    model = runs["bf16"].run_json()["model"]
    assert model["compute_dtype"] == "torch.bfloat16" and model["weight_dtype"] == "torch.float32"
    assert runs["plain"].run_json()["model"]["compute_dtype"] == "torch.float32"
    assert losses["bf16"] != losses["plain"]
    assert losses["bf16"] == pytest.approx(losses["plain"], rel=0.02)
