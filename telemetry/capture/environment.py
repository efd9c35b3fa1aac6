"""What a run ran on: software versions and the fabric-relevant environment, secrets redacted."""
from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata

from telemetry.redaction import REDACTED, SECRET_NAME, SECRET_VALUE, is_secret, redact_text  # noqa: F401

# Settings that decide which fabric and transport a job uses (docs/reference.md section 4), plus the
# launcher's identity. Anything else in the environment is not recorded at all.
RECORDED_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "FI_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "CUDA_VISIBLE_DEVICES",
                     "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_NNODES",
                     "SLURM_JOB_NODELIST", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                     "TORCHELASTIC_RUN_ID", "HF_HUB_OFFLINE")


def redact_tree(obj):
    """A copy of a JSON-like value with credential-shaped strings redacted (the recipe, the command line)."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v) for v in obj]
    return obj


def redacted_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    out = {}
    for name in sorted(env):
        if not name.startswith(RECORDED_PREFIXES):
            continue
        value = env[name]
        out[name] = REDACTED if is_secret(name, value) else value
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _harness_version() -> str | None:
    """The installed distribution's version, else the checkout's own (run from a checkout on PYTHONPATH, as
    bench/gpu/run.sh does where the image's environment is read-only), else None."""
    if (v := _version("fabric-harness")) is not None:
        return v
    import re
    from pathlib import Path

    try:
        text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else None


def software_versions() -> dict:
    import torch

    cuda = torch.version.cuda
    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # no NCCL in this build
            nccl = None
    return {
        "python": sys.version.split()[0], "torch": torch.__version__, "cuda": cuda, "nccl": nccl,
        "transformers": _version("transformers"), "peft": _version("peft"), "datasets": _version("datasets"),
        "fabric_harness": _harness_version(), "platform": platform.platform(),
    }


def launcher_hosts(world: int, environ=os.environ) -> int | None:
    """Hosts in the job, each with a local rank 0 that reads the host-wide sources: torchrun's agents
    (GROUP_WORLD_SIZE), right also where nodes run different numbers of ranks; else world size over the ranks
    per host (LOCAL_WORLD_SIZE); None when neither is set, or when that does not divide the world (hosts of
    different rank counts: 6 // 4 would say 1 host for hosts of 4 and 2 ranks)."""
    agents = environ.get("GROUP_WORLD_SIZE", "")
    if agents.isdigit() and int(agents) >= 1:
        return int(agents)
    local = environ.get("LOCAL_WORLD_SIZE", "")
    if not (local.isdigit() and int(local) >= 1 and world % int(local) == 0):
        return None
    return max(1, world // int(local))


def host_info() -> dict:
    # FABRIC_HARNESS_NODE names the node where host names do not tell nodes apart (the fabric lab's
    # namespaces, some container set-ups)
    return {"hostname": os.environ.get("FABRIC_HARNESS_NODE") or socket.gethostname(), "pid": os.getpid()}
