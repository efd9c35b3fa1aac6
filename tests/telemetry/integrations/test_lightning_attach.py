"""Our telemetry on an unmodified Lightning job (the NeMo 2 path) and the import-order guard.

lightning_job.py imports a stand-in 'megatron' (fake_engine/) that binds all_gather_into_tensor at
import, as megatron-core does, then trains with DDP on 2 CPU ranks. Started through
`python -m telemetry.integrations.attach`, the tracer is installed before that import and Lightning adds our callback
through its entry point; the run directory must count the bound all-gather's bytes. Built in the wrong
order, the callback refuses with one line. The real megatron-core binding is checked in the NeMo venv
(tests/launch/test_nemo.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST, REPO, run_cli

HERE = Path(__file__).parent
GATHER_BYTES = 2 * 256 * 4  # world 2 x 256 float32 (lightning_job.GATHER_ELEMENTS)
DDP_BUCKET_BYTES = (8 + 1) * 4  # Linear(8, 1): weight and bias, float32


def entry_point_dir(tmp_path: Path) -> Path:
    """The entry point pyproject.toml declares, as an installed distribution's metadata carries it: the
    installed fabric-harness's own where `pip install -e .` has put it there (CI), else a stand-in (an
    environment installed before the entry point existed); never both, or Lightning adds two callbacks."""
    from importlib.metadata import entry_points
    root = tmp_path / "ep"
    if any(ep.value == "telemetry.integrations.lightning:callbacks_factory"
           for ep in entry_points(group="lightning.pytorch.callbacks_factory")):
        root.mkdir()
        return root
    info = root / "fabric_harness_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fabric-harness-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[lightning.pytorch.callbacks_factory]\nfabric_harness = telemetry.integrations.lightning:callbacks_factory\n")
    return root


def test_pyproject_declares_the_lightning_entry_point():
    text = (REPO / "pyproject.toml").read_text()  # tomllib is 3.11+; the project supports 3.10
    section = text.split('[project.entry-points."lightning.pytorch.callbacks_factory"]', 1)[1].split("\n[", 1)[0]
    assert 'fabric_harness = "telemetry.integrations.lightning:callbacks_factory"' in section


@pytest.fixture(scope="module")
def attached_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attach")
    run_dir = tmp / "lightning_run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE / "fake_engine"), str(entry_point_dir(tmp))])}
    env.pop("FABRIC_HARNESS_RUN_DIR", None)
    cmd = [sys.executable, "-m", "telemetry.integrations.attach", "--run-dir", str(run_dir), "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "lightning_job.py"), str(run_dir), "4"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    assert res.returncode == 0, res.stderr[-4000:]
    return run_dir


@pytest.mark.integration
def test_attached_job_writes_our_run_directory(attached_run):
    info = json.loads((attached_run / "run.json").read_text())
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["engine"] == "lightning"
    assert info["layout"]["world_size"] == 2 and info["layout"]["global_batch_size"] == 8
    assert len(info["hosts"]) == 2 and info["fabric"]["backend"] == "gloo"
    assert info["telemetry"]["enabled"] is True
    rows = [json.loads(line) for line in (attached_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        # the all-gather megatron-like code bound at import, and DDP's gradient bucket
        assert r["comm"]["all_gather"]["count"] == 1 and r["comm"]["all_gather"]["bytes"] == GATHER_BYTES
        assert r["comm"]["all_reduce"]["bytes"] == DDP_BUCKET_BYTES
        assert r["comm_bytes"] == GATHER_BYTES + DDP_BUCKET_BYTES
        assert r["loss"] > 0 and r["lr"] == 0.1 and r["samples_per_s"] > 0
        assert r["ranks"]["step_time_s"]["ranks"] == 2
        assert r["tokens_per_s"] is None and r["gpu_energy_j"] is None  # unknown here: null, never 0
    assert sorted(p.name for p in (attached_run / "ranks").glob("*.telemetry.jsonl")) == [
        "rank00000.telemetry.jsonl", "rank00001.telemetry.jsonl"]


def telemetry_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "telemetry", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


RECORDED_ENGINE_RUN = """
import sys
from trainer.config import load_recipe
from trainer.layout import resolve_layout
from telemetry.integrations.recorder import RunRecorder
recipe = load_recipe(sys.argv[2], sys.argv[3:])
given = recipe.to_dict(); given.pop("recipe_path")  # what launch.nemo records (Translation.harness)
rec = RunRecorder(sys.argv[1], name="engine_run", recipe=given, layout=resolve_layout(recipe, 1)[0].to_dict(),
                  engine="nemo2")
rec.start()
for step in (1, 2, 3):
    rec.begin_step(step)
    rec.end_step(step, loss=5.0 - step, lr=1e-3)
rec.close("completed")
"""


@pytest.mark.integration
def test_report_and_compare_read_it_beside_a_native_run(attached_run, tmp_path):
    res = telemetry_cli("report", attached_run)
    assert res.returncode == 0, res.stderr
    report = (attached_run / "report" / "report.md").read_text()
    assert "all_gather" in report and "all_reduce" in report
    native = run_cli(tmp_path / "native", *FAST, "max_steps=3")
    assert native.returncode == 0, native.stderr
    # an engine run that records the recipe it translates compares with the native run as the same recipe
    engine = tmp_path / "engine"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", RECORDED_ENGINE_RUN, str(engine), str(REPO / "recipes" / "tiny_llama_lora.yaml"),
                          *FAST, "max_steps=3", f"output_dir={tmp_path / 'native'}"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=REPO)
    assert res.returncode == 0, res.stderr
    res = telemetry_cli("compare", native.out, engine, "--out", tmp_path / "cmp")
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| runs | 1: native | 1: engine |" in text  # side by side, one column each
    # a plain Lightning job is another recipe: compare says so, and shows it when asked
    assert telemetry_cli("compare", native.out, attached_run, "--out", tmp_path / "cmp2").returncode == 2
    res = telemetry_cli("compare", native.out, attached_run, "--out", tmp_path / "cmp2", "--allow-mismatch")
    assert res.returncode == 0, res.stderr


@pytest.mark.integration
def test_callback_after_megatron_import_refuses_with_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE / "fake_engine")])}
    env.pop("FABRIC_HARNESS_RUN_DIR", None)
    res = subprocess.run([sys.executable, str(HERE / "lightning_job.py"), str(tmp_path / "run"), "2",
                          "--explicit-callback"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("telemetry.capture.early.ImportOrderError: megatron imported before the telemetry tracer")
    assert "megatron.core.dist_all_gather_func -> torch.distributed" in last and "telemetry.integrations.attach" in last
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_factory_adds_nothing_without_a_run_directory(monkeypatch):
    from telemetry.integrations.lightning import callbacks_factory
    monkeypatch.delenv("FABRIC_HARNESS_RUN_DIR", raising=False)
    assert callbacks_factory() == []


@pytest.mark.integration
def test_two_callbacks_on_one_run_directory_write_once(tmp_path):
    """A script's own TelemetryCallback plus the one attach's entry point adds: one writer, one line per step."""
    job = ("import sys, torch\n"
           "from trainer.compat import ensure_torchvision_importable\n"
           "ensure_torchvision_importable()\n"
           "import lightning.pytorch as pl\n"
           "from telemetry.integrations.lightning import TelemetryCallback\n"
           "class Tiny(pl.LightningModule):\n"
           "    def __init__(self):\n"
           "        super().__init__(); self.layer = torch.nn.Linear(4, 1)\n"
           "    def training_step(self, batch, i):\n"
           "        return self.layer(batch[0]).pow(2).mean()\n"
           "    def configure_optimizers(self):\n"
           "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
           "data = torch.utils.data.TensorDataset(torch.randn(16, 4))\n"
           "cbs = [TelemetryCallback(sys.argv[1]), TelemetryCallback(sys.argv[1])]\n"
           "pl.Trainer(max_steps=3, accelerator='cpu', devices=1, logger=False, enable_checkpointing=False,\n"
           "           enable_progress_bar=False, enable_model_summary=False, callbacks=cbs,\n"
           "           default_root_dir=sys.argv[1]).fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("FABRIC_HARNESS_RUN_DIR", None)
    res = subprocess.run([sys.executable, "-c", job, str(tmp_path / "run")], capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "already recorded by another callback" in res.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "completed"


def test_entry_point_declared_twice_adds_one_callback(tmp_path, monkeypatch):
    """An editable install plus a copy on the path: Lightning calls the factory once per distribution."""
    from telemetry.integrations import lightning as tl
    monkeypatch.setenv("FABRIC_HARNESS_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(tl, "_FACTORY_MADE", {})
    first, second = tl.callbacks_factory(), tl.callbacks_factory()
    assert len(first) == 1 and second == []
