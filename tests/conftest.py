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


def loop_all_reduces(step: int) -> int:
    """The training loop's own all-reduces at `step` of a fresh run (trainer/loop.py): step 1's item counts,
    then each step's loss sums (with the next step's counts)."""
    return 2 if step == 1 else 1


def loop_reduction_bytes(step: int, max_steps: int, terms: int = 1) -> int:
    """Bytes of the training loop's own all-reduces at `step` of a fresh run that reaches `max_steps` (one
    stopped early sends the next step's counts at its last step too) (trainer/loop.py), all float64:
    the item counts (each loss term's, real tokens, padded tokens, attention's position pairs: terms + 3) and
    the loss sums (terms). Step 1 reduces its own counts before its forward; every step reduces its loss
    sums together with the next step's counts, so the last step sends its sums alone."""
    counts = 8 * (terms + 3)
    return (counts if step == 1 else 0) + 8 * terms + (counts if step < max_steps else 0)


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
    return run_bounded(cmd, full_env, timeout, out)


def run_bounded(cmd: list[str], env: dict, timeout: int, out: Path) -> Result:
    """`cmd` from the repository root in a session of its own; on timeout its whole group is killed and
    the test fails with the end of its output."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return Result(proc.returncode, stdout, stderr, out)


class Payload:
    """Unpickling this runs a shell command that creates `marker`: what a loader that unpickles an
    untrusted file (a checkpoint, a flight-recorder dump) must refuse."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


# --- test tiers --------------------------------------------------------------------------------------
# The fast tier (`pytest -m "not integration"`) runs in-process. A test that starts a Python interpreter,
# torchrun, the fabric lab (ip netns), Slurm or a browser is an integration test and must say so: outside
# a test marked `integration`, such a start fails the test with the marker it needs. Other tools the code
# under test reads (ethtool, nvidia-smi, tc -s) may run anywhere.
_CURRENT: list = [None]
_LAUNCHERS = ("python", "torchrun", "ip", "srun", "sbatch", "salloc", "slurmctld", "slurmd", "munged",
              "chromium", "iperf3", "bash", "sh", "deepspeed", "nemo", "automodel", "docker", "hadolint")


def _launcher(args) -> str | None:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args or [])
    if not argv:
        return None
    head = os.path.basename(os.fsdecode(argv[0]).split()[0])
    if os.fsdecode(argv[0]) == sys.executable or head.startswith(_LAUNCHERS):
        return " ".join(os.fsdecode(a) for a in argv[:4])
    return None


_real_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self, args, *a, **k):
    item = _CURRENT[0]
    what = _launcher(args)
    if item is not None and what and item.get_closest_marker("integration") is None:
        raise AssertionError(f"{item.nodeid} starts a process ({what}): mark it @pytest.mark.integration")
    return _real_popen_init(self, args, *a, **k)


subprocess.Popen.__init__ = _guarded_popen_init


def unset_env(monkeypatch, *names: str) -> None:
    """Unset `names` for this test and unset them again afterwards, also where the code under test sets
    them (monkeypatch.delenv of an absent variable records nothing to undo)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


# set by pytest itself, and by libraries for the whole process when first imported (lightning, deepspeed:
# torch's CUDA check through NVML), whichever test imports them first
_PROCESS_WIDE = {"PYTEST_CURRENT_TEST", "PYTORCH_NVML_BASED_CUDA_CHECK"}


@pytest.fixture(autouse=True)
def _environ_unchanged(request):
    """A test that changes os.environ (or lets the code under test change it) without monkeypatch leaks the
    change into every later test and every process they start: a leaked TORCH_DISABLE_SHARE_RDZV_TCP_STORE
    made rank 0 of later torchrun runs serve a store on every interface. Checked after monkeypatch undoes."""
    before = dict(os.environ)
    yield
    changed = sorted(k for k in before.keys() | os.environ.keys()
                     if before.get(k) != os.environ.get(k) and k not in _PROCESS_WIDE)
    if changed:
        os.environ.clear()
        os.environ.update(before)
        pytest.fail(f"{request.node.nodeid} left os.environ changed ({', '.join(changed)}): set or remove "
                    "variables with monkeypatch.setenv/delenv (restored after the test)", pytrace=False)


def pytest_runtest_setup(item):
    _CURRENT[0] = item


def pytest_runtest_teardown(item):
    _CURRENT[0] = item  # module fixtures torn down here belong to this item's tier


def gpu_unavailable_reason() -> str | None:
    """Why `gpu`-marked tests skip here, or None on a machine with a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (torch.cuda.is_available() is False)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            reason = reason or gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
