"""Plain loops for BERT-Large pretraining and ResNet-50 on one GPU, random inputs of the real shapes: the
samples/s the harness's bert_large and resnet50 recipes are compared with (bench/gpu/run.sh). bf16
autocast over fp32 weights, as the recipes; AdamW for BERT, SGD with momentum for ResNet-50 (run.sh gives
the harness the same optimizer); ResNet-50 in channels_last, optionally compiled whole.

  python bench/gpu/plain_models.py bert --batch 32 --out bert.json
  python bench/gpu/plain_models.py resnet --batch 256 --compile --out resnet.json
"""
from __future__ import annotations

import argparse
import statistics
import time


BERT_LARGE = {"vocab_size": 30522, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
              "intermediate_size": 4096, "max_position_embeddings": 512, "type_vocab_size": 2}
SMOKE_BERT = {"vocab_size": 1024, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 256}  # --smoke: the script's own path on a CPU, not a measurement


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=("bert", "resnet"))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="torch.compile the whole model")
    p.add_argument("--out")
    p.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (with --smoke)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (2-layer BERT, 64x64 images): checks the script")
    args = p.parse_args()

    from step_spread import emit, spread  # beside this script
    from trainer.compat import prepare_torchvision

    prepare_torchvision(args.model == "resnet")  # importable where needed, hidden from transformers otherwise
    import torch

    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if args.model == "bert":
        from transformers import BertConfig, BertForPreTraining

        shape = {**BERT_LARGE, **(SMOKE_BERT if args.smoke else {})}
        model = BertForPreTraining(BertConfig(**shape)).to(dev)
        seq, preds = (64, 10) if args.smoke else (512, 76)
        ids = torch.randint(5, shape["vocab_size"], (args.batch, seq), device=dev)
        labels = torch.full_like(ids, -100)
        labels[:, :preds] = ids[:, :preds]
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
                  "labels": labels, "next_sentence_label": torch.randint(0, 2, (args.batch,), device=dev)}
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        forward = lambda m: m(**inputs).loss  # noqa: E731
    else:
        import torchvision

        model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
        side = 64 if args.smoke else 224
        x = torch.randn(args.batch, 3, side, side, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (args.batch,), device=dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        forward = lambda m: torch.nn.functional.cross_entropy(m(x), y, label_smoothing=0.1)  # noqa: E731
    run = torch.compile(model) if args.compile else model
    model.train()
    times = []
    for step in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = forward(run)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    med = statistics.median(times)
    result = {"what": f"plain {args.model} loop", "micro_batch": args.batch, "compile": args.compile,
              "channels_last": args.model == "resnet", "steps_timed": args.steps, **spread(times),
              "samples_per_s": args.batch / med,
              "peak_memory_GiB": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
              "device": torch.cuda.get_device_name() if cuda else dev.type, "smoke": args.smoke,
              "torch": torch.__version__}
    emit(result, args.out)


if __name__ == "__main__":
    main()
