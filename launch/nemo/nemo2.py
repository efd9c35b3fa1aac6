"""Our recipe as a NeMo 2 fine-tune (nemo-toolkit 2.x, `nemo.collections.llm`, NeMo-Run recipes).

The base is NeMo's own recipe: `llm.<model>.finetune_recipe(...)` where NeMo has one for the model
(Llama-3 70B), else the generic `default_finetune_recipe` with the model's config class (Llama-2 70B has
no recipe of its own). Every field our recipe decides is then set on it explicitly, so NeMo's defaults
never decide for us: one that they would get wrong is `optim.lr_scheduler.max_steps`, which NeMo's
recipes leave at CosineAnnealingScheduler's class default (10).
"""
from __future__ import annotations

from trainer.config import Recipe
from trainer.layout import Layout

from .common import (DOLLY_SPLIT, Code, Translation, World, check_common, check_dolly, dump, fail, identify_model,
                     refuse_unless, steps_of)

# Our (Hugging Face) projection names -> Megatron's fused linear layers, which LoRA targets in NeMo.
FUSED = (("linear_qkv", ("q_proj", "k_proj", "v_proj")), ("linear_proj", ("o_proj",)),
         ("linear_fc1", ("gate_proj", "up_proj")), ("linear_fc2", ("down_proj",)))


def megatron_targets(modules: list[str], key: str, problems: list[str]) -> list[str]:
    """HF projection names as Megatron layer names; a fused layer needs all of its projections."""
    wanted, out = set(modules), []
    known = {p for _, parts in FUSED for p in parts}
    unknown = sorted(wanted - known)
    if unknown:
        problems.append(f"{key}: {unknown} have no Megatron counterpart; allowed: {sorted(known)}")
    for fused, parts in FUSED:
        hit = wanted & set(parts)
        if hit and hit != set(parts):
            problems.append(f"{key}: {sorted(hit)} without {sorted(set(parts) - hit)}: Megatron fuses {', '.join(parts)} "
                            f"into {fused}, so LoRA adapts all of them or none; allowed: all of {list(parts)} or none")
        elif hit:
            out.append(fused)
    return out


def megatron_lora_checks(recipe: Recipe, layout: Layout, engine: str, problems: list[str],
                         why: dict[str, str]) -> tuple:
    """What the Megatron engines' (NeMo 2, Megatron-Bridge) LoRA translations refuse alike: Dolly with its
    split, bf16 weights and compute, replicated data parallelism, a known model, fused LoRA targets. `why`:
    each engine's own words for data.split, model.dtype and parallel.data_parallel. Returns (model, targets)."""
    check_common(recipe, layout, engine, problems)
    check_dolly(recipe, engine, problems)
    refuse_unless(problems, list(recipe.data.split) == DOLLY_SPLIT, "data.split", recipe.data.split, why["data.split"])
    refuse_unless(problems, recipe.model.dtype in ("bf16", "auto"), "model.dtype", recipe.model.dtype,
                  why["model.dtype"])
    refuse_unless(problems, recipe.train.precision in ("bf16", "auto"), "train.precision", recipe.train.precision,
                  "allowed: bf16, auto")
    refuse_unless(problems, recipe.parallel.data_parallel in ("replicate", "ddp"), "parallel.data_parallel",
                  recipe.parallel.data_parallel, why["parallel.data_parallel"])
    model = identify_model(recipe, problems)
    return model, megatron_targets(recipe.lora.target_modules, "lora.target_modules", problems)


def set_megatron_parallel(t: Translation, at: str, recipe: Recipe) -> None:
    """Our parallel degrees on Megatron's fields, under `at` (NeMo 2: trainer.strategy; Bridge: model)."""
    par = recipe.parallel
    t.set(f"{at}.tensor_model_parallel_size", par.tp)
    t.set(f"{at}.pipeline_model_parallel_size", par.pp)
    t.set(f"{at}.virtual_pipeline_model_parallel_size",
          par.pp_stages_per_rank if par.pp_schedule == "interleaved_1f1b" else None)
    t.set(f"{at}.sequence_parallel", par.sequence_parallel)
    t.set(f"{at}.context_parallel_size", 1)


def set_megatron_recompute(t: Translation, at: str, recipe: Recipe) -> None:
    """Recompute every layer, as our per-block activation checkpointing does (`at`: the model's config)."""
    if recipe.model.activation_checkpointing:
        t.set(f"{at}.recompute_granularity", "full")
        t.set(f"{at}.recompute_method", "uniform")
        t.set(f"{at}.recompute_num_layers", 1)


def set_megatron_lora(t: Translation, recipe: Recipe, targets: list[str]) -> None:
    """Our LoRA on Megatron's `peft` (the same fields in NeMo 2 and Bridge)."""
    lora = recipe.lora
    t.set("peft.dim", lora.r)
    t.set("peft.alpha", int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha)
    t.set("peft.dropout", lora.dropout)
    t.set("peft.dropout_position", "pre")  # peft applies lora_dropout to the adapter's input
    t.set("peft.target_modules", targets)


def set_megatron_adam(t: Translation, at: str, recipe: Recipe) -> None:
    """Our AdamW on Megatron's optimizer config (`at`: NeMo 2's optim.config, Bridge's optimizer); replicated
    data parallelism, so no optimizer-state sharding."""
    train = recipe.train
    t.set(f"{at}.optimizer", "adam")  # Megatron's adam is AdamW (decoupled weight decay)
    t.set(f"{at}.lr", train.lr)
    t.set(f"{at}.weight_decay", train.weight_decay)
    t.set(f"{at}.adam_beta1", train.betas[0])
    t.set(f"{at}.adam_beta2", train.betas[1])
    t.set(f"{at}.adam_eps", train.eps)
    t.set(f"{at}.clip_grad", train.grad_clip if train.grad_clip is not None else 0.0)
    t.set(f"{at}.use_distributed_optimizer", False)


def translate(recipe: Recipe, layout: Layout, world: World, run_dir: str) -> Translation:
    problems: list[str] = []
    model, targets = megatron_lora_checks(recipe, layout, "NeMo 2", problems, {
        "data.split": f"NeMo's DollyDataModule splits {DOLLY_SPLIT}; allowed: {DOLLY_SPLIT}",
        "model.dtype": "NeMo's fine-tune recipes train in bf16 mixed precision; allowed: bf16, auto",
        "parallel.data_parallel": "NeMo's LoRA keeps the frozen tensor-parallel shard on every data-parallel rank "
                                  "and all-reduces the adapter gradients (our replicate); allowed: replicate, ddp"})
    fail(problems)

    t = Translation("nemo2", recipe, layout, world, model)
    train, data = recipe.train, recipe.data
    if model.nemo_recipe:
        t.base = (f"llm.{model.nemo_recipe}.finetune_recipe(dir={dump(recipe.output_dir + '/nemo')}, "
                  f"name={dump(recipe.name)}, num_nodes={world.nodes}, num_gpus_per_node={world.gpus_per_node}, "
                  f"peft_scheme='lora', seq_length={data.seq_len}, packed_sequence={data.packing})")
    else:
        t.base = (f"default_finetune_recipe(run.Config(llm.LlamaModel, config=run.Config(llm.{model.nemo_config})), "
                  f"{dump(model.hf_id)}, dir={dump(recipe.output_dir + '/nemo')}, name={dump(recipe.name)}, "
                  f"num_nodes={world.nodes}, num_gpus_per_node={world.gpus_per_node}, packed_sequence={data.packing})")
        t.set("peft", Code("run.Config(llm.peft.LoRA)"))  # the generic recipe is a full fine-tune
    t.set("trainer.num_nodes", world.nodes)
    t.set("trainer.devices", world.gpus_per_node)
    t.set("trainer.max_steps", recipe.max_steps)
    t.set("trainer.log_every_n_steps", train.log_every)
    set_megatron_parallel(t, "trainer.strategy", recipe)
    every = steps_of(train.eval_every_samples, layout.global_batch_size)
    if every is None:  # no periodic evaluation: Lightning's way is zero validation batches
        t.set("trainer.limit_val_batches", 0)
    else:
        t.set("trainer.val_check_interval", every)
    set_megatron_lora(t, recipe, targets)
    t.set("data", Code("run.Config(llm.DollyDataModule)"))
    t.set("data.seq_length", data.seq_len)
    t.set("data.global_batch_size", train.global_batch_size)
    t.set("data.micro_batch_size", train.micro_batch_size)
    t.set("data.seed", data.split_seed)
    if data.packing:
        t.set("data.packed_sequence_specs", Code(f"run.Config(PackedSequenceSpecs, packed_sequence_size={data.seq_len})"))
        t.set("data.dataset_kwargs", {"pad_to_max_length": True})
    t.set("model.config.seq_length", data.seq_len)
    set_megatron_recompute(t, "model.config", recipe)
    t.set("model.config.cross_entropy_loss_fusion", False)  # NeMo's LoRA recipes turn it off
    set_megatron_adam(t, "optim.config", recipe)
    t.set("optim.config.bf16", True)
    t.set("optim.lr_scheduler.warmup_steps", train.warmup_steps)
    t.set("optim.lr_scheduler.constant_steps", 0)
    t.set("optim.lr_scheduler.min_lr", train.min_lr)
    t.set("optim.lr_scheduler.max_steps", recipe.max_steps)
    t.set("log.ckpt.every_n_train_steps", train.save_every if train.save_every else recipe.max_steps)
    t.set("resume.resume_if_exists", train.resume == "auto")
    t.set("resume.restore_config.path", f"nemo://{model.hf_id}")
    t.notes += [
        f"weights: NeMo restores nemo://{model.hf_id} (NEMO_HOME); import the checkpoint once with "
        f"llm.import_ckpt(model=llm.LlamaModel(llm.{model.nemo_config}()), source='hf://{recipe.model.path}')",
        "data: NeMo's DollyDataModule downloads the hub set itself and orders context and instruction at random; "
        "our loader puts the context first",
        f"seed {recipe.seed}: NeMo seeds its own model-parallel RNG; only the data split seed is passed",
        f"distributed.timeout_s {recipe.distributed.timeout_s}: NeMo keeps its own process-group timeout",
    ]
    t.text = render(t, run_dir)
    return t


def render(t: Translation, run_dir: str) -> str:
    """The NeMo 2 job: a Python file that builds the recipe (`build()`) and runs it on each rank."""
    r = t.recipe
    lines = [
        f'"""NeMo 2 fine-tune of recipe {r.name!r}, translated by `python -m launch.nemo --engine nemo2`.',
        "",
        f"Run on each of {t.world.nodes} node(s) with {t.world.gpus_per_node} GPU(s):",
        f"    torchrun --nnodes {t.world.nodes} --nproc-per-node {t.world.gpus_per_node} ... THIS_FILE",
        f'Our run directory ({run_dir}): python -m telemetry report {run_dir}',
        *(f"Note: {note}" for note in t.notes),
        '"""',
        "import telemetry.capture.early",
        "",
        "telemetry.capture.early.install()  # before nemo/megatron: megatron-core binds its collectives at import",
        "",
        "import nemo_run as run  # noqa: E402",
        "from nemo.collections import llm  # noqa: E402",
        "from nemo.collections.llm.gpt.data.packed_sequence import PackedSequenceSpecs  # noqa: E402,F401",
        "from nemo.collections.llm.recipes.finetune_default import default_finetune_recipe  # noqa: E402,F401",
        "",
        "from telemetry.integrations.lightning import TelemetryCallback  # noqa: E402",
        "",
        f"HARNESS = {t.harness()!r}",
        "",
        "",
        "def build() -> run.Partial:",
        f"    recipe = {t.base}",
    ]
    for path, value in t.assignments:
        lines.append(f"    recipe.{path} = {dump(value)}")
    lines += [
        f"    recipe.trainer.callbacks.append(run.Config(TelemetryCallback, run_dir={dump(run_dir)}, name={dump(r.name)},",
        f"                                               expect={dump(r.fabric.expect)}, engine='nemo2',",
        "                                               recipe=HARNESS['recipe'], layout=HARNESS['layout']))",
        "    return recipe",
        "",
        "",
        'if __name__ == "__main__":',
        "    run.run(build(), direct=True)  # in this process: torchrun or srun started one per GPU",
    ]
    return "\n".join(lines) + "\n"
