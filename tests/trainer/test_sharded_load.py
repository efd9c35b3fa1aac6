"""A saved checkpoint loads sharded: each rank reads only its own slices, holds well under the whole
model in host memory, gets exactly the checkpoint's values, and trains to the unsharded run's loss."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from ..conftest import FAST, run_cli
from bench.support.llama_checkpoint import make_checkpoint

# layout: (ranks, overrides, the bound on bytes read and on host memory growth per rank, as a share of
# the model). 0.6 is the bound at 2 ranks; at 4 ranks (dp2 x tp2) a rank's share is a quarter
# of the matrices and half of the rest, so 0.4 holds with room.
LAYOUTS = {
    "tp2": (2, ["parallel.tp=2"], 0.6),
    "pp2": (2, ["parallel.pp=2", "parallel.pp_schedule=gpipe"], 0.6),
    "fsdp2": (2, ["parallel.data_parallel=fsdp"], 0.6),
    # DeepSpeed ZeRO-3: each rank builds and fills only its partitions (no whole model anywhere)
    "deepspeed3": (2, ["parallel.data_parallel=deepspeed", "parallel.zero_stage=3"], 0.6),
    # FSDP2 over tensor parallel: strided shards (FSDP's shard of a tensor-parallel shard)
    "fsdp2_tp2": (4, ["parallel.data_parallel=fsdp", "parallel.tp=2"], 0.4),
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


def _piece(t: torch.Tensor, d: dict) -> torch.Tensor:
    """The part of the full tensor a digest describes: a block at an offset, runs of indices per
    dimension (a strided shard), or a range of the flattened tensor (a ZeRO-3 partition)."""
    if "flat_offset" in d:
        return t.reshape(-1)[d["flat_offset"]:d["flat_offset"] + d["shape"][0]]
    if "runs" in d:
        for dim, runs in enumerate(d["runs"]):
            t = torch.cat([t.narrow(dim, g, n) for g, n in runs], dim=dim)
        return t
    return t[tuple(slice(o, o + n) for o, n in zip(d["offset"], d["shape"]))]


def _digest_matches(digests: dict, full: dict) -> None:
    for key, d in digests.items():
        block = _piece(full[key], d).contiguous()
        assert list(block.shape) == d["shape"], key
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
def test_sharded_load_reads_only_its_slices(layout, checkpoint, full_tensors, single, tmp_path, request):
    path, total = checkpoint
    nproc, overrides, bound = LAYOUTS[layout]
    env = dict(ENV)
    if layout.startswith("deepspeed"):
        request.getfixturevalue("ds_op_built")  # skips where deepspeed is not installed
        env["DS_ACCELERATOR"] = "cpu"
    res = run_cli(tmp_path / layout, *COMMON, f"model.path={path}", *overrides, nproc=nproc, env=env, timeout=900)
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
        assert grown < bound * total, (layout, final["rank"], grown / total)
        assert load["bytes_read"] < bound * total, (layout, load["bytes_read"] / total)
        if layout.startswith("deepspeed"):
            # and deepspeed.initialize gathers nothing whole either: gathering the rest of the model would
            # add 0.5x; what it adds is fixed (on CPU mostly the shared-memory workspace of DeepSpeed's
            # communication op, 2 x 32 MiB at most, touched at its first collective)
            extra = load["rss_peak_engine_bytes"] - load["rss_peak_bytes"]
            assert extra < 0.45 * total, (layout, final["rank"], extra / total)


def test_a_flat_range_reads_only_the_rows_it_covers(tmp_path, monkeypatch):
    """ZeRO-3's partitions are ranges of the flattened tensor: each is read as the rows it covers (in
    chunks), and only its own elements are kept."""
    from safetensors.torch import save_file

    from trainer import materialize
    from trainer.materialize import SafetensorsSource

    tensors = {"m": torch.randn(7, 5), "v": torch.randn(11), "c": torch.randn(2, 3, 4)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    monkeypatch.setattr(materialize, "CHUNK_BYTES", 40)  # two rows of "m" per chunk: ranges cross chunks
    for key, t in tensors.items():
        flat = t.reshape(-1)
        for start, n in [(0, flat.numel()), (3, flat.numel() - 5), (flat.numel() - 4, 4), (6, 1)]:
            src = SafetensorsSource(str(tmp_path))
            out = torch.full((n,), float("nan"))
            src.copy_flat(key, tuple(t.shape), out, start)
            assert torch.equal(out, flat[start:start + n]), (key, start, n)
            row = t[0].numel() if t.dim() > 1 else 1
            assert src.bytes_read <= (n + 2 * row) * 4, (key, start, n)  # at most two partial rows more


def test_a_bin_only_checkpoint_is_refused_across_ranks_with_the_conversion_that_works(tmp_path, monkeypatch):
    """pytorch_model.bin cannot be read in slices: several ranks would each load it whole. One rank may;
    several get one line whose conversion command, run as printed, gives a checkpoint that loads sharded."""
    import shlex

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, LlamaConfig

    from trainer.materialize import SafetensorsSource, refuse_whole_load
    from trainer.workloads.hf import ModelError

    ckpt = tmp_path / "tiny-bin"
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2)
    model = AutoModelForCausalLM.from_config(config)
    ckpt.mkdir()
    config.save_pretrained(ckpt)
    torch.save(model.state_dict(), ckpt / "pytorch_model.bin")  # how older checkpoints ship (pickle)
    assert (ckpt / "pytorch_model.bin").exists() and not SafetensorsSource.available(str(ckpt))
    refuse_whole_load(str(ckpt), "AutoModelForCausalLM")  # a single process: loads whole, as before
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 8)
    with pytest.raises(ModelError) as err:
        refuse_whole_load(str(ckpt), "AutoModelForCausalLM")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"model.path: '{ckpt}' has no safetensors weights")
    assert "each of the 8 ranks would load whole" in message
    assert "(only pytorch_model.bin)" in message
    code = shlex.split(message.split("python -c ", 1)[1].split(" (writes", 1)[0])[0]
    empty = tmp_path / "no-weights"
    empty.mkdir()
    with pytest.raises(ModelError, match="has no weights; expected one of model.safetensors"):
        refuse_whole_load(str(empty), "AutoModelForCausalLM")  # not 'only pytorch_model.bin' where there is none
    monkeypatch.undo()  # the conversion runs alone, outside the job
    exec(code, {})  # the printed command, as the user would run it
    assert SafetensorsSource.available(f"{ckpt}-safetensors")
