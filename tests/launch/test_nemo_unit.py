"""launch.nemo's translators in-process: each engine's printed configuration from a recipe, its refusals,
and the `python -m launch.nemo` entry point (runpy). The engines themselves are not imported."""
from __future__ import annotations

import json
import runpy
import sys

import pytest
import yaml

from launch.nemo.command import main
from tests.conftest import REPO

RECIPES = REPO / "recipes"


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_nemo2_job_sets_the_recipe_fields(capsys):
    code, out, err = cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--nodes", "8")
    assert code == 0 and err == "", err
    for line in ("recipe.trainer.strategy.tensor_model_parallel_size = 8", "recipe.data.global_batch_size = 128",
                 "recipe.trainer.max_steps = 1010", "recipe.peft = run.Config(llm.peft.LoRA)"):
        assert line in out, line
    assert out.index("telemetry.capture.early.install()") < out.index("import nemo_run")
    compile(out, "nemo2_job.py", "exec")  # the printed job is Python


def test_nemo2_json_values_follow_overrides(capsys):
    code, out, _ = cli(capsys, RECIPES / "llama70b_lora.yaml", "parallel.pp=2", "data.padding=max_length", "parallel.pp_schedule=interleaved_1f1b",
                       "parallel.pp_stages_per_rank=2", "train.eval_every_samples=1280", "--engine", "nemo2",
                       "--json", "--nodes", "2")
    assert code == 0
    v = json.loads(out)
    assert v["engine"] == "nemo2" and v["world"] == {"nodes": 2, "gpus_per_node": 8}
    f = v["values"]
    assert f["trainer.strategy.pipeline_model_parallel_size"] == 2
    assert f["trainer.strategy.virtual_pipeline_model_parallel_size"] == 2
    assert f["trainer.val_check_interval"] == 10  # 1280 samples / global batch 128


def test_bridge_job_from_llama3(capsys):
    code, out, err = cli(capsys, RECIPES / "llama3_70b_lora.yaml", "--engine", "megatron-bridge", "--json", "--nodes", "8")
    assert code == 0, err
    v = json.loads(out)
    assert v["base"] == "llama3_70b_peft_config(peft_scheme='lora')"
    f = v["values"]
    assert (f["model.tensor_model_parallel_size"], f["train.global_batch_size"], f["train.micro_batch_size"]) == (8, 128, 1)
    assert f["peft.dim"] == 16 and f["optimizer.use_distributed_optimizer"] is False
    assert any("TransformerEngine" in note for note in v["notes"])
    code, text, _ = cli(capsys, RECIPES / "llama3_70b_lora.yaml", "--engine", "megatron-bridge", "--nodes", "8")
    assert code == 0 and "callbacks=[BridgeTelemetry(" in text
    compile(text, "bridge_job.py", "exec")


def test_automodel_yaml_from_llama2(capsys):
    code, text, err = cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "automodel", "--nodes", "8")
    assert code == 0, err
    cfg = yaml.safe_load(text)
    assert cfg["distributed"]["tp_size"] == 8 and cfg["distributed"]["dp_size"] == 8
    assert cfg["step_scheduler"]["global_batch_size"] == 128 and cfg["step_scheduler"]["local_batch_size"] == 1
    assert cfg["peft"]["dim"] == 32 and cfg["peft"]["target_modules"] == ["q_proj", "k_proj", "v_proj"]


@pytest.mark.parametrize("engine,overrides,key", [
    ("nemo2", ["train.optimizer=lamb"], "train.optimizer"),
    ("nemo2", ["data.split=[0.9,0.05,0.05]"], "data.split"),
    ("megatron-bridge", [], "model.path"),  # Bridge 0.6 has no Llama-2 PEFT recipe
    ("automodel", ["parallel.pp=2", "data.padding=max_length"], "parallel.pp"),
])
def test_what_an_engine_cannot_express_is_one_line(capsys, engine, overrides, key):
    code, out, err = cli(capsys, RECIPES / "llama70b_lora.yaml", *overrides, "--engine", engine, "--nodes", "8")
    assert code == 2 and out == ""
    assert one_error(err).startswith(f"error: {key}:")


def test_tiny_recipe_gets_one_line_per_problem(capsys):
    code, _, err = cli(capsys, RECIPES / "tiny_llama_lora.yaml", "--engine", "nemo2", "--nodes", "1",
                       "--gpus-per-node", "2")
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err
    assert [line.split(":")[1].strip() for line in lines] == ["model.tokenizer", "data.dataset", "model.config"]
    assert all(line.startswith("error: ") and "allowed:" in line for line in lines)


def test_run_without_cuda_and_bad_nodes(capsys):
    code, out, err = cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--run")
    assert code == 2 and out == "" and one_error(err).startswith("error: --run: nemo2 trains on CUDA GPUs")
    code, _, err = cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--nodes", "0")
    assert code == 2 and one_error(err) == "error: --nodes: got 0; expected an integer >= 1"


def test_module_entry_point_refuses_an_unknown_engine(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["launch.nemo", str(RECIPES / "llama70b_lora.yaml"), "--engine", "nemo3"])
    monkeypatch.delitem(sys.modules, "launch.nemo.__main__", raising=False)
    with pytest.raises(SystemExit) as info:
        runpy.run_module("launch.nemo", run_name="__main__", alter_sys=False)
    assert info.value.code == 2
    line = one_error(capsys.readouterr().err)
    assert "nemo3" in line and "see python -m launch.nemo --help" in line


def test_job_is_published_whole_and_a_different_translation_is_one_line(tmp_path):
    from launch.nemo.command import publish_job
    job = tmp_path / "job.py"
    job.write_text("stale = True\n")
    assert publish_job(str(job), "fresh = True\n") is None
    assert job.read_text() == "fresh = True\n" and [p.name for p in tmp_path.iterdir()] == ["job.py"]
    inode = job.stat().st_ino
    assert publish_job(str(job), "fresh = True\n") is None and job.stat().st_ino == inode  # not rewritten
    # a rank whose text differs: it renames its own over the path, then finds another rank's in its place
    import launch.nemo.command as cli
    reads = iter([b"other", b"theirs = 1\n"])
    original = cli._read
    cli._read = lambda path: next(reads)
    try:
        problem = publish_job(str(job), "mine = 1\n")
    finally:
        cli._read = original
    assert problem.startswith("--run: ") and "differs from this rank's translation" in problem
