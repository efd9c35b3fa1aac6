"""Model FLOPs of the Llama LoRA benchmark shape in two named conventions (no torch: report.py uses it too).

- ours (trainer/throughput.py): 4 N_matmul + 2 N_trainable + 12 L d T per computed token (forward 2N, the
  backward's input gradients 2N, weight gradients only for the trainable parameters; attention scores
  and values 12 L d T at sequence length T);
- AutoModel's LoRA convention (NeMo AutoModel's performance summary): full fine-tuning FLOPs x (2 +
  N_lora / N_frozen) / 3, full fine-tuning being 6 N per token with N every parameter, embeddings included,
  attention not counted. Its published row (Llama-3.1-8B LoRA, 1 H100, 12,473 tokens/s, 40.6% at
  989 TFLOP/s) is 32.2 GFLOP per token, which this reproduces.
"""
from __future__ import annotations

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def llama_params(cfg: dict, lora_r: int, targets=TARGETS) -> dict:
    """Parameter counts of a (LoRA-wrapped) Llama from its config: total base, matmul (lm_head included,
    the embedding lookup not), LoRA."""
    h, i, layers, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    k = cfg.get("num_key_value_heads", heads) * hd
    shapes = {"q_proj": (h, heads * hd), "k_proj": (h, k), "v_proj": (h, k), "o_proj": (heads * hd, h),
              "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    per_layer = sum(a * b for a, b in shapes.values())
    lora = layers * sum(lora_r * (a + b) for name, (a, b) in shapes.items() if name in targets)
    tied = cfg.get("tie_word_embeddings", False)
    norms = layers * 2 * h + h
    total = layers * per_layer + norms + v * h * (1 if tied else 2)
    matmul = layers * per_layer + v * h
    return {"total": total, "matmul": matmul, "lora": lora, "layers": layers, "hidden": h}


def ours_per_token(p: dict, seq: int) -> float:
    return 4 * (p["matmul"] + p["lora"]) + 2 * p["lora"] + 12 * p["layers"] * p["hidden"] * seq


def automodel_lora_per_token(p: dict) -> float:
    return 6 * p["total"] * (2 + p["lora"] / p["total"]) / 3


def mfu(tokens_per_s: float | None, per_token: float, peak_tflops: float | None) -> float | None:
    if not tokens_per_s or not peak_tflops:
        return None
    return tokens_per_s * per_token / (peak_tflops * 1e12)
