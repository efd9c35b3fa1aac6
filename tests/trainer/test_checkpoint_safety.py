"""Checkpoints: resuming never runs code from the run directory; damaged, truncated or mismatched
checkpoints are one line naming the file and step; a save that fills the disk leaves nothing that
latest.json could point to, and the last good checkpoint still loads. In-process, a world of one (gloo)."""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import subprocess
import uuid

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from trainer import checkpoint
from trainer.error_report import FaultError, InputError

from ..conftest import REPO, TINY, Payload


@pytest.fixture(scope="module", autouse=True)
def group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _parts(width: int = 4, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    model(torch.randn(5, width)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def _save(root, step=2, **kw):
    model, optimizer, scheduler = _parts(**kw)
    checkpoint.save(str(root), step, model, optimizer, scheduler, {"step": step, "global_batch_size": 8})
    return model, optimizer, scheduler


def _load(path, **kw):
    model, optimizer, scheduler = _parts(seed=1, **kw)
    return checkpoint.load(str(path), model, optimizer, scheduler), model, optimizer, scheduler


def test_round_trip_restores_weights_optimizer_scheduler_and_rng(tmp_path):
    torch.manual_seed(123)
    model, optimizer, scheduler = _save(tmp_path)
    expected_rng = torch.rand(3)
    ((state, rng_restored), loaded, opt2, sched2) = _load(checkpoint.find_latest(str(tmp_path)))
    assert state == {"step": 2, "global_batch_size": 8} and rng_restored
    assert torch.equal(torch.rand(3), expected_rng)  # the stream continues where the save left it
    for a, b in zip(model.parameters(), loaded.parameters()):
        assert torch.equal(a, b)
    assert opt2.state_dict()["param_groups"][0]["betas"] == (0.9, 0.95)
    assert sched2.state_dict()["last_epoch"] == scheduler.state_dict()["last_epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["latest.json", "step-0000002"]  # no partial directory
    assert json.loads((tmp_path / "latest.json").read_text())["path"] == "step-0000002"


def test_crafted_metadata_does_not_run_a_command(tmp_path):
    _save(tmp_path)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    meta = tmp_path / "step-0000002" / ".metadata"
    meta.write_bytes(pickle.dumps(Payload(marker)))
    # the exploit is real: DCP's own reader runs it
    with contextlib.suppress(Exception):
        dcp.FileSystemReader(str(meta.parent)).read_metadata()
    assert marker.exists()
    marker.unlink()
    with pytest.raises(InputError) as info:
        _load(meta.parent)
    assert not marker.exists()
    assert f"{meta} is damaged or not DCP metadata" in str(info.value)
    assert "refused global posix.system" in str(info.value) and "\n" not in str(info.value)


def test_crafted_optimizer_value_does_not_run_a_command(tmp_path):
    """A well-formed checkpoint whose non-tensor leaf (an optimizer hyper-parameter) is a pickle payload."""
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    model, optimizer, scheduler = _parts()
    msd, osd = get_state_dict(model, optimizer, options=checkpoint.OPTIONS)
    lrs = [key for key in osd if key.startswith("param_groups.") and key.endswith(".lr")]  # one per parameter
    assert lrs
    for key in lrs:
        osd[key] = Payload(marker)
    path = tmp_path / "step-0000002"
    dcp.save({"model": msd, "optim": osd, "harness/scheduler": checkpoint._json_tensor(scheduler.state_dict()),
              "harness/trainer": checkpoint._json_tensor({"step": 2})}, checkpoint_id=str(path))
    assert not marker.exists()
    with pytest.raises(InputError) as info:
        _load(path)
    assert not marker.exists()
    assert "step 2" in str(info.value) and "cannot be read" in str(info.value)
    # DCP's default planner would have run it
    m2, o2, _ = _parts(seed=1)
    msd2, osd2 = get_state_dict(m2, o2, options=checkpoint.OPTIONS)
    with contextlib.suppress(BaseException):
        dcp.load({"model": msd2, "optim": osd2}, checkpoint_id=str(path))
    assert marker.exists()


def test_optimizer_groups_are_keyed_by_parameter_and_the_by_index_layout_still_loads(tmp_path):
    """Param groups by parameter name (pipeline ranks hold different parameters: by group index they collided);
    a checkpoint written before, with groups by index, still resumes."""
    model, optimizer, scheduler = _save(tmp_path / "new")
    saved = checkpoint.read_metadata(checkpoint.find_latest(str(tmp_path / "new"))).state_dict_metadata
    assert "optim.param_groups.0.weight.lr" in saved and checkpoint.LEGACY_KEY not in saved
    msd, osd = get_state_dict(model, optimizer, options=checkpoint.LEGACY_OPTIONS)
    legacy = tmp_path / "legacy" / "step-0000002"
    dcp.save({"model": msd, "optim": osd, "harness/scheduler": checkpoint._json_tensor(scheduler.state_dict()),
              "harness/trainer": checkpoint._json_tensor({"step": 2})}, checkpoint_id=str(legacy))
    assert checkpoint.LEGACY_KEY in checkpoint.read_metadata(str(legacy)).state_dict_metadata
    for path in (checkpoint.find_latest(str(tmp_path / "new")), legacy):
        (state, _), loaded, opt2, _ = _load(path)
        assert state["step"] == 2 and opt2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
        for p, q in zip(optimizer.param_groups[0]["params"], opt2.param_groups[0]["params"]):
            assert torch.equal(optimizer.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"])


def test_old_pickled_harness_state_is_refused(tmp_path):
    """Checkpoints of the previous format kept the harness state as pickles: refused, named."""
    model, optimizer, scheduler = _parts()
    msd, osd = get_state_dict(model, optimizer, options=checkpoint.OPTIONS)
    import io
    path = tmp_path / "step-0000003"
    dcp.save({"model": msd, "optim": osd, "scheduler": io.BytesIO(pickle.dumps({})),
              "trainer": io.BytesIO(pickle.dumps({"step": 3}))}, checkpoint_id=str(path))
    with pytest.raises(InputError) as info:
        _load(path)
    assert "step 3" in str(info.value) and "has no harness/scheduler" in str(info.value)


def _first_data_file(path):
    return next(p for p in sorted(path.iterdir()) if p.suffix == ".distcp")


@pytest.mark.parametrize("damage,expected", [
    ("truncate-data", "cannot be read: rank 0:"),
    ("empty-metadata", ".metadata is damaged or not DCP metadata (EOFError"),
    ("garbage-metadata", ".metadata is damaged or not DCP metadata"),
    ("no-metadata", "is not a checkpoint directory (no DCP .metadata); allowed: a step directory "
     "(RUN/checkpoints/step-NNNNNNN), auto (the latest in output_dir) or never"),
    ("metadata-path-escape", "names a data file outside the checkpoint: '../x.distcp'"),
])
def test_damaged_checkpoint_is_one_line_naming_file_and_step(tmp_path, damage, expected):
    _save(tmp_path)
    step = tmp_path / "step-0000002"
    if damage == "truncate-data":
        data = _first_data_file(step)
        data.write_bytes(data.read_bytes()[:100])
    elif damage == "empty-metadata":
        (step / ".metadata").write_bytes(b"")
    elif damage == "garbage-metadata":
        (step / ".metadata").write_bytes(b"\x80\x04not a pickle at all")
    elif damage == "no-metadata":
        (step / ".metadata").unlink()
    elif damage == "metadata-path-escape":
        meta = checkpoint.read_metadata(str(step))
        for info in meta.storage_data.values():
            info.relative_path = "../x.distcp"
        (step / ".metadata").write_bytes(pickle.dumps(meta))
    with pytest.raises(InputError) as info:
        _load(checkpoint.find_latest(str(tmp_path)))
    text = str(info.value)
    assert expected in text and "\n" not in text, text
    assert "step-0000002" in text or "step 2" in text


@pytest.mark.parametrize("content,expected", [
    ("{not json", "latest.json is damaged (Expecting property name"),
    ('{"step": 2}', "latest.json is damaged: expected 'step' (an integer) and 'path'"),
    ('{"step": 2, "path": "../../etc"}', "latest.json is damaged: expected 'step'"),
    ('{"step": 9, "path": "step-0000009"}', "latest.json points at step 9, but"),
    ("", "latest.json is damaged (Expecting value"),
    pytest.param('{"step": ' + "9" * 5000 + ', "path": "step-0000002"}', "latest.json is damaged (Exceeds the limit",
                 id="int-of-5000-digits"),
])
def test_damaged_latest_pointer(tmp_path, content, expected):
    _save(tmp_path)
    (tmp_path / "latest.json").write_text(content)
    with pytest.raises(InputError) as info:
        checkpoint.find_latest(str(tmp_path))
    assert expected in str(info.value) and str(tmp_path) in str(info.value)


def test_checkpoint_of_the_wrong_shape_names_the_tensor(tmp_path):
    _save(tmp_path, width=4)
    with pytest.raises(InputError) as info:
        _load(tmp_path / "step-0000002", width=6)
    text = str(info.value)
    assert "step 2" in text and "model.0.weight has shape [3, 4] in the checkpoint, [3, 6] in the model" in text
    assert "(and 2 more)" in text  # its two Adam moments


@contextlib.contextmanager
def _small_disk(path, size: str):
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(disk, leave: int):
    """Fill the disk but `leave` bytes."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as f:
        with contextlib.suppress(OSError):
            f.write(b"\1" * max(free - leave, 0))


@pytest.mark.integration
def test_disk_full_during_a_save_keeps_the_last_good_checkpoint(tmp_path):
    with _small_disk(tmp_path / "disk", "4m") as disk:
        root = disk / "checkpoints"
        root.mkdir()
        model, optimizer, scheduler = _save(root, step=2, width=64)
        _fill(disk, leave=8 * 1024)
        with pytest.raises(FaultError) as info:
            checkpoint.save(str(root), 4, model, optimizer, scheduler, {"step": 4})
        text = str(info.value)
        assert text.startswith("checkpoint at step 4 not written (rank 0: ") and "No space left on device" in text
        assert "latest.json still points at step 2" in text and "\n" not in text
        assert sorted(os.listdir(root)) == ["latest.json", "step-0000002"]  # the partial one is gone
        (disk / "filler").unlink()
        (state, _), loaded, _, _ = _load(checkpoint.find_latest(str(root)), width=64)
        assert state["step"] == 2
        for a, b in zip(model.parameters(), loaded.parameters()):
            assert torch.equal(a, b)


@pytest.mark.integration
def test_disk_full_while_writing_metrics_still_records_the_failure(tmp_path):
    from trainer.run_writer import RunDir

    with _small_disk(tmp_path / "disk", "2m") as disk:
        rundir = RunDir(str(disk / "run"), 0)
        rundir.create()
        rundir.update(status="running", error=None)
        rundir.open_metrics(0)
        _fill(disk, leave=0)
        with pytest.raises(FaultError) as info:
            for step in range(1, 100000):  # the stream's buffer hides the first few lines
                rundir.write_metrics({"step": step, "loss": 1.0, "pad": "x" * 4000})
        assert "metrics.jsonl: cannot write step" in str(info.value) and "No space left on device" in str(info.value)
        rundir.update(status="failed", error=str(info.value))  # the reserve gives the room back
        rundir.close()
        run = json.loads((disk / "run" / "run.json").read_text())
        assert run["status"] == "failed" and "No space left" in run["error"]
        assert not [p for p in os.listdir(disk / "run") if ".tmp" in p]
        shutil.rmtree(disk / "run")


@pytest.mark.integration
def test_an_output_dir_too_small_for_run_json_is_one_line_not_a_traceback(tmp_path):
    """A filesystem with room for the write probe but not for run.json's first version: an OSError traceback from
    the atomic writer. Now one line naming output_dir and what is allowed, exit 2 (nothing was recorded)."""
    import sys

    with _small_disk(tmp_path / "disk", "8k") as disk:
        env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT")}
        proc = subprocess.run([sys.executable, "-m", "trainer", TINY, "max_steps=1", f"output_dir={disk}/run"],
                              capture_output=True, text=True, cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                              timeout=300)
        errors = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[trainer]")]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert errors == [f"error: output_dir: '{disk}/run' could not be written (No space left on device); what "
                          "was recorded before is kept; allowed: an output_dir on a writable filesystem with free "
                          "space"], proc.stderr


def test_model_directory_without_weights_is_one_line(tmp_path):
    from trainer.workloads.hf import ModelError, check_checkpoint

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelError) as info:
        check_checkpoint(str(tmp_path), "checkpoint", "config.json, weights, tokenizer files")
    assert str(info.value) == (f"model.path: {str(tmp_path)!r} has a config.json but no weights; expected one of "
                               "model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
                               "pytorch_model.bin.index.json (or model.config instead of model.path for random init)")


def test_truncated_safetensors_is_one_line(tmp_path):
    from safetensors.torch import save_file

    from trainer.materialize import SafetensorsSource

    save_file({"w": torch.zeros(64, 64)}, str(tmp_path / "model.safetensors"))
    SafetensorsSource(str(tmp_path))  # whole: fine
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:40])
    with pytest.raises(InputError) as info:
        SafetensorsSource(str(tmp_path))
    assert str(info.value).startswith(f"model.path: {str(tmp_path / 'model.safetensors')!r} is damaged (")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("draw", ["torch", "numpy", "python"])
def test_host_rng_moved_sees_a_draw_from_any_host_stream(draw):
    """The loop saves the streams from before the next step's batches only when building them drew (trainer/loop.py)."""
    import random

    import numpy as np

    before = checkpoint.host_rng()
    assert not checkpoint.host_rng_moved(before)
    {"torch": lambda: torch.rand(1), "numpy": np.random.rand, "python": random.random}[draw]()
    assert checkpoint.host_rng_moved(before)


def test_a_by_index_checkpoint_with_an_empty_group_resumes_without_it(tmp_path):
    """A LoRA run checkpointed before param groups were keyed by parameter held an empty no-decay group (group 1);
    build_optimizer now drops it. The by-index checkpoint (2 groups) still loads onto the 1-group optimizer."""
    def parts(seed, drop):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=False), torch.nn.Linear(3, 2))
        model[1].requires_grad_(False)  # the frozen base: no trainable 1-d parameter
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW([{"params": [p for p in trainable if p.ndim > 1], "weight_decay": 0.1},
                                       {"params": [p for p in trainable if p.ndim <= 1], "weight_decay": 0.0}], lr=1e-2)
        if drop:
            optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)

    model, optimizer, scheduler = parts(0, drop=False)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    msd, osd = get_state_dict(model, optimizer, options=checkpoint.LEGACY_OPTIONS)
    assert [len(g["params"]) for g in osd["param_groups"]] == [1, 0]
    path = tmp_path / "step-0000002"
    dcp.save({"model": msd, "optim": osd, "harness/scheduler": checkpoint._json_tensor(scheduler.state_dict()),
              "harness/trainer": checkpoint._json_tensor({"step": 2})}, checkpoint_id=str(path))
    model2, optimizer2, scheduler2 = parts(1, drop=True)
    state, _ = checkpoint.load(str(path), model2, optimizer2, scheduler2)
    assert state["step"] == 2 and len(optimizer2.param_groups) == 1
    (p,), (q,) = optimizer.param_groups[0]["params"], optimizer2.param_groups[0]["params"]
    assert torch.equal(optimizer.state[p]["exp_avg"], optimizer2.state[q]["exp_avg"]) and torch.equal(p, q)
