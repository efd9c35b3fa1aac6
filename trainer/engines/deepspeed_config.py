"""The recipe's `deepspeed:` block: which of DeepSpeed's keys pass through, which the recipe owns, and
the DeepSpeed configuration built from both. No torch and no deepspeed import: `--dry-run` stays instant.

DeepSpeed ignores top-level keys it does not know, so a misspelt key would silently do nothing; here it
exits 2. Keys the recipe already says (batch sizes, clipping, precision, optimizer, schedule, ZeRO stage)
may not be set twice. tests/trainer/test_deepspeed_config.py checks these tables against the installed
DeepSpeed's own key names.
"""
from __future__ import annotations

import difflib

# DeepSpeed keys the recipe owns -> where the recipe says it
OWNED = {
    "train_batch_size": "train.global_batch_size",
    "train_micro_batch_size_per_gpu": "train.micro_batch_size",
    "gradient_accumulation_steps": "train.global_batch_size / (train.micro_batch_size x dp)",
    "gradient_clipping": "train.grad_clip",
    "fp16": "train.precision",
    "bf16": "train.precision",
    "amp": "train.precision",
    "torch_autocast": "train.precision",
    "optimizer": "train.optimizer",
    "scheduler": "train.schedule",
    "zero_allow_untested_optimizer": "the harness (it passes the recipe's own torch optimizer)",
    # the loop divides each loss by its global item count times dp and lets DeepSpeed average over dp;
    # it also calls DeepSpeed's step once per micro-batch
    "gradient_allreduce_op": "the harness (gradients are averaged over dp)",
    "managed_gradient_accumulation": "the harness (it drives gradient accumulation)",
}

# top-level DeepSpeed keys passed through unchanged
PASSTHROUGH = (
    "zero_optimization", "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
    "comms_logger", "flops_profiler", "communication_data_type", "seq_parallel_communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "activation_checkpointing", "data_types",
    "zero_force_ds_cpu_optimizer", "tensorboard", "wandb", "csv_monitor", "aio", "timers",
)

# zero_optimization's keys (DeepSpeedZeroConfig fields and their stage3_* aliases), less `stage`
ZERO_KEYS = (
    "allgather_bucket_size", "allgather_partitions", "compute_grad_norm", "contiguous_gradients",
    "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory", "elastic_checkpoint",
    "enable_sanity_checks", "ignore_unused_parameters", "leaf_module", "legacy_stage1",
    "load_from_fp32_weights", "log_trace_cache_warnings", "memory_efficient_linear", "offload_optimizer",
    "offload_param", "overlap_comm", "override_module_apply", "parameter_alignment",
    "pipeline_loading_checkpoint", "reduce_bucket_size", "reduce_scatter", "round_robin_gradients",
    "save_muon_momentum_buffer_in_memory", "stage3_gather_fp16_weights_on_model_save", "sub_group_size",
    "use_multi_rank_bucket_allreduce", "zenflow", "zero_hpz_partition_size", "zero_quantized_gradients",
    "zero_quantized_nontrainable_weights", "zero_quantized_weights",
    "allgather_sequential", "stage3_allgather_sequential",
    "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
    "max_live_parameters", "stage3_max_live_parameters", "max_reuse_distance", "stage3_max_reuse_distance",
    "model_persistence_threshold", "stage3_model_persistence_threshold",
    "module_granularity_threshold", "stage3_module_granularity_threshold",
    "param_persistence_threshold", "stage3_param_persistence_threshold",
    "prefetch_bucket_size", "stage3_prefetch_bucket_size",
    "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
)

ZERO_STAGES = (1, 2, 3)
# element-wise optimizers only: ZeRO flattens parameters into partitions, so an optimizer with
# per-tensor norms (LAMB, LARS) would compute them per partition, silently changing the update
OPTIMIZERS = ("adamw", "sgd")


def _unknown(key: str, path: str, allowed) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{path}.{key}: unknown DeepSpeed key; {hint}allowed: {', '.join(sorted(allowed))}"


def check(recipe) -> list[str]:
    """Problems with parallel.zero_stage and the deepspeed block, one line each."""
    par, block = recipe.parallel, recipe.deepspeed
    p: list[str] = []
    if par.data_parallel != "deepspeed":
        if par.zero_stage is not None:
            p.append(f"parallel.zero_stage: got {par.zero_stage}; only with parallel.data_parallel=deepspeed "
                     f"(now {par.data_parallel!r}); allowed: null")
        if block:
            p.append(f"deepspeed: set, but parallel.data_parallel is {par.data_parallel!r}; allowed: an empty "
                     "block, or parallel.data_parallel=deepspeed")
        return p
    if par.zero_stage not in ZERO_STAGES:
        got = "null" if par.zero_stage is None else par.zero_stage
        p.append(f"parallel.zero_stage: got {got}; required with data_parallel=deepspeed; allowed: "
                 + ", ".join(map(str, ZERO_STAGES)))
    for key in ("tp", "pp"):
        if getattr(par, key) != 1:
            p.append(f"parallel.{key}: got {getattr(par, key)}; DeepSpeed runs data parallel only in this "
                     "harness; allowed: 1")
    if par.sequence_parallel:
        p.append("parallel.sequence_parallel: not with data_parallel=deepspeed; allowed: false")
    if recipe.train.optimizer not in OPTIMIZERS:
        p.append(f"train.optimizer: got {recipe.train.optimizer!r}; with DeepSpeed ZeRO the optimizer sees "
                 "flattened partitions, so per-tensor trust ratios (LAMB, LARS) would be wrong; allowed: "
                 + ", ".join(OPTIMIZERS))
    for key, value in block.items():
        key = str(key)
        if key in OWNED:
            p.append(f"deepspeed.{key}: set by {OWNED[key]} in the recipe; remove it from the deepspeed block")
        elif key not in PASSTHROUGH:
            p.append(_unknown(key, "deepspeed", (*PASSTHROUGH,)))
    zero = block.get("zero_optimization")
    if zero is not None and not isinstance(zero, dict):
        p.append(f"deepspeed.zero_optimization: got {zero!r}; expected a mapping")
    elif zero:
        for key in zero:
            key = str(key)
            if key == "stage":
                p.append("deepspeed.zero_optimization.stage: set by parallel.zero_stage in the recipe; remove it "
                         "from the deepspeed block")
            elif key not in ZERO_KEYS:
                p.append(_unknown(key, "deepspeed.zero_optimization", ZERO_KEYS))
    return p


def build(recipe, layout, bf16: bool) -> dict:
    """The DeepSpeed configuration: the recipe's batch, clipping, precision and stage, plus the block."""
    block = {k: (dict(v) if isinstance(v, dict) else v) for k, v in recipe.deepspeed.items()}
    zero = dict(block.pop("zero_optimization", None) or {})
    zero["stage"] = recipe.parallel.zero_stage
    config = {
        "train_batch_size": layout.global_batch_size,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.grad_accum_steps,
        "zero_optimization": zero,
        # the recipe's optimizer is a torch one (trainer/optim.py), built before DeepSpeed wraps it
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2 ** 31 - 1,  # the harness prints its own progress
        **block,
    }
    if recipe.train.grad_clip is not None:
        config["gradient_clipping"] = recipe.train.grad_clip
    if bf16:
        config["bf16"] = {"enabled": True}
    return config
