"""Run by tests/telemetry/capture/test_group_timeout.py under torchrun (2 gloo ranks, job timeout 10 s): a
group made with torch's default, given the job's timeout after it was used once; rank 1 then stays silent and
rank 0 writes how long its all_reduce on that group waited."""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from telemetry.capture.group_timeout import carry_job_timeout


def main(out: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    group = dist.new_group(backend="gloo")
    t = torch.ones(4)
    dist.all_reduce(t, group=group)  # connected, under torch's 30 minutes
    carry_job_timeout(group)
    done = os.path.join(out, "waited.json")
    if dist.get_rank() == 0:
        began = time.monotonic()
        try:
            dist.all_reduce(t, group=group)
            error = None
        except RuntimeError as exc:
            error = str(exc)[:300]
        with open(done + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"waited_s": time.monotonic() - began, "error": error}, f)
        os.replace(done + ".tmp", done)
    else:  # silent until rank 0 has its answer
        while not os.path.exists(done):
            time.sleep(0.2)
    os._exit(0)  # no tear-down through a group that lost a peer


if __name__ == "__main__":
    main(sys.argv[1])
