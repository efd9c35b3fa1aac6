"""What every engine translation shares: the world, the model's identity, refusals, the output.

A translation is a list of assignments `path = value` on the engine's own configuration object (a
NeMo-Run recipe, a Megatron-Bridge ConfigContainer, an AutoModel YAML tree). The printed job and the
tests read the same list, so what is tested is what runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainer.config import Recipe, RecipeError
from trainer.layout import Layout

ENGINES = ("nemo2", "megatron-bridge", "automodel")

DOLLY_HUB = "databricks/databricks-dolly-15k"
DOLLY_SPLIT = [0.8, 0.15, 0.05]  # NeMo's DollyDataModule splits train/validation/test this way


@dataclass(frozen=True)
class Model:
    key: str  # our name: llama2_70b, llama3_70b, ...
    hf_id: str  # the Hugging Face id the engines' recipes name
    nemo_config: str  # nemo.collections.llm config class
    nemo_recipe: str | None  # nemo.collections.llm.<module>.finetune_recipe, where NeMo has one
    bridge_recipe: str | None  # megatron.bridge.recipes.llama.<function>


# Checkpoint directory names as Meta and Hugging Face publish them; the NeMo model is chosen by name
# because a CI machine has no 70B config.json to read.
MODELS = (
    (r"llama-?2-?7b", Model("llama2_7b", "meta-llama/Llama-2-7b-hf", "Llama2Config7B", "llama2_7b", None)),
    (r"llama-?2-?70b", Model("llama2_70b", "meta-llama/Llama-2-70b-hf", "Llama2Config70B", None, None)),
    (r"llama-?3\.?1-?70b", Model("llama31_70b", "meta-llama/Llama-3.1-70B", "Llama31Config70B", "llama31_70b",
                                 "llama31_70b_peft_config")),
    (r"llama-?3\.?1-?8b", Model("llama31_8b", "meta-llama/Llama-3.1-8B", "Llama31Config8B", "llama31_8b",
                                "llama31_8b_peft_config")),
    (r"llama-?3-?70b", Model("llama3_70b", "meta-llama/Meta-Llama-3-70B", "Llama3Config70B", "llama3_70b",
                             "llama3_70b_peft_config")),
    (r"llama-?3-?8b", Model("llama3_8b", "meta-llama/Meta-Llama-3-8B", "Llama3Config8B", "llama3_8b",
                            "llama3_8b_peft_config")),
)


@dataclass
class World:
    nodes: int
    gpus_per_node: int

    @property
    def size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class Translation:
    engine: str
    recipe: Recipe
    layout: Layout
    world: World
    model: Model | None
    assignments: list[tuple[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the engine does its own way (not refused)
    base: str = ""  # the engine's own recipe call the assignments start from
    text: str = ""  # the engine's configuration as printed: a Python job or a YAML file

    def set(self, path: str, value: Any) -> None:
        self.assignments.append((path, value))

    def values(self) -> dict[str, Any]:
        """path -> value (the last assignment wins), JSON-friendly: what the tests compare."""
        return {path: value for path, value in self.assignments if not isinstance(value, Code)}

    def harness(self) -> dict:
        """The recipe and layout this job translates, recorded in run.json as a native run records them."""
        recipe = self.recipe.to_dict()
        recipe.pop("recipe_path", None)
        return {"recipe": recipe, "layout": self.layout.to_dict(), "engine": self.engine}


class Code(str):
    """A value that is Python source in the printed job (a constructor call), not a literal."""


def identify_model(recipe: Recipe, problems: list[str]) -> Model | None:
    if recipe.model.path is None:
        problems.append("model.config: a random-initialised model (model.config) cannot be handed to the NeMo "
                        "engines; allowed: model.path naming a Llama checkpoint directory")
        return None
    name = recipe.model.path.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, model in MODELS:
        if re.search(pattern, name):
            return model
    allowed = ", ".join(m.hf_id.split("/")[1] for _, m in MODELS)
    problems.append(f"model.path: cannot tell which NeMo model {recipe.model.path!r} is from its name; "
                    f"allowed: a checkpoint directory named like {allowed}")
    return None


def refuse_unless(problems: list[str], ok: bool, key: str, got: Any, allowed: str) -> None:
    if not ok:
        problems.append(f"{key}: got {got!r}; {allowed}")


def check_common(recipe: Recipe, layout: Layout, engine: str, problems: list[str]) -> None:
    """Keys no NeMo engine expresses the way our trainer means them."""
    refuse_unless(problems, recipe.workload == "llm_lora", "workload", recipe.workload,
                  f"{engine} translates LoRA fine-tuning only; allowed: llm_lora")
    if recipe.workload != "llm_lora":  # another workload's model and data (a sweep's none) are no translation's
        fail(problems)
    refuse_unless(problems, recipe.model.family == "llama", "model.family", recipe.model.family, "allowed: llama")
    refuse_unless(problems, recipe.model.tokenizer is None, "model.tokenizer", recipe.model.tokenizer,
                  f"{engine} uses the checkpoint's own tokenizer; allowed: null")
    refuse_unless(problems, recipe.model.attn_implementation == "sdpa", "model.attn_implementation",
                  recipe.model.attn_implementation, f"{engine} picks its own attention kernels; allowed: sdpa (the default)")
    refuse_unless(problems, recipe.train.optimizer == "adamw", "train.optimizer", recipe.train.optimizer,
                  "allowed: adamw")
    refuse_unless(problems, recipe.train.schedule == "cosine", "train.schedule", recipe.train.schedule,
                  "allowed: cosine (warm-up then cosine decay to train.min_lr)")
    refuse_unless(problems, recipe.train.target_eval_loss is None, "train.target_eval_loss",
                  recipe.train.target_eval_loss, f"{engine} has no stop-at-target; allowed: null")
    refuse_unless(problems, recipe.train.target_eval_accuracy is None, "train.target_eval_accuracy",
                  recipe.train.target_eval_accuracy, "allowed: null")
    refuse_unless(problems, recipe.train.resume in ("auto", "never"), "train.resume", recipe.train.resume,
                  f"{engine} resumes from its own checkpoint directory; allowed: auto, never")
    refuse_unless(problems, recipe.data.max_train_samples is None, "data.max_train_samples",
                  recipe.data.max_train_samples, "allowed: null")
    refuse_unless(problems, recipe.data.max_eval_samples is None, "data.max_eval_samples",
                  recipe.data.max_eval_samples, "allowed: null")
    refuse_unless(problems, recipe.distributed.backend in ("auto", "nccl"), "distributed.backend",
                  recipe.distributed.backend, f"{engine} trains on GPUs over NCCL; allowed: auto, nccl")
    refuse_unless(problems, recipe.parallel.pp_schedule != "gpipe", "parallel.pp_schedule",
                  recipe.parallel.pp_schedule, "allowed: 1f1b, interleaved_1f1b")
    if recipe.train.eval_every_samples is not None and recipe.train.eval_every_samples % layout.global_batch_size:
        problems.append(f"train.eval_every_samples: {recipe.train.eval_every_samples} is not a whole number of "
                        f"steps of {layout.global_batch_size} samples; {engine} evaluates every N steps; allowed: "
                        f"multiples of train.global_batch_size, or null")


def check_dolly(recipe: Recipe, engine: str, problems: list[str]) -> None:
    refuse_unless(problems, recipe.data.format == "dolly", "data.format", recipe.data.format,
                  f"{engine} is given Dolly-15k here; allowed: dolly")
    refuse_unless(problems, recipe.data.dataset == DOLLY_HUB, "data.dataset", recipe.data.dataset,
                  f"{engine}'s Dolly data reads the hub set itself; allowed: {DOLLY_HUB}")
    refuse_unless(problems, recipe.data.eval_dataset is None, "data.eval_dataset", recipe.data.eval_dataset,
                  "allowed: null (the validation split)")


def steps_of(samples: int | None, gbs: int) -> int | None:
    return None if samples is None else samples // gbs


def dump(value: Any) -> str:
    """A Python literal for the printed job."""
    if isinstance(value, Code):
        return str(value)
    return repr(value)  # None, bool, numbers, strings, and lists/dicts of them


def fail(problems: list[str]) -> None:
    if problems:
        raise RecipeError(problems)
