"""A plain transformers + peft LoRA loop on the same shapes and data as the harness's run (bench/gpu/run.sh):
the baseline the harness's throughput is compared with. Random init, bf16 weights, AdamW on the LoRA
parameters, one GPU; the loss as the harness takes it (summed cross-entropy / label tokens), clip_grad_norm_,
one .item() per step. Optional: liger-kernel's fused Llama kernels (--kernels liger: RoPE, RMSNorm, SwiGLU,
fused linear cross-entropy) and each decoder block compiled (--compile blocks).

  python bench/gpu/plain_lora.py --make-data tokens.jsonl            the token rows both runs read
  python bench/gpu/plain_lora.py --data tokens.jsonl --out plain.json [--layers 32] [--steps 10] [--batch 4]
      [--kernels liger] [--compile blocks]

Every step's time is kept: the JSON has the median, the spread (p10, p90) and both MFU conventions
(flops.py beside it), the peak memory and the compile time (the warm-up steps hold it).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import types


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
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--kernels", choices=("none", "liger"), default="none")
    p.add_argument("--compile", choices=("off", "blocks"), default="off")
    p.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (tiny --layers)")
    p.add_argument("--hidden", type=int, default=SHAPES["hidden_size"], help="smoke runs: a narrower model")
    args = p.parse_args()
    if args.make_data:
        make_data(args.make_data, args.rows, args.seq)
        return

    from trainer.compat import prepare_torchvision

    prepare_torchvision(False)  # transformers must not import a torchvision built for another torch (run.sh's PYTHONPATH)
    import torch

    if args.kernels == "liger":  # before the model is built: the patch replaces transformers' Llama classes
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=True)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    from flops import automodel_lora_per_token, llama_params, mfu, ours_per_token  # beside this script
    from step_spread import emit, spread
    from trainer.throughput import peak_tflops

    torch.manual_seed(0)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    shapes = {**SHAPES, "num_hidden_layers": args.layers}
    if args.hidden != SHAPES["hidden_size"]:
        shapes.update(hidden_size=args.hidden, intermediate_size=args.hidden * 7 // 2, num_attention_heads=4,
                      num_key_value_heads=1, vocab_size=1024)
    config = LlamaConfig(**shapes, use_cache=False)
    with dev:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0,
                                             target_modules=TARGETS, task_type="CAUSAL_LM"))
    if args.compile == "blocks":  # one compiled forward shared by every decoder layer; hooks stay eager
        fn = None
        for module in model.modules():
            if type(module).__name__ == "LlamaDecoderLayer":
                fn = fn or torch.compile(type(module).forward)
                module.forward = types.MethodType(fn, module)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=dev.type == "cuda")
    rows = [[t % shapes["vocab_size"] for t in json.loads(line)["input_ids"][:args.seq]]
            for line in open(args.data, encoding="utf-8")]
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        batch = torch.tensor([rows[(step * args.batch + i) % len(rows)] for i in range(args.batch)], device=dev)
        sync()
        start = time.perf_counter()
        positions = torch.arange(args.seq, device=dev).unsqueeze(0)
        count = args.batch * (args.seq - 1)  # label tokens: every next token
        if args.kernels == "liger":  # summed loss straight from hidden states (num_items_in_batch=1)
            loss = model(input_ids=batch, position_ids=positions, labels=batch, num_items_in_batch=1).loss / count
        else:
            logits = model(input_ids=batch, position_ids=positions).logits[:, :-1].float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                                     reduction="sum") / count
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()  # the step's one host sync
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            losses.append(value)
    tokens = args.batch * args.seq
    med = statistics.median(times)
    counts = llama_params(shapes, LORA["r"])
    peak, _ = peak_tflops(dev, torch.bfloat16)
    result = {"what": "plain transformers + peft loop", "kernels": args.kernels, "compile": args.compile,
              "layers": args.layers, "seq_len": args.seq, "micro_batch": args.batch, "steps_timed": args.steps,
              **spread(times), "tokens_per_s": tokens / med, "last_loss": losses[-1],
              "mfu": mfu(tokens / med, ours_per_token(counts, args.seq), peak),
              "mfu_automodel": mfu(tokens / med, automodel_lora_per_token(counts), peak), "peak_tflops": peak,
              "peak_memory_GiB": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None,
              "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__}
    emit(result, args.out)


if __name__ == "__main__":
    main()
