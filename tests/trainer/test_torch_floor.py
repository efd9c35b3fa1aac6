"""The torch floor: the start-up check names the version found, the floor and the missing API; pyproject
declares the same floor; the installed torch passes."""
from __future__ import annotations

import inspect

from packaging.requirements import Requirement
from packaging.version import Version

from trainer import torch_floor
from trainer.cli import main

from ..conftest import REPO, TINY, unset_env

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_installed_torch_has_every_api():
    assert torch_floor.missing_api() is None
    assert torch_floor.check() is None


def test_pyproject_declares_the_floor_as_a_pre_release_bound():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [Requirement(d) for d in deps if d.startswith("torch")]
    (bound,) = [s for s in torch.specifier if s.operator == ">="]
    assert Version(bound.version) == Version(f"{torch_floor.FLOOR}.0a0")
    # the floor is the newest release among the APIs checked
    assert max(Version(r) for _, r, _ in torch_floor.APIS) == Version(torch_floor.FLOOR)


def test_torch_without_src_data_rank_is_one_line_naming_versions_and_api(monkeypatch):
    import torch.distributed.tensor as dt

    def distribute_tensor(tensor, device_mesh=None, placements=None):  # torch 2.6's signature
        raise AssertionError("not called")

    monkeypatch.setattr(dt, "distribute_tensor", distribute_tensor)
    assert "src_data_rank" not in inspect.signature(dt.distribute_tensor).parameters
    problem = torch_floor.check(version="2.6.0a0+ecf3bae40a.nv25.01")
    assert problem == ("torch 2.6.0a0+ecf3bae40a.nv25.01 is too old: this harness needs torch >= 2.11 (an NGC "
                       "PyTorch image with torch 2.11 or newer, docs/containers.md); missing: "
                       "torch.distributed.tensor.distribute_tensor(src_data_rank=...) (torch 2.7)")


def test_a_torch_whose_gloo_connects_eagerly_is_refused_by_behaviour(monkeypatch):
    """torch 2.7 ignores TORCH_GLOO_LAZY_INIT and connects every pair when the group is made. Fake: the real
    ProcessGroupGloo built with the variable forced off (the behaviour of a gloo without lazy init); the probe
    must wait for the absent rank 1, time out and report it, whatever the version string says."""
    import torch.distributed as dist
    real = dist.ProcessGroupGloo
    import os

    def eager(*args, **kwargs):
        os.environ["TORCH_GLOO_LAZY_INIT"] = "0"
        return real(*args, **kwargs)

    assert torch_floor._gloo_connects_lazily()  # the installed torch: lazy, and the variable is restored
    assert "TORCH_GLOO_LAZY_INIT" not in os.environ
    monkeypatch.setattr(torch_floor, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(dist, "ProcessGroupGloo", eager)
    problem = torch_floor.check(version="2.11.0")
    assert torch_floor.check(version="2.7.0a0+7c8ec84dab.nv25.03").startswith("torch 2.7.0a0+7c8ec84dab.nv25.03 is too old")
    assert problem.startswith("torch 2.11.0 lacks what its release should have: this harness needs torch >= 2.11") and \
        problem.endswith("missing: gloo lazy connections (TORCH_GLOO_LAZY_INIT, probed) (torch 2.8)"), problem


def test_a_torch_whose_pipeline_schedules_have_no_eval_is_refused(monkeypatch):
    """torch 2.8's schedules have step() only (PyPI's torch 2.8.0, run on CPU: Pipeline.evaluate raised
    AttributeError); the check names the API and the release that brought it."""
    from torch.distributed.pipelining import ScheduleGPipe

    owner = next(cls for cls in ScheduleGPipe.__mro__ if "eval" in vars(cls))
    monkeypatch.setattr(owner, "eval", None)
    problem = torch_floor.check(version="2.8.0+cu128")
    assert problem == ("torch 2.8.0+cu128 is too old: this harness needs torch >= 2.11 (an NGC PyTorch image with "
                       "torch 2.11 or newer, docs/containers.md); missing: torch.distributed.pipelining schedules' "
                       "eval() (torch 2.9)"), problem


def test_a_release_below_the_floor_is_refused_even_with_every_api(monkeypatch):
    """torch 2.9.1 has every API and fails the distributed tests (bench/RESULTS.md): the release is read."""
    import torch

    monkeypatch.setattr(torch, "__version__", "2.9.1+cu128")
    assert torch_floor.check() == ("torch 2.9.1+cu128 is too old: this harness needs torch >= 2.11 (an NGC PyTorch "
                                   "image with torch 2.11 or newer, docs/containers.md); missing: distributed tests "
                                   "passing (tensor-parallel LoRA and pipeline runs fail on torch 2.9) (torch 2.11)")
    monkeypatch.setattr(torch, "__version__", "2.11.0a0")  # a pre-release of 2.11, as NGC builds are
    assert torch_floor.check() is None


def test_missing_module_is_reported_not_raised():
    def gone() -> bool:
        import torch.distributed.no_such_module  # noqa: F401
        return True

    assert torch_floor.missing_api([("torch.distributed.no_such_module", "9.9", gone)]) == \
        "torch.distributed.no_such_module (torch 9.9)"


def test_cli_refuses_an_old_torch_with_exit_2(tmp_path, capsys, monkeypatch):
    unset_env(monkeypatch, "WORLD_SIZE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")  # the CLI sets the last two
    monkeypatch.setattr(torch_floor, "APIS", [("torch.distributed.fsdp.fully_shard", "2.6", lambda: False)])
    assert main([TINY, f"output_dir={tmp_path / 'run'}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: torch ") and \
        lines[0].endswith("missing: torch.distributed.fsdp.fully_shard (torch 2.6)"), lines
    assert not (tmp_path / "run" / "run.json").exists()  # refused before the run started
