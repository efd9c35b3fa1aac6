"""A saved Llama checkpoint big enough to measure loading (about 233 MB in fp32, several safetensors
shards) with the project's byte tokenizer; shared by the sharded-load test and bench/model_load.py."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHAPES = dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
              num_attention_heads=8, num_key_value_heads=8, eos_token_id=2, pad_token_id=0, bos_token_id=1)


def make_checkpoint(path: Path, shard_size: str = "60MB") -> int:
    """Write the checkpoint (if not there yet); returns the bytes of all its tensors."""
    import torch
    from safetensors import safe_open

    from trainer.compat import ensure_torchvision_importable
    ensure_torchvision_importable()  # before transformers (trainer/compat.py)
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if not (path / "model.safetensors.index.json").exists():
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**SHAPES)).save_pretrained(path, max_shard_size=shard_size)
        AutoTokenizer.from_pretrained(str(REPO / "recipes" / "assets" / "byte_tokenizer")).save_pretrained(path)
    total = 0
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for key in f.keys():
                s = f.get_slice(key)
                n = 1
                for d in s.get_shape():
                    n *= d
                total += n * 4  # fp32
    return total
