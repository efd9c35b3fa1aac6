"""telemetry.integrations.lightning in-process: TelemetryCallback on a small Lightning fit on CPU (one
process, no process group): the run directory, the layout read from the trainer, one writer per run
directory, and a failed fit recorded as failed."""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch

import telemetry.capture.early
from telemetry.integrations.lightning import TelemetryCallback, trainer_layout


@pytest.fixture(autouse=True)
def process_tracer():
    yield
    telemetry.capture.early.reset()  # the recorder installed the process tracer


def fit(tmp_path, callbacks, steps=3, fail_at=None, accumulate=1, losses=None, sigterm_at=None):
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            if fail_at is not None and i == fail_at:
                raise RuntimeError("loss is NaN")
            if sigterm_at is not None and i == sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)  # Lightning's handler notes it; the loop stops after the batch
            loss = self.layer(batch[0]).pow(2).mean()
            if losses is not None:
                losses.append(float(loss))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(16, 4))
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=str(tmp_path), accumulate_grad_batches=accumulate)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    return trainer


def read(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, json.loads((run_dir / "run.json").read_text())


def test_fit_writes_our_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    trainer = fit(tmp_path, [TelemetryCallback(str(run_dir), name="lit")])
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["loss"] > 0 and r["lr"] == 0.05 and r["samples_per_s"] > 0 for r in rows)
    assert info["status"] == "completed" and info["engine"] == "lightning" and info["name"] == "lit"
    lay = info["layout"]
    assert (lay["world_size"], lay["dp"], lay["tp"], lay["pp"]) == (1, 1, 1, 1)
    assert (lay["global_batch_size"], lay["micro_batch_size"], lay["grad_accum_steps"]) == (4, 4, 1)
    assert lay["source"] == "read from the Lightning trainer" and trainer_layout(trainer)["global_batch_size"] == 4


def test_accumulated_micro_batches_are_one_step(tmp_path):
    """accumulate_grad_batches=2: two training batches, one optimizer step. One metrics line per optimizer step,
    numbered as Lightning's global_step, timed from its first micro-batch; its loss the mean of its micro-batches'
    (the loss the step's gradient is of)."""
    run_dir = tmp_path / "run"
    losses: list[float] = []
    trainer = fit(tmp_path, [TelemetryCallback(str(run_dir))], steps=3, accumulate=2, losses=losses)
    rows, info = read(run_dir)
    assert trainer.global_step == 3 and len(losses) == 6
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["loss"] for r in rows] == pytest.approx([(losses[i] + losses[i + 1]) / 2 for i in (0, 2, 4)])
    assert info["status"] == "completed" and info["layout"]["grad_accum_steps"] == 2
    assert info["layout"]["global_batch_size"] == 8


def test_two_callbacks_on_one_run_directory_write_once(tmp_path, capsys):
    run_dir = tmp_path / "run"
    fit(tmp_path, [TelemetryCallback(str(run_dir)), TelemetryCallback(str(run_dir))])
    assert "already recorded by another callback in this process; this one stays idle" in capsys.readouterr().err
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3] and info["status"] == "completed"


def test_a_failed_fit_is_recorded(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="loss is NaN"):
        fit(tmp_path, [TelemetryCallback(str(run_dir))], fail_at=2)
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert info["status"] == "failed" and info["exit_code"] == 1 and info["error"] == "RuntimeError: loss is NaN"


def test_a_sigterm_is_recorded_as_interrupted(tmp_path):
    """Lightning turns SIGTERM (preemption) into its SIGTERMException at the batch's end: the run was
    interrupted, as the harness's own trainer records a SIGTERM, not failed."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    run_dir = tmp_path / "run"
    with pytest.raises(SIGTERMException):
        fit(tmp_path, [TelemetryCallback(str(run_dir))], steps=5, sigterm_at=1)
    rows, info = read(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert (info["status"], info["exit_code"], info["error"]) == ("interrupted", 130, "interrupted by SIGTERM")


def test_megatron_layout_from_the_strategy_and_data_module():
    class Strategy:
        tensor_model_parallel_size, pipeline_model_parallel_size = 2, 2

    trainer = type("T", (), {"world_size": 16, "strategy": Strategy(),
                             "datamodule": type("D", (), {"global_batch_size": 64, "micro_batch_size": 1})()})()
    lay = trainer_layout(trainer)
    assert (lay["dp"], lay["tp"], lay["pp"], lay["grad_accum_steps"], lay["per_rank_batch"]) == (4, 2, 2, 16, 16)
    assert lay["data_parallel"] == "Strategy"
    trainer.world_size = 6  # not a multiple of tp x pp: dp unknown, so is everything derived from it
    lay = trainer_layout(trainer)
    assert lay["dp"] is None and lay["grad_accum_steps"] is None and lay["per_rank_batch"] is None
