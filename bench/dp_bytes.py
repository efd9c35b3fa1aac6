"""Bytes each GPU sends across the data-parallel (inter-node) axis per optimizer step, for a 70B LoRA
recipe's layout at its real shapes: `replicate` (frozen tp shard kept on every dp replica, LoRA gradients
all-reduced) against `fsdp` (FSDP2 shards the frozen base over dp and all-gathers it for forward and again
for backward in every micro-batch, then reduce-scatters the LoRA gradients).

Shapes come from the recipe's model built on the meta device (no weights, no memory) with peft LoRA
applied, and the tensor-parallel plan of trainer/parallelize.py. Sizes follow nccl-tests' S (all-reduce:
the buffer; all-gather: the gathered output).

    python -m bench.dp_bytes recipes/llama70b_lora.yaml [--world-size 64] [--config-json FILE]
"""
from __future__ import annotations

import argparse
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Published shapes, for recipes whose model.path is a checkpoint that is not here.
LLAMA2_70B = dict(vocab_size=32000, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8)
LLAMA3_70B = dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8, rope_theta=500000.0)


def shard_numel(name: str, shape: tuple, tp: int, colwise: tuple, rowwise: tuple) -> int:
    """This tp rank's element count of a parameter under the Llama TP plan (LoRA-aware)."""
    numel = 1
    for d in shape:
        numel *= d
    if tp == 1:
        return numel
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):  # vocabulary split over tp (untied)
        return numel // tp
    suffix = next((s for s in colwise + rowwise if f".{s}." in f".{name}"), None)
    if suffix is None:
        return numel
    col = suffix in colwise
    if ".lora_A." in name:
        return numel if col else numel // tp  # column-parallel: replicated A; row-parallel: A split by input
    if ".lora_B." in name:
        return numel // tp if col else numel
    return numel // tp  # the base layer's weight


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--world-size", type=int, default=64)
    ap.add_argument("--config-json", help="the model's config.json (default: published shapes by recipe name)")
    args = ap.parse_args()

    from trainer.compat import ensure_torchvision_importable
    ensure_torchvision_importable()  # before transformers (see trainer/compat.py)
    import torch
    from accelerate import init_empty_weights
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    from trainer.config import load_recipe
    from trainer.layout import resolve_layout
    from trainer.parallelize import LLAMA_COLWISE, LLAMA_ROWWISE

    recipe = load_recipe(args.recipe, [])
    layout, problems = resolve_layout(recipe, args.world_size)
    assert not problems, problems
    if args.config_json:
        config = LlamaConfig(**json.load(open(args.config_json)))
    else:
        config = LlamaConfig(**(LLAMA3_70B if "llama3" in recipe.name else LLAMA2_70B))
    elsize = 2 if recipe.model.dtype in ("bf16", "auto") else 4  # weights as the recipe loads them (GPU: bf16)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if elsize == 2 else torch.float32)
        # as trainer/workloads/llm_lora.py applies it: peft's autocast_adapter_dtype (default on) keeps the
        # adapters, and so their gradients, in fp32 on a bf16 base
        model = get_peft_model(model, LoraConfig(r=recipe.lora.r, lora_alpha=recipe.lora.alpha,
                                                 target_modules=list(recipe.lora.target_modules)))
    tp, dp = layout.tp, layout.dp
    micro_batches = layout.grad_accum_steps
    base = train = grad_bytes = 0
    grad_dtypes = set()
    for name, p in model.named_parameters():
        n = shard_numel(name, tuple(p.shape), tp, LLAMA_COLWISE, LLAMA_ROWWISE)
        if p.requires_grad:
            train += n
            grad_bytes += n * p.element_size()  # a gradient has its parameter's dtype
            grad_dtypes.add(str(p.dtype).replace("torch.", ""))
        else:
            base += n
    total = sum(p.numel() for p in model.parameters())
    # replicate: one all-reduce of this rank's LoRA gradient pieces per step, in their dtype (fp32: see above)
    replicate = grad_bytes
    # fsdp: every micro-batch gathers the whole tp shard (base + LoRA) for forward and again for
    # backward (reshard after forward), then reduce-scatters the LoRA gradients in fp32
    fsdp_gather = 2 * micro_batches * (base + train) * elsize
    fsdp_scatter = micro_batches * train * 4
    out = {"recipe": recipe.name, "world_size": args.world_size, "tp": tp, "dp": dp, "pp": layout.pp,
           "micro_batches_per_step": micro_batches, "parameters": total, "per_tp_rank_base_numel": base,
           "per_tp_rank_trainable_numel": train, "weight_bytes_per_element": elsize,
           "lora_gradient_dtypes": sorted(grad_dtypes),
           "replicate_bytes_per_step_per_gpu": replicate,
           "fsdp_all_gather_bytes_per_step_per_gpu": fsdp_gather,
           "fsdp_reduce_scatter_bytes_per_step_per_gpu": fsdp_scatter,
           "fsdp_over_replicate": (fsdp_gather + fsdp_scatter) / replicate}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
