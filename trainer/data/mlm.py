"""Pre-masked BERT pretraining data in the MLPerf BERT layout, read from local files or made up (synthetic).

One sequence (L = data.seq_len, P = data.max_predictions):

    input_ids             [L]   [CLS] A [SEP] B [SEP], then padding
    input_mask            [L]   1 on real tokens, 0 on padding            (also read as attention_mask)
    segment_ids           [L]   0 for [CLS], A and the first [SEP]; 1 for B (also read as token_type_ids)
    masked_lm_positions   [<=P] where the masked tokens are, padded with 0
    masked_lm_ids         [<=P] the original tokens there, padded with 0
    masked_lm_weights     [<=P] optional (the TF records carry it): 1.0 real, 0.0 padding
    next_sentence_labels  []    0 = B follows A, 1 = B is a random sentence (also read as [1] or
                                next_sentence_label)

Padding rule: a prediction slot is padding when its position is 0. Position 0 holds [CLS], which is never
masked, so this is unambiguous; it is the rule MLPerf's PyTorch reference applies to its hdf5 shards, which
carry no weights. Where masked_lm_weights is present, a slot with weight 0 is padding too. Rows may carry
fewer than P predictions (they are padded here); the token columns must have exactly L entries.

Sources: a .jsonl/.json/.parquet file or a directory of them (read with `datasets`, held in memory as
compact tensors), or MLPerf's fixed-shape .hdf5 shards (a file or a directory of them; needs h5py; read
lazily, batch by batch, so the full training set need not fit in memory).

Evaluation uses data.eval_dataset. Without it, the data set is split like the Dolly data: data.split's
first fraction trains, its second evaluates (seeded with data.split_seed; the third is left unused), so
the training set does not depend on whether evaluation is on.

data.synthetic: random sequences of the real shapes from the recipe's seed (full length, a random A/B
boundary, exactly P masked positions each): data.synthetic_samples to train on, a quarter as many to
evaluate. They make the step's compute and communication real; the accuracy means nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from .sft import DataError, load_table, split_indices

TOKEN_COLUMNS = {  # batch name -> accepted column names, MLPerf's first
    "input_ids": ("input_ids",),
    "attention_mask": ("input_mask", "attention_mask"),
    "token_type_ids": ("segment_ids", "token_type_ids"),
}
PREDICTION_COLUMNS = {
    "masked_lm_positions": ("masked_lm_positions",),
    "masked_lm_ids": ("masked_lm_ids",),
}
NSP_COLUMNS = ("next_sentence_labels", "next_sentence_label")
WEIGHTS_COLUMN = "masked_lm_weights"
HDF5_SUFFIXES = (".hdf5", ".h5")


@dataclass
class MlmSet:
    """Pre-masked sequences held in memory; a batch is the dict the BERT workload feeds its model."""

    input_ids: torch.Tensor  # [N, L] int32
    attention_mask: torch.Tensor  # [N, L] int8
    token_type_ids: torch.Tensor  # [N, L] int8
    masked_lm_positions: torch.Tensor  # [N, P] int32, 0 on padding slots
    masked_lm_ids: torch.Tensor  # [N, P] int32, 0 on padding slots
    masked_lm_valid: torch.Tensor  # [N, P] bool, False on padding slots
    next_sentence_labels: torch.Tensor  # [N] int8
    source: str = ""
    synthetic: bool = False

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def batch(self, indices) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return {"input_ids": self.input_ids[idx].long(), "attention_mask": self.attention_mask[idx].long(),
                "token_type_ids": self.token_type_ids[idx].long(),
                "masked_lm_positions": self.masked_lm_positions[idx].long(),
                "masked_lm_ids": self.masked_lm_ids[idx].long(), "masked_lm_valid": self.masked_lm_valid[idx],
                "next_sentence_labels": self.next_sentence_labels[idx].long()}


class SubSet:
    """A fixed selection of another set's rows (a split, or max_*_samples)."""

    def __init__(self, base, rows: np.ndarray):
        self.base, self.rows = base, np.asarray(rows, dtype=np.int64)
        self.source, self.synthetic = base.source, base.synthetic

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices) -> dict[str, torch.Tensor]:
        return self.base.batch(self.rows[np.asarray(indices, dtype=np.int64)])


# ---------------------------------------------------------------- checks shared by every source

def _pad_predictions(values: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Ragged rows (flat values + per-row lengths, each <= width) -> [N, width], padded with 0."""
    n = len(lengths)
    out = np.zeros((n, width), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    rows = np.repeat(np.arange(n), lengths)
    cols = np.arange(len(values)) - np.repeat(starts, lengths)
    out[rows, cols] = values
    return out


def _finish(cols: dict[str, np.ndarray], seq_len: int, key: str, vocab_size: int | None,
            type_vocab_size: int | None, source: str) -> MlmSet:
    """Dense, width-checked columns -> an MlmSet; values checked where a bad one would crash the model."""
    pos, ids = cols["masked_lm_positions"], cols["masked_lm_ids"]
    valid = pos > 0
    if WEIGHTS_COLUMN in cols:
        valid &= cols[WEIGHTS_COLUMN] > 0
    _check_values(cols, valid, seq_len, key, vocab_size, type_vocab_size)
    return MlmSet(
        input_ids=torch.from_numpy(cols["input_ids"].astype(np.int32)),
        attention_mask=torch.from_numpy(cols["attention_mask"].astype(np.int8)),
        token_type_ids=torch.from_numpy(cols["token_type_ids"].astype(np.int8)),
        masked_lm_positions=torch.from_numpy(np.where(valid, pos, 0).astype(np.int32)),
        masked_lm_ids=torch.from_numpy(np.where(valid, ids, 0).astype(np.int32)),
        masked_lm_valid=torch.from_numpy(valid),
        next_sentence_labels=torch.from_numpy(cols["next_sentence_labels"].astype(np.int8)),
        source=source)


def _check_values(cols: dict, valid: np.ndarray, seq_len: int, key: str, vocab_size: int | None,
                  type_vocab_size: int | None) -> None:
    def bad(name: str, values: np.ndarray, lo: int, hi: int, what: str) -> None:
        if values.size and (values.min() < lo or values.max() >= hi):
            worst = values.min() if values.min() < lo else values.max()
            raise DataError(f"{key}: {name} holds {int(worst)}, outside {what}")

    if vocab_size is not None:
        bad("input_ids", cols["input_ids"], 0, vocab_size, f"the model's vocabulary (vocab_size {vocab_size})")
        bad("masked_lm_ids", cols["masked_lm_ids"][valid], 0, vocab_size,
            f"the model's vocabulary (vocab_size {vocab_size})")
    bad("masked_lm_positions", cols["masked_lm_positions"], 0, seq_len, f"the sequence (data.seq_len {seq_len})")
    bad("input_mask", cols["attention_mask"], 0, 2, "0/1")
    bad("segment_ids", cols["token_type_ids"], 0, type_vocab_size or 2,
        f"the model's token types (type_vocab_size {type_vocab_size or 2})")
    bad("next_sentence_labels", cols["next_sentence_labels"], 0, 2,
        "0 (B follows A) / 1 (B is random)")


def _shape_error(key: str, name: str, got: str, seq_len: int, max_predictions: int) -> DataError:
    if name in PREDICTION_COLUMNS or name == WEIGHTS_COLUMN:
        return DataError(f"{key}: {name} has {got} entries per sequence; expected at most data.max_predictions "
                         f"({max_predictions}), padded with 0")
    return DataError(f"{key}: {name} has {got} tokens per sequence; expected data.seq_len ({seq_len}) "
                     "(set data.seq_len to the data set's sequence length)")


def _pick(names: list[str], choices: tuple[str, ...]) -> str | None:
    return next((c for c in choices if c in names), None)


def _column_map(names: list[str], key: str) -> dict[str, str]:
    """Batch name -> the source's column name; one error naming every missing column."""
    found, missing = {}, []
    for batch_name, choices in {**TOKEN_COLUMNS, **PREDICTION_COLUMNS, "next_sentence_labels": NSP_COLUMNS}.items():
        col = _pick(names, choices)
        if col is None:
            missing.append(" or ".join(choices))
        else:
            found[batch_name] = col
    if missing:
        raise DataError(f"{key}: missing {', '.join(missing)}; the MLPerf BERT layout needs input_ids, input_mask, "
                        "segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels; found "
                        f"{', '.join(names) or 'no columns'}")
    if WEIGHTS_COLUMN in names:
        found[WEIGHTS_COLUMN] = WEIGHTS_COLUMN
    return found


# ---------------------------------------------------------------- jsonl / parquet (in memory)

def _arrow_column(table, name: str, key: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(flat values, per-row lengths) of a list column, or (values, None) of a scalar one - no Python loop."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.data.column(name).combine_chunks()
    if col.null_count:
        raise DataError(f"{key}: {name} has {col.null_count} missing value(s)")
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
        values = col.flatten()
        if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
            raise DataError(f"{key}: {name} holds {values.type} lists; expected lists of integers")
        return values.to_numpy(zero_copy_only=False), lengths
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise DataError(f"{key}: {name} holds {col.type}; expected integers")
    return col.to_numpy(zero_copy_only=False), None


def _load_table_set(spec: str, key: str, seq_len: int, max_predictions: int, vocab_size, type_vocab_size) -> MlmSet:
    table = load_table(spec, key)
    names = _column_map(list(table.column_names), key)
    if len(table) == 0:
        raise DataError(f"{key}: {spec!r} holds no sequences")
    cols: dict[str, np.ndarray] = {}
    pred_lengths = {}
    for batch_name, col in names.items():
        values, lengths = _arrow_column(table, col, key)
        if batch_name == "next_sentence_labels":
            if lengths is not None:  # [1] per row
                if (lengths != 1).any():
                    raise DataError(f"{key}: {col} must hold one label per sequence")
            cols[batch_name] = values.astype(np.int64)
            continue
        if lengths is None:
            raise DataError(f"{key}: {col} holds one number per row; expected a list per sequence")
        if batch_name in TOKEN_COLUMNS:
            if (lengths != seq_len).any():
                wrong = lengths[lengths != seq_len]
                got = str(int(wrong[0])) if (wrong == wrong[0]).all() else f"{int(lengths.min())}..{int(lengths.max())}"
                raise _shape_error(key, col, got, seq_len, max_predictions)
            cols[batch_name] = values.astype(np.int64).reshape(len(lengths), seq_len)
        else:
            if lengths.max() > max_predictions:
                raise _shape_error(key, col, str(int(lengths.max())), seq_len, max_predictions)
            pred_lengths[col] = lengths
            cols[batch_name] = _pad_predictions(values.astype(np.float64 if batch_name == WEIGHTS_COLUMN
                                                               else np.int64), lengths, max_predictions)
    first = next(iter(pred_lengths.values()))
    for col, lengths in pred_lengths.items():
        if (lengths != first).any():
            raise DataError(f"{key}: {col} and {names['masked_lm_positions']} differ in length in some rows; "
                            "each masked position needs its original token id")
    return _finish(cols, seq_len, key, vocab_size, type_vocab_size, os.path.basename(spec.rstrip("/")))


# ---------------------------------------------------------------- MLPerf hdf5 shards (lazy)

def _hdf5_files(spec: str, key: str) -> list[str] | None:
    """The shard paths when `spec` is an hdf5 file or a directory of them; None for other sources."""
    if os.path.isfile(spec) and spec.endswith(HDF5_SUFFIXES):
        return [spec]
    if os.path.isdir(spec):
        files = sorted(os.path.join(spec, f) for f in os.listdir(spec) if f.endswith(HDF5_SUFFIXES))
        return files or None
    return None


class Hdf5Set:
    """MLPerf's fixed-shape hdf5 shards, read batch by batch (only shapes are checked up front)."""

    def __init__(self, files: list[str], key: str, seq_len: int, max_predictions: int, type_vocab_size):
        try:
            import h5py
        except ImportError:
            raise DataError(f"{key}: reading .hdf5 shards needs h5py, which is not installed "
                            "(pip install h5py), or convert the shards to .parquet") from None
        self.h5py, self.key, self.seq_len, self.max_predictions = h5py, key, seq_len, max_predictions
        self.type_vocab_size = type_vocab_size
        self.files, sizes = files, []
        self.source = os.path.basename(os.path.dirname(files[0]) if len(files) > 1 else files[0])
        self.synthetic = False
        self._open: dict[int, object] = {}
        for i, path in enumerate(files):
            try:
                f = h5py.File(path, "r")
            except OSError as exc:
                raise DataError(f"{key}: cannot read {path!r} as hdf5: {str(exc).splitlines()[0]}") from None
            self.names = _column_map(list(f.keys()), f"{key} ({os.path.basename(path)})")
            n = f[self.names["input_ids"]].shape[0]
            for batch_name, col in self.names.items():
                shape = f[col].shape
                if shape[0] != n:
                    raise DataError(f"{key}: {os.path.basename(path)}: {col} has {shape[0]} rows, input_ids {n}")
                if batch_name in TOKEN_COLUMNS and shape[1:] != (seq_len,):
                    raise _shape_error(key, col, "x".join(map(str, shape[1:])) or "1", seq_len, max_predictions)
                if batch_name in PREDICTION_COLUMNS and (len(shape) != 2 or shape[1] > max_predictions):
                    raise _shape_error(key, col, "x".join(map(str, shape[1:])) or "1", seq_len, max_predictions)
            sizes.append(n)
            f.close()
        self.offsets = np.concatenate([[0], np.cumsum(sizes)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _file(self, i: int):
        if i not in self._open:
            self._open[i] = self.h5py.File(self.files[i], "r")
        return self._open[i]

    def batch(self, indices) -> dict[str, torch.Tensor]:
        indices = np.asarray(indices, dtype=np.int64)
        shard = np.searchsorted(self.offsets, indices, side="right") - 1
        parts, order = [], []
        for i in np.unique(shard):
            local = indices[shard == i] - self.offsets[i]
            rows, back = np.unique(local, return_inverse=True)  # h5py reads increasing, distinct rows
            f = self._file(int(i))
            parts.append({b: np.asarray(f[c][rows.tolist()])[back] for b, c in self.names.items()})
            order.append(np.nonzero(shard == i)[0])
        where = np.argsort(np.concatenate(order), kind="stable")
        cols = {}
        for b in parts[0]:
            joined = np.concatenate([p[b] for p in parts])[where]
            if b in PREDICTION_COLUMNS or b == WEIGHTS_COLUMN:
                joined = np.pad(joined, ((0, 0), (0, self.max_predictions - joined.shape[1])))
            cols[b] = joined.reshape(len(indices)) if b == "next_sentence_labels" else joined
        return _finish(cols, self.seq_len, self.key, None, self.type_vocab_size, self.source).batch(
            range(len(indices)))


# ---------------------------------------------------------------- synthetic

def synthetic_set(n: int, seq_len: int, max_predictions: int, vocab_size: int, seed: int) -> MlmSet:
    """Full-length random sequences with exactly max_predictions masked positions each (seeded)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab_size, size=(n, seq_len), dtype=np.int64)
    boundary = rng.integers(seq_len // 4, 3 * seq_len // 4 + 1, size=(n, 1))
    types = (np.arange(seq_len)[None, :] >= boundary).astype(np.int64)
    # max_predictions distinct positions in 1..seq_len-1 per row, ascending (position 0 is [CLS])
    pos = np.sort(np.argsort(rng.random((n, seq_len - 1)), axis=1)[:, :max_predictions] + 1, axis=1)
    cols = {"input_ids": ids, "attention_mask": np.ones((n, seq_len), dtype=np.int64), "token_type_ids": types,
            "masked_lm_positions": pos, "masked_lm_ids": rng.integers(1, vocab_size, size=pos.shape),
            "next_sentence_labels": rng.integers(0, 2, size=n)}
    out = _finish(cols, seq_len, "data.synthetic", vocab_size, None, "synthetic")
    out.synthetic = True
    return out


# ---------------------------------------------------------------- entry point

def load_mlm_set(spec: str, key: str, seq_len: int, max_predictions: int, vocab_size: int | None = None,
                 type_vocab_size: int | None = None):
    """One local source (jsonl/json/parquet file or directory, or hdf5 shards) as a set with len() and batch()."""
    files = _hdf5_files(spec, key)
    if files is not None:
        return Hdf5Set(files, key, seq_len, max_predictions, type_vocab_size)
    if spec.endswith(HDF5_SUFFIXES) and not os.path.exists(spec):
        raise DataError(f"{key}: path {spec!r} does not exist; allowed: .hdf5 shards on this machine (a relative "
                        "path is read from the recipe's directory, then from the working directory)")
    if not os.path.exists(spec):  # BERT data is always local: no hub look-up
        raise DataError(f"{key}: path {spec!r} does not exist; allowed: a .jsonl/.parquet file, .hdf5 shards, "
                        "or a directory of them, on this machine")
    return _load_table_set(spec, key, seq_len, max_predictions, vocab_size, type_vocab_size)


def build_mlm_datasets(cfg, vocab_size: int, type_vocab_size: int, seed: int, need_eval: bool):
    """(train set, eval set or None) from the recipe's `data` section; see the module docstring."""
    if cfg.synthetic:
        train = synthetic_set(cfg.synthetic_samples, cfg.seq_len, cfg.max_predictions, vocab_size, seed)
        evals = synthetic_set(max(1, cfg.synthetic_samples // 4), cfg.seq_len, cfg.max_predictions, vocab_size,
                              seed + 1) if need_eval else None
        return train, evals
    full = load_mlm_set(cfg.dataset, "data.dataset", cfg.seq_len, cfg.max_predictions, vocab_size, type_vocab_size)
    evals = None
    if cfg.eval_dataset is not None:
        train = full
        if need_eval:
            evals = load_mlm_set(cfg.eval_dataset, "data.eval_dataset", cfg.seq_len, cfg.max_predictions,
                                 vocab_size, type_vocab_size)
    else:
        train_idx, eval_idx, _ = split_indices(len(full), cfg.split, cfg.split_seed)
        train = SubSet(full, train_idx)
        if need_eval:
            evals = SubSet(full, eval_idx)
    if cfg.max_train_samples is not None:
        train = SubSet(train, np.arange(min(cfg.max_train_samples, len(train))))
    if evals is not None and cfg.max_eval_samples is not None:
        evals = SubSet(evals, np.arange(min(cfg.max_eval_samples, len(evals))))
    if len(train) == 0:
        raise DataError(f"data.dataset: no training sequences in {cfg.dataset!r} (check data.split)")
    return train, evals
