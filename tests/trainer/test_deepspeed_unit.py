"""trainer.engines.deepspeed's parts that need no engine, in-process: DeepSpeed's own config parser behind one
error line, the comms-logger summary, and the helpers that must work without deepspeed in use. (Engine runs,
which JIT-compile an op on first use, are in tests/trainer/test_deepspeed.py, integration tier.)"""
from __future__ import annotations

import types

import pytest
import torch

from trainer.engines import deepspeed as ds
from trainer.error_report import InputError


@pytest.fixture
def cpu_accelerator(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # DeepSpeed picks its accelerator at import


def test_a_value_deepspeed_refuses_is_one_error_line(cpu_accelerator):
    with pytest.raises(InputError) as info:
        ds._check_values({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 3,
                          "gradient_accumulation_steps": 1})
    text = str(info.value)
    assert text.startswith("deepspeed: DeepSpeed refuses the configuration built from the recipe: ")
    assert "train_batch_size" in text and "\n" not in text
    ds._check_values({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})


def test_comms_logger_switch():
    recipe = types.SimpleNamespace(deepspeed={})
    assert ds.comms_logger_enabled(recipe) is False
    recipe.deepspeed = {"comms_logger": {"enabled": True, "verbose": False}}
    assert ds.comms_logger_enabled(recipe) is True
    recipe.deepspeed = {"comms_logger": "yes"}  # not a block: off
    assert ds.comms_logger_enabled(recipe) is False


def test_comms_log_sums_deepspeed_names_under_our_collective_types(monkeypatch):
    log = ds.CommsLog()
    logger = types.SimpleNamespace(comms_dict={"stale": {1: [1]}})
    monkeypatch.setattr(ds.CommsLog, "_logger", lambda self: logger)
    log.on_step_start(3)
    assert logger.comms_dict == {}
    # DeepSpeed's layout: {logged name: {message size: [count, latencies, algbw, busbw]}}
    logger.comms_dict.update({"all_gather_into_tensor | [Caller Func: f]": {1024: [2, [], [], []], 64: [1, [], [], []]},
                              "allgather_fn": {8: [3, [], [], []]},
                              "reduce_scatter_tensor": {512: [1, [], [], []]}})
    record = {}
    log.on_step_end(3, record)
    gather = record["deepspeed_comm"]["all_gather"]
    assert gather["count"] == 6 and gather["msg_bytes"] == 2 * 1024 + 64 + 3 * 8
    assert gather["ops"] == {"all_gather_into_tensor | [Caller Func: f]": 3, "allgather_fn": 3}
    assert record["deepspeed_comm"]["reduce_scatter"] == {"count": 1, "msg_bytes": 512,
                                                          "ops": {"reduce_scatter_tensor": 1}}


def test_helpers_without_an_engine():
    p = torch.nn.Parameter(torch.zeros(3, 4))
    assert ds.local_numel(p) == 12
    p.ds_tensor = torch.zeros(5)  # a ZeRO-3 partition: only this rank's piece counts
    assert ds.local_numel(p) == 5
    layer = torch.nn.Linear(2, 2)
    assert ds.is_engine(layer) is False
    with ds.gathered(layer):  # nothing to gather outside ZeRO-3
        pass
