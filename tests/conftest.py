"""Shared helpers: run the real CLI (alone or under torchrun) as bounded subprocesses."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainer.compat import ensure_torchvision_importable

ensure_torchvision_importable()  # tests import transformers directly; see trainer/compat.py

# DeepSpeed JIT-compiles a small C++ op on its first initialisation (minutes on two cores). One build
# directory per test session, inherited by every run the tests start, builds it once per session; a
# TORCH_EXTENSIONS_DIR set outside (a developer's cache) is kept, so it builds once per machine.
if "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="fabric-harness-torch-extensions-")
    atexit.register(shutil.rmtree, os.environ["TORCH_EXTENSIONS_DIR"], True)

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "recipes" / "tiny_llama_lora.yaml")
# Small and quick: 6 steps, short sequences, no periodic eval unless a test asks for it.
FAST = ["max_steps=6", "data.seq_len=128", "train.log_every=1", "train.eval_every_samples=null",
        "distributed.timeout_s=60"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    def metrics(self) -> list[dict]:
        path = self.out / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def run_json(self) -> dict:
        return json.loads((self.out / "run.json").read_text())

    def rank_files(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((self.out / "ranks").glob("*.final.json"))]

    def losses(self) -> list[float]:
        return [r["loss"] for r in self.metrics()]


def run_cli(out: Path, *overrides: str, nproc: int = 1, recipe: str = TINY, env: dict | None = None,
            timeout: int = 300, extra_args: tuple[str, ...] = ()) -> Result:
    """Run `python -m trainer` (nproc 1) or torchrun --standalone; kill the whole group on timeout."""
    args = [recipe, f"output_dir={out}", *overrides, *extra_args]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "trainer", *args]
    else:
        cmd = [sys.executable, "-m", "trainer", *args]
    # CUDA_VISIBLE_DEVICES="": these are CPU/gloo runs, also on a machine with a GPU
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
                **(env or {})}
    proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return Result(proc.returncode, stdout, stderr, out)
