"""Instruction data for causal-LM fine-tuning: Dolly-schema rows or pre-tokenized sequences.

Dolly-15k (docs/reference.md section 7): input = context + blank line + instruction (or the instruction alone),
output = response, text = "{input} {output}", loss on the answer only, split 80/15/5 with seed 1234.
"""
from __future__ import annotations

import codecs
import json
import os
from dataclasses import dataclass

import numpy as np
import torch

from telemetry.input_files import not_a_file

from ..error_report import InputError
from .sampler import StepSampler  # noqa: F401  (re-exported: it was born here)

IGNORE = -100  # label value the loss skips
DOLLY_FIELDS = ("instruction", "context", "response")


class DataError(InputError):
    """A data set that cannot be used; the message is one line naming the key and the problem."""


@dataclass
class TokenizedSet:
    """Right-padded sequences, stored compactly at the full length; a sample is (input_ids, labels,
    attention_mask).

    `pad_multiple` None: every batch is `seq_len` wide (`data.padding: max_length`). A number: each batch
    is cut to its longest sequence rounded up to that multiple (`data.padding: longest`, dynamic padding
    as NeMo's fine-tuning collator does): the columns cut are padding in every row, and with right padding
    and causal attention the real tokens' loss is the same as at full width.
    """

    input_ids: torch.Tensor  # [N, L] int32
    labels: torch.Tensor  # [N, L] int32, IGNORE where no loss
    attention_mask: torch.Tensor  # [N, L] int8
    pad_multiple: int | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        mask = self.attention_mask[idx]
        width = mask.shape[1]
        if self.pad_multiple is not None and mask.numel():
            longest = int(mask.sum(dim=1).max())
            width = min(width, -(-max(longest, 1) // self.pad_multiple) * self.pad_multiple)
        return {"input_ids": self.input_ids[idx, :width].long(), "labels": self.labels[idx, :width].long(),
                "attention_mask": mask[:, :width].long()}


def _json_problem(path: str, key: str) -> str | None:
    """Where a JSON/JSON-lines file goes wrong (file and line), for when the reader gave up without saying."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
    except OSError as exc:
        return f"{key}: cannot read {path!r}: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        return f"{key}: {path}: line {line} is not UTF-8 text; allowed: UTF-8 JSON lines"
    if path.endswith(".json") and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as exc:
            return f"{key}: {path}: line {exc.lineno} is not valid JSON: {exc.msg}"
        bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
        return None if bad is None else f"{key}: {path}: item {bad} is not a JSON object; expected one object per row"
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            return f"{key}: {path}: line {number} is not valid JSON: {exc.msg}; expected one JSON object per line"
        if not isinstance(row, dict):
            return (f"{key}: {path}: line {number} holds a JSON {type(row).__name__}; "
                    "expected one JSON object per line")
    return None


def _check_utf8(f, head: bytes, path: str, key: str) -> None:
    """The JSON reader passes invalid UTF-8 through as replacement characters; refuse it, by line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, chunk = 0, head
    while True:
        try:
            decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            line = lines + chunk[:max(exc.start, 0)].count(b"\n") + 1
            raise DataError(f"{key}: {path}: line {line} is not UTF-8 text; allowed: UTF-8 JSON") from None
        if not chunk:
            return
        lines += chunk.count(b"\n")
        chunk = f.read(16 << 20)


def _check_json_files(files, key: str) -> None:
    """Refuse empty files and rows that are not JSON objects before the reader sees them (it fails with
    an IndexError on an empty file and turns bare values into a 'text' column)."""
    for path in [files] if isinstance(files, str) else files:
        if path.endswith(".parquet"):
            continue
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            _check_utf8(f, head, path, key)
        if not head.strip():
            raise DataError(f"{key}: {path} is empty; expected JSON lines, one object per row")
        if not head.lstrip().startswith((b"{", b"[") if path.endswith(".json") else b"{"):
            problem = _json_problem(path, key)
            if problem:
                raise DataError(problem)


def load_table(spec: str, key: str):
    """A local .jsonl/.json/.parquet file (or a directory of them), else a hub name in the local cache."""
    import datasets

    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)  # its failure log would add lines
    if os.path.exists(spec):
        files = spec
        if os.path.isdir(spec):
            files = sorted(os.path.join(spec, f) for f in os.listdir(spec)
                           if f.endswith((".jsonl", ".json", ".parquet")))
            if not files:
                raise DataError(f"{key}: directory {spec!r} holds no .jsonl, .json or .parquet files")
        for path in [files] if isinstance(files, str) else files:  # a FIFO is opened and waited on forever
            if kind := not_a_file(path):
                raise DataError(f"{key}: {path!r} {kind}; allowed: a .jsonl, .json or .parquet file, or a "
                                "directory of them")
        first = files if isinstance(files, str) else files[0]
        builder = "parquet" if first.endswith(".parquet") else "json"
        if os.path.isfile(spec) and not spec.endswith((".jsonl", ".json", ".parquet")):
            raise DataError(f"{key}: {spec!r} is not a .jsonl, .json or .parquet file")
        try:
            _check_json_files(files, key)
            table = datasets.load_dataset(builder, data_files=files, split="train")
        except DataError:
            raise
        except Exception as exc:  # datasets raises many types; the user needs the file and the reason
            for path in ([] if builder == "parquet" else [files] if isinstance(files, str) else files):
                problem = _json_problem(path, key)
                if problem:
                    raise DataError(problem) from None
            raise DataError(f"{key}: cannot read {spec!r} as {builder}: {str(exc).splitlines()[0]}") from None
        if len(table) == 0:
            raise DataError(f"{key}: {spec!r} holds no rows")
        return table
    if spec.startswith((".", "/")) or spec.endswith((".jsonl", ".json", ".parquet")):
        raise DataError(f"{key}: path {spec!r} does not exist; allowed: a .jsonl, .json or .parquet file (or a "
                        "directory of them) on this machine; a relative path is read from the recipe's directory, "
                        "then from the working directory, and $VARIABLES are not expanded")
    try:
        return datasets.load_dataset(spec, split="train")
    except Exception as exc:
        raise DataError(
            f"{key}: {spec!r} is neither a local file nor a data set in the Hugging Face cache "
            f"({type(exc).__name__}); download it where there is internet (datasets.load_dataset) or give "
            "a .jsonl/.parquet path") from None


def split_indices(n: int, fractions: list[float], seed: int) -> list[np.ndarray]:
    """Seeded permutation cut into train/validation/test by fractions."""
    order = np.random.default_rng(seed).permutation(n)
    cut1 = int(round(n * fractions[0]))
    cut2 = cut1 + int(round(n * fractions[1]))
    return [order[:cut1], order[cut1:cut2], order[cut2:]]


def dolly_prompt(row: dict) -> tuple[str, str]:
    context = (row.get("context") or "").strip()
    instruction = (row.get("instruction") or "").strip()
    source = f"{context}\n\n{instruction}" if context else instruction
    return source + " ", (row.get("response") or "").strip()


def tokenize_dolly(rows, tokenizer) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per example: prompt tokens get IGNORE, answer tokens and EOS are learned."""
    if not len(rows):  # an empty split (data.split with a 0): the fast tokenizer fails on an empty batch
        return []
    prompts, answers = zip(*(dolly_prompt(r) for r in rows))
    # a row longer than the tokenizer's model_max_length is cut or dropped at data.seq_len (to_fixed_length), so
    # transformers' one-time "Token indices sequence length is longer ..." warning says nothing true of the run;
    # it was a second stderr line beside the one error line of a data set with no usable row
    warned = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    p_ids = tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
    a_ids = tokenizer(list(answers), add_special_tokens=False)["input_ids"]
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out = []
    for p, a in zip(p_ids, a_ids):
        ids = list(p) + list(a) + eos
        out.append((ids, [IGNORE] * len(p) + list(a) + eos))
    return out


def to_fixed_length(examples: list[tuple[list[int], list[int]]], seq_len: int, pad_id: int,
                    packing: bool) -> TokenizedSet:
    """Pad (or truncate) each example to seq_len, or pack examples end to end into seq_len blocks.

    Packing concatenates examples without an attention barrier between them (plain causal attention),
    the simple packing most loops use; the answer-only labels are kept per example.
    """
    rows_ids, rows_lab, rows_mask = [], [], []
    if packing:
        flat_ids = [t for ids, _ in examples for t in ids]
        flat_lab = [t for _, lab in examples for t in lab]
        for start in range(0, len(flat_ids) - seq_len + 1, seq_len):
            lab = flat_lab[start:start + seq_len]
            if all(x == IGNORE for x in lab):
                continue
            rows_ids.append(flat_ids[start:start + seq_len])
            rows_lab.append(lab)
            rows_mask.append([1] * seq_len)
    else:
        for ids, lab in examples:
            ids, lab = ids[:seq_len], lab[:seq_len]
            if all(x == IGNORE for x in lab):
                continue  # the answer was truncated away: nothing to learn from
            pad = seq_len - len(ids)
            rows_ids.append(ids + [pad_id] * pad)
            rows_lab.append(lab + [IGNORE] * pad)
            rows_mask.append([1] * len(ids) + [0] * pad)
    if not rows_ids:
        return TokenizedSet(torch.zeros(0, seq_len, dtype=torch.int32), torch.zeros(0, seq_len, dtype=torch.int32),
                            torch.zeros(0, seq_len, dtype=torch.int8))
    return TokenizedSet(torch.tensor(rows_ids, dtype=torch.int32), torch.tensor(rows_lab, dtype=torch.int32),
                        torch.tensor(rows_mask, dtype=torch.int8))


def _need_int_lists(table, col: str, key: str) -> None:
    feature = table.features[col]
    inner = getattr(feature, "feature", None)  # List/Sequence of values
    dtype = getattr(inner, "dtype", None)
    if inner is None or not (isinstance(dtype, str) and dtype.startswith(("int", "uint"))):
        raise DataError(f"{key}: column {col!r} holds {feature}; expected a list of integer token ids per row")


def pretokenized_examples(table, key: str) -> list[tuple[list[int], list[int]]]:
    """Rows with `input_ids` and optionally `labels` (MLPerf GovReport's preprocessed layout)."""
    if "input_ids" not in table.column_names:
        raise DataError(f"{key}: data.format=pretokenized needs an 'input_ids' column; "
                        f"found {', '.join(table.column_names)}")
    for col in ("input_ids", "labels"):
        if col in table.column_names:
            _need_int_lists(table, col, key)
    has_labels = "labels" in table.column_names
    out = []
    for row in table:
        ids = list(row["input_ids"])
        labels = list(row["labels"]) if has_labels else list(ids)
        if len(labels) != len(ids):
            raise DataError(f"{key}: a row has {len(ids)} input_ids but {len(labels)} labels")
        out.append((ids, labels))
    return out


def check_token_ids(data: TokenizedSet, vocab_size: int, key: str) -> None:
    """Every token id (and every label the loss reads) within the model's vocabulary: an id past it fails
    in the embedding with a traceback on CPU and a device-side assert that kills the context on CUDA."""
    if len(data) == 0:
        return
    ids = data.input_ids[data.attention_mask.bool()]
    labels = data.labels[data.labels != IGNORE]
    for col, values in (("input_ids", ids), ("labels", labels)):
        if values.numel() == 0:
            continue
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise DataError(f"{key}: {col} holds token id {bad}, outside the model's vocabulary; allowed: "
                            f"0 to {vocab_size - 1} (model vocab_size {vocab_size})"
                            + (f", or {IGNORE} in labels to skip a position" if col == "labels" else ""))


def _check_dolly(table, key: str, path: str) -> None:
    """The Dolly fields, each text: a number or list where text belongs fails deep in the tokenizer."""
    missing = [f for f in DOLLY_FIELDS if f not in table.column_names]
    if missing:
        raise DataError(f"{key}: {path!r} lacks the Dolly field(s) {', '.join(missing)}; "
                        f"found {', '.join(table.column_names)}")
    for f in DOLLY_FIELDS:
        dtype = getattr(table.features[f], "dtype", None)
        if dtype not in ("string", "large_string", "null"):
            raise DataError(f"{key}: {path!r} field {f!r} holds {table.features[f]}; expected text (a string per row)")


def build_datasets(cfg, tokenizer, need_eval: bool,
                   pad_multiple: int = 16) -> tuple[TokenizedSet, TokenizedSet | None]:
    """Train set and (when asked for) eval set from the recipe's `data` section. With `data.padding:
    longest` batches are cut to their longest sequence rounded up to `pad_multiple` (tensor-core friendly
    shapes; the caller adds tp under sequence parallelism, whose slices must divide the sequence)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    table = load_table(cfg.dataset, "data.dataset")
    if cfg.format == "dolly":
        _check_dolly(table, "data.dataset", cfg.dataset)
        if cfg.eval_dataset is not None:  # an eval set of its own: every row of data.dataset trains (as BERT's)
            train = tokenize_dolly(list(table.select(range(min(len(table), cfg.max_train_samples or len(table))))),
                                   tokenizer)
            evals = None
            if need_eval:
                eval_table = load_table(cfg.eval_dataset, "data.eval_dataset")
                _check_dolly(eval_table, "data.eval_dataset", cfg.eval_dataset)
                n = min(len(eval_table), cfg.max_eval_samples or len(eval_table))
                evals = tokenize_dolly(list(eval_table.select(range(n))), tokenizer)
        else:
            train_idx, val_idx, _ = split_indices(len(table), cfg.split, cfg.split_seed)
            train = tokenize_dolly(list(table.select(train_idx[:cfg.max_train_samples])), tokenizer)
            evals = (tokenize_dolly(list(table.select(val_idx[:cfg.max_eval_samples])), tokenizer)
                     if need_eval else None)
    else:
        train = pretokenized_examples(table, "data.dataset")[:cfg.max_train_samples]
        evals = None
        if need_eval:
            evals = pretokenized_examples(load_table(cfg.eval_dataset, "data.eval_dataset"),
                                          "data.eval_dataset")[:cfg.max_eval_samples]
    train_set = to_fixed_length(train, cfg.seq_len, pad_id, cfg.packing)
    if len(train_set) == 0:
        raise DataError(f"data.dataset: no usable training sequences in {cfg.dataset!r} at seq_len {cfg.seq_len}; "
                        "allowed: rows with an answer that starts within data.seq_len tokens (a longer seq_len, "
                        "or data.packing: true)")
    eval_set = to_fixed_length(evals, cfg.seq_len, pad_id, cfg.packing) if evals is not None else None
    if cfg.padding == "longest":
        for s in (train_set, eval_set):
            if s is not None:
                s.pad_multiple = pad_multiple
    return train_set, eval_set
