"""trainer.materialize in-process: a meta-device LoRA model filled from a safetensors checkpoint (each tensor
read back equal to what was saved; LoRA by its own rule), the seeded init that depends only on the seed and
the parameter name, and the refusals."""
from __future__ import annotations

import shutil

import pytest
import torch

from tests.conftest import REPO, TINY
from trainer.config import load_recipe
from trainer.error_report import InputError
from trainer.materialize import SafetensorsSource, is_meta
from trainer.workloads import get_workload

SMALL = ["data.seq_len=32", "train.eval_every_samples=null", "lora.dropout=0.0"]


def workload(*overrides):
    recipe = load_recipe(TINY, [*SMALL, *overrides])
    return get_workload("llm_lora")(recipe, torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny recipe's model, initialised by transformers and saved as a Hugging Face checkpoint."""
    from transformers import LlamaForCausalLM

    w = workload()
    torch.manual_seed(7)
    model = LlamaForCausalLM(w._model_config())
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    model.save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(REPO / "recipes" / "assets" / "byte_tokenizer" / name, path / name)
    return path, {k: v.clone() for k, v in model.state_dict().items()}


def test_weights_come_from_the_checkpoint_slices(checkpoint):
    path, saved = checkpoint
    assert SafetensorsSource.available(str(path))
    w = workload(f"model.path={path}", "model.config=null", "model.tokenizer=null")
    meta = w.build_model()
    assert is_meta(meta)
    model = w._materialize(meta)
    assert not is_meta(model) and w.load_stats["source"] == "safetensors slices"
    assert w.load_stats["tensors"] > 0 and w.load_stats["bytes_read"] > 0
    base = {k.replace("base_model.model.", "").replace(".base_layer", ""): v
            for k, v in model.state_dict().items() if "lora_" not in k}
    for key, value in saved.items():
        assert torch.equal(base[key], value), key
    lora_b = [v for k, v in model.state_dict().items() if "lora_B" in k]
    assert lora_b and all(not v.any() for v in lora_b)  # LoRA starts as the identity: B is zero


def test_seeded_init_depends_on_the_seed_only():
    a, b = workload(), workload()
    ma, mb = a._materialize(a.build_model()), b._materialize(b.build_model())
    for (name, pa), (_, pb) in zip(ma.named_parameters(), mb.named_parameters()):
        assert torch.equal(pa, pb), name
    c = workload("seed=99")
    mc = c._materialize(c.build_model())
    changed = [n for (n, pa), (_, pc) in zip(ma.named_parameters(), mc.named_parameters()) if not torch.equal(pa, pc)]
    assert changed and any("lora_A" in n for n in changed)


def test_a_directory_without_a_model_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as info:
        workload(f"model.path={tmp_path / 'empty'}", "model.config=null", "model.tokenizer=null")
    text = str(info.value)
    assert text.startswith("model.path:") and "\n" not in text
