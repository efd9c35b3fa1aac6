"""A worker of the rendezvous tests: joins the process group its torchrun agent formed, checks the world
with one all-reduce, records (rank, world) in a file of its own, then idles until its agent stops it."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
ones = torch.ones(1)
dist.all_reduce(ones)
name = f"{time.time_ns()}_rank{dist.get_rank()}_of{int(ones)}"
with open(os.path.join(os.environ["OUT"], name), "w", encoding="utf-8") as f:
    f.write(os.environ.get("TORCHELASTIC_RESTART_COUNT", ""))
while True:
    time.sleep(0.2)
