"""Write the project's own small pre-masked BERT pretraining set, in the MLPerf BERT layout.

Text: the sentences of recipes/assets/fabric_dolly_mini.jsonl (each row is a document: its context split
into sentences, then the instruction, then the response). Tokens: the byte-level tokenizer shipped in
recipes/assets/byte_tokenizer. It has no BERT specials, so its own stand in: <s> is [CLS] (id 1), </s>
is [SEP] (2), <unk> is [MASK] (3; byte-level text never produces <unk>), <pad> pads (0).

Each sequence follows BERT's pretraining-data recipe, at a small size:
  - next-sentence pairs: A is a sentence; B is the document's next sentence (label 0), or with
    probability 1/2 a sentence of another document (label 1);
  - the pair is cut to fit [CLS] A [SEP] B [SEP] in SEQ_LEN tokens, trimming the longer side one token at
    a time from its front or back at random;
  - 15% of the non-special tokens (at most MAX_PREDICTIONS) are predicted: of those, 80% become [MASK],
    10% a random byte token, 10% stay as they are.
Columns: input_ids, input_mask, segment_ids (SEQ_LEN each), masked_lm_positions, masked_lm_ids,
masked_lm_weights (MAX_PREDICTIONS each, padded with 0), next_sentence_labels. Documents are split before
pairing: the first TRAIN_DOCS rows give the training set, the rest the evaluation set. Seeded: re-running
gives the same files.

    python tools/make_bert_data.py recipes/assets
"""
from __future__ import annotations

import json
import os
import random
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SEQ_LEN = 64
MAX_PREDICTIONS = 10  # round(0.15 * 64)
MASKED_LM_PROB = 0.15
TRAIN_DOCS = 700  # of the 800 rows; the other 100 documents are held out for evaluation
TRAIN_SEQUENCES, EVAL_SEQUENCES = 640, 128
PAD, CLS, SEP, MASK = 0, 1, 2, 3
FIRST_BYTE_TOKEN = 4  # ids 4..259 are the 256 byte tokens


def documents(path: str) -> list[list[str]]:
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            sents = [s for s in re.split(r"(?<=[.?!])\s+", (row.get("context") or "").strip()) if s]
            sents += [row["instruction"].strip(), row["response"].strip()]
            docs.append([s for s in sents if s])
    return docs


def truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def mask(tokens: list[int], vocab_size: int, rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """(masked tokens, positions, original ids) by the 80/10/10 rule."""
    candidates = [i for i, t in enumerate(tokens) if t not in (CLS, SEP)]
    rng.shuffle(candidates)
    count = min(MAX_PREDICTIONS, max(1, int(round(len(tokens) * MASKED_LM_PROB))))
    out = list(tokens)
    picked = sorted(candidates[:count])
    for pos in picked:
        r = rng.random()
        if r < 0.8:
            out[pos] = MASK
        elif r < 0.9:
            out[pos] = rng.randrange(FIRST_BYTE_TOKEN, vocab_size)
    return out, picked, [tokens[p] for p in picked]


def instances(docs: list[list[str]], tokenizer, rng: random.Random) -> list[dict]:
    encoded = [[tokenizer(s, add_special_tokens=False)["input_ids"] for s in doc] for doc in docs]
    vocab_size = len(tokenizer)
    rows = []
    for d, doc in enumerate(encoded):
        for i in range(len(doc) - 1):
            a = list(doc[i])
            if rng.random() < 0.5:
                other = rng.choice([k for k in range(len(encoded)) if k != d])
                b, label = list(rng.choice(encoded[other])), 1
            else:
                b, label = list(doc[i + 1]), 0
            truncate_pair(a, b, SEQ_LEN - 3, rng)
            tokens = [CLS] + a + [SEP] + b + [SEP]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            masked, positions, ids = mask(tokens, vocab_size, rng)
            pad, pad_pred = SEQ_LEN - len(tokens), MAX_PREDICTIONS - len(positions)
            rows.append({"input_ids": masked + [PAD] * pad, "input_mask": [1] * len(tokens) + [0] * pad,
                         "segment_ids": segments + [0] * pad,
                         "masked_lm_positions": positions + [0] * pad_pred, "masked_lm_ids": ids + [0] * pad_pred,
                         "masked_lm_weights": [1.0] * len(positions) + [0.0] * pad_pred,
                         "next_sentence_labels": label})
    rng.shuffle(rows)
    return rows


def write(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    int_list = pa.list_(pa.int32())
    schema = pa.schema([("input_ids", int_list), ("input_mask", int_list), ("segment_ids", int_list),
                        ("masked_lm_positions", int_list), ("masked_lm_ids", int_list),
                        ("masked_lm_weights", pa.list_(pa.float32())), ("next_sentence_labels", pa.int32())])
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, compression="zstd")


def main(out_dir: str) -> None:
    from trainer.compat import ensure_torchvision_importable

    ensure_torchvision_importable()  # transformers imports torchvision when installed (trainer/compat.py)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(REPO, "recipes", "assets", "byte_tokenizer"))
    docs = documents(os.path.join(REPO, "recipes", "assets", "fabric_dolly_mini.jsonl"))
    rng = random.Random(1234)
    train = instances(docs[:TRAIN_DOCS], tokenizer, rng)[:TRAIN_SEQUENCES]
    evals = instances(docs[TRAIN_DOCS:], tokenizer, rng)[:EVAL_SEQUENCES]
    for name, rows in (("train", train), ("eval", evals)):
        path = os.path.join(out_dir, f"fabric_bert_mini_{name}.parquet")
        write(rows, path)
        nsp = sum(r["next_sentence_labels"] for r in rows) / len(rows)
        masked = sum(sum(w > 0 for w in r["masked_lm_weights"]) for r in rows)
        print(f"wrote {path}: {len(rows)} sequences of {SEQ_LEN} tokens, {masked} masked tokens, "
              f"{nsp:.0%} random-next")


def cli(argv: list[str] | None = None) -> int:
    """The command line: a bad output directory is one `error:` line, exit 2, before anything is built."""
    from telemetry.errors import OneLineParser, output_dir_problem, print_errors

    p = OneLineParser(prog="python -m tools.make_bert_data", description="Write the BERT pretraining demo set.")
    p.add_argument("out_dir", nargs="?", default=os.path.join(REPO, "recipes", "assets"),
                   help="directory for fabric_bert_mini_{train,eval}.parquet")
    args = p.parse_args(argv)
    if problem := output_dir_problem(args.out_dir, "out_dir"):
        return print_errors(problem)
    os.makedirs(args.out_dir, exist_ok=True)
    main(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
