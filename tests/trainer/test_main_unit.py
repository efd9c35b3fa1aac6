"""`python -m trainer` in-process (runpy): its exit code is main's; a dry run and bad input."""
from __future__ import annotations

import runpy
import sys

import pytest
import yaml

from tests.conftest import TINY


def run_module(monkeypatch, *args) -> int:
    monkeypatch.setattr(sys, "argv", ["trainer", *args])
    monkeypatch.delitem(sys.modules, "trainer.__main__", raising=False)
    with pytest.raises(SystemExit) as info:
        runpy.run_module("trainer", run_name="__main__", alter_sys=False)
    return info.value.code


def test_dry_run_prints_the_resolved_recipe_and_layout(monkeypatch, capsys):
    assert run_module(monkeypatch, TINY, "max_steps=7", "--dry-run", "--world-size", "2") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# recipe {TINY} with max_steps=7")
    body, layout = out.split("# layout\n")
    assert yaml.safe_load(body)["max_steps"] == 7
    lay = yaml.safe_load(layout.rsplit("\n# ", 1)[0])["layout"]
    assert (lay["world_size"], lay["dp"], lay["grad_accum_steps"]) == (2, 2, 2)
    assert out.strip().splitlines()[-1] == "# world 2 = dp 2 x tp 1 x pp 1 (ddp); global batch 16 = micro-batch 4 " \
                                           "x grad-accum 2 x dp 2; per-rank batch 8"


def test_bad_override_is_one_error_line(monkeypatch, capsys):
    assert run_module(monkeypatch, TINY, "train.lr=fast", "--dry-run") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: train.lr:"), err


def test_world_size_without_dry_run_is_refused(monkeypatch, capsys):
    assert run_module(monkeypatch, TINY, "--world-size", "2") == 2
    assert capsys.readouterr().err.strip() == ("error: --world-size: only with --dry-run; a real run takes its world "
                                               "size from torchrun")


def test_unknown_option_is_one_error_line(monkeypatch, capsys):
    assert run_module(monkeypatch, TINY, "--fast") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unrecognized arguments: --fast") and "--help" in err[0]


@pytest.mark.parametrize("args,lines", [
    # what the run refuses at model build, the dry run (a laptop checking a cluster's recipe) refuses too
    (["model.config.num_hiden_layers=32"], ["error: model.config.num_hiden_layers: unknown key for LlamaConfig (did "
                                            "you mean 'num_hidden_layers'?); allowed: the fields of LlamaConfig"]),
    (["model.config.hidden_size=65"], ["error: model.config.hidden_size: 65 is not divisible by num_attention_heads 4"]),
    (["parallel.tp=3", "--world-size", "3"],
     # one mistake, one line (it was three, each naming parallel.tp)
     ["error: parallel.tp: 3 does not divide the model's num_attention_heads (4), num_key_value_heads (2), "
      "intermediate_size (352); allowed: 1, 2 (what divides num_attention_heads, num_key_value_heads, "
      "intermediate_size)"]),
    (["parallel.tp=4", "--world-size", "4"],
     ["error: parallel.tp: 4 does not divide the model's num_key_value_heads (2); allowed: 1, 2 (what divides "
      "num_attention_heads, num_key_value_heads, intermediate_size)"]),
])
def test_dry_run_checks_the_model_config_as_the_run_would(monkeypatch, capsys, args, lines):
    assert run_module(monkeypatch, TINY, *args, "--dry-run") == 2
    assert capsys.readouterr().err.strip().splitlines() == lines


def test_dry_run_leaves_a_clusters_config_path_to_the_run(monkeypatch, capsys):
    assert run_module(monkeypatch, TINY, "model.config=/cluster/models/llama/config.json", "--dry-run") == 0
    assert "'/cluster/models/llama/config.json' does not exist on this machine" in capsys.readouterr().err
