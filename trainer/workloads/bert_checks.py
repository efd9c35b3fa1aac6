"""The bert_pretraining workload's recipe checks (no torch: the dry run uses them)."""
from __future__ import annotations

from ..checks import at_least
from ..config import Recipe
from .data_checks import check_split, check_synthetic_or_path
from .hf import config_problems

def check(r: Recipe) -> list[str]:
    p = []
    m, d = r.model, r.data
    if (m.path is None) == (m.config is None):
        p.append("model: set exactly one of model.path (a local BERT checkpoint directory) "
                 "or model.config (BertConfig fields, random init); got " + ("both" if m.path else "neither"))
    if m.path is None:  # a checkpoint's config.json is read where the run starts
        p += config_problems(m.config)
    p += at_least("data", d, ("seq_len",), 8)
    if not 1 <= d.max_predictions <= d.seq_len:
        p.append(f"data.max_predictions: got {d.max_predictions}; expected 1..data.seq_len ({d.seq_len})")
    if not d.synthetic and d.eval_dataset is None:
        p += check_split(d)  # the held-out eval rows come from data.split
    return p + check_synthetic_or_path(r, "a local file or directory of tokenized sequences")
