"""Our recipe as a NeMo AutoModel fine-tune (nemo-automodel 0.7, the YAML its `automodel` CLI reads).

AutoModel trains Hugging Face models as they are, so our LoRA target names pass through unchanged.
Our data-parallel layouts map onto its FSDP2 strategy: fsdp shards the frozen base over dp
(dp_size = dp), replicate keeps a whole tensor-parallel shard per dp rank (dp_replicate_size = dp, no
sharding), ddp is its ddp strategy. AutoModel has no callbacks: the recipe class is our subclass of
its TrainFinetuneRecipeForNextTokenPrediction (telemetry/integrations/automodel_recipe.py), which brackets each
optimizer step. The Dolly rows go through its ColumnMappedTextInstructionDataset with our template's
columns (context, instruction -> answer).
"""
from __future__ import annotations

import yaml

from trainer.config import Recipe
from trainer.layout import Layout

from .common import DOLLY_HUB, DOLLY_SPLIT, Translation, World, check_common, check_dolly, fail, refuse_unless, steps_of

DTYPES = {"bf16": "bfloat16", "fp32": "float32", "auto": "bfloat16"}


def translate(recipe: Recipe, layout: Layout, world: World, run_dir: str) -> Translation:
    problems: list[str] = []
    check_common(recipe, layout, "AutoModel", problems)
    check_dolly(recipe, "AutoModel", problems)
    refuse_unless(problems, list(recipe.data.split) == DOLLY_SPLIT, "data.split", recipe.data.split,
                  f"AutoModel reads Dolly's hub train split whole and no other split can be asked of it; "
                  f"allowed: {DOLLY_SPLIT} (the default, recorded in run.json only)")
    refuse_unless(problems, not recipe.data.packing or recipe.parallel.tp == 1, "data.packing", recipe.data.packing,
                  "AutoModel packs sequences only without tensor parallelism; allowed: false with tp > 1")
    refuse_unless(problems, recipe.parallel.pp == 1, "parallel.pp", recipe.parallel.pp,
                  "AutoModel's pipeline splits Hugging Face models by its own rules; allowed: 1")
    refuse_unless(problems, not (recipe.parallel.data_parallel == "ddp" and recipe.parallel.tp > 1),
                  "parallel.data_parallel", recipe.parallel.data_parallel,
                  "AutoModel's ddp strategy has no tensor parallelism; allowed: replicate, fsdp")
    if recipe.model.path is None:
        problems.append("model.config: AutoModel loads a pretrained checkpoint; allowed: model.path")
    fail(problems)

    t = Translation("automodel", recipe, layout, world, None)
    par, train, data = recipe.parallel, recipe.train, recipe.data
    t.set("recipe", "telemetry.integrations.automodel_recipe.TrainFinetuneRecipeWithTelemetry")
    t.set("step_scheduler.global_batch_size", train.global_batch_size)
    t.set("step_scheduler.local_batch_size", train.micro_batch_size)
    t.set("step_scheduler.max_steps", recipe.max_steps)
    t.set("step_scheduler.num_epochs", None)  # max_steps decides, as in our trainer
    t.set("step_scheduler.ckpt_every_steps", train.save_every if train.save_every else recipe.max_steps)
    t.set("step_scheduler.val_every_steps", steps_of(train.eval_every_samples, layout.global_batch_size))
    t.set("dist_env.backend", "nccl")
    t.set("dist_env.timeout_minutes", max(1, recipe.distributed.timeout_s // 60))
    t.set("rng._target_", "nemo_automodel.components.training.rng.StatefulRNG")
    t.set("rng.seed", recipe.seed)
    t.set("rng.ranked", True)
    t.set("model._target_", "nemo_automodel.NeMoAutoModelForCausalLM.from_pretrained")
    t.set("model.pretrained_model_name_or_path", recipe.model.path)
    t.set("model.torch_dtype", DTYPES[recipe.model.dtype])
    t.set("checkpoint.enabled", True)
    t.set("checkpoint.checkpoint_dir", f"{recipe.output_dir}/automodel/checkpoints")
    t.set("peft._target_", "nemo_automodel.components._peft.lora.PeftConfig")
    t.set("peft.target_modules", list(recipe.lora.target_modules))
    t.set("peft.dim", recipe.lora.r)
    t.set("peft.alpha", int(recipe.lora.alpha) if float(recipe.lora.alpha).is_integer() else recipe.lora.alpha)
    t.set("peft.dropout", recipe.lora.dropout)
    t.set("peft.dropout_position", "pre")  # peft applies lora_dropout to the adapter's input
    t.set("distributed.strategy", "ddp" if par.data_parallel == "ddp" else "fsdp2")
    t.set("distributed.tp_size", par.tp)
    t.set("distributed.cp_size", 1)
    t.set("distributed.pp_size", 1)
    t.set("distributed.dp_size", layout.dp)
    t.set("distributed.dp_replicate_size", layout.dp if par.data_parallel == "replicate" else None)
    t.set("distributed.sequence_parallel", par.sequence_parallel)
    t.set("distributed.activation_checkpointing", recipe.model.activation_checkpointing)
    t.set("dataset._target_", "nemo_automodel.components.datasets.llm.column_mapped_text_instruction_dataset."
          "ColumnMappedTextInstructionDataset")
    t.set("dataset.path_or_dataset_id", DOLLY_HUB)
    t.set("dataset.split", "train")
    t.set("dataset.column_mapping", {"context": "context", "question": "instruction", "answer": "response"})
    t.set("dataset.answer_only_loss_mask", True)
    t.set("dataset.seq_length", data.seq_len)
    t.set("packed_sequence.packed_sequence_size", data.seq_len if data.packing else 0)
    t.set("optimizer._target_", "torch.optim.AdamW")
    t.set("optimizer.lr", train.lr)
    t.set("optimizer.betas", list(train.betas))
    t.set("optimizer.eps", train.eps)
    t.set("optimizer.weight_decay", train.weight_decay)
    t.set("lr_scheduler.lr_decay_style", "cosine")
    t.set("lr_scheduler.lr_warmup_steps", train.warmup_steps)
    t.set("lr_scheduler.init_lr", 0.0)  # warm-up from 0 (its default starts at lr / 10)
    t.set("lr_scheduler.min_lr", train.min_lr)  # its default is lr / 100
    t.set("lr_scheduler.lr_decay_steps", recipe.max_steps)
    t.set("clip_grad_norm.max_norm", train.grad_clip)
    t.set("fabric_harness.run_dir", run_dir)
    t.set("fabric_harness.expect", recipe.fabric.expect)
    t.notes += ["data: the hub's train split whole (AutoModel has no 80/15/5 split of Dolly); the validation "
                "set is not split off", "not run here: AutoModel's recipe needs CUDA"]
    t.text = render(t)
    return t


def tree(t: Translation) -> dict:
    """The assignments as AutoModel's nested YAML mapping."""
    out: dict = {}
    for path, value in t.assignments:
        *parents, leaf = path.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def render(t: Translation) -> str:
    r = t.recipe
    head = [f"# NeMo AutoModel fine-tune of recipe {r.name!r}, translated by `python -m launch.nemo --engine automodel`.",
            f"#   automodel THIS_FILE --nproc-per-node {t.world.gpus_per_node}   (fabric-harness installed: the recipe "
            "class is ours)", *(f"# Note: {n}" for n in t.notes)]
    return "\n".join(head) + "\n" + yaml.safe_dump(tree(t), sort_keys=False)
