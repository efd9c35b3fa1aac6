"""launch.nemo: our recipes in NeMo 2, Megatron-Bridge and AutoModel configurations.

NeMo 2 is checked against its real objects: nemo-toolkit 2.7.3 lives in its own virtual environment
(tools/nemo_venv.sh builds it once per machine; it pins transformers, numpy and pyarrow, so it never
enters the project's environment), and nemo2_engine_check.py builds each printed job there. Megatron-Bridge
(Python 3.12 + TransformerEngine) and AutoModel (CUDA-only recipe) are checked against the source of
their released wheels (pip download, no install): every field the translation sets must be a field of
the configuration class that section is, and Bridge's real CallbackManager drives our adapter.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import types
import warnings
import zipfile
from pathlib import Path

import pytest
import yaml

from launch.nemo.command import main
from tests.conftest import REPO

RECIPES = REPO / "recipes"
CACHE = Path(os.environ.get("FABRIC_HARNESS_CACHE", Path.home() / ".cache" / "fabric-harness"))
BRIDGE_WHEEL = ("megatron-bridge==0.6.2", "3.12")  # https://pypi.org/project/megatron-bridge/0.6.2/
AUTOMODEL_WHEEL = ("nemo-automodel==0.7.0", None)  # https://pypi.org/project/nemo-automodel/0.7.0/
# the parents of Bridge's config classes: the megatron-core built the same day as megatron-bridge 0.6.2
MCORE_WHEEL = ("megatron-core==0.19.2", "3.12")  # https://pypi.org/project/megatron-core/0.19.2/


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def values(capsys, recipe: str, engine: str, *extra) -> dict:
    code, out, err = run_cli(capsys, RECIPES / recipe, "--engine", engine, "--json", *extra)
    assert code == 0, err
    return json.loads(out)


# ---------------------------------------------------------------- what the issue asks for, on CPU

@pytest.mark.integration
def test_llama70b_nemo2_print_shows_the_seed_evaluation(capsys):
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--print")
    assert code == 0, err
    for line in ("recipe.trainer.strategy.tensor_model_parallel_size = 8",
                 "recipe.trainer.strategy.pipeline_model_parallel_size = 1",
                 "recipe.data.global_batch_size = 128", "recipe.data.micro_batch_size = 1",
                 "recipe.peft = run.Config(llm.peft.LoRA)", "recipe.data = run.Config(llm.DollyDataModule)",
                 "llm.Llama2Config70B", "recipe.trainer.max_steps = 1010"):
        assert line in out, line
    # the tracer goes on before NeMo is imported
    assert out.index("telemetry.capture.early.install()") < out.index("import nemo_run")


@pytest.mark.integration
def test_nemo2_fields_follow_the_recipe(capsys):
    """Each field from the recipe's own values (not from the translator's table)."""
    v = values(capsys, "llama3_70b_lora.yaml", "nemo2", "--nodes", "8")
    assert v["base"].startswith("llm.llama3_70b.finetune_recipe(") and "num_nodes=8" in v["base"]
    f = v["values"]
    assert (f["trainer.num_nodes"], f["trainer.devices"]) == (8, 8)
    assert v["layout"]["dp"] == 8 and v["layout"]["grad_accum_steps"] == 16
    assert f["peft.target_modules"] == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert (f["peft.dim"], f["peft.alpha"], f["peft.dropout"]) == (16, 32, 0.0)
    assert (f["data.seq_length"], f["model.config.seq_length"]) == (2048, 2048)
    assert f["data.dataset_kwargs"] == {"pad_to_max_length": True}  # packing: true
    assert (f["optim.config.lr"], f["optim.lr_scheduler.min_lr"], f["optim.lr_scheduler.warmup_steps"]) == (1e-4, 0.0, 50)
    assert f["optim.lr_scheduler.max_steps"] == 1000  # NeMo's recipe would leave the class default, 10
    assert (f["optim.config.adam_beta1"], f["optim.config.adam_beta2"]) == (0.9, 0.98)
    assert f["optim.config.use_distributed_optimizer"] is False  # replicate: only LoRA gradients cross dp


@pytest.mark.integration
def test_overrides_and_layout_options(capsys):
    f = values(capsys, "llama70b_lora.yaml", "nemo2", "parallel.pp=2", "data.padding=max_length",
               "parallel.pp_schedule=interleaved_1f1b",
               "parallel.pp_stages_per_rank=2", "train.eval_every_samples=1280", "--nodes", "2")["values"]
    assert f["trainer.strategy.pipeline_model_parallel_size"] == 2
    assert f["trainer.strategy.virtual_pipeline_model_parallel_size"] == 2
    assert f["trainer.val_check_interval"] == 10
    assert "trainer.limit_val_batches" not in f


REFUSALS = [  # (engine, overrides, the key the one error line must name)
    ("nemo2", ["lora.target_modules=[q_proj,v_proj]"], "lora.target_modules"),
    ("nemo2", ["train.optimizer=lamb"], "train.optimizer"),
    ("nemo2", ["parallel.data_parallel=fsdp"], "parallel.data_parallel"),
    ("nemo2", ["data.split=[0.9,0.05,0.05]"], "data.split"),
    ("nemo2", ["train.eval_every_samples=100"], "train.eval_every_samples"),
    ("megatron-bridge", ["model.path=/models/Meta-Llama-3-70B", "parallel.pp_schedule=gpipe", "parallel.pp=2",
                         "data.padding=max_length"],
     "parallel.pp_schedule"),
    ("automodel", ["parallel.pp=2", "data.padding=max_length"], "parallel.pp"),
    ("automodel", ["train.target_eval_loss=1.0"], "train.target_eval_loss"),
]


@pytest.mark.integration
@pytest.mark.parametrize("engine,overrides,key", REFUSALS)
def test_what_an_engine_cannot_express_is_refused(capsys, engine, overrides, key):
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", *overrides, "--engine", engine, "--nodes", "8")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}:"), err
    assert "Traceback" not in err


# every LLM recipe x engine: translated, or refused naming the key that no engine setting expresses
OUTCOMES = {
    ("llama70b_lora", "nemo2"): None, ("llama3_70b_lora", "nemo2"): None,
    ("llama70b_lora", "megatron-bridge"): "model.path",  # Bridge 0.6 has no Llama-2 PEFT recipe
    ("llama3_70b_lora", "megatron-bridge"): None,
    ("llama70b_lora", "automodel"): None, ("llama3_70b_lora", "automodel"): "data.packing",
    ("mlperf_llama2_70b_lora", "nemo2"): "train.target_eval_loss",
    ("mlperf_llama2_70b_lora", "megatron-bridge"): "train.target_eval_loss",
    ("mlperf_llama2_70b_lora", "automodel"): "train.target_eval_loss",
    ("mlperf_llama2_70b_lora_deepspeed", "nemo2"): "train.target_eval_loss",  # and data_parallel: deepspeed
    ("mlperf_llama2_70b_lora_deepspeed", "megatron-bridge"): "train.target_eval_loss",
    ("mlperf_llama2_70b_lora_deepspeed", "automodel"): "train.target_eval_loss",
    ("tiny_llama_lora", "nemo2"): "model.tokenizer",
    ("tiny_llama_lora", "megatron-bridge"): "model.tokenizer",
    ("tiny_llama_lora", "automodel"): "model.tokenizer",
}


def test_every_llm_recipe_is_covered():
    llm = {p.stem for p in RECIPES.glob("*.yaml") if yaml.safe_load(p.read_text()).get("workload") == "llm_lora"}
    assert llm == {r for r, _ in OUTCOMES}, "a new LLM recipe: add what each NeMo engine makes of it to OUTCOMES"


@pytest.mark.integration
@pytest.mark.parametrize("recipe,engine", sorted(OUTCOMES))
def test_every_llm_recipe_translates_or_names_the_key(capsys, recipe, engine):
    world = {"tiny_llama_lora": ["--nodes", "1", "--gpus-per-node", "2"],  # each recipe's intended world
             "mlperf_llama2_70b_lora": ["--nodes", "1"],
             "mlperf_llama2_70b_lora_deepspeed": ["--nodes", "1"]}.get(recipe, ["--nodes", "8"])
    code, out, err = run_cli(capsys, RECIPES / f"{recipe}.yaml", "--engine", engine, *world)
    refused = OUTCOMES[(recipe, engine)]
    if refused is None:
        assert code == 0 and err == "", err
    else:
        assert code == 2 and f"error: {refused}:" in err, err


@pytest.mark.parametrize("engine", ["nemo2", "megatron-bridge", "automodel"])
def test_another_workloads_recipe_is_one_line_naming_the_workload(capsys, engine):
    # a sweep recipe was also judged as a model to hand over (model.config: random init), a second line
    code, out, err = run_cli(capsys, RECIPES / "collectives.yaml", "--engine", engine)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: workload: got 'collectives'; "), err


def test_run_without_cuda_refuses_with_one_line(capsys, monkeypatch):
    import torch

    # a machine without CUDA, also where there is a GPU (the refusal is what is tested, not the machine)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--run")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and err.startswith("error: --run: nemo2 trains on CUDA GPUs")


@pytest.mark.integration
def test_bad_engine_is_one_line():
    res = subprocess.run([sys.executable, "-m", "launch.nemo", str(RECIPES / "llama70b_lora.yaml"), "--engine", "nemo3"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "nemo3" in res.stderr


# ---------------------------------------------------------------- NeMo 2: its real objects

@pytest.fixture(scope="session")
def nemo_python() -> str:
    """The NeMo 2 venv's python, built by tools/nemo_venv.sh on first use (about 11 minutes, ~3 GB)."""
    res = subprocess.run(["bash", str(REPO / "tools" / "nemo_venv.sh")], capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "PYTHON": sys.executable})  # the venv's Python is the suite's
    assert res.returncode == 0, f"tools/nemo_venv.sh failed:\n{res.stderr[-3000:]}"
    return res.stdout.strip().splitlines()[-1]


NEMO2_CASES = {
    "llama70b_lora": ["--nodes", "8"],
    "llama3_70b_lora": ["--nodes", "8"],
    "llama70b_pp_interleaved": ["parallel.pp=2", "data.padding=max_length", "parallel.pp_schedule=interleaved_1f1b", "parallel.pp_stages_per_rank=2",
                                "train.eval_every_samples=1280", "data.packing=true", "--nodes", "2"],
}


@pytest.mark.integration
def test_nemo2_jobs_build_nemo_objects_field_by_field(nemo_python, tmp_path, capsys):
    cases, expected = [], {}
    for case, extra in NEMO2_CASES.items():
        recipe = RECIPES / ("llama3_70b_lora.yaml" if case.startswith("llama3") else "llama70b_lora.yaml")
        code, job, err = run_cli(capsys, recipe, "--engine", "nemo2", *extra)
        assert code == 0, err
        (tmp_path / f"{case}.py").write_text(job)
        expected[case] = values(capsys, recipe.name, "nemo2", *extra)
        cases.append({"id": case, "job": str(tmp_path / f"{case}.py"), "values": expected[case]["values"]})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([nemo_python, str(REPO / "tests" / "launch" / "nemo2_engine_check.py"), str(tmp_path / "cases.json"),
                          str(tmp_path / "out.json"), str(REPO)], capture_output=True, text=True, timeout=1500, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    found = {c["id"]: c for c in out["cases"]}
    for case in NEMO2_CASES:
        got = found[case]
        assert "error" not in got, got.get("error")
        assert got["read_back"] == expected[case]["values"]  # every field NeMo holds is the one we set
        b, layout = got["built"], expected[case]["layout"]
        assert (b["tp"], b["pp"]) == (layout["tp"], layout["pp"])
        assert b["num_nodes"] * b["devices"] == layout["world_size"]
        assert b["data"]["global_batch_size"] == layout["global_batch_size"]
        assert b["data"]["micro_batch_size"] == layout["micro_batch_size"]
        assert b["data"]["class"] == "DollyDataModule" and b["data"]["seed"] == 1234
        assert b["lora"]["class"] == "LoRA"
        assert b["scheduler"]["class"] == "CosineAnnealingScheduler" and b["optimizer"]["name"] == "adam"
        assert b["callbacks"][-1] == "TelemetryCallback"
    seed = found["llama70b_lora"]["built"]  # Llama-2 70B as the fabric evaluation ran it
    assert seed["recipe_fn"] == "nemo.collections.llm.api.finetune"
    assert seed["model_config_class"] == "Llama2Config70B"
    assert (seed["tp"], seed["pp"], seed["max_steps"]) == (8, 1, 1010)
    assert seed["lora"] == {"class": "LoRA", "dim": 32, "alpha": 32, "dropout": 0.0, "target_modules": ["linear_qkv"]}
    l3 = found["llama3_70b_lora"]["built"]
    assert l3["model_config_class"] == "Llama3Config70B"
    assert l3["lora"]["dim"] == 16 and l3["data"]["packed_size"] == 2048 and l3["data"]["seq_length"] == 2048
    assert l3["scheduler"] == {"class": "CosineAnnealingScheduler", "warmup_steps": 50, "min_lr": 0.0,
                               "max_steps": 1000, "constant_steps": 0}
    pp = found["llama70b_pp_interleaved"]["built"]
    assert (pp["pp"], pp["vp"]) == (2, 2)
    # megatron-core binds all_gather/reduce_scatter at import: imported first, its modules hold functions the
    # tracer cannot see and the callback refuses; imported after telemetry.capture.early.install(), they call ours
    late, early = out["binding"]["late"], out["binding"]["early"]
    assert any(s.startswith("megatron.core.tensor_parallel.mappings.dist_all_gather_func -> torch.distributed")
               for s in late["stale"]), late
    assert late["calls_traced_function"] is False and "bound before the telemetry tracer" in (late["refused"] or "")
    assert early == {"stale": [], "refused": None, "calls_traced_function": True}


# ---------------------------------------------------------------- Megatron-Bridge and AutoModel: released source

def wheel(spec: tuple[str, str | None]) -> Path:
    """The released wheel (pip download, no dependencies, no install), cached per machine."""
    requirement, python = spec
    target = CACHE / "wheels"
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(target.glob(f"{name}-{requirement.split('==')[1]}-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(target), requirement]
        if python:
            cmd[4:4] = ["--python-version", python]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        found = sorted(target.glob(f"{name}-{requirement.split('==')[1]}-*.whl"))
    return found[0]


def class_fields(wheels: list[Path]) -> dict[str, set[str]]:
    """Class name -> its annotated fields and __init__ parameters, with the fields of its bases (by name)."""
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                if not name.endswith(".py"):
                    continue
                try:
                    with warnings.catch_warnings():  # their sources' own escape-sequence warnings
                        warnings.simplefilter("ignore")
                        tree = ast.parse(z.read(name))
                except SyntaxError:
                    continue
                aliases = {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                           for a in n.names if a.asname}
                for node in ast.walk(tree):
                    if not isinstance(node, ast.ClassDef):
                        continue
                    fields = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                              and isinstance(s.target, ast.Name)}
                    for s in node.body:
                        if isinstance(s, ast.FunctionDef) and s.name == "__init__":
                            fields |= {a.arg for a in s.args.args + s.args.kwonlyargs}
                    own.setdefault(node.name, set()).update(fields)
                    bases.setdefault(node.name, []).extend(
                        aliases.get(b.id, b.id) if isinstance(b, ast.Name) else b.attr
                        for b in node.bases if isinstance(b, (ast.Name, ast.Attribute)))

    def all_fields(cls: str, seen: set) -> set[str]:
        if cls in seen:
            return set()
        seen.add(cls)
        out = set(own.get(cls, ()))
        for b in bases.get(cls, ()):
            out |= all_fields(b, seen)
        return out
    return {cls: all_fields(cls, set()) for cls in own}


# the configuration class behind each section the translations set (read from the same wheels)
BRIDGE_SECTIONS = {"model": "GPTModelProvider", "train": "TrainingConfig", "validation": "ValidationConfig",
                   "peft": "LoRA", "dataset": "GPTSFTDatasetConfig", "dataset.offline_packing_specs": "PackedSequenceSpecs",
                   "optimizer": "OptimizerConfig", "scheduler": "SchedulerConfig", "checkpoint": "CheckpointConfig",
                   "logger": "LoggerConfig", "rng": "RNGConfig"}


@pytest.mark.integration
def test_bridge_translation_sets_fields_its_config_classes_have(capsys):
    fields = class_fields([wheel(BRIDGE_WHEEL), wheel(MCORE_WHEEL)])
    v = values(capsys, "llama3_70b_lora.yaml", "megatron-bridge", "--nodes", "8")
    assert v["base"] == "llama3_70b_peft_config(peft_scheme='lora')"
    with zipfile.ZipFile(wheel(BRIDGE_WHEEL)) as z:
        assert "llama3_70b_peft_config" in z.read("megatron/bridge/recipes/llama/__init__.py").decode() or \
               "llama3_70b_peft_config" in z.read("megatron/bridge/recipes/llama/llama3.py").decode()
    missing = []
    for path in v["values"]:
        section, leaf = path.rsplit(".", 1)
        if leaf not in fields[BRIDGE_SECTIONS[section]]:
            missing.append(f"{path} ({BRIDGE_SECTIONS[section]})")
    assert not missing, missing
    f = v["values"]
    assert (f["model.tensor_model_parallel_size"], f["train.global_batch_size"], f["train.micro_batch_size"]) == (8, 128, 1)


@pytest.fixture
def process_tracer():
    """The recorder installs the process-wide tracer; leave torch.distributed as the other tests expect it."""
    import telemetry.capture.early
    yield
    telemetry.capture.early.reset()


@pytest.mark.integration
def test_bridge_callback_manager_drives_our_adapter(tmp_path, process_tracer):
    """Megatron-Bridge's own callbacks.py (stdlib only at run time) from the released wheel, firing our
    adapter as its training loop does; our run directory comes out."""
    with zipfile.ZipFile(wheel(BRIDGE_WHEEL)) as z:
        source = z.read("megatron/bridge/training/callbacks.py")
    (tmp_path / "bridge_callbacks.py").write_bytes(source)
    spec = importlib.util.spec_from_file_location("bridge_callbacks", tmp_path / "bridge_callbacks.py")
    cb = importlib.util.module_from_spec(spec)
    sys.modules["bridge_callbacks"] = cb  # its dataclasses look their module up
    try:
        spec.loader.exec_module(cb)
    finally:
        del sys.modules["bridge_callbacks"]
    from telemetry.integrations.engines import BridgeTelemetry
    run_dir = tmp_path / "run"
    adapter = BridgeTelemetry(str(run_dir), name="bridge_test")
    manager = cb.CallbackManager()
    manager.add(adapter)
    assert {"on_train_start", "on_train_step_start", "on_train_step_end", "on_train_end"} <= set(manager.events) \
        or all(manager.has_callbacks(e) for e in ("on_train_start", "on_train_step_start", "on_train_step_end"))
    import torch
    train_state = types.SimpleNamespace(step=0)
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(global_batch_size=8, micro_batch_size=1),
                                model=types.SimpleNamespace(tensor_model_parallel_size=1, pipeline_model_parallel_size=1))
    state = types.SimpleNamespace(cfg=cfg, train_state=train_state)
    manager.fire("on_train_start", cb.CallbackContext(state=state, model=[]))
    for step in range(3):
        manager.fire("on_train_step_start", cb.CallbackContext(state=state, model=[]))
        train_state.step += 1
        manager.fire("on_train_step_end", cb.CallbackContext(state=state, model=[], loss_dict={"lm loss": torch.tensor(2.0 - step)},
                                                             grad_norm=0.5, skipped_iter=False))
    manager.fire("on_train_end", cb.CallbackContext(state=state, model=[]))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["loss"] for r in rows] == [2.0, 1.0, 0.0]
    assert all(r["grad_norm"] == 0.5 and r["samples_per_s"] > 0 for r in rows)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "completed" and info["engine"] == "megatron-bridge" and info["layout"]["global_batch_size"] == 8


AUTOMODEL_SECTIONS = {"step_scheduler": "StepSchedulerConfig", "peft": "PeftConfig", "lr_scheduler": "LRSchedulerConfig",
                      "dataset": "ColumnMappedTextInstructionDataset", "rng": "StatefulRNG"}


@pytest.mark.integration
def test_automodel_yaml_uses_its_config_fields(capsys):
    fields = class_fields([wheel(AUTOMODEL_WHEEL)])
    code, text, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "automodel", "--nodes", "8")
    assert code == 0, err
    cfg = yaml.safe_load(text)
    assert cfg["distributed"]["tp_size"] == 8 and cfg["distributed"]["dp_size"] == 8
    assert cfg["distributed"]["dp_replicate_size"] == 8  # replicate: no sharding of the frozen base over dp
    assert cfg["step_scheduler"]["global_batch_size"] == 128 and cfg["step_scheduler"]["local_batch_size"] == 1
    assert cfg["peft"]["target_modules"] == ["q_proj", "k_proj", "v_proj"] and cfg["peft"]["dim"] == 32
    missing = [f"{section}.{key}" for section, cls in AUTOMODEL_SECTIONS.items() for key in cfg[section]
               if key != "_target_" and key not in fields[cls] and not (section == "step_scheduler" and key == "local_batch_size")]
    assert not missing, missing
    with zipfile.ZipFile(wheel(AUTOMODEL_WHEEL)) as z:  # the distributed keys its parser pops
        dist_utils = z.read("nemo_automodel/recipes/_dist_utils.py").decode()
    fsdp2 = fields["FSDP2Config"]  # the rest of the section becomes the strategy's config
    for key in cfg["distributed"]:
        assert f'"{key}"' in dist_utils or key in fsdp2, key


@pytest.mark.integration
def test_automodel_recipe_subclass_brackets_each_optimizer_step(tmp_path, process_tracer):
    """The subclass around a stand-in with AutoModel 0.7.0's loop interface (setup, _run_train_optim_step
    returning a MetricsSample-like object, step_scheduler.step, run_train_validation_loop); the real recipe
    is CUDA-only. Its method names are checked against the released wheel."""
    with zipfile.ZipFile(wheel(AUTOMODEL_WHEEL)) as z:
        source = z.read("nemo_automodel/recipes/llm/train_ft.py").decode()
    for name in ("def setup(self", "def _run_train_optim_step(self, batches", "def run_train_validation_loop(self",
                 "self.step_scheduler.step"):
        assert name in source, name
    from telemetry.integrations.engines import automodel_recipe

    class StandIn:  # what the subclass relies on, nothing more
        def __init__(self, cfg):
            self.cfg, self.step_scheduler = cfg, types.SimpleNamespace(step=0)

        def setup(self):
            pass

        def _run_train_optim_step(self, batches, max_grad_norm=None):
            self.step_scheduler.step += 1
            return types.SimpleNamespace(metrics={"loss": 3.0 / self.step_scheduler.step, "lr": 1e-4, "grad_norm": 0.25})

        def run_train_validation_loop(self):
            for _ in range(3):
                self._run_train_optim_step([None])

    recipe = automodel_recipe(StandIn, str(tmp_path / "run"), layout={"world_size": 1, "global_batch_size": 4})({})
    recipe.setup()
    recipe.run_train_validation_loop()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and [r["loss"] for r in rows] == [3.0, 1.5, 1.0]
    assert all(r["lr"] == 1e-4 and r["grad_norm"] == 0.25 and r["samples_per_s"] > 0 for r in rows)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "completed" and info["engine"] == "nemo-automodel"


# ---------------------------------------------------------------- the launcher's world, in-process

LAUNCHER_VARS = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE",
                 "SLURM_GPUS_ON_NODE", "NNODES")


@pytest.fixture
def launcher_env(monkeypatch):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env, nodes, gpus", [
    ({"WORLD_SIZE": "64", "LOCAL_WORLD_SIZE": "8"}, 8, 8),  # torchrun --nnodes 8 --nproc-per-node 8
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "4"}, 4, 4),
    # sbatch + torchrun: Slurm counts one task (the agent) per node; torchrun's numbers win
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "1"}, 2, 8),
    ({"SLURM_NNODES": "8", "SLURM_NTASKS_PER_NODE": "8"}, 8, 8),  # srun, one task per GPU
    ({"SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "8(x4)"}, 4, 8),
    ({"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "4"}, 2, 4),
    ({}, 1, 8),  # no launcher: tp 8 x pp 1 fits one node of 8
])
def test_world_comes_from_the_launcher_not_the_recipes_degrees(launcher_env, capsys, env, nodes, gpus):
    for k, v in env.items():
        launcher_env.setenv(k, v)
    out = values(capsys, "llama70b_lora.yaml", "nemo2")
    assert out["world"] == {"nodes": nodes, "gpus_per_node": gpus}
    assert out["layout"]["world_size"] == nodes * gpus and out["layout"]["tp"] == 8


def test_flags_that_contradict_torchruns_world_are_refused(launcher_env, capsys):
    launcher_env.setenv("WORLD_SIZE", "64")
    launcher_env.setenv("LOCAL_WORLD_SIZE", "8")
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--nodes", "1", "--json")
    assert code == 2 and err.startswith("error: --nodes 1 x --gpus-per-node 8 = 8 ranks, but torchrun")
    launcher_env.setenv("WORLD_SIZE", "60")
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--json")
    assert code == 2 and "not a multiple of LOCAL_WORLD_SIZE 8" in err
    assert err.strip().endswith("; allowed: the same number of ranks on every node (torchrun --nproc-per-node N on each)")
    launcher_env.delenv("WORLD_SIZE")
    launcher_env.setenv("SLURM_NNODES", "eight")
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--json")
    assert code == 2 and "SLURM_NNODES: got 'eight'" in err


def test_run_under_torchrun_builds_the_job_for_the_launchers_world(launcher_env, capsys, tmp_path):
    """--run as rank 0 of a 64-rank torchrun: the job it writes and runs is for 8 nodes x 8 GPUs, and it runs
    in this process's rank (no second torchrun). CUDA and the child process are the only stand-ins."""
    import torch

    calls = []
    launcher_env.setattr(torch.cuda, "is_available", lambda: True)
    from telemetry.integrations import attach
    launcher_env.setattr(attach, "run_job", lambda command, env: calls.append((command, env)) or 0)
    for k, v in {"WORLD_SIZE": "64", "LOCAL_WORLD_SIZE": "8", "RANK": "0"}.items():
        launcher_env.setenv(k, v)
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--run",
                             f"output_dir={tmp_path / 'run'}")
    assert code == 0, err
    ((command, env),) = calls
    job = tmp_path / "run" / "engine" / "nemo2_job.py"
    assert command == [sys.executable, str(job)]
    harness = json.loads(env["FABRIC_HARNESS_RECIPE_JSON"])
    assert harness["layout"]["world_size"] == 64, harness["layout"]
    text = job.read_text()
    assert "num_nodes = 8" in text and "devices = 8" in text, text


@pytest.mark.parametrize("engine", ["nemo2", "automodel"])
def test_run_outside_a_launcher_refuses_a_job_of_several_nodes(launcher_env, capsys, tmp_path, engine):
    """--run with no launcher starts one node (torchrun --standalone / automodel --nproc-per-node G). A job
    translated for 2 nodes would then start 4 processes for a world of 8: NeMo waits for ranks that never come,
    and run.json's layout says 8. Refused with one line, before anything starts."""
    import torch

    from telemetry.integrations import attach
    calls = []
    launcher_env.setattr(torch.cuda, "is_available", lambda: True)
    launcher_env.setattr(attach, "run_job", lambda command, env: calls.append(command) or 0)
    code, out, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", engine, "--run", "--nodes", "2",
                             "--gpus-per-node", "4", f"output_dir={tmp_path / 'run'}")
    lines = err.strip().splitlines()
    assert code == 2 and calls == [] and len(lines) == 1, err
    assert lines[0].startswith("error: --nodes: 2 nodes x 4 GPUs") and "torchrun" in lines[0], lines[0]


def _printed_job_over_a_stale_one(tmp_path, capsys, stale: str) -> tuple[str, str, Path]:
    """(the output_dir override, the 2-node x 4-GPU nemo2 job as --print gives it, its path), with an
    earlier run's job (`stale` after a comment line) left at that path."""
    override = f"output_dir={tmp_path / 'run'}"
    code, printed, err = run_cli(capsys, RECIPES / "llama70b_lora.yaml", "--engine", "nemo2", "--print",
                                 "--nodes", "2", "--gpus-per-node", "4", override)
    assert code == 0, err
    job = tmp_path / "run" / "engine" / "nemo2_job.py"
    job.parent.mkdir(parents=True)
    job.write_text("# an earlier run's job\n" + stale)
    return override, printed, job


def _task_environ() -> dict:
    """This environment without any launcher's variables: each task adds the ones its launcher sets."""
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}


def _task(env: dict, override: str) -> subprocess.Popen:
    """tests/launch/srun_task.py running the job with --run, as one launched task."""
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "launch" / "srun_task.py"),
                             str(RECIPES / "llama70b_lora.yaml"), "--engine", "nemo2", "--run", override],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.integration
def test_srun_tasks_all_run_the_same_complete_job(tmp_path, capsys):
    """8 processes started as srun starts its tasks (SLURM_PROCID/LOCALID/NODEID, no RANK), all at once, over
    a stale job of an earlier run: every task runs the whole current job, byte for byte the printed one."""
    override, printed, job = _printed_job_over_a_stale_one(tmp_path, capsys, "x = 1\n" * 200_000)
    base = _task_environ()
    base.update(PYTHONPATH=str(REPO), TASK_OUT=str(tmp_path), SLURM_NNODES="2", SLURM_NTASKS_PER_NODE="4",
                SLURM_NTASKS="8", SLURM_JOB_ID="77")
    procs = []
    for task in range(8):
        env = dict(base, SLURM_PROCID=str(task), SLURM_LOCALID=str(task % 4), SLURM_NODEID=str(task // 4))
        procs.append(_task(env, override))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    want = hashlib.sha256(printed.encode()).hexdigest()
    runs = [json.loads((tmp_path / f"task{t}.json").read_text()) for t in range(8)]
    assert {r["sha256"] for r in runs} == {want}
    assert all(r["command"] == [sys.executable, str(job)] for r in runs)  # srun started one task per GPU
    assert job.read_text() == printed and not list(job.parent.glob("*.tmp"))


@pytest.mark.integration
def test_torchrun_workers_that_start_before_rank_0_run_the_current_job(tmp_path, capsys):
    """torchrun's workers 1..7 start (and finish) before rank 0 reaches --run, over an earlier run's job: each
    runs the current job all the same. (Before: only rank 0 wrote the file and nobody waited, so these ran
    the stale job.)"""
    override, printed, job = _printed_job_over_a_stale_one(tmp_path, capsys, "x = 1\n")
    base = _task_environ()
    base.update(PYTHONPATH=str(REPO), TASK_OUT=str(tmp_path), WORLD_SIZE="8", LOCAL_WORLD_SIZE="4")

    def worker(rank: int) -> subprocess.Popen:
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank % 4), GROUP_RANK=str(rank // 4))
        return _task(env, override)

    for group in ([worker(r) for r in range(1, 8)], [worker(0)]):  # rank 0 last
        for p in group:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    want = hashlib.sha256(printed.encode()).hexdigest()
    assert {json.loads((tmp_path / f"task{r}.json").read_text())["sha256"] for r in range(8)} == {want}
