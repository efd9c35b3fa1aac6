"""telemetry.integrations.automodel_recipe in-process. nemo_automodel is not installed here (its recipe is
CUDA-only): the import refuses naming it; with a stand-in module under AutoModel's name the class reads
the run directory and the expectation from the YAML's `fabric_harness` section, else the environment."""
from __future__ import annotations

import importlib
import json
import sys
import types

import pytest

import telemetry.capture.early
from telemetry.integrations.attach import EXPECT_ENV, RUN_DIR_ENV

MODULE = "telemetry.integrations.automodel_recipe"
TRAIN_FT = "nemo_automodel.recipes.llm.train_ft"


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield
    sys.modules.pop(MODULE, None)
    telemetry.capture.early.reset()  # importing the module installs the process tracer


class Recipe:
    """AutoModel's TrainFinetuneRecipeForNextTokenPrediction as far as the subclass uses it."""

    def __init__(self, cfg):
        self.cfg, self.step_scheduler = cfg, types.SimpleNamespace(step=0)

    def setup(self):
        pass

    def _run_train_optim_step(self, batches):
        self.step_scheduler.step += 1
        return types.SimpleNamespace(metrics={"loss": 2.0, "lr": 0.5, "grad_norm": 1.0})

    def run_train_validation_loop(self):
        self._run_train_optim_step([])


@pytest.fixture
def stand_in(monkeypatch):
    """nemo_automodel's package path with the recipe class in its train_ft module."""
    names = ["nemo_automodel", "nemo_automodel.recipes", "nemo_automodel.recipes.llm", TRAIN_FT]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[TRAIN_FT].TrainFinetuneRecipeForNextTokenPrediction = Recipe


def test_without_automodel_the_import_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "nemo_automodel", None)  # as where it is not installed
    with pytest.raises(ImportError, match="nemo_automodel"):
        importlib.import_module(MODULE)
    assert telemetry.capture.early.process_tracer() is not None  # the tracer went on first


def test_run_directory_and_expectation_from_the_yaml_section(stand_in, tmp_path):
    mod = importlib.import_module(MODULE)
    run_dir = tmp_path / "from_yaml"
    recipe = mod.TrainFinetuneRecipeWithTelemetry({"fabric_harness": {"run_dir": str(run_dir), "expect": "tcp"}})
    assert isinstance(recipe, Recipe) and type(recipe).__name__ == "RecipeWithTelemetry"
    recipe.setup()
    recipe.run_train_validation_loop()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["engine"] == "nemo-automodel"
    assert info["fabric"]["expectation"]["expected"] == "tcp"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in rows] == [(1, 2.0, 0.5, 1.0)]


def test_run_directory_from_the_environment(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "from_env"))
    monkeypatch.delenv(EXPECT_ENV, raising=False)
    mod = importlib.import_module(MODULE)
    recipe = mod.TrainFinetuneRecipeWithTelemetry({})
    recipe.setup()
    recipe.run_train_validation_loop()
    info = json.loads((tmp_path / "from_env" / "run.json").read_text())
    assert info["status"] == "completed" and info["fabric"]["expectation"]["expected"] == "any"


def test_a_bad_expectation_names_the_allowed_ones(stand_in, tmp_path):
    mod = importlib.import_module(MODULE)
    recipe = mod.TrainFinetuneRecipeWithTelemetry({"fabric_harness": {"run_dir": str(tmp_path / "r"), "expect": "ib"}})
    with pytest.raises(ValueError, match=r"^expect: got 'ib'; allowed: "):
        recipe.setup()
