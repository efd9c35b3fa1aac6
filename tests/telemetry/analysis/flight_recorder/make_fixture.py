"""Regenerates the recorded flight-recorder dumps here (torch's own pickle dump, gloo on CPU, 2 ranks):

    torchrun --standalone --nproc-per-node 2 tests/telemetry/analysis/flight_recorder/make_fixture.py

Both ranks run three all_reduces; rank 0 then enters a fourth that rank 1 never enters, and each rank
writes torch's dump (`_dump_fr_trace`, the pickle NCCL's watchdog writes on a timeout) as
nccl_trace_rankN, the name TORCH_NCCL_DEBUG_INFO_TEMP_FILE gives it in a run directory.
"""
import os

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1024)
for _ in range(3):
    dist.all_reduce(t)
if rank == 0:
    dist.all_reduce(t, async_op=True)  # never completes: rank 1 does not come
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, f"nccl_trace_rank{rank}"), "wb") as f:
    f.write(_dump_fr_trace())
os._exit(0)  # rank 0's pending all_reduce would block a clean shutdown
