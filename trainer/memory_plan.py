"""What one rank of a decoder-LLM recipe holds on its GPU, estimated without torch, so `--dry-run` shows an
out-of-memory coming before a job waits in a queue (docs/memory.md).

Per rank: weights, gradients and optimizer state of the trainable parameters (sharded as the layout says;
full-parameter training keeps fp32 master weights and AdamW state, LoRA fp32 adapters over bf16 weights),
and the activations one micro-batch keeps for backward, times the micro-batches a pipeline keeps in flight.

Activations per token per decoder layer, in elements of the compute dtype (bf16), with
H = hidden_size, I = intermediate_size, K = num_key_value_heads x head_dim, no activation checkpointing and
SDPA/flash attention (no sequence x sequence matrix is kept):
- eager transformers Llama: 15 H + 4 I + 4 K. Each RMSNorm keeps its input, an fp32 copy (2 H in bf16
  elements) and its output; attention keeps q, k, v before and after RoPE, the repeated k and v SDPA reads,
  its output and o_proj's input; the MLP keeps gate, up, SiLU(gate) and down_proj's input;
- liger kernels (model.kernels=liger): 10 H + 3 I + 3 K: its RMSNorm keeps no fp32 copy (-4 H), SwiGLU
  recomputes SiLU(gate) in backward (-I) and RoPE works in place (-H - K).
Of these, the two norms' part (8 H eager, 4 H liger: input, fp32 copy, output - the projections' input) is
per token over the whole hidden size; the rest is split over attention heads and MLP columns. Tensor
parallelism divides that rest by tp; the norms' part only with sequence parallelism (each rank keeps its
slice of the sequence), as in Megatron's activation formula (Korthikanti et al. 2022, sbh(10 + 24/t + ...)
without sequence parallelism, everything / t with it).
Beside the stored weights: without FSDP2, fp32 master weights under bf16 autocast also hold autocast's bf16 copy
of each matmul weight (saved for backward: 2 more bytes per parameter); FSDP2 on a pipeline stage keeps the
stage's weights gathered in the compute dtype from forward to backward, and with more than one micro-batch
per step it accumulates the trainable gradients unsharded in fp32 until the last one.
Logits: eager cross-entropy holds the bf16 logits, their fp32 copy and its gradient at the peak of
backward: 10 bytes x vocab per token; liger's fused linear cross-entropy holds a chunk of them (counted 0).
Under tensor parallelism the vocabulary (embedding, lm_head, logits) is split over tp unless the embeddings
are tied or the vocabulary does not divide by tp (trainer/parallelize.py).
LoRA's own activations (r values per projection) are left out.

Calibrated on one H100 (issue 30's measurements, 2026-11-27: Llama-3-8B shape, LoRA r16 on 7 projections,
seq 2048, bf16): the formula gives 50.5 GiB (measured 50.9) for the plain loop at micro-batch 2, 36.8 GiB
(37.1) with liger at micro-batch 2 and 58.1 GiB (58.6) at micro-batch 4; the harness's own eager peak at
micro-batch 2 was 48.0 GiB, the plain loop's with compiled blocks at micro-batch 4 53.8. An estimate, not a promise:
the CUDA allocator's fragmentation, NCCL's buffers and the CUDA context come on top (about 1-3 GiB).
"""
from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
DEVICE_RESERVE_BYTES = 2 * GiB  # CUDA context, NCCL buffers, allocator slack: kept free in "fits"
MiB = 1 << 20
# each card's memory as nvidia-smi reports it (memory.total, MiB; where two cards share a line, the smaller):
# the product names round up in decimal gigabytes, the estimate is in GiB. Values as listed in
# https://thundergolfer.com/blog/nvidia-gpu-memory-capacity (NVML readings of each card)
CARDS = (("A100 40 GB", 40_960 * MiB), ("L40S 48 GB", 46_068 * MiB), ("H100/A100 80 GB", 81_559 * MiB),
         ("H200 141 GB", 143_771 * MiB))
LORA_PARAM_BYTES = 4  # peft keeps adapters in fp32 beside bf16 base weights (autocast_adapter_dtype)
ADAM_STATES = 2  # exp_avg and exp_avg_sq, in the parameter's dtype


@dataclass
class MemoryPlan:
    weights: float
    gradients: float
    optimizer: float
    activations_per_micro_batch: float
    in_flight: int  # micro-batches whose activations are held at once (pipeline schedules)
    logits: float
    kernels: str
    tokens: int  # per micro-batch

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations_per_micro_batch * self.in_flight
                + self.logits)

    def lines(self) -> list[str]:
        g = lambda b: f"{b / GiB:.1f} GiB" if b >= GiB / 10 or b == 0 else f"{b / 2**20:.1f} MiB"  # noqa: E731
        acts = g(self.activations_per_micro_batch) + (f" x {self.in_flight} in flight" if self.in_flight > 1 else "")
        out = [f"# memory per rank, estimated (docs/memory.md): weights {g(self.weights)}, gradients "
               f"{g(self.gradients)}, optimizer {g(self.optimizer)}, activations {acts} per micro-batch of "
               f"{self.tokens:,} tokens ({'liger kernels' if self.kernels == 'liger' else 'eager'}), logits {g(self.logits)}; total {g(self.total)}"]
        fits = [f"{name}: {'fits' if self.total + DEVICE_RESERVE_BYTES <= size else 'does NOT fit'}"
                for name, size in CARDS]
        out.append(f"# with {DEVICE_RESERVE_BYTES // GiB} GiB kept for CUDA and NCCL: " + "; ".join(fits))
        return out


def activation_elements(h: int, i: int, k: int, kernels: str, tp: int = 1, sequence_parallel: bool = False) -> float:
    """Elements one rank keeps for backward per token per decoder layer (formula in the module docstring):
    the norms' part is divided by tp only under sequence parallelism, the heads' and columns' part always."""
    norms, split = (4 * h, 6 * h + 3 * i + 3 * k) if kernels == "liger" else (8 * h, 7 * h + 4 * i + 4 * k)
    return (norms + split) / tp if sequence_parallel else norms + split / tp


def plan(recipe, layout) -> MemoryPlan | None:
    """The estimate for a decoder-LLM recipe on a GPU (bf16 unless the recipe says fp32); None where the
    model's config cannot be read here or the workload is not a decoder LLM."""
    from .config import LLM_WORKLOADS

    from .workloads.hf import recipe_config_fields

    cfg = recipe_config_fields(recipe) if recipe.workload in LLM_WORKLOADS else None
    if not cfg or layout is None or not layout.global_batch_size:
        return None
    h, layers, v = cfg.get("hidden_size", 4096), cfg.get("num_hidden_layers", 32), cfg.get("vocab_size", 32000)
    i = cfg.get("intermediate_size", 11008)
    heads = cfg.get("num_attention_heads", 32)
    head_dim = cfg.get("head_dim") or h // heads
    k = cfg.get("num_key_value_heads", heads) * head_dim
    tied = cfg.get("tie_word_embeddings", False)
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    sp = recipe.parallel.sequence_parallel and tp > 1
    vocab_tp = tp if not tied and v % tp == 0 else 1  # embedding, lm_head and logits split over tp
    wbytes = 4 if recipe.model.dtype == "fp32" else 2
    abytes = 4 if recipe.train.precision == "fp32" else 2
    per_layer = h * heads * head_dim * 2 + h * k * 2 + 3 * h * i  # q, o; k, v; gate, up, down
    vocab = v * h * (1 if tied else 2)
    stage_layers = -(-layers // pp)
    # the largest stage: the first holds the embedding, the last the head; with pp 1 one rank holds both
    base = stage_layers * per_layer / tp + (vocab if pp == 1 else v * h) / vocab_tp
    lora = recipe.workload == "llm_lora"
    if lora:
        r, targets = recipe.lora.r, set(recipe.lora.target_modules)
        shapes = {"q_proj": (h, heads * head_dim), "k_proj": (h, k), "v_proj": (h, k), "o_proj": (heads * head_dim, h),
                  "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
        trainable = stage_layers * sum(r * (a + b) for name, (a, b) in shapes.items() if name in targets)
        tbytes = LORA_PARAM_BYTES
    else:  # every weight; the tp split is applied below. fp32 master weights and AdamW state
        # (trainer/optim.py keep_fp32_master) except under DeepSpeed, whose bf16 mode keeps its own
        trainable = base * tp
        tbytes = wbytes if layout.data_parallel == "deepspeed" else 4
        wbytes = tbytes
    fsdp = layout.data_parallel in ("fsdp", "deepspeed")
    shard = dp if fsdp else 1
    weights = base * wbytes / shard + (trainable * tbytes / shard if lora else 0)
    grads = trainable * tbytes / (tp if not lora else 1) / shard
    if layout.data_parallel == "fsdp":
        if pp > 1:  # a stage's blocks stay gathered after forward (trainer/parallelize.py): whole, compute dtype
            weights += (base + (trainable if lora else 0)) * abytes
        if layout.grad_accum_steps > 1:  # FSDP2 accumulates unsharded fp32 gradients until the last micro-batch
            grads = trainable * 4 / (tp if not lora else 1)
    elif not lora and abytes < wbytes:  # autocast's bf16 copy of each fp32 master weight, saved for backward
        weights += (stage_layers * per_layer / tp + v * h / vocab_tp) * abytes
    optim = ADAM_STATES * trainable * tbytes / (tp if not lora else 1) / shard
    from .kernels import fused_ce_fallback

    kernels = recipe.model.kernels
    kernels = "liger" if kernels in ("auto", "liger") else "none"  # a dry run plans for the GPU it will run on
    tokens = layout.micro_batch_size * recipe.data.seq_len
    per_token = activation_elements(h, i, k, kernels, tp, sp) * abytes
    if recipe.model.activation_checkpointing:  # each layer keeps its input; one layer is recomputed at a time
        acts = tokens * (stage_layers * h * abytes / (tp if sp else 1) + per_token)
    else:
        acts = tokens * stage_layers * per_token
    in_flight = 1
    if pp > 1:
        in_flight = layout.grad_accum_steps if layout.pp_schedule == "gpipe" else min(pp, layout.grad_accum_steps)
    fused = kernels == "liger" and fused_ce_fallback(recipe) is None
    logits = 0.0 if fused else tokens * v / vocab_tp * 10
    return MemoryPlan(weights, grads, optim, acts, in_flight, logits, kernels, tokens)
