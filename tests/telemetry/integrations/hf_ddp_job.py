"""2 gloo ranks: a Hugging Face Trainer (which wraps the model in DDP itself) with hf_callback; each rank writes
OUT/rankN.json with its step records and the model's parameter bytes. With `own-hook` the job registers its own
DDP comm hook first (as a PowerSGD or compression job does); with `accum-eval` 2 micro-batches a step and an
evaluation after each; with `compile` torch_compile=True. With `twice` the same Trainer trains a second time
(a notebook's second train(), a second phase) with a fresh Telemetry and callback: OUT/rankN.second.json."""
from __future__ import annotations

import json
import os
import sys
import warnings

from trainer.compat import prepare_torchvision

prepare_torchvision(False)

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from telemetry.capture.session import Telemetry, TelemetrySettings  # noqa: E402
from telemetry.integrations.adapters import hf_callback  # noqa: E402

out, own_hook, twice = sys.argv[1], "own-hook" in sys.argv[2:], "twice" in sys.argv[2:]
rank = int(os.environ["RANK"])
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(12)]


class OwnHook(TrainerCallback):  # runs before ours: the job's hook is the one DDP keeps
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        for o in __import__("gc").get_objects():
            if isinstance(o, torch.nn.parallel.DistributedDataParallel) and o.module is model:
                o.register_comm_hook(None, allreduce_hook)


telemetry = Telemetry(TelemetrySettings(), run_dir=out)  # before the Trainer sets the process group up
extra = {}
if "accum-eval" in sys.argv[2:]:  # 2 micro-batches an optimizer step, and an evaluation after every step
    extra = {"gradient_accumulation_steps": 2, "eval_strategy": "steps", "eval_steps": 1,
             "per_device_eval_batch_size": 2}
if "compile" in sys.argv[2:]:  # the Trainer compiles the DDP-wrapped model (accelerate's dynamo plugin)
    extra["torch_compile"] = True
args = TrainingArguments(output_dir=f"{out}/hf", max_steps=3, per_device_train_batch_size=2, report_to=[],
                         use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
                         ddp_backend="gloo", ddp_find_unused_parameters=False, **extra)
callback = hf_callback(telemetry, f"{out}/metrics.jsonl")  # one file: rank 0 writes it
callbacks = ([OwnHook()] if own_hook else []) + [callback]


def report(path, callback, caught):
    rows = [json.loads(json.dumps(r, default=str)) for r in callback.clock.records]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"rows": rows, "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                   "warnings": [str(w.message) for w in caught if "DDP gradient buckets" in str(w.message)]}, f)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4] if extra else None,
                      callbacks=callbacks)
    trainer.train()
report(f"{out}/rank{rank}.json", callback, caught)
if twice:
    trainer.remove_callback(callback)
    second = hf_callback(Telemetry(TelemetrySettings(), run_dir=f"{out}/second"))
    trainer.add_callback(second)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    report(f"{out}/rank{rank}.second.json", second, caught)
