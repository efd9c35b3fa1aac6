"""A plain transformers + peft LoRA loop on the same shapes and data as the harness's run (bench/gpu/run.sh):
the baseline the harness's throughput is compared with. Random init, bf16 weights, bf16 autocast off
(the weights are bf16 already, as in the harness run), AdamW on the LoRA parameters, one GPU.

  python bench/gpu/plain_lora.py --make-data tokens.jsonl            the token rows both runs read
  python bench/gpu/plain_lora.py --data tokens.jsonl --out plain.json [--layers 32] [--steps 20]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

# Llama-3-8B's shapes (its config.json); the layer count may be cut to fit the time (run.sh says so)
SHAPES = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
          "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA = {"r": 16, "alpha": 32}


def make_data(path: str, rows: int, seq: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(rows):
            f.write(json.dumps({"input_ids": [rng.randrange(3, SHAPES["vocab_size"]) for _ in range(seq)]}) + "\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--make-data")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--data")
    p.add_argument("--out")
    p.add_argument("--layers", type=int, default=SHAPES["num_hidden_layers"])
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    if args.make_data:
        make_data(args.make_data, args.rows, args.seq)
        return

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(**{**SHAPES, "num_hidden_layers": args.layers})
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0,
                                             target_modules=TARGETS, task_type="CAUSAL_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
    rows = [json.loads(line)["input_ids"][:args.seq] for line in open(args.data, encoding="utf-8")]
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        batch = torch.tensor([rows[(step * args.batch + i) % len(rows)] for i in range(args.batch)], device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            losses.append(float(loss))
    tokens = args.batch * args.seq
    result = {"what": "plain transformers + peft loop", "layers": args.layers, "seq_len": args.seq,
              "micro_batch": args.batch, "steps_timed": args.steps, "median_step_s": statistics.median(times),
              "tokens_per_s": tokens / statistics.median(times), "last_loss": losses[-1],
              "peak_memory_GiB": torch.cuda.max_memory_allocated() / 2**30,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
