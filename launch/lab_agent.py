"""A fabric lab node's torchrun agent (`python -m launch.lab_agent TORCHRUN_ARGS`): torch.distributed.run itself,
set first to get SIGTERM when the lab process that started it dies (launch/lab_leftovers.py stop_with_parent).

`kill -9` of a lab skips its teardown; its agents then ran on, and their ranks with them: ranks 1 and 2 of a 3-node
lab killed at step 3 ran 80 s more, writing into the run directory. On SIGTERM torchrun stops its workers (they
record the run as interrupted) and exits, so a killed lab leaves empty namespaces, which the next lab removes.
"""
from __future__ import annotations

import runpy
import sys

from launch.lab_leftovers import stop_with_parent

if __name__ == "__main__":
    stop_with_parent()
    sys.argv[0] = "torch.distributed.run"
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
