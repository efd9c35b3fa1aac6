"""Fused GPU kernels for the model families we ship (`model.kernels`): liger-kernel's Llama kernels, or none.

liger-kernel (a declared extra, `pip install 'fabric-harness[gpu]'`; never vendored) replaces transformers'
Llama RoPE, RMSNorm and SwiGLU MLP with Triton kernels and computes the cross-entropy straight from the
final hidden states and lm_head's weight, a chunk of tokens at a time, so the full-vocabulary logits (at
seq 2048 and vocab 128k: 1 GiB per sequence in bf16, twice that upcast) never exist.
`apply_liger_kernel_to_llama` patches transformers' Llama module, so it runs before the model is built;
peft then wraps the projections inside the fused MLP as it wraps any Linear.

The loss keeps the harness's normalisation (trainer/loop.py: summed cross-entropy divided by the global
batch's label tokens across grad-accum and dp): the model is called with `num_items_in_batch=1`, for which
liger's (and transformers') causal-LM loss is the sum over labelled tokens divided by 1.

Where the fused cross-entropy cannot keep that contract the run says so once and keeps the other kernels:
- tensor parallel: lm_head is split over the vocabulary and the loss runs vocabulary-parallel
  (`loss_parallel`); the fused kernel reads the whole lm_head weight;
- pipeline stages: the loss is the schedule's loss function on the last stage's output;
- DeepSpeed ZeRO-3: lm_head's weight is a partition outside its module's own forward;
- a LoRA adapter on lm_head (lora.target_modules): the kernel reads `lm_head.weight`, which for peft's LoRA
  layer is the frozen base weight alone - the adapter would add nothing to the loss and get no gradient.

Asked for by name where it cannot run (no CUDA, no Triton, liger-kernel missing, a family without kernels):
one `error:` line at start, before any step. `auto` falls back to none, with the reason in run.json.
A dry run checks only the recipe (trainer/config.py): the cluster's machine is not the laptop's.
"""
from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, field

from .error_report import InputError

# the family's kernels as liger-kernel names them (apply_liger_kernel_to_llama's switches)
LLAMA_KERNELS = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy")
# model_type values of transformers' Llama code (what apply_liger_kernel_to_llama patches)
LLAMA_TYPES = ("llama",)
INSTALL = "pip install 'fabric-harness[gpu]' (liger-kernel>=0.8)"


@dataclass
class KernelChoice:
    """What `model.kernels` resolved to on this machine (run.json `model.kernels`)."""
    requested: str
    used: str  # liger or none
    kernels: list[str] = field(default_factory=list)  # the liger kernels applied
    reason: str | None = None  # why auto resolved to none
    fallback: str | None = None  # why the fused cross-entropy is off while the other kernels are on
    liger_version: str | None = None

    @property
    def fused_ce(self) -> bool:
        return "fused_linear_cross_entropy" in self.kernels

    def to_dict(self) -> dict:
        return asdict(self)


def missing(device_type: str) -> str | None:
    """What this machine lacks for liger's kernels, in words; None when nothing is missing."""
    if device_type != "cuda":
        return f"a CUDA GPU (this run is on {device_type})"
    if importlib.util.find_spec("triton") is None:
        return "Triton (the `triton` package; CUDA builds of torch ship it)"
    if importlib.util.find_spec("liger_kernel") is None:
        return f"liger-kernel ({INSTALL})"
    return None


def fused_ce_fallback(recipe) -> str | None:
    """Why the fused linear cross-entropy cannot keep the loss contract in this layout, or None."""
    par = recipe.parallel
    if par.tp > 1:
        whole = _whole_head(recipe, par.tp)
        if whole:  # trainer/parallelize.py splits lm_head only for untied embeddings and a vocabulary divisible by tp
            return (f"parallel.tp {par.tp}: lm_head stays whole ({whole}) while its input comes from the "
                    "tensor-parallel blocks, a layout the fused kernel is not wired for; the cross-entropy stays eager")
        return (f"parallel.tp {par.tp}: lm_head is split over the vocabulary and the loss runs vocabulary-parallel "
                "(loss_parallel), while the fused kernel reads the whole lm_head weight; the cross-entropy stays "
                "vocabulary-parallel")
    if par.pp > 1:
        return (f"parallel.pp {par.pp}: the last pipeline stage hands its output to the schedule's loss function; "
                "the cross-entropy stays eager there")
    if par.data_parallel == "deepspeed" and par.zero_stage == 3:
        return "DeepSpeed ZeRO-3 partitions lm_head's weight outside its own forward; the cross-entropy stays eager"
    targets = recipe.lora.target_modules if recipe.workload == "llm_lora" else []
    if any(isinstance(t, str) and t.rsplit(".", 1)[-1] == "lm_head" for t in targets or []):
        return ("lora.target_modules adapts lm_head: the fused kernel reads lm_head.weight, the frozen base weight "
                "without the adapter, so the adapter would neither count in the loss nor train; the cross-entropy "
                "stays eager")
    return None


def _whole_head(recipe, tp: int) -> str | None:
    """Why lm_head is not split over tp for this model (tied embeddings, a vocabulary tp does not divide), or None
    (split, or the model's config is not readable here)."""
    from .workloads.hf import recipe_config_fields

    cfg = recipe_config_fields(recipe) or {}
    if cfg.get("tie_word_embeddings"):
        return "the embeddings are tied"
    vocab = cfg.get("vocab_size")
    if isinstance(vocab, int) and vocab % tp:
        return f"vocab_size {vocab} does not divide by tp {tp}"
    return None


def resolve(recipe, device_type: str, model_type: str | None = "llama") -> KernelChoice:
    """`model.kernels` on this machine: an explicit liger that cannot run is an InputError (one line)."""
    from .config import LLM_WORKLOADS

    asked = recipe.model.kernels
    if asked == "none":
        return KernelChoice(asked, "none")
    problem = None
    if recipe.workload not in LLM_WORKLOADS:
        problem = f"kernels for the {recipe.workload} workload (liger has them for the Llama family only)"
    elif model_type is not None and model_type not in LLAMA_TYPES:
        problem = f"kernels for model_type {model_type!r} in this build (Llama only)"
    else:
        problem = missing(device_type)
    if problem is not None:
        if asked == "liger":
            raise InputError(f"model.kernels: liger needs {problem}; allowed here: none or auto")
        return KernelChoice(asked, "none", reason=f"needs {problem}")
    fallback = fused_ce_fallback(recipe)
    kernels = [k for k in LLAMA_KERNELS if not (fallback and k == "fused_linear_cross_entropy")]
    return KernelChoice(asked, "liger", kernels, fallback=fallback, liger_version=_version("liger-kernel"))


def apply(choice: KernelChoice) -> None:
    """Patch transformers' Llama modules with liger's kernels; before the model is built. A liger-kernel that
    does not import here (built for another torch, transformers or Triton): an explicit liger is an InputError
    (one line); auto falls back to none, the reason recorded in `choice`."""
    if choice.used != "liger":
        return
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
    except Exception as exc:  # noqa: BLE001 - any import failure of the extra, said in one line
        first = (str(exc).strip().splitlines() or [""])[0]
        problem = f"liger-kernel to import here ({type(exc).__name__}: {first})"
        if choice.requested == "liger":
            raise InputError(f"model.kernels: liger needs {problem}; allowed here: none or auto") from None
        choice.used, choice.kernels, choice.fallback, choice.liger_version = "none", [], None, None
        choice.reason = f"needs {problem}"
        return
    apply_liger_kernel_to_llama(rope="rope" in choice.kernels, rms_norm="rms_norm" in choice.kernels,
                                swiglu="swiglu" in choice.kernels, cross_entropy=False,
                                fused_linear_cross_entropy=choice.fused_ce)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
