"""Dolly template, answer-only labels, padding/packing, splits, the step sampler, loaders and bad paths."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from trainer.data.sft import (IGNORE, DataError, StepSampler, build_datasets, dolly_prompt, load_table,
                              split_indices, to_fixed_length, tokenize_dolly)

from ..conftest import REPO

TOKENIZER_DIR = REPO / "recipes" / "assets" / "byte_tokenizer"
DEMO = REPO / "recipes" / "assets" / "fabric_dolly_mini.jsonl"


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def data_cfg(**kw):
    base = dict(dataset=str(DEMO), format="dolly", eval_dataset=None, seq_len=256, packing=False,
                split=[0.8, 0.15, 0.05], split_seed=1234, max_train_samples=None, max_eval_samples=None,
                padding="max_length")
    return SimpleNamespace(**{**base, **kw})


def test_dolly_template_puts_context_before_instruction():
    assert dolly_prompt({"instruction": "Q?", "context": "Ctx.", "response": "A."}) == ("Ctx.\n\nQ? ", "A.")
    assert dolly_prompt({"instruction": "Q?", "context": "", "response": "A."}) == ("Q? ", "A.")


def test_loss_is_on_the_answer_and_eos_only(tok):
    [(ids, labels)] = tokenize_dolly([{"instruction": "Hi?", "context": "", "response": "Yo."}], tok)
    assert tok.decode(ids) == "Hi? Yo.</s>"
    learned = [t for t in labels if t != IGNORE]
    assert tok.decode(learned) == "Yo.</s>"
    assert labels[:len("Hi? ")] == [IGNORE] * len("Hi? ")


def test_padding_masks_pad_and_drops_examples_whose_answer_is_cut(tok):
    ex = tokenize_dolly([{"instruction": "a" * 10, "context": "", "response": "b"},
                         {"instruction": "c" * 40, "context": "", "response": "d"}], tok)
    out = to_fixed_length(ex, seq_len=20, pad_id=tok.pad_token_id, packing=False)
    assert len(out) == 1  # the second answer lies past 20 tokens: nothing to learn, dropped
    assert int(out.attention_mask[0].sum()) == 10 + 1 + 1 + 1  # prompt, space, answer, eos
    assert (out.labels[0][out.attention_mask[0] == 0] == IGNORE).all()
    assert (out.input_ids[0][out.attention_mask[0] == 0] == tok.pad_token_id).all()


def test_a_row_longer_than_the_tokenizers_maximum_is_no_warning(tok, monkeypatch):
    """Such a row is cut or dropped at data.seq_len; transformers' warning that the sequence is longer than the
    model's maximum was a second stderr line beside a data set's one error line."""
    from transformers import tokenization_utils_base

    said = []
    monkeypatch.setattr(tokenization_utils_base.logger, "warning", lambda msg, *a, **k: said.append(msg))
    monkeypatch.setattr(tok, "model_max_length", 8)
    monkeypatch.setattr(tok, "deprecation_warnings", {})
    [(ids, _)] = tokenize_dolly([{"instruction": "a" * 40, "context": "", "response": "b"}], tok)
    assert len(ids) > 8 and not [m for m in said if "Token indices sequence length" in str(m)], said


def test_packing_fills_every_position_and_keeps_answer_only_labels(tok):
    rows = [{"instruction": f"q{i}", "context": "", "response": f"a{i}"} for i in range(50)]
    ex = tokenize_dolly(rows, tok)
    out = to_fixed_length(ex, seq_len=32, pad_id=0, packing=True)
    total = sum(len(ids) for ids, _ in ex)
    assert len(out) == total // 32 and bool(out.attention_mask.all())
    flat_labels = [t for _, lab in ex for t in lab][: len(out) * 32]
    assert out.labels.flatten().tolist() == flat_labels


def test_split_is_80_15_5_seeded_and_disjoint():
    tr, va, te = split_indices(1000, [0.8, 0.15, 0.05], 1234)
    assert (len(tr), len(va), len(te)) == (800, 150, 50)
    assert len(set(tr) | set(va) | set(te)) == 1000
    again = split_indices(1000, [0.8, 0.15, 0.05], 1234)
    assert (again[0] == tr).all()


def test_dp_ranks_together_see_exactly_the_single_process_batch():
    single = StepSampler(100, seed=7, global_batch=8, dp=1, dp_rank=0, micro_batch=2)
    ranks = [StepSampler(100, seed=7, global_batch=8, dp=2, dp_rank=r, micro_batch=2) for r in range(2)]
    for step in range(30):  # crosses epoch boundaries (100 samples / 8 per step)
        assert single.positions(step) == ranks[0].positions(step) + ranks[1].positions(step)
    assert [len(mb) for mb in ranks[0].micro_batches(0)] == [2, 2]


def test_every_sample_seen_once_per_epoch():
    s = StepSampler(40, seed=1, global_batch=8, dp=1, dp_rank=0, micro_batch=8)
    first_epoch = [i for step in range(5) for i in s.positions(step)]
    assert sorted(first_epoch) == list(range(40))
    assert s.positions(5) != s.positions(0)  # a new permutation each epoch


def test_build_from_local_jsonl_and_parquet(tmp_path, tok):
    train, evals = build_datasets(data_cfg(max_train_samples=50, max_eval_samples=10), tok, need_eval=True)
    assert len(train) == 50 and len(evals) == 10
    import datasets
    rows = [json.loads(line) for line in DEMO.read_text().splitlines()[:30]]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    train, _ = build_datasets(data_cfg(dataset=str(tmp_path / "d.parquet")), tok, need_eval=False)
    assert len(train) == 24


def test_instruction_data_with_an_eval_set_of_its_own(tmp_path, tok):
    """data.eval_dataset with Dolly-format data: the evaluation reads it and every row of data.dataset trains
    (it was ignored, the split's validation rows evaluated instead); a missing or malformed one is one line."""
    lines = DEMO.read_text().splitlines()
    (tmp_path / "eval.jsonl").write_text("\n".join(lines[:7]) + "\n")
    cfg = data_cfg(eval_dataset=str(tmp_path / "eval.jsonl"))
    train, evals = build_datasets(cfg, tok, need_eval=True)
    everything, _ = build_datasets(data_cfg(split=[1.0, 0.0, 0.0]), tok, need_eval=False)
    assert len(evals) == 7 and len(train) == len(everything)
    assert build_datasets(cfg, tok, need_eval=False)[1] is None
    with pytest.raises(DataError, match="data.eval_dataset: path '/no/eval.jsonl' does not exist"):
        build_datasets(data_cfg(eval_dataset="/no/eval.jsonl"), tok, need_eval=True)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(DataError, match="data.eval_dataset: .* lacks the Dolly field"):
        build_datasets(data_cfg(eval_dataset=str(tmp_path / "bad.jsonl")), tok, need_eval=True)


def test_pretokenized_sets_keep_their_labels(tmp_path, tok):
    import datasets
    rows = [{"input_ids": list(range(5, 5 + 16)), "labels": [IGNORE] * 8 + list(range(13, 21))} for _ in range(6)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    datasets.Dataset.from_list(rows[:2]).to_parquet(str(tmp_path / "eval.parquet"))
    cfg = data_cfg(dataset=str(tmp_path / "train.parquet"), eval_dataset=str(tmp_path / "eval.parquet"),
                   format="pretokenized", seq_len=16)
    train, evals = build_datasets(cfg, tok, need_eval=True)
    assert len(train) == 6 and len(evals) == 2
    assert train.labels[0, :8].tolist() == [IGNORE] * 8 and train.labels[0, 8:].tolist() == list(range(13, 21))


def test_token_ids_past_the_vocabulary_are_one_line_not_an_embedding_error(tmp_path, tok):
    # an id >= vocab_size fails in the embedding with a traceback on CPU and a device-side assert on CUDA
    from trainer.data.sft import check_token_ids
    rows = [{"input_ids": [5, 6, 7, 1030], "labels": [IGNORE, 6, 7, 1030]}, {"input_ids": [1, 2], "labels": [1, 2]}]
    datasets_mod = pytest.importorskip("datasets")
    datasets_mod.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    cfg = data_cfg(dataset=str(tmp_path / "train.parquet"), format="pretokenized", seq_len=8)
    train, _ = build_datasets(cfg, tok, need_eval=False)
    check_token_ids(train, 2048, "data.dataset")  # padding (pad id) and IGNORE labels are not ids the model reads
    with pytest.raises(DataError) as err:
        check_token_ids(train, 1024, "data.dataset")
    assert str(err.value) == ("data.dataset: input_ids holds token id 1030, outside the model's vocabulary; "
                              "allowed: 0 to 1023 (model vocab_size 1024)")
    train.input_ids[train.input_ids == 1030] = 3  # a label past the vocabulary alone is named as a label
    with pytest.raises(DataError, match=r"labels holds token id 1030, .* or -100 in labels to skip a position"):
        check_token_ids(train, 1024, "data.dataset")


def test_missing_data_file_fails_with_one_line():
    # hub names not in the cache are covered through the CLI (tests/trainer/test_training.py), which
    # sets HF_HUB_OFFLINE before datasets is imported
    with pytest.raises(DataError) as err:
        load_table("/no/such/file.jsonl", "data.dataset")
    assert str(err.value).startswith("data.dataset: path '/no/such/file.jsonl' does not exist; allowed: a .jsonl, "
                                     ".json or .parquet file")


def test_missing_dolly_fields_are_named(tmp_path, tok):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"prompt": "p", "completion": "c"}) + "\n")
    with pytest.raises(DataError, match="lacks the Dolly field"):
        build_datasets(data_cfg(dataset=str(path)), tok, need_eval=False)


def test_longest_padding_cuts_each_batch_to_its_longest_row_rounded_up(tok):
    rows = [{"instruction": "a" * n, "context": "", "response": "b"} for n in (3, 20, 50)]
    full = to_fixed_length(tokenize_dolly(rows, tok), seq_len=64, pad_id=tok.pad_token_id, packing=False)
    lengths = full.attention_mask.sum(dim=1).tolist()  # 6, 23, 53 real tokens
    assert full.batch([0, 1])["input_ids"].shape == (2, 64)  # max_length: every batch seq_len wide
    full.pad_multiple = 16
    short = full.batch([0, 1])
    assert short["input_ids"].shape == (2, 32) and max(lengths[:2]) <= 32
    assert full.batch([0])["labels"].shape == (1, 16)
    assert full.batch([2, 0])["attention_mask"].shape == (2, 64)  # 53 rounds up to 64, never past seq_len
    # only padding is cut: every real token and label is still there
    assert int(short["attention_mask"].sum()) == lengths[0] + lengths[1]
    assert torch.equal(short["labels"], full.labels[[0, 1], :32].long())
    assert (full.labels[[0, 1], 32:] == IGNORE).all()


def test_padding_key_reaches_the_data_sets(tok):
    train, evals = build_datasets(data_cfg(max_train_samples=50, max_eval_samples=10, padding="longest"), tok,
                                  need_eval=True, pad_multiple=8)
    assert train.pad_multiple == evals.pad_multiple == 8
    assert build_datasets(data_cfg(max_train_samples=5), tok, need_eval=False)[0].pad_multiple is None
