"""Run under torchrun (gloo, CPU): build the tiny LoRA Llama as the trainer does (same seed everywhere,
then tensor and data parallelism), reseed as trainer/run.py does before the first step, run one forward on
the same batch on every rank and record which positions each LoRA dropout dropped. Rank 0 writes every
rank's (dp rank, tp rank, mask digests) to the JSON file named by argv[1]."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.config import load_recipe
from trainer.distributed import ParallelDims
from trainer.layout import resolve_layout
from trainer.run import seed_everything
from trainer.seeding import seed_training_streams
from trainer.workloads.llm_lora import LlmLoraWorkload

RECIPE = str(Path(__file__).resolve().parents[3] / "recipes" / "tiny_llama_lora.yaml")


def main(out: str, overrides: list[str]) -> None:
    dist.init_process_group("gloo")
    recipe = load_recipe(RECIPE, ["lora.dropout=0.5", "parallel.data_parallel=replicate", *overrides])
    layout, problems = resolve_layout(recipe, dist.get_world_size())
    assert layout is not None, problems
    dims = ParallelDims(layout, "cpu")
    cpu = torch.device("cpu")
    seed_everything(recipe.seed)
    workload = LlmLoraWorkload(recipe, cpu, torch.float32)
    model = workload.parallelize(workload.build_model(), dims, cpu, torch.float32)
    seed_training_streams(recipe.seed, dims.dp_rank, dims.mesh("pp").get_local_rank())
    dropped: dict[str, str] = {}

    def record(name):
        def hook(_module, args, output):
            x = args[0]
            mask = ((x != 0) & (output == 0)).contiguous()
            dropped[name] = hashlib.sha256(mask.numpy().tobytes()).hexdigest()
            dropped[name + ".share"] = float(mask.float().mean())
        return hook

    for name, module in model.named_modules():
        if name.endswith("lora_dropout.default"):
            module.register_forward_hook(record(name))
    ids = torch.arange(3, 3 + 2 * 32).reshape(2, 32) % 250 + 3  # the same batch on every rank
    with workload.loss_context():
        model(input_ids=ids, position_ids=torch.arange(32).unsqueeze(0))
    mine = {"rank": dist.get_rank(), "dp_rank": dims.dp_rank, "tp_rank": dims.mesh("tp").get_local_rank(),
            "masks": dropped}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(every))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
