"""model.kernels on CPU (trainer/kernels.py): what it resolves to on each machine, the one error line where an
explicit liger cannot run, the fused-CE fallback and its reason, liger-kernel's real patch of transformers'
Llama classes (the kernels themselves need a GPU: tests/gpu/test_kernels_compile.py), the loss contract the
fused path relies on, and what a run records. In-process."""
from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist

from tests.conftest import TINY
from trainer import kernels
from trainer.cli import main
from trainer.config import RecipeError, load_recipe
from trainer.error_report import InputError
from trainer.workloads import get_workload

STEPS = ["max_steps=1", "data.seq_len=64", "train.global_batch_size=4", "train.micro_batch_size=2",
         "train.eval_every_samples=null", "distributed.timeout_s=60"]
BERT = str(__import__("pathlib").Path(TINY).with_name("tiny_bert.yaml"))


def recipe(*overrides, path=TINY):
    return load_recipe(path, list(overrides))


@pytest.fixture
def gpu_machine(monkeypatch):
    """This machine as a CUDA one with Triton and liger-kernel installed (the checks read find_spec only)."""
    real = kernels.importlib.util.find_spec
    monkeypatch.setattr(kernels.importlib.util, "find_spec",
                        lambda name, *a: object() if name in ("triton", "liger_kernel") else real(name, *a))


def test_default_is_liger_on_a_gpu_and_none_on_cpu(gpu_machine):
    on_gpu = kernels.resolve(recipe(), "cuda")
    assert on_gpu.used == "liger" and on_gpu.requested == "auto" and on_gpu.fused_ce
    assert on_gpu.kernels == ["rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"] and on_gpu.fallback is None
    on_cpu = kernels.resolve(recipe(), "cpu")
    assert (on_cpu.used, on_cpu.kernels, on_cpu.reason) == ("none", [], "needs a CUDA GPU (this run is on cpu)")
    assert kernels.resolve(recipe("model.kernels=none"), "cuda").used == "none"


@pytest.mark.parametrize("missing, words", [
    ("triton", "model.kernels: liger needs Triton (the `triton` package; CUDA builds of torch ship it); "
               "allowed here: none or auto"),
    ("liger_kernel", "model.kernels: liger needs liger-kernel (pip install 'fabric-harness[gpu]' "
                     "(liger-kernel>=0.8)); allowed here: none or auto")])
def test_explicit_liger_names_what_is_missing(monkeypatch, missing, words):
    real = kernels.importlib.util.find_spec
    monkeypatch.setattr(kernels.importlib.util, "find_spec",
                        lambda name, *a: None if name == missing else object() if name in ("triton", "liger_kernel")
                        else real(name, *a))
    with pytest.raises(InputError) as err:
        kernels.resolve(recipe("model.kernels=liger"), "cuda")
    assert str(err.value) == words
    auto = kernels.resolve(recipe(), "cuda")  # the default falls back instead, and says why in run.json
    assert auto.used == "none" and auto.reason == words.split("liger ", 1)[1].split("; allowed")[0]


def test_explicit_liger_on_cpu_and_for_another_family(gpu_machine):
    with pytest.raises(InputError, match=r"^model.kernels: liger needs a CUDA GPU \(this run is on cpu\); "
                                         r"allowed here: none or auto$"):
        kernels.resolve(recipe("model.kernels=liger"), "cpu")
    with pytest.raises(InputError, match=r"^model.kernels: liger needs kernels for model_type 'mistral' in this "
                                         r"build \(Llama only\); allowed here: none or auto$"):
        kernels.resolve(recipe("model.kernels=liger"), "cuda", "mistral")


@pytest.mark.parametrize("overrides, words", [
    (["parallel.tp=2"], "parallel.tp 2: lm_head is split over the vocabulary"),
    (["parallel.pp=2", "train.global_batch_size=8"], "parallel.pp 2: the last pipeline stage"),
    (["parallel.data_parallel=deepspeed", "parallel.zero_stage=3"], "DeepSpeed ZeRO-3 partitions lm_head"),
    # liger's loss reads lm_head.weight: for peft's LoRA layer the base weight alone, the adapter left out
    (["lora.target_modules=[q_proj,lm_head]"], "lora.target_modules adapts lm_head")])
def test_fused_cross_entropy_falls_back_with_its_reason(gpu_machine, overrides, words):
    choice = kernels.resolve(recipe("model.kernels=liger", *overrides), "cuda")
    assert choice.used == "liger" and not choice.fused_ce and choice.kernels == ["rope", "rms_norm", "swiglu"]
    assert choice.fallback.startswith(words)


def test_an_lm_head_adapter_is_not_in_the_weight_the_fused_loss_reads():
    """Why an lm_head adapter turns the fused cross-entropy off: liger's loss takes `model.lm_head.weight`,
    and peft's LoRA layer answers with its base layer's weight (the adapter is applied only in its forward)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    head = model.get_base_model().lm_head
    assert head.weight is head.base_layer.weight and not head.weight.requires_grad
    assert any(p.requires_grad for n, p in head.named_parameters() if "lora_" in n)


def test_recipe_checks_refuse_a_family_without_kernels_and_accept_liger_for_llama():
    with pytest.raises(RecipeError) as err:
        recipe("model.kernels=liger", path=BERT)
    assert err.value.problems == ["model.kernels: liger has kernels for the Llama family (workloads llm_lora, "
                                  "llm_full); the bert_pretraining workload has none in this build; allowed: none or auto"]
    assert recipe("model.kernels=liger").model.kernels == "liger"


def test_dry_run_on_a_laptop_accepts_a_cluster_recipe_asking_for_liger(capsys):
    assert main([TINY, "model.kernels=liger", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert "kernels: liger" in out.out and out.err == ""


@pytest.fixture
def llama_module(monkeypatch):
    """transformers' Llama module, restored after the test: liger's patch is process-wide."""
    pytest.importorskip("liger_kernel.transformers", reason="liger-kernel and Triton: pip install -e .[test]")
    from transformers.models.llama import modeling_llama

    for name in ("LlamaRMSNorm", "LlamaMLP", "apply_rotary_pos_emb"):
        monkeypatch.setattr(modeling_llama, name, getattr(modeling_llama, name))
    monkeypatch.setattr(modeling_llama.LlamaForCausalLM, "forward", modeling_llama.LlamaForCausalLM.forward)
    return modeling_llama


def test_liger_patches_the_llama_classes_before_the_model_is_built_and_lora_wraps_its_mlp(llama_module, gpu_machine):
    from liger_kernel.transformers.model.llama import lce_forward
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    choice = kernels.resolve(recipe("model.kernels=liger"), "cuda")
    kernels.apply(choice)
    assert llama_module.LlamaRMSNorm is LigerRMSNorm and llama_module.LlamaMLP is LigerSwiGLUMLP
    assert llama_module.apply_rotary_pos_emb is liger_rotary_pos_emb
    assert llama_module.LlamaForCausalLM.forward is lce_forward
    wl = get_workload("llm_lora")(recipe("model.kernels=liger", "data.seq_len=64"), torch.device("cpu"), torch.float32)
    wl.kernels = choice
    model = wl._materialize(wl.build_model())
    layer = model.get_base_model().model.layers[0]
    assert isinstance(layer.mlp, LigerSwiGLUMLP) and isinstance(layer.input_layernorm, LigerRMSNorm)
    assert torch.equal(layer.input_layernorm.weight, torch.ones(128))  # the seeded init knows liger's norm too
    assert type(layer.mlp.gate_proj).__module__.startswith("peft.") and layer.mlp.gate_proj.lora_A  # LoRA inside
    assert {n for n, p in model.named_parameters() if p.requires_grad} >= {
        "base_model.model.model.layers.0.mlp.down_proj.lora_B.default.weight"}


def test_without_fused_cross_entropy_the_model_forward_is_left_alone(llama_module, gpu_machine):
    before = llama_module.LlamaForCausalLM.forward
    kernels.apply(kernels.resolve(recipe("model.kernels=liger", "parallel.tp=2"), "cuda"))
    assert llama_module.LlamaForCausalLM.forward is before


def test_the_fused_path_asks_the_model_for_the_same_summed_loss():
    """The fused path calls the model with labels and num_items_in_batch=1 (liger's lce_forward follows
    transformers' causal-LM loss contract). With transformers' own forward that is the summed loss of the
    eager path, per token shift and ignored labels included; on a GPU the same call runs liger's kernel."""
    wl = get_workload("llm_lora")(recipe("data.seq_len=64"), torch.device("cpu"), torch.float32)
    model = wl._materialize(wl.build_model())
    train, _ = wl.build_data(need_eval=False)
    batch = train.batch([0, 1, 2])
    eager, count = wl._summed_ce(model, batch)
    fused, fused_count = wl._fused_summed_ce(model, batch)
    assert int(count) == int(fused_count) > 0
    assert float(fused.detach()) == pytest.approx(float(eager.detach()), rel=1e-5)
    assert float(eager.detach()) / int(count) == pytest.approx(
        float(model(input_ids=batch["input_ids"], labels=batch["labels"]).loss), rel=1e-5)  # transformers' mean


def test_a_cpu_run_records_what_the_kernels_resolved_to_and_refuses_an_explicit_liger(tmp_path, capsys):
    def run(out, *args):
        saved = dict(os.environ)
        try:
            return main([TINY, f"output_dir={out}", *STEPS, *args])
        finally:
            os.environ.clear()
            os.environ.update(saved)
            assert not dist.is_initialized()

    assert run(tmp_path / "auto") == 0
    info = json.loads((tmp_path / "auto" / "run.json").read_text())
    assert info["model"]["kernels"] == {"requested": "auto", "used": "none", "kernels": [],
                                        "reason": "needs a CUDA GPU (this run is on cpu)", "fallback": None,
                                        "liger_version": None}
    capsys.readouterr()
    assert run(tmp_path / "liger", "model.kernels=liger") == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.strip()] == [
        "error: model.kernels: liger needs a CUDA GPU (this run is on cpu); allowed here: none or auto"]
    assert not (tmp_path / "liger" / "metrics.jsonl").exists() or not (tmp_path / "liger" / "metrics.jsonl").read_text()
    assert json.loads((tmp_path / "liger" / "run.json").read_text())["exit_code"] == 2


def test_a_liger_kernel_that_does_not_import_here_is_one_line_or_the_eager_path(gpu_machine, monkeypatch):
    """liger-kernel installed but not importable with this torch/transformers/Triton (a wheel built for
    another stack): an explicit liger is one error line at start, and auto falls back to eager with the
    reason in run.json (it escaped as an ImportError traceback from apply)."""
    import sys

    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", None)  # `import` of it raises ImportError
    with pytest.raises(InputError) as err:
        kernels.apply(kernels.resolve(recipe("model.kernels=liger"), "cuda"))
    assert str(err.value).startswith("model.kernels: liger needs liger-kernel to import here (ModuleNotFoundError: ")
    assert str(err.value).endswith("; allowed here: none or auto") and "\n" not in str(err.value)
    auto = kernels.resolve(recipe(), "cuda")
    kernels.apply(auto)
    assert (auto.used, auto.kernels, auto.liger_version) == ("none", [], None)
    assert auto.reason.startswith("needs liger-kernel to import here (ModuleNotFoundError: ") and not auto.fused_ce


@pytest.mark.parametrize("overrides, why", [
    (["model.config.tie_word_embeddings=true"], "the embeddings are tied"),
    (["model.config.vocab_size=261"], "vocab_size 261 does not divide by tp 2")])
def test_under_tp_a_whole_lm_head_is_not_called_split_in_the_fallback_reason(gpu_machine, overrides, why):
    """trainer/parallelize.py leaves lm_head whole when the embeddings are tied (Llama 3.2 1B/3B) or the
    vocabulary does not divide by tp: the logits are then whole on every rank and the loss is not
    vocabulary-parallel. The reason recorded in run.json said both were split."""
    choice = kernels.resolve(recipe("model.kernels=liger", "parallel.tp=2", *overrides), "cuda")
    assert not choice.fused_ce and "split over the vocabulary" not in choice.fallback
    assert choice.fallback.startswith(f"parallel.tp 2: lm_head stays whole ({why})"), choice.fallback
    split = kernels.resolve(recipe("model.kernels=liger", "parallel.tp=2"), "cuda")
    assert split.fallback.startswith("parallel.tp 2: lm_head is split over the vocabulary")
