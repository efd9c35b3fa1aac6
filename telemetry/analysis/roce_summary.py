"""RoCE's GID (index and type) and traffic class for the Fabrics table.

The GID index a job used: NCCL's log (`NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 576 mtu 3 GID 3 (0/...)`, one
line per queue pair it connects, NET subsystem), else NCCL_IB_GID_INDEX; its type (RoCE v1 or v2) from the
port's GID table recorded at start-up (run.json fabric.roce, telemetry/capture/roce.py). The traffic class:
NCCL_IB_TC (NCCL's own, default 0), else the port's (mlx5 `tc/1/traffic_class`).
"""
from __future__ import annotations

import glob
import os
import re

from telemetry.analysis.runs import Run
from telemetry.rundir import LOGS

_QP_GID = re.compile(r"NCCL Dev (\d+) Ib[Dd]ev (\d+) Port (\d+) qpn \d+ mtu \d+.*?\bGID (\d+) \(")


def gid_indices_from_log(lines) -> set[int]:
    return {int(m.group(4)) for line in lines for m in _QP_GID.finditer(line)}


def _log_gids(run_dir: str, max_bytes: int = 16 << 20) -> set[int]:
    found: set[int] = set()
    for path in sorted(glob.glob(os.path.join(run_dir, LOGS, "nccl*.log"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            found |= gid_indices_from_log(f.read(max_bytes).splitlines())
    return found


def roce_fact(run: Run) -> str:
    fab = run.info.get("fabric") or {}
    env = fab.get("environment") or {}
    roce = fab.get("roce") or {}
    is_roce = bool(roce) or "roce" in str(fab.get("transport") or "")
    if not is_roce:
        return "n/a (no RoCE port recorded)"
    gids = _log_gids(run.path) if os.path.isdir(run.path) else set()
    if gids:
        index, where = ", ".join(map(str, sorted(gids))), "NCCL's log"
    elif env.get("NCCL_IB_GID_INDEX") not in (None, ""):
        gids, index, where = {int(env["NCCL_IB_GID_INDEX"])}, env["NCCL_IB_GID_INDEX"], "NCCL_IB_GID_INDEX"
    else:
        index, where = None, "not in NCCL's log (NET subsystem) nor NCCL_IB_GID_INDEX"
    types = {g.get("type") for port in roce.values() for g in port.get("gids") or [] if g.get("index") in gids}
    types.discard(None)
    gid = (f"GID {index} ({where}; " + (" / ".join(sorted(types)) if types else
                                        "type unknown: no GID table recorded for it") + ")") if index is not None \
        else f"GID unknown ({where})"
    if env.get("NCCL_IB_TC") not in (None, ""):
        tc = f"traffic class {env['NCCL_IB_TC']} (NCCL_IB_TC)"
    else:
        port_tc = {p.get("traffic_class") for p in roce.values()} - {None}
        tc = (f"traffic class {', '.join(map(str, sorted(port_tc)))} (the port's global setting, sysfs; NCCL_IB_TC "
              "unset)" if port_tc else "traffic class 0 (NCCL_IB_TC unset: NCCL's default)")
    return f"{gid}; {tc}"
