"""A saved checkpoint loads sharded: each rank reads only its own slices, holds well under the whole
model in host memory, gets exactly the checkpoint's values, and trains to the unsharded run's loss."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from ..conftest import FAST, run_cli
from bench.support.llama_checkpoint import make_checkpoint

LAYOUTS = {
    "tp2": (2, ["parallel.tp=2"]),
    "pp2": (2, ["parallel.pp=2", "parallel.pp_schedule=gpipe"]),
    "fsdp2": (2, ["parallel.data_parallel=fsdp"]),
}
COMMON = [*FAST, "max_steps=1", "data.seq_len=64", "lora.dropout=0.0", "model.config=null", "model.tokenizer=null",
          "train.save_final=false"]
ENV = {"FABRIC_HARNESS_LOAD_DIGESTS": "1"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama233m") / "ckpt"
    total = make_checkpoint(path)
    assert total >= 200e6 and len(list(path.glob("*.safetensors"))) >= 3
    return path, total


@pytest.fixture(scope="module")
def full_tensors(checkpoint):
    from safetensors.torch import load_file

    out = {}
    for shard in sorted(checkpoint[0].glob("*.safetensors")):
        out.update(load_file(str(shard)))
    return out


@pytest.fixture(scope="module")
def single(checkpoint, tmp_path_factory):
    res = run_cli(tmp_path_factory.mktemp("single"), *COMMON, f"model.path={checkpoint[0]}", env=ENV, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _digest_matches(digests: dict, full: dict) -> None:
    for key, d in digests.items():
        t = full[key]
        block = t[tuple(slice(o, o + n) for o, n in zip(d["offset"], d["shape"]))].contiguous()
        assert hashlib.sha256(block.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest() == d["sha256"], key


@pytest.mark.integration
def test_single_process_load_equals_the_checkpoint(single, full_tensors):
    digests = json.loads((single.out / "ranks" / "rank00000.load.json").read_text())
    assert set(digests) == set(full_tensors)  # every checkpoint tensor, whole
    _digest_matches(digests, full_tensors)
    load = single.rank_files()[0]["load"]
    assert load["source"] == "safetensors slices" and load["tensors"] > len(full_tensors)  # + LoRA


@pytest.mark.integration
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sharded_load_reads_only_its_slices(layout, checkpoint, full_tensors, single, tmp_path):
    path, total = checkpoint
    nproc, overrides = LAYOUTS[layout]
    res = run_cli(tmp_path / layout, *COMMON, f"model.path={path}", *overrides, nproc=nproc, env=ENV, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    # the first step's loss equals the unsharded run (same weights, same batch)
    assert res.losses()[0] == pytest.approx(single.losses()[0], rel=1e-5)
    seen: set[str] = set()
    for rank in range(nproc):
        digests = json.loads((res.out / "ranks" / f"rank{rank:05d}.load.json").read_text())
        _digest_matches(digests, full_tensors)  # bit for bit the checkpoint's values at their offsets
        seen |= set(digests)
    assert seen == set(full_tensors)
    for final in res.rank_files():
        load = final["load"]
        grown = load["rss_peak_bytes"] - load["rss_before_bytes"]
        # the bound: the load's peak host memory stays below 0.6x the whole model
        assert grown < 0.6 * total, (layout, final["rank"], grown / total)
        assert load["bytes_read"] < 0.6 * total, (layout, load["bytes_read"] / total)
