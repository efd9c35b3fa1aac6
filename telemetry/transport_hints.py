"""What to check when NCCL used TCP sockets where RDMA was expected: one wording for the run's own fabric check
(telemetry/capture/fabric.py) and for `telemetry nccl-log --expect` (telemetry/analysis/nccl_log_view.py)."""
from __future__ import annotations

TCP_FALLBACK = (" - NCCL fell back to TCP sockets (check NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET "
                "and the RDMA devices)")
