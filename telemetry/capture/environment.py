"""What a run ran on: software versions and the fabric-relevant environment, secrets redacted."""
from __future__ import annotations

import os
import platform
import re
import socket
import sys
from importlib import metadata

# Settings that decide which fabric and transport a job uses (docs/reference.md section 4), plus the
# launcher's identity. Anything else in the environment is not recorded at all.
RECORDED_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "FI_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "CUDA_VISIBLE_DEVICES",
                     "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "SLURM_JOB_ID", "SLURM_NNODES",
                     "SLURM_JOB_NODELIST", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                     "TORCHELASTIC_RUN_ID", "HF_HUB_OFFLINE")
# Names that hold secrets, matched anywhere in the name (so *_CREDS, *_APIKEY, X_AUTHORIZATION are caught).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|(^|_)PWD($|_)|KEY|CRED|AUTH|COOKIE|SESSION|PRIVATE|"
                         r"SIGNATURE|SALT", re.I)
# Values that look like credentials whatever their name: URLs with a password, bearer/basic authorization,
# vendor token shapes (Hugging Face, GitHub, GitLab, Slack, OpenAI-style, AWS access keys, npm, PyPI),
# JSON web tokens and PEM private keys.
SECRET_VALUE = re.compile(
    r"://[^/\s:@]+:[^/\s@]+@"
    r"|\b(hf|ghp|gho|ghu|ghs|ghr|github_pat|glpat|sk|xox[abpors]|npm)[_-][A-Za-z0-9_-]{8,}"
    r"|\bpypi-[A-Za-z0-9_-]{16,}"
    r"|\b(AKIA|ASIA)[0-9A-Z]{16}\b"
    r"|\b(Bearer|Basic)\s+\S+"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----", re.I)
REDACTED = "<redacted>"


def is_secret(name: str, value: str) -> bool:
    return bool(SECRET_NAME.search(name) or SECRET_VALUE.search(value))


def redact_text(text: str) -> str:
    """`text` with every credential-shaped part replaced (command lines, overrides, recipe strings)."""
    return SECRET_VALUE.sub(REDACTED, text)


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
        "fabric_harness": _version("fabric-harness"), "platform": platform.platform(),
    }


def host_info() -> dict:
    # FABRIC_HARNESS_NODE names the node where host names do not tell nodes apart (the fabric lab's
    # namespaces, some container set-ups)
    return {"hostname": os.environ.get("FABRIC_HARNESS_NODE") or socket.gethostname(), "pid": os.getpid()}
