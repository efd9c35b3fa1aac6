"""Host syncs per training step: reads of tensor values into Python inside Trainer.train_step.

On a GPU each such read waits for the device to drain its queue. Runs the tiny Llama LoRA recipe in
one process (gloo, CPU) and counts with bench/support/host_reads.py; reads of the CPU-side batch (the
workloads' loss_counts/input_tokens, before the batch moves) are not counted.

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.host_syncs", description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="recipe overrides, as python -m trainer takes them")
    main(parser.parse_args().overrides)
