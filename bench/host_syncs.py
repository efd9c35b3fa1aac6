"""Host syncs per training step: reads of tensor values into Python inside Trainer.train_step.

On a GPU each such read waits for the device to drain its queue. Runs the tiny Llama LoRA recipe in
one process (gloo, CPU) and counts with bench/support/host_reads.py; reads of the CPU-side batch (the
workloads' loss_counts/input_tokens, before the batch moves) are not counted. Then, per forward, on the
same tiny model: a whole-model forward with torch.arange positions (what transformers does when handed
them), with the harness's trainer.positions.plain_positions, and each pipeline stage (trainer/pipeline.py).

    python -m bench.host_syncs [key=value ...]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str]) -> None:
    from bench.support.host_reads import count_step_reads
    from trainer import cli
    from trainer.compat import ensure_torchvision_importable
    ensure_torchvision_importable()
    from trainer.loop import Trainer

    counters = count_step_reads(Trainer)
    with tempfile.TemporaryDirectory() as out:
        code = cli.main([os.path.join(REPO, "recipes/tiny_llama_lora.yaml"), f"output_dir={out}", "max_steps=3",
                         "data.seq_len=64", "train.eval_every_samples=null", "train.log_every=100", *argv])
    assert code == 0, code
    for i, c in enumerate(counters, 1):
        print(f"step {i}: {c.count} host reads: {'; '.join(c.where)}")
    print("JSON " + json.dumps([c.where for c in counters]))
    per_forward = forward_reads()
    for name, where in per_forward.items():
        print(f"one forward, {name}: {len(where)} host reads{': ' if where else ''}{'; '.join(where)}")
    print("FORWARD " + json.dumps(per_forward))


def forward_reads() -> dict[str, list[str]]:
    """Reads in one forward of tiny_llama_lora's model shape (no cache, as the trainer builds it)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from bench.support.host_reads import HostReads
    from trainer.config import load_recipe
    from trainer.pipeline import LlamaStage
    from trainer.positions import plain_positions

    recipe = load_recipe(os.path.join(REPO, "recipes/tiny_llama_lora.yaml"), [])
    config = LlamaConfig(**recipe.model.config, use_cache=False, attn_implementation="sdpa")
    model = AutoModelForCausalLM.from_config(config)
    ids = torch.randint(0, config.vocab_size, (4, 64))
    n = config.num_hidden_layers
    stages = [LlamaStage(model, list(range(n // 2)), True, False), LlamaStage(model, list(range(n // 2, n)), False, True)]

    def count(fn) -> list[str]:
        with HostReads() as counter:
            fn()
        return counter.where

    with torch.no_grad():
        h = stages[0](ids)
        return {"transformers given torch.arange positions": count(
                    lambda: model(input_ids=ids, position_ids=torch.arange(64).unsqueeze(0))),
                "the harness's positions (llm_lora)": count(
                    lambda: model(input_ids=ids, position_ids=plain_positions(64, ids.device))),
                "pipeline stage 0": count(lambda: stages[0](ids)),
                "pipeline stage 1": count(lambda: stages[1](h))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.host_syncs", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="recipe overrides, as python -m trainer takes them")
    main(parser.parse_args().overrides)
