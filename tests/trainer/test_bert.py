"""BERT pretraining: the MLPerf data layout, synthetic data, the loss terms against BertForPreTraining's own,
and real runs through the CLI (2 ranks on gloo against one process on the same global batch)."""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.config import load_recipe
from trainer.data.mlm import build_mlm_datasets, load_mlm_set, synthetic_set
from trainer.data.sft import DataError

from ..conftest import REPO, run_cli

TINY_BERT = str(REPO / "recipes" / "tiny_bert.yaml")
ASSETS = REPO / "recipes" / "assets"
TRAIN, EVAL = ASSETS / "fabric_bert_mini_train.parquet", ASSETS / "fabric_bert_mini_eval.parquet"
SEQ, PRED = 64, 10
CLS, SEP, MASK = 1, 2, 3  # the byte tokenizer's <s>, </s>, <unk> stand in (tools/make_bert_data.py)
# Dropout masks are drawn per rank, so the layout comparison turns dropout off; no checkpoint at the end.
QUICK = ["model.config.hidden_dropout_prob=0.0", "model.config.attention_probs_dropout_prob=0.0",
         "train.log_every=10", "train.save_final=false", "distributed.timeout_s=60"]


def data_cfg(**kw):
    base = dict(dataset=str(TRAIN), eval_dataset=str(EVAL), seq_len=SEQ, max_predictions=PRED, synthetic=False,
                synthetic_samples=64, split=[0.8, 0.15, 0.05], split_seed=1234, max_train_samples=None,
                max_eval_samples=None)
    return SimpleNamespace(**{**base, **kw})


# ---------------------------------------------------------------- data

def test_shipped_tiny_set_has_the_mlperf_layout_and_padding_rule():
    train, evals = build_mlm_datasets(data_cfg(), vocab_size=260, type_vocab_size=2, seed=1, need_eval=True)
    assert (len(train), len(evals)) == (640, 128)
    b = train.batch(list(range(len(train))))
    assert b["input_ids"].shape == b["attention_mask"].shape == b["token_type_ids"].shape == (640, SEQ)
    assert b["masked_lm_positions"].shape == b["masked_lm_ids"].shape == b["masked_lm_valid"].shape == (640, PRED)
    assert b["next_sentence_labels"].shape == (640,)
    valid, pos, ids = b["masked_lm_valid"], b["masked_lm_positions"], b["masked_lm_ids"]
    # padding rule: a slot is padding exactly where its position is 0 ([CLS] is never masked); id 0 there too
    assert torch.equal(valid, pos > 0) and bool((ids[~valid] == 0).all())
    assert bool((b["input_ids"][:, 0] == CLS).all())
    counts = valid.sum(1)
    assert int(counts.min()) >= 1 and int(counts.max()) == PRED
    rows = torch.arange(640).unsqueeze(1).expand_as(pos)
    at = b["input_ids"][rows[valid], pos[valid]]
    assert bool((b["attention_mask"][rows[valid], pos[valid]] == 1).all())  # only real tokens are masked
    # BERT's 80/10/10 rule: most predicted positions hold [MASK], the rest a byte (kept or random)
    assert 0.7 < float((at == MASK).float().mean()) < 0.9
    assert bool((ids[valid] >= 4).all())  # targets are byte tokens, never specials or padding
    # [CLS] A [SEP] B [SEP]: segment 1 only on real tokens, two [SEP]s per sequence
    assert bool((b["token_type_ids"][b["attention_mask"] == 0] == 0).all())
    assert bool(((b["input_ids"] == SEP).sum(1) == 2).all())
    assert 0.4 < float(b["next_sentence_labels"].float().mean()) < 0.6


def test_synthetic_sets_are_seeded_and_have_the_real_shapes():
    a, b = synthetic_set(16, 32, 5, 100, seed=3), synthetic_set(16, 32, 5, 100, seed=3)
    ba, bb = a.batch(range(16)), b.batch(range(16))
    assert all(torch.equal(ba[k], bb[k]) for k in ba)
    assert not torch.equal(ba["input_ids"], synthetic_set(16, 32, 5, 100, seed=4).batch(range(16))["input_ids"])
    assert ba["input_ids"].shape == (16, 32) and ba["masked_lm_positions"].shape == (16, 5)
    pos = ba["masked_lm_positions"]
    assert bool(ba["masked_lm_valid"].all()) and int(pos.min()) >= 1 and int(pos.max()) < 32
    assert bool((pos[:, 1:] > pos[:, :-1]).all())  # distinct, ascending
    train, evals = build_mlm_datasets(data_cfg(synthetic=True, synthetic_samples=40), 100, 2, 7, need_eval=True)
    assert (len(train), len(evals)) == (40, 10) and train.synthetic


def test_ragged_predictions_aliases_and_weights(tmp_path):
    """jsonl rows may carry fewer than max_predictions entries; HF column names are accepted; a zero
    masked_lm_weight marks padding too."""
    row = {"input_ids": [1] + [10] * 6 + [2], "attention_mask": [1] * 8, "token_type_ids": [0] * 8,
           "masked_lm_positions": [2, 5, 6], "masked_lm_ids": [11, 12, 13], "masked_lm_weights": [1.0, 1.0, 0.0],
           "next_sentence_label": 1}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "masked_lm_positions": [3],
                                                          "masked_lm_ids": [14], "masked_lm_weights": [1.0]}) + "\n")
    s = load_mlm_set(str(path), "data.dataset", 8, 4, 100, 2)
    b = s.batch([0, 1])
    assert b["masked_lm_positions"].tolist() == [[2, 5, 0, 0], [3, 0, 0, 0]]
    assert b["masked_lm_ids"].tolist() == [[11, 12, 0, 0], [14, 0, 0, 0]]
    assert b["masked_lm_valid"].sum(1).tolist() == [2, 1] and b["next_sentence_labels"].tolist() == [1, 1]


def test_without_eval_dataset_a_seeded_split_is_held_out():
    train, evals = build_mlm_datasets(data_cfg(eval_dataset=None), 260, 2, 1, need_eval=True)
    assert (len(train), len(evals)) == (512, 96)
    assert not set(train.rows.tolist()) & set(evals.rows.tolist())
    again, none = build_mlm_datasets(data_cfg(eval_dataset=None), 260, 2, 1, need_eval=False)
    assert none is None and np.array_equal(again.rows, train.rows)  # training rows do not depend on eval


def _write(tmp_path, **changes) -> str:
    import pyarrow.parquet as pq

    table = pq.read_table(TRAIN).slice(0, 8).to_pydict()
    table.update(changes)
    table = {k: v for k, v in table.items() if v is not None}
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({k: table[k][i] for k in table}) + "\n" for i in range(8)))
    return str(path)


@pytest.mark.parametrize("change,expected", [
    ({"input_ids": None}, "data.dataset: missing input_ids; the MLPerf BERT layout needs"),
    ({"masked_lm_ids": [[5] * 11] * 8}, "data.dataset: masked_lm_ids has 11 entries per sequence; expected at "
                                        "most data.max_predictions (10)"),
    ({"segment_ids": [[0] * 63] * 8},
     "data.dataset: segment_ids has 63 tokens per sequence; expected data.seq_len (64)"),
    ({"masked_lm_ids": [[5] * 9] * 8}, "data.dataset: masked_lm_ids and masked_lm_positions differ in length"),
    ({"input_ids": [[1] + [300] * 63] * 8}, "data.dataset: input_ids holds 300, outside the model's vocabulary"),
    ({"next_sentence_labels": [2] * 8}, "data.dataset: next_sentence_labels holds 2, outside 0"),
])
def test_bad_data_is_one_clear_line(change, expected, tmp_path):
    with pytest.raises(DataError) as err:
        load_mlm_set(_write(tmp_path, **change), "data.dataset", SEQ, PRED, 260, 2)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_hdf5_shards_read_like_the_parquet_set(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setitem(sys.modules, "h5py", None)  # as on a machine without h5py
    (tmp_path / "part-0.hdf5").write_bytes(b"")
    with pytest.raises(DataError, match=r"^data.dataset: reading .hdf5 shards needs h5py"):
        load_mlm_set(str(tmp_path), "data.dataset", SEQ, PRED)
    monkeypatch.undo()
    import h5py  # in the test extra: the shards are read for real, never skipped
    table = pq.read_table(TRAIN).to_pydict()
    shards = tmp_path / "shards"
    shards.mkdir()
    for k, (a, b) in enumerate([(0, 300), (300, 640)]):  # MLPerf's fixed-shape layout: no weights
        with h5py.File(shards / f"part-{k:05d}.hdf5", "w") as f:
            for col in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                        "next_sentence_labels"):
                f.create_dataset(col, data=np.asarray(table[col][a:b], dtype=np.int32))
    lazy = load_mlm_set(str(shards), "data.dataset", SEQ, PRED)
    ref = load_mlm_set(str(TRAIN), "data.dataset", SEQ, PRED)
    idx = [5, 299, 300, 639, 5, 17]
    assert len(lazy) == 640 and all(torch.equal(lazy.batch(idx)[k], v) for k, v in ref.batch(idx).items())


# ---------------------------------------------------------------- loss terms

@pytest.fixture(scope="module")
def workload():
    from trainer.workloads.bert import BertPretrainingWorkload

    recipe = load_recipe(TINY_BERT, QUICK)
    return BertPretrainingWorkload(recipe, torch.device("cpu"), torch.float32)


def test_loss_terms_equal_bert_for_pretraining_full_logits(workload):
    from transformers import BertForPreTraining

    model = workload.build_model().eval()
    train, _ = workload.build_data(need_eval=False)
    batch = train.batch([0, 1, 2, 3, 4])
    plain = BertForPreTraining(model.config).eval()
    assert plain.load_state_dict(model.state_dict()).missing_keys == []  # same modules, same names
    with torch.no_grad():
        sums = workload.loss_sums(model, batch)
        evals = workload.eval_sums(model, batch)
        # the hand computation: every position's logits, labels at the masked positions only
        labels = torch.full_like(batch["input_ids"], -100)
        rows = torch.arange(5).unsqueeze(1).expand_as(batch["masked_lm_positions"])
        valid = batch["masked_lm_valid"]
        labels[rows[valid], batch["masked_lm_positions"][valid]] = batch["masked_lm_ids"][valid]
        out = plain(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], labels=labels,
                    next_sentence_label=batch["next_sentence_labels"])
        full = torch.nn.functional.cross_entropy(out.prediction_logits.flatten(0, 1), labels.flatten(),
                                                 reduction="sum")
        nsp = torch.nn.functional.cross_entropy(out.seq_relationship_logits, batch["next_sentence_labels"],
                                                reduction="sum")
        correct = (out.prediction_logits.argmax(-1) == labels)[labels != -100].sum()
    counts = workload.loss_counts(batch)
    assert counts == {"masked_tokens": int(valid.sum()), "sequences": 5}
    assert float(sums["mlm_loss"]) == pytest.approx(float(full), rel=1e-5)
    assert float(sums["nsp_loss"]) == pytest.approx(float(nsp), rel=1e-5)
    # BertForPreTraining's own loss is mean masked-LM + mean NSP: the loop's two-term normalisation
    mean = sums["mlm_loss"] / counts["masked_tokens"] + sums["nsp_loss"] / counts["sequences"]
    assert float(mean) == pytest.approx(float(out.loss), rel=1e-5)
    assert float(evals["loss"][0]) == pytest.approx(float(full), rel=1e-5)
    assert int(evals["accuracy"][0]) == int(correct) and int(evals["accuracy"][1]) == counts["masked_tokens"]
    assert workload.input_tokens(batch) == int(batch["attention_mask"].sum())


def test_flops_and_description(workload):
    from trainer.throughput import matmul_params

    model = workload.build_model()
    per, unit, formula = workload.flops(model)
    n, trainable = matmul_params(model)
    assert n == trainable and unit == "token" and formula.startswith("6N + 6 N_head P/L + 12 L d T")
    head, _ = matmul_params(model.cls.predictions)  # transform dense + the decoder to the vocabulary
    assert 0 < head < n
    # the head runs on max_predictions (10) gathered slots of each 64-token sequence, not on all 64
    assert per == pytest.approx(6 * (n - head) + 6 * head * 10 / SEQ + 12 * 2 * 128 * SEQ)
    train, _ = workload.build_data(need_eval=False)
    assert workload.describe(train) == ("BERT pretraining; 640 sequences of 64 tokens from "
                                        "fabric_bert_mini_train.parquet, up to 10 masked")


# ---------------------------------------------------------------- runs through the CLI

STEPS = ["max_steps=60", "train.eval_every_samples=320"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    # grad-accum 2 of 16 here against dp 2 x grad-accum 2 of 8 there: the same global batch of 32
    res = run_cli(tmp_path_factory.mktemp("bert1"), *QUICK, *STEPS, "train.micro_batch_size=16", recipe=TINY_BERT)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
def test_two_ranks_match_one_process_and_learn(single, tmp_path):
    res = run_cli(tmp_path / "ddp", *QUICK, *STEPS, recipe=TINY_BERT, nproc=2)
    assert res.returncode == 0, res.stderr[-3000:]
    rows, ref = res.metrics(), single.metrics()
    assert [r["step"] for r in rows] == list(range(1, 61))
    for r in rows:
        for key in ("loss", "mlm_loss", "nsp_loss", "masked_tokens", "sequences", "tokens_per_s", "grad_norm"):
            assert isinstance(r[key], (int, float)), key
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"], rel=1e-9) and r["sequences"] == 32
    # same global batch (dp 2 x grad-accum 2 against grad-accum 4), same seed
    assert rows[0]["loss"] == pytest.approx(ref[0]["loss"], abs=1e-5)
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in ref], rel=1e-5)
    assert [r["masked_tokens"] for r in rows] == [r["masked_tokens"] for r in ref]
    hashes = {f["trainable"]["sha256"] for f in res.rank_files()}
    assert len(res.rank_files()) == 2 and len(hashes) == 1
    evals = [r for r in rows if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [10, 20, 30, 40, 50, 60]
    ref_acc = [r["eval_accuracy"] for r in ref if "eval_accuracy" in r]
    assert [r["eval_accuracy"] for r in evals] == pytest.approx(ref_acc, abs=2e-3)  # one argmax flip at most
    # it learns: masked-LM accuracy beats always answering the commonest masked token
    _, evals_set = build_mlm_datasets(data_cfg(), 260, 2, 1, need_eval=True)
    b = evals_set.batch(list(range(len(evals_set))))
    targets = b["masked_lm_ids"][b["masked_lm_valid"]]
    majority = float(torch.bincount(targets).max()) / len(targets)
    assert evals[-1]["eval_accuracy"] > majority + 0.03, (majority, [r["eval_accuracy"] for r in evals])
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] - 0.5
    info = res.run_json()
    assert info["status"] == "completed" and info["layout"]["dp"] == 2
    assert info["data"]["eval_accuracy_is"] == "masked-LM" and info["throughput"]["flops_per_token"] > 0
    assert info["model"]["trainable_parameters"] == info["model"]["parameters"]
    assert "BERT pretraining; 640 sequences of 64 tokens" in res.stdout and "eval_acc" in res.stdout


@pytest.mark.integration
@pytest.mark.parametrize("override,expected", [
    ("data.dataset=/no/such/bert.parquet", "data.dataset: path '/no/such/bert.parquet' does not exist"),
    ("data.seq_len=32", "data.dataset: input_ids has 64 tokens per sequence; expected data.seq_len (32)"),
])
def test_bad_data_fails_with_one_line_through_the_cli(override, expected, tmp_path):
    res = run_cli(tmp_path / "bad", *QUICK, "max_steps=2", override, recipe=TINY_BERT)
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    info = res.run_json()
    assert info["status"] == "failed" and info["exit_code"] == 2 and expected in info["error"]


@pytest.mark.integration
def test_safetensors_checkpoint_loads_in_fsdp_shards(tmp_path):
    """model.path with safetensors: built empty, each FSDP rank reads only its shards, bit for bit the
    checkpoint's values, and trains from the same loss as one process."""
    import hashlib

    from safetensors.torch import load_file
    from transformers import BertConfig, BertForPreTraining

    ckpt = tmp_path / "bert"
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=260, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=512, max_position_embeddings=64, pad_token_id=0,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    BertForPreTraining(cfg).save_pretrained(ckpt, max_shard_size="500KB")
    assert len(list(ckpt.glob("*.safetensors"))) > 1
    full = {}
    for shard in ckpt.glob("*.safetensors"):
        full.update(load_file(str(shard)))
    common = [*QUICK, "max_steps=2", "train.eval_every_samples=null", f"model.path={ckpt}", "model.config=null",
              "train.save_final=false"]
    env = {"FABRIC_HARNESS_LOAD_DIGESTS": "1"}
    one = run_cli(tmp_path / "one", *common, "train.micro_batch_size=16", recipe=TINY_BERT, env=env)
    two = run_cli(tmp_path / "two", *common, "parallel.data_parallel=fsdp", recipe=TINY_BERT, nproc=2, env=env)
    for res in (one, two):
        assert res.returncode == 0, res.stderr[-3000:]
    assert two.losses()[0] == pytest.approx(one.losses()[0], abs=1e-5)
    for res, nproc in ((one, 1), (two, 2)):
        seen = set()
        for rank in range(nproc):
            digests = json.loads((res.out / "ranks" / f"rank{rank:05d}.load.json").read_text())
            for key, d in digests.items():
                block = full[key][tuple(slice(o, o + n) for o, n in zip(d["offset"], d["shape"]))].contiguous()
                assert hashlib.sha256(block.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest() == d["sha256"]
                seen.add(key)
        assert seen == set(full)
        loads = [f["load"] for f in res.rank_files()]
        assert all(x["source"] == "safetensors slices" for x in loads)
        total = sum(t.numel() * t.element_size() for t in full.values())
        assert sum(x["bytes_read"] for x in loads) == total  # the ranks between them read the model once
