"""A Weights & Biases run in offline mode only: files on disk, never the network (`wandb sync` uploads
them later if the user wants). Project: the recipe's name; run name: the run directory's name."""
from __future__ import annotations

import os

from telemetry.analysis.exports.scalars import step_scalars


def write(run, out: str) -> str:
    os.environ["WANDB_MODE"] = "offline"  # also for anything wandb starts on its own
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    root = os.path.join(out, "wandb")
    os.makedirs(root, exist_ok=True)
    name = os.path.basename(os.path.normpath(run.path))
    w = wandb.init(mode="offline", dir=root, project=run.name, name=name, config=run.info.get("recipe") or {},
                   settings=wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True))
    run_dir = os.path.dirname(w.dir)  # offline-run-<time>-<id>/, holding run-<id>.wandb
    try:
        for record in run.metrics:
            if record.get("step") is not None:
                w.log(step_scalars(record), step=int(record["step"]))
        w.summary["status"] = run.info.get("status")
    finally:
        w.finish()
    return run_dir
