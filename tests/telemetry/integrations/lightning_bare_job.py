"""2 gloo ranks under torchrun: a Lightning DDP job driving a bare Telemetry through
telemetry.integrations.adapters.lightning_callback; each rank writes OUT/rankN.json with the callback's records
and the model's parameter bytes."""
import json
import os
import sys

import torch

from trainer.compat import ensure_torchvision_importable

ensure_torchvision_importable()  # CUDA torchvision next to CPU torch (trainer/compat.py)

import lightning.pytorch as pl  # noqa: E402

from telemetry.capture.session import Telemetry, TelemetrySettings  # noqa: E402
from telemetry.integrations.adapters import lightning_callback  # noqa: E402
from tests.telemetry.integrations.lightning_tiny import Tiny, data  # noqa: E402

out = sys.argv[1]
torch.manual_seed(0)
model = Tiny()
callback = lightning_callback(Telemetry(TelemetrySettings()))
trainer = pl.Trainer(max_steps=3, accelerator="cpu", devices=2, strategy="ddp", logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[callback], default_root_dir=out)
trainer.fit(model, torch.utils.data.DataLoader(data(48), batch_size=4))
with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w", encoding="utf-8") as f:
    json.dump({"rows": callback.clock.records, "param_bytes": sum(p.numel() * 4 for p in model.parameters())}, f,
              default=str)
