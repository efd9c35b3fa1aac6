"""The recipe's DeepSpeed keys: refused with one error line each (exit 2), the built configuration, and
the key tables checked against the installed DeepSpeed's own names."""
from __future__ import annotations

import pathlib

import pytest

from trainer.cli import main
from trainer.config import load_recipe
from trainer.engines import deepspeed_config
from trainer.layout import resolve_layout

from ..conftest import REPO, TINY

DS = ["parallel.data_parallel=deepspeed", "parallel.zero_stage=3"]
BERT = str(REPO / "recipes" / "tiny_bert.yaml")

BAD = [
    (["parallel.data_parallel=deepspeed"],
     ["parallel.zero_stage: got null; required with data_parallel=deepspeed; allowed: 1, 2, 3"]),
    (["parallel.data_parallel=deepspeed", "parallel.zero_stage=4"],
     ["parallel.zero_stage: got 4; required with data_parallel=deepspeed; allowed: 1, 2, 3"]),
    (["parallel.zero_stage=2"],
     ["parallel.zero_stage: got 2; only with parallel.data_parallel=deepspeed (now 'ddp'); allowed: null"]),
    (["deepspeed={steps_per_print: 10}"],
     ["deepspeed: set, but parallel.data_parallel is 'ddp'; allowed: an empty block, or parallel.data_parallel=deepspeed"]),
    ([*DS, "deepspeed.train_batch_size=32"],
     ["deepspeed.train_batch_size: set by train.global_batch_size in the recipe; remove it from the deepspeed block"]),
    ([*DS, "deepspeed.gradient_clipping=0.3", "deepspeed.bf16={enabled: true}"],
     ["deepspeed.gradient_clipping: set by train.grad_clip in the recipe",
      "deepspeed.bf16: set by train.precision in the recipe"]),
    ([*DS, "deepspeed.zero_optimization.stage=2"],
     ["deepspeed.zero_optimization.stage: set by parallel.zero_stage in the recipe"]),
    ([*DS, "deepspeed.optimizer={type: Adam}"], ["deepspeed.optimizer: set by train.optimizer in the recipe"]),
    ([*DS, "deepspeed.gradient_allreduce_op=sum"], ["deepspeed.gradient_allreduce_op: set by the harness"]),
    ([*DS, "deepspeed.wall_clock_breakdwn=true"],
     ["deepspeed.wall_clock_breakdwn: unknown DeepSpeed key; did you mean 'wall_clock_breakdown'? allowed: "]),
    ([*DS, "deepspeed.zero_optimization.overlap_com=true"],
     ["deepspeed.zero_optimization.overlap_com: unknown DeepSpeed key; did you mean 'overlap_comm'?"]),
    ([*DS, "deepspeed.zero_optimization=3"], ["deepspeed.zero_optimization: got 3; expected a mapping"]),
    ([*DS, "deepspeed=[1]"], ["deepspeed: got [1] (list); expected a mapping"]),
    ([*DS, "parallel.tp=2"], ["parallel.tp: got 2; DeepSpeed runs data parallel only in this harness; allowed: 1"]),
]


@pytest.mark.parametrize("overrides,expected", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_deepspeed_settings_exit_2_naming_them(overrides, expected, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main([TINY, *overrides, "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == len(expected), lines
    for line, want in zip(lines, expected):
        assert line.startswith("error: " + want), (line, want)


def test_lamb_and_lars_are_refused_under_zero(capsys):
    assert main([BERT, *DS, "--dry-run"]) == 2  # tiny_bert trains with LAMB
    err = capsys.readouterr().err
    assert "train.optimizer: got 'lamb'; with DeepSpeed ZeRO the optimizer sees flattened partitions" in err
    assert main([BERT, *DS, "train.optimizer=adamw", "--dry-run", "--world-size", "2"]) == 0


def test_built_configuration_takes_batch_clip_precision_and_stage_from_the_recipe(capsys):
    recipe = load_recipe(TINY, [*DS, "deepspeed={zero_optimization: {overlap_comm: false}, wall_clock_breakdown: true}"])
    layout, problems = resolve_layout(recipe, 2)
    assert not problems
    config = deepspeed_config.build(recipe, layout, bf16=False)
    assert config["train_batch_size"] == 16 and config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 2 and config["gradient_clipping"] == 1.0
    assert config["zero_optimization"] == {"overlap_comm": False, "stage": 3}
    assert config["wall_clock_breakdown"] is True and "bf16" not in config
    assert config["zero_allow_untested_optimizer"] is True  # the recipe's torch AdamW is a client optimizer
    assert "gradient_clipping" not in deepspeed_config.build(load_recipe(TINY, [*DS, "train.grad_clip=null"]),
                                                             layout, bf16=True)
    assert deepspeed_config.build(recipe, layout, bf16=True)["bf16"] == {"enabled": True}
    # the dry run prints it
    assert main([TINY, *DS, "--dry-run", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "deepspeed_config:\n  train_batch_size: 16\n  train_micro_batch_size_per_gpu: 4" in out


def test_the_mlperf_variant_mirrors_the_reference_zero3_setup(capsys):
    path = str(REPO / "recipes" / "mlperf_llama2_70b_lora_deepspeed.yaml")
    assert main([path, "--dry-run", "--world-size", "8"]) == 0
    assert "global batch 8 = micro-batch 1 x grad-accum 1 x dp 8" in capsys.readouterr().out
    r = load_recipe(path)
    config = deepspeed_config.build(r, resolve_layout(r, 8)[0], bf16=r.train.precision == "bf16")
    # the MLCommons reference's configs/default_config.yaml: ZeRO 3, clip 0.3, GAS 1, no offload, bf16
    assert config["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "none"},
                                           "offload_param": {"device": "none"}}
    assert (config["gradient_clipping"], config["gradient_accumulation_steps"], config["bf16"]) == (
        0.3, 1, {"enabled": True})


# ---------------------------------------------------------------- against the installed DeepSpeed

def test_key_tables_are_deepspeeds_own_names(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # a CPU test, also on a machine with a GPU
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra")
    import deepspeed
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    fields = DeepSpeedZeroConfig.model_fields
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    assert set(deepspeed_config.ZERO_KEYS) == names - {"stage"}
    # every top-level key we pass through or own is a key DeepSpeed's sources read
    root = pathlib.Path(deepspeed.__file__).parent
    text = "\n".join(p.read_text(errors="replace") for sub in ("runtime", "monitor", "profiling", "comm", "utils")
                     for p in (root / sub).rglob("*.py"))
    for key in (*deepspeed_config.PASSTHROUGH, *deepspeed_config.OWNED):
        assert f'"{key}"' in text or f"'{key}'" in text, key


def test_deepspeeds_parser_accepts_the_built_configuration(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # a CPU test, also on a machine with a GPU
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra")
    from deepspeed.runtime.config import DeepSpeedConfig

    r = load_recipe(str(REPO / "recipes" / "mlperf_llama2_70b_lora_deepspeed.yaml"), ["train.global_batch_size=1"])
    parsed = DeepSpeedConfig(deepspeed_config.build(r, resolve_layout(r, 1)[0], bf16=True))  # world 1 here
    assert (parsed.zero_optimization_stage, parsed.gradient_clipping, parsed.train_batch_size) == (3, 0.3, 1)


def test_a_value_deepspeed_refuses_is_one_input_error(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra")
    from trainer.engines.deepspeed import _check_values
    from trainer.error_report import InputError

    r = load_recipe(TINY, [*DS, "deepspeed.zero_optimization.overlap_comm=maybe"])  # keys pass, the value not
    with pytest.raises(InputError) as exc:
        _check_values(deepspeed_config.build(r, resolve_layout(r, 1)[0], bf16=False))  # world 1 here
    message = str(exc.value)
    assert message.startswith("deepspeed: DeepSpeed refuses the configuration") and "overlap_comm" in message
    assert "\n" not in message
