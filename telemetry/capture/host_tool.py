"""Running one host tool (nvidia-smi, ethtool, dmidecode, dcb...) for the inventory: its output, or the reason
there is none, so every unreadable field can be null with that reason."""
from __future__ import annotations

import shutil
import subprocess


def run_tool(run, *cmd: str, timeout: float = 20, limit: int = 160) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, reason). `run` is subprocess.run or a test's stand-in with its signature;
    `limit` bounds how much of a failing tool's message the reason keeps."""
    if run is subprocess.run and shutil.which(cmd[0]) is None:
        return None, f"{cmd[0]} is not installed"
    try:
        proc = run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{' '.join(cmd)}: {type(exc).__name__}"
    if proc.returncode != 0:
        return None, f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()[:limit]}"
    return proc.stdout, None
