"""Host (Python and dispatch) time per decoder layer of the llama70b_lora layout, on CPU.

The 70B recipe's model at a small width (64 heads, 8 KV heads, head dim 8; MLP and vocabulary cut the
same way) keeps every op of the real layer - LoRA r32 on q/k/v, the TP plan, bf16 autocast, activation
checkpointing - while the arithmetic shrinks to microseconds, so what a forward + backward costs here is
the host's work of issuing it. TP 8 runs in one process on torch's fake process group (rank 0 of 8; its
collectives return at once, shapes are the real shards'): the DTensor dispatch is all there, the
network is not. Per layer = (time at 4 layers - time at 2 layers) / 2, so embedding, head and loss
cancel; aten ops per layer the same way (on a GPU each is at least one kernel launch).

    python -m bench.host_per_layer [--reps 8] [--seq 16] [--out FILE]

One thread; the process's CPU time (time.process_time), not wall time, because the development machine
is shared and a wall clock would count the time other jobs hold the cores; median of `--reps` after one
warm-up.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from bench.support.results import append_line, line_start

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results", "host_per_layer.jsonl")
RECIPE = os.path.join(REPO, "recipes", "llama70b_lora.yaml")
# Llama-2-70B: 80 x 8192, 64 heads / 8 KV heads, MLP 28672, vocab 32000; here head dim 8 instead of 128
SMALL = "{vocab_size: 2048, hidden_size: 512, intermediate_size: 1792, num_hidden_layers: %d, " \
        "num_attention_heads: 64, num_key_value_heads: 8, max_position_embeddings: 4096}"
FULL_LAYERS = 80


def _measure(tp: int, layers: int, checkpointing: bool, reps: int, seq: int) -> tuple[float, int]:
    """(median seconds of one forward + backward, aten ops in it) of the small-width model."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from trainer.config import load_recipe
    from trainer.distributed import ParallelDims
    from trainer.layout import resolve_layout
    from trainer.workloads import get_workload

    dist.init_process_group("fake", rank=0, world_size=tp, store=FakeStore())
    try:
        recipe = load_recipe(RECIPE, ["model.path=null", "model.tokenizer=recipes/assets/byte_tokenizer",
                                      f"model.config={SMALL % layers}", f"parallel.tp={tp}", "parallel.dp=1",
                                      f"model.activation_checkpointing={str(checkpointing).lower()}",
                                      "data.dataset=recipes/assets/fabric_dolly_mini.jsonl"])
        layout, problems = resolve_layout(recipe, tp)
        if problems:
            raise SystemExit("error: " + "; ".join(problems))
        wl = get_workload("llm_lora")(recipe, torch.device("cpu"), torch.bfloat16)
        model = wl.parallelize(wl.build_model(), ParallelDims(layout, "cpu"), torch.device("cpu"), torch.bfloat16)
        ids = torch.randint(3, 2000, (1, seq), generator=torch.Generator().manual_seed(0))
        batch = {"input_ids": ids, "labels": ids}

        def one() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16), wl.loss_context():
                wl.loss_sums(model, batch)["loss"].backward()

        one()  # warm-up: lazy initialisation, caches
        times = []
        for _ in range(reps):  # this process's CPU time: waiting for a core another job holds is not counted
            t0 = time.process_time()
            one()
            times.append(time.process_time() - t0)
        with torch.profiler.profile() as prof:
            one()
        ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
        return statistics.median(times), ops
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--out", default=RESULTS, help="append the result as a JSON line here ('' for none)")
    args = p.parse_args(argv)
    import torch

    from trainer.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    rows = []
    for tp in (8, 1):
        for checkpointing in (True, False):
            (t2, ops2), (t4, ops4) = (_measure(tp, n, checkpointing, args.reps, args.seq) for n in (2, 4))
            per_s, per_ops = (t4 - t2) / 2, (ops4 - ops2) / 2
            row = {"tp": tp, "activation_checkpointing": checkpointing, "host_ms_per_layer": per_s * 1e3,
                   "aten_ops_per_layer": per_ops, "host_ms_per_micro_batch_80_layers": per_s * 1e3 * FULL_LAYERS,
                   "us_per_op": per_s * 1e6 / per_ops if per_ops else None}
            rows.append(row)
            print(f"tp {tp}, activation checkpointing {'on ' if checkpointing else 'off'}: "
                  f"{row['host_ms_per_layer']:.2f} ms and {per_ops:.0f} aten ops per layer (forward + backward), "
                  f"{row['us_per_op']:.1f} us per op; x {FULL_LAYERS} layers = "
                  f"{row['host_ms_per_micro_batch_80_layers']:.0f} ms of host work per micro-batch", flush=True)
    machine = f"2-core CPU dev VM ({platform.machine()}, {os.cpu_count()} cores), 1 thread"
    append_line(args.out, {**line_start("bench.host_per_layer", argv, machine),
                           "recipe": "recipes/llama70b_lora.yaml at small width (head dim 8), LoRA r32 q/k/v, bf16 "
                           "autocast", "seq": args.seq, "reps": args.reps, "rows": rows})


if __name__ == "__main__":
    main()
