"""TensorBoard event file of the per-step scalars (exports.step_scalars names), one per run."""
from __future__ import annotations

import os
import threading

from telemetry.analysis.exports.scalars import step_scalars


def write(run, out: str) -> str:
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    logdir = os.path.join(out, "tensorboard")
    # the writer's own thread meets a full disk first and prints its traceback; the same OSError reaches this
    # thread at the next write or at close, where the command says it in one line: the thread's copy is quiet
    previous = threading.excepthook
    threading.excepthook = lambda args: None if issubclass(args.exc_type, OSError) else previous(args)
    try:
        writer = SummaryWriter(log_dir=logdir)
        try:
            for record in run.metrics:
                step = record.get("step")
                if step is None:
                    continue
                wall = record.get("time")
                for name, value in step_scalars(record).items():
                    writer.add_scalar(name, value, global_step=step, walltime=wall)
        finally:
            writer.close()
    finally:
        threading.excepthook = previous
    return logdir
