"""launch.stage against a real HTTP hub on loopback (tests/launch/hub_server.py): huggingface_hub's own client
code fetches a tiny Llama checkpoint and a Dolly-schema data set; the manifest, the written recipe, --verify
and --check-layout are checked on what lands."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch import stage as st
from trainer.config import load_recipe

from ..conftest import REPO, TINY
from .hub_server import HubServer, Repo, tiny_llama_files

TOKEN = "hf_stage_test_secret_0123456789"
ASSETS = REPO / "recipes" / "assets"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A hub with a gated tiny Llama (safetensors + the byte tokenizer + a .bin copy that must not be fetched)
    and a public data set repository, each with a branch `main` and a tag `v1` on the same commit."""
    files = {**tiny_llama_files(tmp_path_factory.mktemp("ckpt")), "README.md": b"# tiny llama\n",
             "pytorch_model.bin": b"the same weights in the other format\n",
             "original/consolidated.00.pth": b"Meta's own format\n"}
    data = {"README.md": b"# fabric dolly mini\n", "fabric_dolly_mini.jsonl": (ASSETS / "fabric_dolly_mini.jsonl").read_bytes()}
    model = Repo("fabric/tiny-llama", "model", files, gated_token=TOKEN)
    model.branches["v1"] = model.commit
    dataset = Repo("fabric/dolly-mini", "dataset", data)
    splits = Repo("fabric/split-set", "dataset", {
        "data/train-00000-of-00001.parquet": (ASSETS / "fabric_bert_mini_train.parquet").read_bytes(),
        "data/validation-00000-of-00001.parquet": (ASSETS / "fabric_bert_mini_eval.parquet").read_bytes()})
    with HubServer([model, dataset, splits]) as server:
        yield server


@pytest.fixture
def hub_env(hub, monkeypatch, tmp_path):
    return use_hub(hub, monkeypatch, tmp_path)


def use_hub(hub, monkeypatch, tmp_path):
    """The client pointed at the loopback hub, with its own empty cache and the token in the environment."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return hub


norm = os.path.normpath  # the loader joins a recipe-relative path to the recipe's directory as written

STAGE_TINY = ["model.config=null", "model.tokenizer=null", "model.path=fabric/tiny-llama@v1",
              "data.dataset=fabric/dolly-mini"]


def _stage(to: Path, *overrides: str, recipe: str = TINY) -> int:
    return st.main([recipe, *overrides, "--to", str(to)])


def test_stage_fetches_pins_and_writes_a_recipe_that_resolves(hub_env, tmp_path, capsys):
    to = tmp_path / "staged"
    assert _stage(to, *STAGE_TINY) == 0, capsys.readouterr().err
    model = to / "models" / "fabric" / "tiny-llama"
    names = sorted(p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file() and ".cache" not in p.parts)
    # one weight format (safetensors), no Meta original/, the tokenizer and the licence/readme kept
    assert names == ["README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"], names
    manifest = json.loads((to / "manifest.json").read_text())
    commit = hub_env.repos[("model", "fabric/tiny-llama")].commit
    by_path = {e["path"]: e for e in manifest["files"]}
    weights = by_path["models/fabric/tiny-llama/model.safetensors"]
    assert weights["repo"] == "fabric/tiny-llama" and weights["revision"] == commit and weights["repo_type"] == "model"
    assert weights["sha256"] == hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()
    assert weights["size"] == (model / "model.safetensors").stat().st_size
    src = {s["path"]: s for s in manifest["sources"]}["models/fabric/tiny-llama"]
    assert src["revision"] == "v1" and src["commit"] == commit and src["endpoint"] == hub_env.url
    data = by_path["data/fabric/dolly-mini/fabric_dolly_mini.jsonl"]
    assert data["repo"] == "fabric/dolly-mini" and data["repo_type"] == "dataset"
    assert set(by_path) == set(st.staged_files(str(to)))  # every file, the written recipe included
    assert not any(".cache" in p for p in by_path)

    # the written recipe: staged keys relative to it, the overrides kept, loads and resolves
    written = to / "recipes" / "tiny_llama_lora.yaml"
    tree = yaml.safe_load(written.read_text())
    assert tree["model"]["path"] == "../models/fabric/tiny-llama" and tree["model"]["config"] is None
    assert tree["data"]["dataset"] == "../data/fabric/dolly-mini/fabric_dolly_mini.jsonl"
    recipe = load_recipe(str(written))
    assert norm(recipe.model.path) == str(model)
    assert norm(recipe.data.dataset) == str(to / "data/fabric/dolly-mini/fabric_dolly_mini.jsonl")

    # the token was sent to the hub (gated repo) but reached no file
    assert any(auth == f"Bearer {TOKEN}" for _, path, auth in hub_env.requests if "tiny-llama" in path)
    assert not [p for p in to.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert "original/" not in "".join(path for _, path, _ in hub_env.requests)  # never requested
    cdn = [auth for _, path, auth in hub_env.requests if path.startswith("/lfs/")]
    assert cdn and cdn == [None] * len(cdn)  # large files came from the other origin, without the token

    # --verify: all good, then one line per problem and a non-zero exit
    capsys.readouterr()
    assert st.main(["--verify", str(to)]) == 0
    assert "every file matches" in capsys.readouterr().out
    (model / "tokenizer.json").unlink()
    with open(model / "model.safetensors", "r+b") as f:  # same size, one byte changed
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    (to / "data/fabric/dolly-mini/README.md").write_text("longer than before\n")
    assert st.main(["--verify", str(to)]) == 1
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == sorted([
        "missing: models/fabric/tiny-llama/tokenizer.json",
        f"sha256 mismatch: models/fabric/tiny-llama/model.safetensors: manifest {weights['sha256']}, found "
        + hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest(),
        f"size mismatch: data/fabric/dolly-mini/README.md: manifest {by_path['data/fabric/dolly-mini/README.md']['size']}"
        " bytes, found 19"]), out
    assert err.startswith("error: 3 file(s)")


def test_local_assets_are_copied_and_two_recipes_share_one_directory(hub_env, tmp_path, capsys):
    to = tmp_path / "staged"
    assert _stage(to) == 0, capsys.readouterr().err  # the tiny recipe as shipped: local tokenizer and data
    # a second recipe into the same directory: a data set repository with train/validation split files
    code = _stage(to, "data.dataset=fabric/split-set", "data.eval_dataset=fabric/split-set",
                  recipe=str(REPO / "recipes" / "tiny_bert.yaml"))
    assert code == 0, capsys.readouterr().err
    assert len([r for r in hub_env.requests if r[1] == "/api/datasets/fabric/split-set/revision/main"]) == 1

    manifest = json.loads((to / "manifest.json").read_text())
    local = {e["path"]: e for e in manifest["files"] if "local" in e}
    assert local["local/byte_tokenizer/tokenizer.json"]["local"] == str(ASSETS / "byte_tokenizer")
    assert "local/fabric_dolly_mini.jsonl" in local  # the first recipe's files stay in the manifest
    assert {s["path"] for s in manifest["sources"]} == {"local/byte_tokenizer", "local/fabric_dolly_mini.jsonl",
                                                         "data/fabric/split-set"}
    tiny = load_recipe(str(to / "recipes" / "tiny_llama_lora.yaml"))
    assert norm(tiny.model.tokenizer) == str(to / "local" / "byte_tokenizer")
    assert norm(tiny.data.dataset) == str(to / "local" / "fabric_dolly_mini.jsonl")
    bert = load_recipe(str(to / "recipes" / "tiny_bert.yaml"))
    base = to / "data" / "fabric" / "split-set" / "data"
    assert norm(bert.data.dataset) == str(base / "train-00000-of-00001.parquet")
    assert norm(bert.data.eval_dataset) == str(base / "validation-00000-of-00001.parquet")
    assert st.main(["--verify", str(to)]) == 0


@pytest.mark.parametrize("overrides, needle", [
    (["model.path=fabric/no-such-model"], "model.path: model fabric/no-such-model@main: no such repository"),
    (["model.path=fabric/tiny-llama@v9"], "model.path: model fabric/tiny-llama@v9: no such revision"),
    (["data.dataset=/data/gov_report/train.parquet"], "MLPerf's data is not on the hub"),
    (["model.path=/models/Llama-2-70b-hf"], "its hub repository is probably model.path=meta-llama/Llama-2-70b-hf"),
])
def test_bad_references_are_one_error_line(hub_env, tmp_path, capsys, overrides, needle):
    base = ["model.config=null", "model.tokenizer=null", "model.path=fabric/tiny-llama"]
    assert _stage(tmp_path / "s", *base, *overrides) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err


def test_gated_repository_without_token_names_the_fix(hub_env, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert _stage(tmp_path / "s", *STAGE_TINY) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "is gated" in line and "HF_TOKEN" in line


def test_staging_with_the_hub_switched_off_says_so(hub_env, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 (the image's setting) does
    assert _stage(tmp_path / "s", *STAGE_TINY) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "HF_HUB_OFFLINE is set; staging needs the hub" in line, line


def test_two_local_sources_of_one_name_are_kept_apart(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "rows.jsonl").write_bytes((ASSETS / "fabric_dolly_mini.jsonl").read_bytes())
    (b / "rows.jsonl").write_text('{"instruction": "x", "context": "", "response": "y"}\n' * 40)
    to = tmp_path / "staged"
    assert _stage(to, f"data.dataset={a / 'rows.jsonl'}", f"data.eval_dataset={b / 'rows.jsonl'}") == 0, \
        capsys.readouterr().err
    recipe = load_recipe(str(to / "recipes" / "tiny_llama_lora.yaml"))
    assert norm(recipe.data.dataset) == str(to / "local" / "rows.jsonl")
    assert norm(recipe.data.eval_dataset) == str(to / "local" / "rows-2.jsonl")
    assert (to / "local" / "rows-2.jsonl").read_bytes() == (b / "rows.jsonl").read_bytes()


def test_cli_modes_are_exclusive_and_verify_needs_a_manifest(tmp_path, capsys):
    assert st.main(["--verify", str(tmp_path)]) == 2
    assert "manifest.json does not exist" in capsys.readouterr().err
    assert st.main([TINY]) == 2  # no --to
    assert st.main([TINY, "--to", str(tmp_path), "--verify", str(tmp_path)]) == 2
    assert st.main(["--check-layout", "coco", str(tmp_path)]) == 2
    assert "allowed: imagenet, bert, mlperf-llama" in capsys.readouterr().err
    assert st.main(["--check-layout", "bert", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --check-layout bert: '{tmp_path / 'nope'}' is not a directory "
                                               "(no such file or directory); allowed: the data set's root directory")


@pytest.mark.integration
def test_staged_recipe_trains_offline_from_the_staged_copy(hub_env, tmp_path, capsys):
    """Two steps of training from the staged directory alone, moved elsewhere, with the hub unreachable."""
    to = tmp_path / "staged"
    assert _stage(to, *STAGE_TINY) == 0, capsys.readouterr().err
    moved = tmp_path / "mounted" / "staged"
    moved.parent.mkdir()
    to.rename(moved)  # a cluster mounts it at another path
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "empty-hf-home"),
               PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    verify = subprocess.run([sys.executable, "-m", "launch.stage", "--verify", str(moved)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "trainer", str(moved / "recipes" / "tiny_llama_lora.yaml"),
                           f"output_dir={out}", "max_steps=2", "data.seq_len=64", "train.eval_every_samples=null",
                           "train.log_every=1"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[trainer] done: 2 steps" in proc.stdout
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed"


# ---------------------------------------------------------------- --check-layout on data made here

def _images(root: Path, split: str, classes: list[str], per_class: int) -> None:
    from PIL import Image
    for c in classes:
        (root / split / c).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (40, 30), (i * 40, 0, 0)).save(root / split / c / f"{c}_{i}.JPEG", format="JPEG")


def test_check_layout_imagenet(tmp_path, capsys):
    root = tmp_path / "imagenet"
    _images(root, "train", ["n01440764", "n01443537"], 2)
    (root / "val").mkdir()
    from PIL import Image
    Image.new("RGB", (40, 30)).save(root / "val" / "ILSVRC2012_val_00000001.JPEG", format="JPEG")
    assert st.main(["--check-layout", "imagenet", str(root)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: data.dataset:") and "holds no class subdirectories" in line
    assert "sort them into class folders" in line

    (root / "val" / "ILSVRC2012_val_00000001.JPEG").unlink()
    _images(root, "val", ["n01440764", "n01443537"], 1)
    assert st.main(["--check-layout", "imagenet", str(root)]) == 0
    out = capsys.readouterr().out
    assert "2 classes, 4 training and 2 validation images" in out
    assert "note: classes: 2; the full MLPerf set has 1,000" in out
    assert f"use: recipes/resnet50.yaml data.dataset={root} data.num_classes=2" in out

    _images(root, "val", ["n99999999"], 1)  # a class train/ lacks
    assert st.main(["--check-layout", "imagenet", str(root)]) == 1
    assert "class folders that train/ lacks: n99999999" in capsys.readouterr().err


def _bert_shard(path: Path, rows: int, seq: int = 512, preds: int = 76) -> None:
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["input_ids"] = rng.integers(1000, 30000, (rows, seq), dtype=np.int32)
        f["input_mask"] = np.ones((rows, seq), np.int8)
        f["segment_ids"] = np.zeros((rows, seq), np.int8)
        f["masked_lm_positions"] = np.tile(np.arange(1, preds + 1, dtype=np.int32), (rows, 1))
        f["masked_lm_ids"] = rng.integers(1000, 30000, (rows, preds), dtype=np.int32)
        f["next_sentence_labels"] = np.zeros(rows, np.int8)


def test_check_layout_bert(tmp_path, capsys):
    root = tmp_path / "hdf5"
    (root / "training").mkdir(parents=True)
    _bert_shard(root / "training" / "part-00000-of-00002.hdf5", 3)
    _bert_shard(root / "training" / "part-00001-of-00002.hdf5", 2)
    assert st.main(["--check-layout", "bert", str(root)]) == 1
    assert f"data.eval_dataset: {root}/eval is not a directory" in capsys.readouterr().err
    (root / "eval").mkdir()
    _bert_shard(root / "eval" / "eval_10k.hdf5", 4, seq=128)  # the wrong sequence length
    assert st.main(["--check-layout", "bert", str(root)]) == 1
    assert "expected data.seq_len (512)" in capsys.readouterr().err
    (root / "eval" / "eval_10k.hdf5").unlink()
    _bert_shard(root / "eval" / "eval_10k.hdf5", 4)
    assert st.main(["--check-layout", "bert", str(root)]) == 0
    out = capsys.readouterr().out
    assert "5 training sequences in 2 shards, 4 evaluation sequences in 1" in out
    assert f"data.dataset={root}/training data.eval_dataset={root}/eval" in out


def test_check_layout_mlperf_llama(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path / "gov_report"
    root.mkdir()
    rows = lambda n, L: pa.table({"input_ids": [[5] * L] * n, "labels": [[-100] * 10 + [5] * (L - 10)] * n})  # noqa: E731
    pq.write_table(rows(3, 8192), root / "train-00000-of-00001.parquet")
    assert st.main(["--check-layout", "mlperf-llama", str(root)]) == 1
    assert "expected one validation*.parquet" in capsys.readouterr().err
    pq.write_table(rows(2, 4096), root / "validation-00000-of-00001.parquet")
    assert st.main(["--check-layout", "mlperf-llama", str(root)]) == 1
    assert "sequences of [4096] tokens; MLPerf's set is packed to 8192" in capsys.readouterr().err
    pq.write_table(rows(2, 8192), root / "validation-00000-of-00001.parquet")
    assert st.main(["--check-layout", "mlperf-llama", str(root)]) == 0
    out = capsys.readouterr().out
    assert "3 training and 2 evaluation sequences of 8192 tokens" in out
    assert "note: training sequences: 3; the full MLPerf set has 3,901" in out


def test_staging_directory_that_cannot_be_made_and_bad_jobs(tmp_path, capsys):
    assert st.main([TINY, "--to", TINY]) == 2
    assert capsys.readouterr().err == f"error: --to: {TINY!r} is a file, not a directory; allowed: a new or existing " \
                                      "directory\n"
    assert st.main([TINY, "--to", str(tmp_path / "s"), "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "error: --jobs: got 0; expected an integer >= 1 (files hashed at once)\n"
    assert not (tmp_path / "s").exists()


def test_a_to_on_a_full_filesystem_is_one_line(tmp_path, capsys, monkeypatch):
    """The --to check's probe fits a full filesystem; the copies do not: a shutil.Error traceback before."""
    import shutil

    from launch import stage as stage_module

    def full(*args, **kwargs):
        raise shutil.Error([("a/tokenizer.json", "b/tokenizer.json", "[Errno 28] No space left on device: 'a' -> 'b'")])
    monkeypatch.setattr(stage_module, "stage", full)
    assert stage_module.main(["recipes/tiny_llama_lora.yaml", "--to", str(tmp_path / "s")]) == 2
    assert capsys.readouterr().err == (
        f"error: --to: {str(tmp_path / 's')!r} could not take the staged files ([Errno 28] No space left on device, "
        "1 file(s)); allowed: a directory on a filesystem with room for the recipe's files that this user can write\n")
