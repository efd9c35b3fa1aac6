"""`fabric.force_network: true`: keep NCCL off NVLink, PCIe peer access, shared memory and NVLS, so that
every byte between ranks crosses the network (a fabric evaluation on one node, or one that must not let
intra-node paths flatter the numbers), and prove afterwards from NCCL's log that every channel was NET.

The environment must be set before the process group starts (NCCL reads it when a communicator is made);
the check reads the connection lines `Channel 00/0 : 0[0] -> 1[1] via NET/IB/0` that
telemetry/capture/nccl_log.py counts per kind.
"""
from __future__ import annotations

import os

# NCCL_P2P_DISABLE: no NVLink/PCIe peer-to-peer; NCCL_SHM_DISABLE: no host shared memory between local ranks;
# NCCL_NVLS_ENABLE=0: no NVLink SHARP (NVSwitch multicast) channels
FORCE_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
NETWORK_KINDS = ("NET/", "COLLNET/")


def apply(enabled: bool, backend: str, environ=None) -> dict | None:
    """Set FORCE_ENV (the recipe switch wins over values already set, which are recorded). None when off."""
    if not enabled:
        return None
    env = os.environ if environ is None else environ
    if backend != "nccl":
        return {"enabled": True, "applied": False,
                "reason": f"fabric.force_network acts on NCCL only; this run's backend is {backend}"}
    overridden = {k: env[k] for k, v in FORCE_ENV.items() if k in env and env[k] != v}
    env.update(FORCE_ENV)
    return {"enabled": True, "applied": True, "set": dict(FORCE_ENV), "overridden": overridden}


def check(nccl: dict | None) -> dict:
    """Whether every channel in the parsed NCCL log went over the network: all_net true/false, or null with
    the reason when the log shows no channel."""
    channels = (nccl or {}).get("channels")
    if not channels:
        reason = ((nccl or {}).get("unknown") or {}).get("channels") or "no NCCL log with connection lines was read"
        return {"all_net": None, "reason": reason, "channels": channels}
    local = {k: v for k, v in channels.items() if not k.startswith(NETWORK_KINDS)}
    out = {"all_net": not local, "channels": channels}
    if local:
        out["not_net"] = local
        out["warning"] = ("FORCE_NETWORK VIOLATED: fabric.force_network is on but NCCL connected channels via "
                          + ", ".join(f"{k} ({v})" for k, v in sorted(local.items()))
                          + "; those bytes did not cross the network (check that NCCL_P2P_DISABLE, NCCL_SHM_DISABLE "
                          "and NCCL_NVLS_ENABLE reached every rank)")
    return out
