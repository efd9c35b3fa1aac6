"""The telemetry library outside our trainer: a Hugging Face Trainer and a Lightning Trainer."""
from __future__ import annotations

import json

import pytest
import torch

from telemetry.integrations.adapters import hf_callback, lightning_callback
from telemetry.capture.session import Telemetry, TelemetrySettings


def test_hugging_face_trainer_callback(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(12)]
    metrics = tmp_path / "metrics.jsonl"
    telemetry = Telemetry(TelemetrySettings(), run_dir=str(tmp_path))
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=3, per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[hf_callback(telemetry, str(metrics))]).train()
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["step_time_s"] > 0 and r["comm"] == {} and r["comm_bytes"] == 0
        assert r["job_gpu_energy_j"] is None and r["gpu_energy_reason"]
    assert not telemetry.started  # closed at train end: torch.distributed is unwrapped again
    assert (tmp_path / "ranks" / "rank00000.telemetry.jsonl").exists()


def test_lightning_callback(tmp_path):
    import lightning.pytorch as pl

    from .lightning_tiny import Tiny, data

    dataset = data(16)
    telemetry = Telemetry(TelemetrySettings())
    callback = lightning_callback(telemetry)
    trainer = pl.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
                         default_root_dir=str(tmp_path))
    trainer.fit(Tiny(), torch.utils.data.DataLoader(dataset, batch_size=4))
    rows = callback.clock.records
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["loss"] > 0 and r["step_time_s"] > 0 and "comm" in r for r in rows)


def test_lightning_callback_counts_optimizer_steps_not_micro_batches(tmp_path):
    import lightning.pytorch as pl

    from .lightning_tiny import Tiny, data

    telemetry = Telemetry(TelemetrySettings())
    callback = lightning_callback(telemetry)
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
                         default_root_dir=str(tmp_path), accumulate_grad_batches=2)
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data(16), batch_size=4))
    assert trainer.global_step == 2
    assert [r["step"] for r in callback.clock.records] == [1, 2]
    assert not telemetry.started


def test_a_failed_end_of_run_exchange_still_closes_the_callbacks_telemetry(tmp_path, monkeypatch):
    """The callbacks' end of training (every rank's held last step reduced, then close): a peer lost in that
    exchange raises, and the telemetry is closed all the same (its tracer off torch.distributed)."""
    import pytest
    import torch.distributed as dist

    original = dist.all_reduce
    telemetry = Telemetry(TelemetrySettings(), run_dir=str(tmp_path))
    callback = lightning_callback(telemetry)
    telemetry.start()
    assert dist.all_reduce is not original
    real = Telemetry.flush

    def flush(self, collective=True, wait_s=None):
        if collective:
            raise RuntimeError("Timed out waiting 10000ms for recv operation to complete")
        return real(self, collective, wait_s)

    monkeypatch.setattr(Telemetry, "flush", flush)
    with pytest.raises(RuntimeError, match="Timed out"):
        callback.clock.finish()
    assert not telemetry.started and dist.all_reduce is original


def _torchrun(tmp_path, script: str, *extra) -> list[dict]:
    """tests/telemetry/integrations/SCRIPT OUT on 2 gloo ranks; each rank's OUT/rankN.json, rank 0 first."""
    import os
    import subprocess
    import sys

    from ...conftest import REPO

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(REPO / "tests" / "telemetry" / "integrations" / script), str(tmp_path), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.integration
def test_hugging_face_trainer_ddp_buckets_are_counted(tmp_path):
    """The Trainer wraps the model in DDP out of the callback's sight: its gradient all-reduce (every parameter's
    fp32 gradient, one bucket here) is counted and timed on every rank and step, not left out of a verdict that
    says 100%."""
    ranks = _torchrun(tmp_path, "hf_ddp_job.py")
    # built before the Trainer set the process group up, the Telemetry still knows its rank at train start
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # rank 0's lines alone
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == [
        "rank00000.telemetry.jsonl", "rank00001.telemetry.jsonl"]
    for rank in ranks:
        assert [r["step"] for r in rank["rows"]] == [1, 2, 3] and not rank["warnings"]
        for r in rank["rows"]:
            assert r["comm"]["all_reduce"]["bytes"] == rank["param_bytes"]
            assert r["comm"]["all_reduce"]["untimed"] == 0 and r["comm"]["all_reduce"]["time_s"] > 0


@pytest.mark.integration
def test_hugging_face_trainer_with_its_own_comm_hook_is_warned(tmp_path):
    """A job that registered its own DDP comm hook keeps it, and the callback warns whose hook runs: one that
    calls torch.distributed (the stock all-reduce hook here) is still counted, by the wrapped call."""
    for rank in _torchrun(tmp_path, "hf_ddp_job.py", "own-hook"):
        assert len(rank["warnings"]) == 1 and "job's own comm hook" in rank["warnings"][0]
        assert "can only be called once" in rank["warnings"][0]
        assert all(r["comm"]["all_reduce"]["bytes"] == rank["param_bytes"] for r in rank["rows"])


@pytest.mark.integration
def test_lightning_callback_counts_ddp_buckets(tmp_path):
    """The bare Lightning callback routes the strategy's DDP buckets through the traced all-reduce too."""
    ranks = _torchrun(tmp_path, "lightning_bare_job.py")
    for rank in ranks:
        assert [r["step"] for r in rank["rows"]] == [1, 2, 3]
        assert all(r["comm"]["all_reduce"]["bytes"] == rank["param_bytes"] for r in rank["rows"])


@pytest.mark.integration
def test_hugging_face_trainer_trained_again_keeps_its_buckets_counted_without_an_own_hook_warning(tmp_path):
    """review65: a second train() of the same Trainer (a notebook's, a second phase) with a fresh Telemetry found
    the DDP still holding the first Telemetry's hook; DDP takes one, so the callback warned that 'the job's own
    comm hook' carried the buckets, though the job registered none. The hook now reports to the newest Telemetry."""
    ranks = _torchrun(tmp_path, "hf_ddp_job.py", "twice")
    for r in range(2):
        first, second = ranks[r], json.loads((tmp_path / f"rank{r}.second.json").read_text())
        assert not first["warnings"] and not second["warnings"], second["warnings"]
        assert [row["step"] for row in second["rows"]] == [1, 2, 3]
        assert all(row["comm"]["all_reduce"]["bytes"] == second["param_bytes"] for row in second["rows"])


@pytest.mark.integration
def test_hugging_face_trainer_with_accumulation_and_evaluation_counts_one_bucket_reduce_a_step(tmp_path):
    """review65 (a check that held): 2 micro-batches an optimizer step (the first under DDP's no_sync) and an
    evaluation after every step: each step holds one all-reduce of every gradient and no evaluation traffic."""
    for rank in _torchrun(tmp_path, "hf_ddp_job.py", "accum-eval"):
        assert [r["step"] for r in rank["rows"]] == [1, 2, 3] and not rank["warnings"]
        for r in rank["rows"]:
            assert (r["comm"]["all_reduce"]["count"], r["comm"]["all_reduce"]["bytes"]) == (1, rank["param_bytes"])
            assert set(r["comm"]) <= {"all_reduce", "broadcast"}  # DDP's buffers; no evaluation all_gather


@pytest.mark.integration
def test_hugging_face_trainer_with_torch_compile_counts_its_ddp_buckets(tmp_path):
    """review65 (a check that held): torch_compile=True compiles the DDP wrapper (accelerate's dynamo plugin); the
    wrapper found on the heap still takes the hook: one all-reduce of every gradient a step on every rank."""
    for rank in _torchrun(tmp_path, "hf_ddp_job.py", "compile"):
        assert [r["step"] for r in rank["rows"]] == [1, 2, 3] and not rank["warnings"]
        assert all((r["comm"]["all_reduce"]["count"], r["comm"]["all_reduce"]["bytes"]) == (1, rank["param_bytes"])
                   for r in rank["rows"])
