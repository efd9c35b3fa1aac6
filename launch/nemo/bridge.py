"""Our recipe as a Megatron-Bridge fine-tune (megatron-bridge 0.6.x, `ConfigContainer`).

The base is Bridge's own PEFT recipe for the model (`llama3_70b_peft_config()`: it reads the model's
Hugging Face config.json to build the Megatron provider); every field our recipe decides is then set on
the container. Bridge has no Dolly source of its own: the data is an SFT directory (training.jsonl,
validation.jsonl, test.jsonl with input/output) under the run's output directory. Our telemetry goes in
through Bridge's callback API (telemetry.integrations.engines.BridgeTelemetry).

Megatron-Bridge needs Python 3.12 and TransformerEngine, so it is not installed in the project's test
environment: the translation is checked against the dataclass fields of the released wheel's source
(tests/launch/test_nemo.py), not against live objects.
"""
from __future__ import annotations

from trainer.config import Recipe
from trainer.layout import Layout

from .common import (DOLLY_SPLIT, Translation, World, dump, fail, steps_of)
from .nemo2 import (megatron_lora_checks, set_megatron_adam, set_megatron_lora, set_megatron_parallel,
                    set_megatron_recompute)


def translate(recipe: Recipe, layout: Layout, world: World, run_dir: str) -> Translation:
    problems: list[str] = []
    model, targets = megatron_lora_checks(recipe, layout, "Megatron-Bridge", problems, {
        "data.split": f"allowed: {DOLLY_SPLIT} (the split the SFT directory is written with)",
        "model.dtype": "Bridge's PEFT recipes train in bf16 mixed precision; allowed: bf16, auto",
        "parallel.data_parallel": "Bridge's LoRA replicates the frozen shard over data parallelism; allowed: "
                                  "replicate, ddp"})
    if model is not None and model.bridge_recipe is None:
        problems.append(f"model.path: Megatron-Bridge 0.6 has no PEFT recipe for {model.hf_id}; allowed: "
                        "Llama-3/3.1 8B and 70B checkpoints")
    fail(problems)

    t = Translation("megatron-bridge", recipe, layout, world, model)
    train, data = recipe.train, recipe.data
    t.base = f"{model.bridge_recipe}(peft_scheme='lora')"
    set_megatron_parallel(t, "model", recipe)
    t.set("model.seq_length", data.seq_len)
    set_megatron_recompute(t, "model", recipe)
    t.set("train.train_iters", recipe.max_steps)
    t.set("train.global_batch_size", train.global_batch_size)
    t.set("train.micro_batch_size", train.micro_batch_size)
    every = steps_of(train.eval_every_samples, layout.global_batch_size)
    t.set("validation.eval_interval", every)
    set_megatron_lora(t, recipe, targets)
    t.set("dataset.seq_length", data.seq_len)
    t.set("dataset.dataset_root", f"{recipe.output_dir}/dolly_sft")
    t.set("dataset.seed", data.split_seed)
    t.set("dataset.enable_offline_packing", data.packing)
    if data.packing:
        t.set("dataset.offline_packing_specs.packed_sequence_size", data.seq_len)
    set_megatron_adam(t, "optimizer", recipe)
    t.set("optimizer.min_lr", train.min_lr)
    t.set("scheduler.lr_decay_style", "cosine")
    t.set("scheduler.lr_warmup_iters", train.warmup_steps)
    t.set("scheduler.lr_warmup_init", 0.0)
    t.set("scheduler.lr_decay_iters", recipe.max_steps)
    t.set("checkpoint.save_interval", train.save_every if train.save_every else recipe.max_steps)
    t.set("checkpoint.save", f"{recipe.output_dir}/bridge/checkpoints")
    t.set("checkpoint.pretrained_checkpoint", recipe.model.path)
    t.set("logger.log_interval", train.log_every)
    t.set("rng.seed", recipe.seed)
    t.notes += [
        f"data: write Dolly-15k as {recipe.output_dir}/dolly_sft/{{training,validation,test}}.jsonl "
        f"(input/output, split {DOLLY_SPLIT} seed {data.split_seed}) before running",
        f"weights: Bridge loads a Megatron checkpoint; convert {recipe.model.path} with AutoBridge first",
        "not run here: Megatron-Bridge needs Python 3.12, TransformerEngine and CUDA",
    ]
    t.text = render(t, run_dir)
    return t


def render(t: Translation, run_dir: str) -> str:
    r = t.recipe
    lines = [
        f'"""Megatron-Bridge fine-tune of recipe {r.name!r}, translated by `python -m launch.nemo '
        '--engine megatron-bridge`.',
        "",
        f"    torchrun --nnodes {t.world.nodes} --nproc-per-node {t.world.gpus_per_node} ... THIS_FILE",
        f"Our run directory ({run_dir}): python -m telemetry report {run_dir}",
        *(f"Note: {note}" for note in t.notes),
        '"""',
        "import telemetry.capture.early",
        "",
        "telemetry.capture.early.install()  # before megatron: megatron-core binds its collectives at import",
        "",
        "from megatron.bridge.recipes.llama import *  # noqa: E402,F401,F403",
        "from megatron.bridge.training.finetune import finetune  # noqa: E402",
        "from megatron.bridge.training.gpt_step import forward_step  # noqa: E402",
        "",
        "from telemetry.integrations.engines import BridgeTelemetry  # noqa: E402",
        "",
        f"HARNESS = {t.harness()!r}",
        "",
        "",
        "def build():",
        f"    cfg = {t.base}",
    ]
    lines += [f"    cfg.{path} = {dump(value)}" for path, value in t.assignments]
    lines += [
        "    return cfg",
        "",
        "",
        'if __name__ == "__main__":',
        f"    finetune(build(), forward_step, callbacks=[BridgeTelemetry({dump(run_dir)}, name={dump(r.name)}, "
        f"expect={dump(r.fabric.expect)},",
        "                                                             recipe=HARNESS['recipe'], layout=HARNESS['layout'])])",
    ]
    return "\n".join(lines) + "\n"
