"""One task of a fake `srun --ntasks N python -m launch.nemo ... --run` (the test sets SLURM_PROCID etc.),
or one worker of a fake torchrun (RANK etc.).

Stand-ins, named: CUDA is reported present, and the engine's child process is replaced by what Python does
first with a script (read it whole and compile it); the task records the sha256 of the bytes it would run.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import torch

from launch.nemo import command as cli
from telemetry.integrations import attach


def fake_child(command: list[str], env: dict) -> int:
    job = command[-1]
    with open(job, "rb") as f:
        source = f.read()
    compile(source, job, "exec")  # a truncated or half-written job fails here
    out = os.path.join(os.environ["TASK_OUT"], f"task{os.environ.get('SLURM_PROCID') or os.environ['RANK']}.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"command": command, "sha256": hashlib.sha256(source).hexdigest()}, f)
    return 0


if __name__ == "__main__":
    torch.cuda.is_available = lambda: True
    attach.run_job = fake_child  # --run starts the job through attach's run_job (imported at call time)
    sys.exit(cli.main(sys.argv[1:]))
