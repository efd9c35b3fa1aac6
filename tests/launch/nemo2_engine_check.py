"""Runs inside the NeMo 2 virtual environment (tools/nemo_venv.sh), never in the project's own.

    python nemo2_engine_check.py CASES.json OUT.json

CASES.json: [{"id", "job" (the file launch.nemo --print wrote), "values" (its --json assignments)}].
For each case: build the job's NeMo-Run recipe with NeMo's real code, read every assigned field back,
and build the parts that construct on CPU (MegatronStrategy, LoRA, the optimizer module and its
scheduler, the Dolly data module, the callbacks) to report what NeMo itself then holds. Also checks
megatron-core's import-time binding against telemetry.capture.early. OUT.json gets the findings; the test asserts.
"""
import json
import runpy
import subprocess
import sys


def get(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def comparable(value):
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)


def check(case):
    import fiddle as fdl

    recipe = runpy.run_path(case["job"], run_name="nemo2_job")["build"]()
    read_back = {path: comparable(get(recipe, path)) for path in case["values"]}
    recipe.model.config.apply_rope_fusion = False  # the fused RoPE kernel is TransformerEngine's (GPU only)
    strategy = fdl.build(recipe.trainer.strategy)
    peft = fdl.build(recipe.peft)
    optim = fdl.build(recipe.optim)
    data = fdl.build(recipe.data)
    built = {
        "recipe_fn": f"{recipe.__fn_or_cls__.__module__}.{recipe.__fn_or_cls__.__name__}",
        "model_config_class": type(fdl.build(recipe.model.config)).__name__,
        "tp": strategy.tensor_model_parallel_size, "pp": strategy.pipeline_model_parallel_size,
        "vp": strategy.virtual_pipeline_model_parallel_size, "sequence_parallel": strategy.sequence_parallel,
        "num_nodes": recipe.trainer.num_nodes, "devices": recipe.trainer.devices,
        "max_steps": recipe.trainer.max_steps,
        "lora": {"class": type(peft).__name__, "dim": peft.dim, "alpha": peft.alpha, "dropout": peft.dropout,
                 "target_modules": list(peft.target_modules)},
        "optimizer": {"name": optim.config.optimizer, "lr": optim.config.lr, "weight_decay": optim.config.weight_decay,
                      "betas": [optim.config.adam_beta1, optim.config.adam_beta2], "eps": optim.config.adam_eps,
                      "clip_grad": optim.config.clip_grad,
                      "distributed_optimizer": optim.config.use_distributed_optimizer},
        "scheduler": {"class": type(optim.lr_scheduler).__name__, "warmup_steps": optim.lr_scheduler.warmup_steps,
                      "min_lr": optim.lr_scheduler.min_lr, "max_steps": optim.lr_scheduler.max_steps,
                      "constant_steps": optim.lr_scheduler.constant_steps},
        "data": {"class": type(data).__name__, "global_batch_size": data.global_batch_size,
                 "micro_batch_size": data.micro_batch_size, "seq_length": data.seq_length, "seed": data.seed,
                 "packed_size": getattr(data.packed_sequence_specs, "packed_sequence_size", None)},
        "callbacks": [c.__fn_or_cls__.__name__ for c in recipe.trainer.callbacks],
    }
    return {"id": case["id"], "read_back": read_back, "built": built}


def binding_order(repo):
    """megatron-core's mappings module imported in a fresh process before ('late') and after ('early')
    the tracer is installed: what it then calls, and what telemetry.capture.early reports."""
    probe = ("import sys; sys.path.insert(0, %r)\n"
             "import json, torch.distributed as dist, telemetry.capture.early as e\n"
             "if sys.argv[1] == 'early': e.install()\n"
             "import megatron.core.tensor_parallel.mappings as m\n"
             "e.install()\n"
             "try:\n"
             "    e.require_early(); refused = None\n"
             "except e.ImportOrderError as exc:\n"
             "    refused = str(exc)\n"
             "print(json.dumps({'stale': e.stale_bindings(), 'refused': refused,"
             " 'calls_traced_function': m.dist_all_gather_func is dist.all_gather_into_tensor}))") % repo
    out = {}
    for mode in ("late", "early"):
        res = subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, timeout=600)
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else {"error": res.stderr[-2000:]}
    return out


def main():
    cases_path, out_path, repo = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(cases_path) as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append(check(case))
        except Exception as exc:  # reported to the test, which fails with it
            results.append({"id": case["id"], "error": f"{type(exc).__name__}: {exc}"})
    with open(out_path, "w") as f:
        json.dump({"cases": results, "binding": binding_order(repo)}, f, indent=1)


if __name__ == "__main__":
    main()
