"""`python -m launch.stage --check-layout KIND DIR`: data the hub does not serve, checked as the harness reads it.

Each kind reads DIR with the harness's own readers (trainer/data/), so a layout that passes here is one the
recipe loads; the message of the first problem found names the path and what was expected. Counts that differ
from the full MLPerf data set are reported as notes, not errors (a subset is fine for a fabric test, not for a
time-to-train result).

    imagenet      DIR/train/<wnid>/*.JPEG and DIR/val/<wnid>/*.JPEG        recipes/resnet50.yaml data.dataset=DIR
    bert          DIR/training/*.hdf5 and DIR/eval/*.hdf5 (MLPerf shards)  recipes/bert_large.yaml
    mlperf-llama  DIR/train*.parquet and DIR/validation*.parquet          recipes/mlperf_llama2_70b_lora*.yaml
"""
from __future__ import annotations

import glob
import os
from telemetry.errors import print_errors
from telemetry.input_files import what_is_there

KINDS = ("imagenet", "bert", "mlperf-llama")

IMAGENET = {"classes": 1000, "train": 1_281_167, "val": 50_000}
BERT_SEQ, BERT_PRED, BERT_EVAL = 512, 76, 10_000  # recipes/bert_large.yaml; MLPerf's held-out set
GOVREPORT = {"train": 3901, "validation": 173, "seq_len": 8192}  # recipes/mlperf_llama2_70b_lora.yaml


def _error(message: str) -> int:
    print_errors(message)
    return 1


def _note(what: str, got: int, full: int) -> None:
    if got != full:
        print(f"note: {what}: {got:,}; the full MLPerf set has {full:,} (a subset: fine for a fabric test, "
              "not for a time-to-train result)")


def check_imagenet(root: str) -> int:
    from trainer.compat import ensure_torchvision_importable
    from trainer.data.images import scan_folder
    from trainer.data.sft import DataError

    ensure_torchvision_importable()
    try:
        train, classes = scan_folder(root, "train")
        try:
            val, _ = scan_folder(root, "val", classes)
        except DataError as exc:
            flat = os.path.isdir(os.path.join(root, "val")) and glob.glob(os.path.join(root, "val", "*.JPEG"))
            hint = (" (val/ holds the images directly: sort them into class folders first, as the validation "
                    "tarball is flat)") if flat else ""
            return _error(str(exc) + hint)
    except DataError as exc:
        return _error(str(exc))
    print(f"[layout] imagenet {root}: {len(classes)} classes, {len(train):,} training and {len(val):,} "
          f"validation images")
    _note("classes", len(classes), IMAGENET["classes"])
    _note("training images", len(train), IMAGENET["train"])
    _note("validation images", len(val), IMAGENET["val"])
    print(f"use: recipes/resnet50.yaml data.dataset={root} data.num_classes={len(classes)}")
    return 0


def check_bert(root: str) -> int:
    from trainer.data.mlm import load_mlm_set
    from trainer.data.sft import DataError

    counts = {}
    for sub, key in (("training", "data.dataset"), ("eval", "data.eval_dataset")):
        path = os.path.join(root, sub)
        if not os.path.isdir(path):
            return _error(f"{key}: {path} is not a directory; expected {root}/training/ and {root}/eval/ "
                          "holding MLPerf's hdf5 shards")
        if not glob.glob(os.path.join(path, "*.hdf5")) + glob.glob(os.path.join(path, "*.h5")):
            return _error(f"{key}: {path} holds no .hdf5 shards")
        try:
            counts[sub] = (len(load_mlm_set(path, key, BERT_SEQ, BERT_PRED)),
                           len(glob.glob(os.path.join(path, "*.hdf5")) + glob.glob(os.path.join(path, "*.h5"))))
        except DataError as exc:
            return _error(str(exc))
    (n_train, f_train), (n_eval, f_eval) = counts["training"], counts["eval"]
    print(f"[layout] bert {root}: {n_train:,} training sequences in {f_train} shards, {n_eval:,} evaluation "
          f"sequences in {f_eval}; {BERT_SEQ} tokens, up to {BERT_PRED} masked positions each")
    _note("evaluation sequences", n_eval, BERT_EVAL)
    print(f"use: recipes/bert_large.yaml data.dataset={root}/training data.eval_dataset={root}/eval")
    return 0


def check_mlperf_llama(root: str) -> int:
    from trainer.data.sft import DataError, load_table, pretokenized_examples

    found = {}
    for split, key in (("train", "data.dataset"), ("validation", "data.eval_dataset")):
        files = sorted(glob.glob(os.path.join(root, f"{split}*.parquet")))
        if len(files) != 1:
            return _error(f"{key}: expected one {split}*.parquet in {root} (MLPerf's packed GovReport: "
                          f"input_ids, labels); found {len(files)}: {', '.join(os.path.basename(f) for f in files)}")
        try:
            rows = pretokenized_examples(load_table(files[0], key), key)
        except DataError as exc:
            return _error(str(exc))
        lengths = {len(ids) for ids, _ in rows}
        if lengths != {GOVREPORT["seq_len"]}:
            return _error(f"{key}: {files[0]}: sequences of {sorted(lengths)[:5]} tokens; MLPerf's set is packed "
                          f"to {GOVREPORT['seq_len']} (set data.seq_len to match a different packing)")
        found[split] = (files[0], len(rows))
    print(f"[layout] mlperf-llama {root}: {found['train'][1]:,} training and {found['validation'][1]:,} "
          f"evaluation sequences of {GOVREPORT['seq_len']} tokens")
    _note("training sequences", found["train"][1], GOVREPORT["train"])
    _note("evaluation sequences", found["validation"][1], GOVREPORT["validation"])
    print(f"use: recipes/mlperf_llama2_70b_lora.yaml data.dataset={found['train'][0]} "
          f"data.eval_dataset={found['validation'][0]}")
    return 0


def check_layout(kind: str, root: str) -> int:
    """0 when `root` holds `kind` as the harness reads it; 1 with one error line naming the problem; 2 for bad input."""
    checks = {"imagenet": check_imagenet, "bert": check_bert, "mlperf-llama": check_mlperf_llama}
    if kind not in checks:
        print_errors(f"--check-layout: unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
        return 2
    if not os.path.isdir(root):
        print_errors(f"--check-layout {kind}: {root!r} is not a directory ({what_is_there(root)}); allowed: the "
                     f"data set's root directory")
        return 2
    return checks[kind](os.path.abspath(root))
