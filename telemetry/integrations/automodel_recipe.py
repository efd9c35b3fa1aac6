"""The AutoModel recipe class our translated YAML names (`recipe:` in launch.nemo's AutoModel output):
AutoModel's TrainFinetuneRecipeForNextTokenPrediction with our telemetry around each optimizer step.
The run directory comes from the YAML's `fabric_harness.run_dir` (or FABRIC_HARNESS_RUN_DIR)."""
from __future__ import annotations

import os

from telemetry.capture import early

early.install()  # before AutoModel's modules bind anything (a no-op when attach already did it)

from nemo_automodel.recipes.llm.train_ft import TrainFinetuneRecipeForNextTokenPrediction  # noqa: E402

from telemetry.integrations.attach import EXPECT_ENV, RUN_DIR_ENV  # noqa: E402
from telemetry.integrations.engines import automodel_recipe  # noqa: E402


class TrainFinetuneRecipeWithTelemetry(TrainFinetuneRecipeForNextTokenPrediction):
    def __new__(cls, cfg, *args, **kwargs):
        section = cfg.get("fabric_harness", None) or {}
        get = section.get if hasattr(section, "get") else (lambda k, d=None: getattr(section, k, d))
        run_dir = get("run_dir", None) or os.environ.get(RUN_DIR_ENV) or "runs/automodel"
        expect = get("expect", None) or os.environ.get(EXPECT_ENV, "any")
        sub = automodel_recipe(TrainFinetuneRecipeForNextTokenPrediction, run_dir, expect=expect)
        return sub(cfg, *args, **kwargs)
