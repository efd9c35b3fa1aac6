"""TensorBoard event file of the per-step scalars (exports.step_scalars names), one per run."""
from __future__ import annotations

import os

from telemetry.analysis.exports.scalars import step_scalars


def write(run, out: str) -> str:
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    logdir = os.path.join(out, "tensorboard")
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
    return logdir
