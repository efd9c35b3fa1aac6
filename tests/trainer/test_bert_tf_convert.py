"""MLPerf BERT's TensorFlow checkpoint format into our BERT: the reader against TensorFlow's own reading of a
checkpoint TensorFlow wrote (tests/trainer/tf_bert/README.md), the name mapping, and the converted directory
loaded by BertForPreTraining with nothing missing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainer.bert_tf_convert import ConvertError, convert, hf_name, main
from trainer.tf_checkpoint import TfCheckpointError, list_variables, load

HERE = Path(__file__).parent / "tf_bert"
PREFIX = str(HERE / "model.ckpt-28252")


def test_reader_agrees_with_tensorflow_bit_for_bit():
    ref = np.load(HERE / "reference.npz")
    got = load(PREFIX)
    assert set(got) == {k.replace("|", "/") for k in ref.files} and len(got) == 139
    for k in ref.files:
        assert np.array_equal(got[k.replace("|", "/")], ref[k]) and got[k.replace("|", "/")].dtype == ref[k].dtype
    assert list_variables(PREFIX)["bert/encoder/layer_1/intermediate/dense/kernel"]["shape"] == [8, 16]
    assert got["global_step"] == 28252


def test_names_map_as_googles_bert_code_wrote_them():
    assert hf_name("bert/encoder/layer_3/attention/self/query/kernel") == (
        "bert.encoder.layer.3.attention.self.query.weight", True)
    assert hf_name("bert/embeddings/LayerNorm/gamma") == ("bert.embeddings.LayerNorm.weight", False)
    assert hf_name("bert/embeddings/word_embeddings") == ("bert.embeddings.word_embeddings.weight", False)
    assert hf_name("cls/predictions/output_bias") == ("cls.predictions.bias", False)
    assert hf_name("cls/seq_relationship/output_weights") == ("cls.seq_relationship.weight", False)


def test_converted_directory_loads_into_bert_for_pretraining(tmp_path, capsys):
    import torch
    from transformers import BertForPreTraining
    out = tmp_path / "bert"
    assert main([PREFIX, "--config", str(HERE / "bert_config.json"), "--out", str(out)]) == 0
    assert "parameters (model.path for the bert recipe)" in capsys.readouterr().out
    model, info = BertForPreTraining.from_pretrained(str(out), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ref = np.load(HERE / "reference.npz")
    q = model.bert.encoder.layer[1].attention.self.query.weight.detach().numpy()
    assert np.array_equal(q, ref["bert|encoder|layer_1|attention|self|query|kernel"].T)  # x @ W in TF
    assert np.array_equal(model.cls.seq_relationship.weight.detach().numpy(),
                          ref["cls|seq_relationship|output_weights"])
    assert torch.equal(model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight)
    assert np.array_equal(model.cls.predictions.bias.detach().numpy(), ref["cls|predictions|output_bias"])


def test_bad_input_is_one_error_line(tmp_path, capsys):
    config = json.loads((HERE / "bert_config.json").read_text())
    with pytest.raises(ConvertError, match="has shape \\[32, 8\\], the config wants \\[64, 8\\]"):
        convert(PREFIX, {**config, "vocab_size": 64})
    with pytest.raises(ConvertError, match="the checkpoint lacks bert.encoder.layer.2"):
        convert(PREFIX, {**config, "num_hidden_layers": 3})
    assert main([str(tmp_path / "nope"), "--config", str(HERE / "bert_config.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "expected a TensorFlow checkpoint prefix" in err and err.count("\n") == 1
    (tmp_path / "x.index").write_bytes(b"not a table")
    with pytest.raises(TfCheckpointError, match="not a TensorFlow checkpoint index"):
        list_variables(str(tmp_path / "x"))


@pytest.mark.parametrize("config, out, expected", [
    ("[1]", "o", "holds a JSON list; expected the checkpoint's bert_config.json (a JSON object)"),
    (None, "file", "--out: '{tmp}/file' is a file, not a directory"),
    (None, None, "the following arguments are required: --out; see python -m trainer.bert_tf_convert --help"),
])
def test_a_bad_config_or_out_is_one_line_before_any_conversion(tmp_path, capsys, config, out, expected):
    """The config must be a JSON object and --out a directory it can write: checked before the weights are
    read (not a TypeError or an OSError after the conversion)."""
    (tmp_path / "file").write_text("x")
    path = HERE / "bert_config.json"
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(config)
    argv = [PREFIX, "--config", str(path)] + (["--out", str(tmp_path / out)] if out else [])
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert expected.format(tmp=tmp_path) in err
