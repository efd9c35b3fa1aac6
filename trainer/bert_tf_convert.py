"""MLPerf BERT's phase-1 checkpoint (TensorFlow, model.ckpt-28252 with bert_config.json) into our BERT:

    python -m trainer.bert_tf_convert PATH/model.ckpt-28252 --config PATH/bert_config.json --out DIR

writes DIR/config.json and DIR/model.safetensors with transformers' BertForPreTraining names, the directory
the bert recipe's `model.path` takes. The checkpoint is read without TensorFlow (trainer/tf_checkpoint.py).
Names map as Google's BERT code wrote them (`bert/encoder/layer_3/attention/self/query/kernel`): `/` and
`layer_N` become module paths, `kernel` a weight (transposed: TF's dense is x @ W), `gamma`/`beta` the
LayerNorm's weight/bias, `cls/predictions/output_bias` the masked-LM bias and `cls/seq_relationship/
output_weights` the next-sentence weight (already out x in). Optimizer slots (LAMB/Adam `adam_m`, `adam_v`)
and `global_step` are left out; every tensor the model needs must be there, and every one used.
"""
from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

from telemetry.errors import InputError, OneLineParser, output_dir_problem
from trainer.tf_checkpoint import TfCheckpointError, load

SKIP = re.compile(r"(adam_[mv]|AdamWeightDecay|LAMB|lamb_|global_step|beta[12]_power|/Momentum|loss_scale)")


class ConvertError(InputError, ValueError):
    """One line naming what does not fit."""


def hf_name(tf_name: str) -> tuple[str, bool]:
    """(BertForPreTraining parameter name, transpose?) for a TF variable name."""
    parts = []
    for p in tf_name.split("/"):
        if m := re.fullmatch(r"layer_(\d+)", p):
            parts += ["layer", m.group(1)]
        else:
            parts.append(p)
    last, transpose = parts[-1], False
    if last == "kernel":
        parts[-1], transpose = "weight", True
    elif last in ("gamma", "output_weights"):
        parts[-1] = "weight"
    elif last in ("beta", "output_bias"):
        parts[-1] = "bias"
    elif last.endswith("_embeddings") and parts[-2] == "embeddings":
        parts.append("weight")
    name = ".".join(parts)
    return name.replace("cls.predictions.bias", "cls.predictions.bias"), transpose


def convert(prefix: str, config: dict) -> dict[str, np.ndarray]:
    """The checkpoint's weights under BertForPreTraining's names, checked against a model of `config`."""
    import torch

    from trainer.compat import ensure_torchvision_importable

    ensure_torchvision_importable()  # transformers imports torchvision when installed (trainer/compat.py)
    from transformers import BertConfig, BertForPreTraining

    tensors = {k: v for k, v in load(prefix).items() if not SKIP.search(k)}
    with torch.device("meta"):
        model = BertForPreTraining(BertConfig(**config))
    wanted = model.state_dict()
    out = {}
    for tf_name, arr in tensors.items():
        name, transpose = hf_name(tf_name)
        if name not in wanted:
            raise ConvertError(f"{prefix}: {tf_name} has no place in BertForPreTraining ({name}); allowed: BERT "
                               "variables of Google's naming (bert/..., cls/...)")
        arr = arr.T if transpose else arr
        if tuple(arr.shape) != tuple(wanted[name].shape):
            raise ConvertError(f"{prefix}: {tf_name} has shape {list(arr.shape)}, the config wants "
                               f"{list(wanted[name].shape)} for {name} (is --config this checkpoint's?)")
        out[name] = np.ascontiguousarray(arr, dtype=np.float32)
    # tied and derived: the decoder is the word embeddings, its bias the masked-LM bias; position ids a buffer
    out.setdefault("cls.predictions.decoder.weight", out.get("bert.embeddings.word_embeddings.weight"))
    if "cls.predictions.bias" in out:
        out.setdefault("cls.predictions.decoder.bias", out["cls.predictions.bias"])
    missing = [k for k in wanted if k not in out and not k.endswith(("position_ids", "token_type_ids"))]
    if missing:
        raise ConvertError(f"{prefix}: the checkpoint lacks {', '.join(missing[:4])}"
                           + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
    return {k: v for k, v in out.items() if v is not None}


def write(prefix: str, config_path: str, out: str) -> dict:
    from safetensors.numpy import save_file
    from telemetry.input_files import read_limited

    from .workloads.hf import CONFIG_MAX_BYTES
    try:  # bounded: --config /dev/zero is refused, not read until memory runs out
        config = json.loads(read_limited(config_path, CONFIG_MAX_BYTES))
    except (OSError, ValueError) as exc:
        raise ConvertError(f"--config {config_path}: {exc}; expected the checkpoint's bert_config.json") from None
    if not isinstance(config, dict):
        raise ConvertError(f"--config {config_path}: holds a JSON {type(config).__name__}; expected the "
                           "checkpoint's bert_config.json (a JSON object)")
    if problem := output_dir_problem(out, "--out"):
        raise ConvertError(problem)
    tensors = convert(prefix, config)
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"model_type": "bert", "architectures": ["BertForPreTraining"], **config}, f, indent=1)
    return {"out": out, "tensors": len(tensors), "parameters": int(sum(v.size for v in tensors.values()))}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m trainer.bert_tf_convert", description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="the TensorFlow checkpoint prefix (model.ckpt-28252: the path without .index)")
    p.add_argument("--config", required=True, help="its bert_config.json")
    p.add_argument("--out", required=True, help="directory for config.json and model.safetensors")
    args = p.parse_args(argv)
    try:
        result = write(args.checkpoint, args.config, args.out)
    except (ConvertError, TfCheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result['out']}: {result['tensors']} tensors, {result['parameters']:,} parameters "
          "(model.path for the bert recipe)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
