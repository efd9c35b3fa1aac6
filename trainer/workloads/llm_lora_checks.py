"""The llm_lora workload's recipe checks (no torch: the dry run uses them)."""
from __future__ import annotations

from ..checks import at_least
from ..config import SEQ_LEN_MAX, Recipe
from .data_checks import check_split
from .hf import config_problems, pp_layers_problem

# lm_head is a Linear too: peft adapts it (a tiny Llama with [q_proj, lm_head] trained at 14fb94c)
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def _unknown_llama_modules(names) -> str | None:
    """A target module no Llama layer has (peft's own error came only once the model was built): the names
    peft matches are a module's last dotted part (or the whole dotted name)."""
    import difflib

    unknown = [n for n in names if isinstance(n, str) and n.rsplit(".", 1)[-1] not in LLAMA_LINEAR]
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0].rsplit(".", 1)[-1], LLAMA_LINEAR, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"lora.target_modules: {unknown[0]!r} is no Llama linear layer{hint}; allowed: {', '.join(LLAMA_LINEAR)}"


def check(r: Recipe) -> list[str]:
    p = []
    m = r.model
    if (m.path is None) == (m.config is None):
        p.append("model: set exactly one of model.path (a local checkpoint directory) "
                 "or model.config (random init); got " + ("both" if m.path else "neither"))
    if m.config is not None and m.tokenizer is None:
        p.append("model.tokenizer: required with model.config (random init has no tokenizer of its own)")
    if m.path is None:  # a checkpoint's config.json is read where the run starts
        p += config_problems(m.config, tp=r.parallel.tp)
        if isinstance(m.config, dict) and isinstance(r.parallel.pp, int) and r.parallel.pp > 1:
            stages = r.parallel.pp * r.parallel.pp_stages_per_rank  # split_layers' rule, before any rank starts
            if line := pp_layers_problem(m.config.get("num_hidden_layers"), stages):
                p.append(line)
    p += at_least("lora", r.lora, ("r",), 1)
    if r.lora.alpha <= 0:
        p.append(f"lora.alpha: got {r.lora.alpha}; expected a number > 0")
    if not 0.0 <= r.lora.dropout < 1.0:
        p.append(f"lora.dropout: got {r.lora.dropout}; expected a number in [0, 1)")
    if not r.lora.target_modules:
        p.append("lora.target_modules: empty; name at least one module, e.g. [q_proj, v_proj]")
    elif m.family == "llama" and (line := _unknown_llama_modules(r.lora.target_modules)):
        p.append(line)
    d = r.data
    p += at_least("data", d, ("seq_len",), 8)
    limit = m.config.get("max_position_embeddings") if isinstance(m.config, dict) else None
    if isinstance(limit, int) and not isinstance(limit, bool) and isinstance(d.seq_len, int) and limit < d.seq_len <= SEQ_LEN_MAX:
        # the recipe declares its own model's context; a checkpoint's (model.path) may be exceeded on purpose
        p.append(f"data.seq_len: got {d.seq_len}; model.config.max_position_embeddings is {limit}; allowed: at most "
                 f"{limit}, or raise model.config.max_position_embeddings")
    if d.padding == "longest" and r.parallel.pp > 1:
        p.append("data.padding: longest gives each step its own sequence length, but a pipeline schedule "
                 "(parallel.pp > 1) fixes the shapes it passes between stages; allowed with pp > 1: max_length")
    return p + check_split(d)
