"""An unmodified Lightning job (tests only): imports a 'megatron' that binds all_gather at import, as a
NeMo script does, then trains a tiny model with DDP on CPU. Run under torchrun.

    lightning_job.py RUN_DIR STEPS [--explicit-callback]

--explicit-callback builds telemetry.integrations.lightning.TelemetryCallback itself after the import (the wrong
order unless the tracer was installed first); without it the callback comes from Lightning's entry point.
"""
import sys

import torch

from trainer.compat import ensure_torchvision_importable

ensure_torchvision_importable()  # CUDA torchvision next to CPU torch (trainer/compat.py)

import megatron.core  # noqa: E402  binds torch.distributed.all_gather_into_tensor now
import lightning.pytorch as pl  # noqa: E402

from tests.telemetry.integrations.lightning_tiny import Tiny, data  # noqa: E402

GATHER_ELEMENTS = 256  # float32 per rank: the all-gather's output is world x 1 KiB


class GatheringTiny(Tiny):
    def training_step(self, batch, batch_idx):
        mine = torch.ones(GATHER_ELEMENTS)
        out = torch.empty(GATHER_ELEMENTS * torch.distributed.get_world_size())
        megatron.core.dist_all_gather_func(out, mine)  # the call only an early tracer sees
        return super().training_step(batch, batch_idx)


def main():
    run_dir, steps = sys.argv[1], int(sys.argv[2])
    callbacks = []
    if "--explicit-callback" in sys.argv:
        from telemetry.integrations.lightning import TelemetryCallback
        callbacks.append(TelemetryCallback(run_dir))
    torch.manual_seed(0)
    dataset = data(64)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=callbacks, default_root_dir=run_dir, use_distributed_sampler=True)
    trainer.fit(GatheringTiny(), torch.utils.data.DataLoader(dataset, batch_size=4))


if __name__ == "__main__":
    main()
