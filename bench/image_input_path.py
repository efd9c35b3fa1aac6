"""Image input path: uint8 batches normalised in the step vs the former host-side fp32 batches.

Runs recipes/tiny_resnet.yaml twice per data source (synthetic, and a generated ImageFolder tree with random
crops and flips), single process, same seed:
  uint8     - the harness as it is: data sets send uint8 pixels, the workload normalises them on the device
  fp32_host - the former path, patched back in: the data set normalises to fp32 on the host, the workload
              feeds that to the model
and compares loss, grad norm, eval loss and eval accuracy step by step (bitwise, and the largest relative
difference). With --baseline-tree DIR (an exported older commit: `git archive C | tar -x -C DIR`) the folder
run is also compared against that code as it was. Bytes per micro-batch are measured on real batches.

    python -m bench.image_input_path [--steps 16] [--baseline-tree DIR] [--out bench/results/image_input_path.jsonl]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ("loss", "grad_norm", "eval_loss", "eval_accuracy")
COLOURS = [(220, 40, 40), (40, 200, 60), (50, 70, 220), (230, 210, 40)]


def make_tree(root: str, per_class: dict[str, int], seed: int = 0) -> None:
    """root/{train,val}/class<c>/*.png: a solid colour per class with noise, varied sizes."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for c, colour in enumerate(COLOURS):
            folder = os.path.join(root, split, f"class{c}")
            os.makedirs(folder)
            for i in range(count):
                h, w = int(rng.integers(36, 56)), int(rng.integers(36, 56))
                pixels = np.clip(np.array(colour) + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(os.path.join(folder, f"{i}.png"))


def worker(mode: str, argv: list[str]) -> int:
    """One run in this process; fp32_host patches the former data path back in."""
    if mode == "fp32_host":
        import torch

        from trainer.data import images
        from trainer.workloads.image import ImageClassificationWorkload

        def host_fp32(batch_fn):
            def batch(self, indices):
                out = batch_fn(self, indices)
                out["images"] = images.normalize(out["images"])
                return out
            return batch

        images.FolderImages.batch = host_fp32(images.FolderImages.batch)
        images.SyntheticImages.batch = host_fp32(images.SyntheticImages.batch)
        ImageClassificationWorkload._images = lambda self, batch: (
            batch["images"].contiguous(memory_format=torch.channels_last) if self.channels_last
            else batch["images"])
    from trainer.cli import main as cli_main

    return cli_main(argv)


def run(mode: str, out: str, overrides: list[str], tree: str = REPO) -> list[dict]:
    argv = [os.path.join(tree, "recipes", "tiny_resnet.yaml"), f"output_dir={out}", "train.resume=never",
            "train.save_final=false", "train.log_every=1", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if mode == "baseline":
        cmd, cwd = [sys.executable, "-m", "trainer", *argv], tree
    else:
        cmd, cwd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--", *argv], REPO
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, timeout=900)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def compare(a: list[dict], b: list[dict]) -> dict:
    pairs = [(x.get(k), y.get(k)) for x, y in zip(a, b) for k in KEYS]
    rel = [abs(x - y) / max(abs(x), 1e-30) for x, y in pairs if x is not None and y is not None]
    return {"steps": len(a), "same_steps": len(a) == len(b), "bitwise_equal": all(x == y for x, y in pairs),
            "max_rel_diff": max(rel) if rel else None}


def batch_bytes(image_size: int, batch: int) -> dict:
    import torch

    from trainer.data.images import SyntheticImages, normalize

    pixels = SyntheticImages(batch, image_size, 10, seed=0, split=0).batch(list(range(batch)))["images"]
    return {"images": batch, "image_size": image_size, "uint8_bytes": pixels.nbytes,
            "fp32_bytes": normalize(pixels).nbytes, "dtype": str(pixels.dtype).replace("torch.", ""),
            "ratio": normalize(pixels).nbytes / pixels.nbytes} if pixels.dtype == torch.uint8 else {}


def main() -> None:
    if "--worker" in sys.argv:
        i = sys.argv.index("--worker")
        sys.exit(worker(sys.argv[i + 1], sys.argv[sys.argv.index("--") + 1:]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--baseline-tree", default=None)
    p.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    args = p.parse_args()
    result = {"benchmark": "image_input_path", "date": datetime.date.today().isoformat(),
              "command": "python " + " ".join([os.path.relpath(__file__, REPO), *sys.argv[1:]]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "device": "cpu",
              "recipe": "recipes/tiny_resnet.yaml", "steps": args.steps, "sources": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "tree")
        make_tree(tree, {"train": 16, "val": 8})
        sources = {
            "synthetic": [f"max_steps={args.steps}", "train.eval_every_samples=80"],
            "folder": ["data.synthetic=false", f"data.dataset={tree}", "data.num_classes=4", "data.workers=2",
                       f"max_steps={args.steps}", "train.eval_every_samples=128"],
        }
        for name, overrides in sources.items():
            runs = {mode: run(mode, os.path.join(tmp, f"{name}-{mode}"), overrides)
                    for mode in ("uint8", "fp32_host")}
            entry = {"uint8_vs_fp32_host": compare(runs["fp32_host"], runs["uint8"]),
                     "final_loss": runs["uint8"][-1]["loss"]}
            if args.baseline_tree and name == "folder":
                old = run("baseline", os.path.join(tmp, f"{name}-baseline"), overrides, args.baseline_tree)
                entry["uint8_vs_baseline_tree"] = compare(old, runs["uint8"])
            result["sources"][name] = entry
            print(name, json.dumps(entry))
    result["bytes_per_micro_batch"] = {"tiny_resnet": batch_bytes(32, 8), "resnet50": batch_bytes(224, 400)}
    print(json.dumps(result["bytes_per_micro_batch"]))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
