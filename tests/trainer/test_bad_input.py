"""Bad input, one table: every row exits 2 with `error:` lines only, naming the key or file (and line),
no traceback. Most rows stop at `--dry-run` (no process group); a few go through the real CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.support.bad_recipes import alias_bomb
from trainer.cli import main

from ..conftest import REPO, TINY, run_cli

BERT = str(REPO / "recipes" / "tiny_bert.yaml")
RESNET = str(REPO / "recipes" / "tiny_resnet.yaml")
SWEEP = str(REPO / "recipes" / "collectives.yaml")
TINY_TEXT = Path(TINY).read_text()

# (id, overrides, expected text in stderr); recipe = TINY unless the id starts with bert/resnet/sweep
OVERRIDES = [
    # NaN and infinity, named by their own key
    ("lr-nan", ["train.lr=nan"], "train.lr: got 'nan'; expected a finite number"),
    ("lr-yaml-nan", ["train.lr=.nan"], "train.lr: got nan; expected a finite number"),
    ("lr-inf", ["train.lr=inf"], "train.lr: got 'inf'; expected a finite number"),
    ("lr-overflow", ["train.lr=1e999"], "train.lr: got '1e999'; expected a finite number"),
    ("lr-huge-int", ["train.lr=" + "9" * 400], "train.lr: got 999"),
    ("min_lr-nan", ["train.min_lr=nan"], "train.min_lr: got 'nan'; expected a finite number"),
    ("grad_clip-nan", ["train.grad_clip=.nan"], "train.grad_clip: got nan; expected a finite number"),
    ("grad_clip-inf", ["train.grad_clip=.inf"], "train.grad_clip: got inf; expected a finite number"),
    ("grad_clip-str-nan", ["train.grad_clip=nan"], "train.grad_clip: got 'nan'; expected a finite number"),
    ("weight_decay-nan", ["train.weight_decay=nan"], "train.weight_decay: got 'nan'; expected a finite number"),
    ("eps-neg-inf", ["train.eps=-.inf"], "train.eps: got -inf; expected a finite number"),
    ("betas-nan", ["train.betas=[.nan,0.99]"], "train.betas[0]: got nan; expected a finite number"),
    ("momentum-nan", ["train.momentum=nan"], "train.momentum: got 'nan'"),
    ("lars_eta-inf", ["train.lars_eta=inf"], "train.lars_eta: got 'inf'"),
    ("poly_power-nan", ["train.poly_power=nan"], "train.poly_power: got 'nan'"),
    ("label_smoothing-nan", ["train.label_smoothing=nan"], "train.label_smoothing: got 'nan'"),
    ("target_loss-nan", ["train.target_eval_loss=nan"], "train.target_eval_loss: got 'nan'; expected a finite"),
    ("target_acc-inf", ["train.target_eval_accuracy=inf"], "train.target_eval_accuracy: got 'inf'"),
    ("lora-alpha-nan", ["lora.alpha=nan"], "lora.alpha: got 'nan'"),
    ("lora-dropout-nan", ["lora.dropout=nan"], "lora.dropout: got 'nan'"),
    ("split-nan", ["data.split=[.nan,0.5,0.5]"], "data.split[0]: got nan"),
    ("power-interval-inf", ["telemetry.power_sample_interval_s=inf"], "telemetry.power_sample_interval_s: got 'inf'"),
    # numbers out of range
    ("seed-negative", ["seed=-1"], "seed: got -1; expected an integer from 0 to 4294967295"),
    ("seed-too-big", ["seed=4294967296"], "seed: got 4294967296; expected an integer from 0 to 4294967295"),
    ("seed-beyond-int64", ["seed=" + "9" * 30], "seed: got 999999999999999999999999999999; out of range"),
    ("split_seed-negative", ["data.split_seed=-5"], "data.split_seed: got -5; expected an integer from 0"),
    ("timeout-overflow", ["distributed.timeout_s=100000000000000"], "distributed.timeout_s: got 100000000000000"),
    ("timeout-zero", ["distributed.timeout_s=0"], "distributed.timeout_s: got 0; expected an integer from 1"),
    ("max_steps-int64", ["max_steps=" + str(1 << 70)], "max_steps: got 1180591620717411303424; out of range"),
    ("micro-batch-memory", ["train.micro_batch_size=100000000000", "train.global_batch_size=100000000000"],
     "train.micro_batch_size: got 100000000000; 100000000000 x data.seq_len (160)"),
    ("global-batch-huge", ["train.global_batch_size=100000000000000000000"], "train.global_batch_size: got 1000"),
    ("global-batch-float", ["train.global_batch_size=1e20"], "train.global_batch_size: got '1e20' (str); expected an integer"),
    ("seq_len-huge", ["data.seq_len=100000000"], "data.seq_len: got 100000000; expected an integer <= 1048576"),
    ("seq_len-beyond-positions", ["data.seq_len=100000"], "data.seq_len: got 100000; model.config.max_position_embeddings "
     "is 512; allowed: at most 512, or raise model.config.max_position_embeddings"),
    ("max_train-negative", ["data.max_train_samples=-1"], "data.max_train_samples: got -1; expected an integer >= 1"),
    ("max_train-zero", ["data.max_train_samples=0"], "data.max_train_samples: got 0; expected an integer >= 1"),
    ("max_eval-zero", ["data.max_eval_samples=0"], "data.max_eval_samples: got 0; expected an integer >= 1"),
    ("weight_decay-negative", ["train.weight_decay=-0.1"], "train.weight_decay: got -0.1; expected a number >= 0"),
    ("eps-zero", ["train.eps=0"], "train.eps: got 0.0; expected a number > 0"),
    ("lora-alpha-zero", ["lora.alpha=0"], "lora.alpha: got 0.0; expected a number > 0"),
    ("target-loss-negative", ["train.target_eval_loss=-1"], "train.target_eval_loss: got -1.0"),
    ("output_dir-empty", ["output_dir="], "output_dir: got None"),
    ("output_dir-blank", ["output_dir=' '"], "output_dir: empty"),
    ("dataset-nul", ["data.dataset=a\x00b"], "data.dataset: got a string with a NUL character"),
    # a bare date or number where text goes: YAML typed it; the line says how to keep it text
    ("name-date", ["name=2024-01-01"], "name: got datetime.date(2024, 1, 1) (date); expected a string; YAML reads an "
     "unquoted date as one: quote it to keep the text ('2024-01-01')"),
    ("name-number", ["name=1.5"], "name: got 1.5 (float); expected a string; YAML reads an unquoted float"),
    ("output_dir-int", ["output_dir=2024"], "output_dir: got 2024 (int); expected a string; YAML reads an unquoted int "
     "as one: quote it to keep the text ('2024')"),
    ("override-dup-keys", ["train={lr: 1, lr: 2}"], "train: the override's value is refused: duplicate key 'lr'"),
    ("override-deep", ["name=" + "[" * 40 + "]" * 40], "name: the override's value is refused: nested deeper"),
    ("bert-image-size", ["data.max_predictions=0"], "data.max_predictions: got 0"),
    ("resnet-image-size-huge", ["data.image_size=100000"], "data.image_size: got 100000; expected an integer from 32"),
    ("resnet-micro-batch-memory", ["train.micro_batch_size=10000000", "train.global_batch_size=20000000"],
     "train.micro_batch_size: got 10000000; 10000000 x 3 x data.image_size^2"),
    ("resnet-workers", ["data.workers=100000"], "data.workers: got 100000; expected an integer from 0 to 256"),
    ("resnet-classes-huge", ["data.num_classes=" + str(1 << 40)], "data.num_classes: got 1099511627776"),
    ("resnet-synthetic-huge", ["data.synthetic_samples=1000000000"], "data.synthetic_samples: got 1000000000"),
    ("sweep-max-bytes-huge", ["sweep.max_bytes=1000000G"], "sweep.max_bytes: got '1000000G'; expected at most"),
    ("sweep-max-bytes-inf", ["sweep.max_bytes=infG"], "sweep.max_bytes: got 'infG'; expected bytes such as"),
    ("sweep-min-bytes-nan", ["sweep.min_bytes=nan"], "sweep.min_bytes: got 'nan'; expected bytes such as"),
    # sizes: near misses are refused with the spelling meant, never guessed (1e9 is not 1G)
    ("sweep-bytes-space", ["sweep.max_bytes=16 G"], "sweep.max_bytes: got '16 G'; expected bytes such as 8, 4K, 64M "
     "or 1G (a whole or decimal number, then K, M or G for powers of 1024, no space, no exponent); did you mean '16G'?"),
    ("sweep-bytes-gib", ["sweep.max_bytes=16GiB"], "did you mean '16G' (K, M and G are already powers of 1024)?"),
    ("sweep-bytes-exponent", ["sweep.max_bytes=1e9"], "got '1e9'; expected bytes such as"),
    ("sweep-bytes-exponent-hint", ["sweep.max_bytes=1e9"], "did you mean 1000000000 (1e9 bytes written out)?"),
    ("sweep-bytes-negative", ["sweep.max_bytes=-1M"], "got '-1M'; expected bytes such as 8, 4K, 64M or 1G"),
    ("sweep-bytes-bool", ["sweep.device_memory=true"], "sweep.device_memory: got True (bool)"),
    # fault injection and the link probe (the straggler report)
    ("delay-nan", ["debug.delay_rank=0", "debug.delay_s=nan"], "debug.delay_s: got 'nan'; expected a finite number"),
    ("delay-negative", ["debug.delay_rank=0", "debug.delay_s=-1"], "debug.delay_s: got -1.0; expected seconds in [0, 60]"),
    ("delay-rank-negative", ["debug.delay_rank=-1"], "debug.delay_rank: got -1; expected a rank >= 0, or null"),
    ("delay-rank-beyond-world", ["debug.delay_rank=1", "debug.delay_s=0.1"],
     "debug.delay_rank: got 1; allowed: a rank below the world size 1"),
    ("delay-from-zero", ["debug.delay_from_step=0"], "debug.delay_from_step: got 0; expected an integer >= 1"),
    ("probe-bytes-zero", ["telemetry.link_probe_bytes=0"], "telemetry.link_probe_bytes: got 0; expected an integer from 4"),
    ("probe-every-negative", ["telemetry.link_probe_every=-1"], "telemetry.link_probe_every: got -1; expected an integer >= 0"),
    # a bare word is a typo of auto/never, not a path (a path absent here is judged when the run loads it)
    ("resume-word", ["train.resume=maybe"], "train.resume: got 'maybe'; allowed: auto (the latest checkpoint in "
                                            "output_dir), never, or a checkpoint directory's path"),
    ("resume-case", ["train.resume=Never"], "train.resume: got 'Never' (did you mean 'never'?); allowed: auto"),
    ("sweep-ops-twice", ["sweep.ops=[all_reduce,broadcast,all_reduce]"],
     "sweep.ops: all_reduce given twice; allowed: each op once (sweep.repeats repeats them)"),
    # model.config sizes: the dry run checks them as the run would (it passed them, and planned the memory of
    # a model with a negative hidden size as fitting every card)
    ("config-hidden-negative", ["model.config.hidden_size=-1"],
     "model.config.hidden_size: got -1; expected an integer from 1 to"),
    ("config-layers-zero", ["model.config.num_hidden_layers=0"], "model.config.num_hidden_layers: got 0; expected"),
    ("config-heads-not-dividing", ["model.config.num_attention_heads=3"],
     "model.config.hidden_size: 128 is not divisible by num_attention_heads 3"),
    ("config-kv-not-dividing", ["model.config.num_key_value_heads=3"],
     "model.config.num_key_value_heads: 3 does not divide num_attention_heads 4"),
    ("config-vocab-inf", ["model.config.vocab_size=.inf"], "model.config.vocab_size: NaN or infinity"),
    ("config-hidden-bool", ["model.config.hidden_size=true"], "model.config.hidden_size: got True; expected"),
    ("bert-config-type-vocab-zero", ["model.config.type_vocab_size=0"], "model.config.type_vocab_size: got 0"),
    # an empty model.config built the family's defaults (a 7B Llama from random init); the dry run said
    # "config.json is not readable here (None)"
    # found by the third bad-input round: each was accepted by the dry run (the run failed later, or hung)
    ("pp-over-layers", ["parallel.pp=4"], "parallel.pp: 4 pipeline stages (pp x pp_stages_per_rank) need at least "
     "as many decoder layers; the model has 2; allowed: pp x pp_stages_per_rank <= 2"),
    ("name-empty", ["name=''"], "name: got ''; allowed: a non-empty name"),
    # ninth round: an empty path (an unset $VAR) passed the dry run
    ("dataset-empty", ["data.dataset=''"], "data.dataset: got ''; allowed: the path of a file or directory (an unset "
     "$VAR gives ''), or null where the key may be left unset"),
    ("tokenizer-empty", ["model.tokenizer=''"], "model.tokenizer: got ''; allowed: the path of a file or directory"),
    # ... and an output_dir no host could make, said by the dry run too (only the real run said it)
    ("output-dir-file", [f"output_dir={TINY}"], "is a file, not a directory; allowed: a new or existing directory"),
    ("output-dir-name-too-long", ["output_dir=/tmp/" + "x" * 300 + "/run"],
     "has a name of 300 bytes (xxxxxxxxxxxxxxxx...); allowed: names of at most 255 bytes each"),
    ("resume-is-a-file", ["train.resume=" + TINY], "is a file, not a checkpoint directory; allowed: auto"),
    ("config-dev-zero", ["model.config=/dev/zero"], "model.config: '/dev/zero' is a character device, not a regular "
     "file; allowed: a config.json file"),  # it was read until the memory ran out
    ("config-empty", ["model.config={}"], "model.config: no fields (an empty mapping builds the family's default "
     "model, such as a 7B Llama, from random init); allowed: the model's sizes"),
    ("bert-config-empty", ["model.config={}"], "model.config: no fields"),
    # seventh round: YAML 1.1 numbers that read as another number, look-alike keys, output_dir's text, push paths
    ("octal-looking", ["max_steps=010"], "max_steps: the override's value is refused: '010' is an octal number in "
     "YAML 1.1 (8), not 10; allowed: 10 without the leading zero, or quoted text ('010')"),
    ("octal-negative", ["seed=-010"], "'-010' is an octal number in YAML 1.1 (-8), not -10"),
    ("octal-in-a-name", ["name=0755"], "name: the override's value is refused: '0755' is an octal number"),
    ("base-60", ["train.warmup_steps=1:30"], "train.warmup_steps: the override's value is refused: '1:30' is a "
     "base-60 number in YAML 1.1 (1:30 is 90); allowed: the number itself, or quoted text ('1:30')"),
    ("base-60-float", ["train.lr=1:30.5"], "train.lr: the override's value is refused: '1:30.5' is a base-60"),
    ("lookalike-key", ["max_st\u0435ps=3"], "max_st\u0435ps: unknown key (it holds U+0435 CYRILLIC SMALL LETTER IE: "
     "not the ASCII letters it may look like); did you mean 'max_steps'?"),
    ("zero-width-key", ["max_steps\u200b=3"], "(it holds U+200B ZERO WIDTH SPACE: not the ASCII letters"),
    ("output-dir-newline", ['output_dir="runs/a\\nb"'], "output_dir: got 'runs/a\\nb', with a control character"),
    ("output-dir-variable", ["output_dir=$SCRATCH/run"], "output_dir: got '$SCRATCH/run'; $SCRATCH is not expanded "
     "(no shell reads a recipe or a quoted override); allowed: the path written out"),
    ("output-dir-braced-variable", ["output_dir=/x/${USER}/r"], "${USER} is not expanded"),
    ("pushgateway-job-path", ["telemetry.pushgateway=http://gw:9091/metrics/job/train"],
     "telemetry.pushgateway: got 'http://gw:9091/metrics/job/train'; holds /metrics (the scrape path) or a "
     "/metrics/job/... grouping path; the push appends /metrics/job/JOB"),
    ("pushgateway-scrape-path", ["telemetry.pushgateway=http://gw:9091/metrics"], "holds /metrics (the scrape path)"),
    ("pushgateway-query", ["telemetry.pushgateway=http://gw:9091/?x=1"], "holds a ?query or #fragment"),
]


def _recipe_for(case_id: str) -> str:
    return {"bert": BERT, "resnet": RESNET, "sweep": SWEEP}.get(case_id.split("-")[0], TINY)


def _assert_rule(err: str, expected: str) -> None:
    assert expected in err, err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    assert "Traceback" not in err
    named = [line.split(":")[1].strip() for line in lines]  # the key each line names: once each
    assert len(named) == len(set(named)), err


@pytest.mark.parametrize("case_id,overrides,expected", OVERRIDES, ids=[c[0] for c in OVERRIDES])
def test_bad_value(case_id, overrides, expected, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main([_recipe_for(case_id), *overrides, "--dry-run"]) == 2
    _assert_rule(capsys.readouterr().err, expected)


# (id, file bytes, expected text with the file's line where there is one)
FILES = [
    ("duplicate-top-key", TINY_TEXT + "max_steps: 5\n", "duplicate key 'max_steps' (first at line 7)"),
    ("duplicate-nested-key", "train:\n  lr: 1.0e-2\n  lr: 2.0e-2\n", "at line 3: duplicate key 'lr' (first at line 2)"),
    ("duplicate-section", "train: {}\ndata: {}\ntrain: {}\n", "at line 3: duplicate key 'train'"),
    ("alias-bomb", alias_bomb(10, nested=False), "expands to more than 100000 values through aliases"),
    ("alias-bomb-wide", alias_bomb(4, 400, nested=False), "expands to more than 100000 values through aliases"),
    ("deep-nesting", "name: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 32 levels"),
    ("deep-mapping", "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v\n", "nested deeper than 32"),
    ("oversized", "# " + "x" * (2 << 20) + "\n", "is larger than 1048576 bytes"),
    ("latin-1", "name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at line 1)"),
    ("utf-16", "name: x\n".encode("utf-16"), "is UTF-16 text (as PowerShell's > and Out-File write it); allowed: a UTF-8 YAML file"),
    ("nul-byte", b"name: a\x00b\n", "is not valid YAML"),
    ("top-list", "- a\n- b\n", "must hold a mapping at the top level, got list"),
    ("top-scalar", "just text\n", "must hold a mapping at the top level, got str"),
    ("unclosed", "name: [x\n", "is not valid YAML at line 2"),
    ("bad-indent", "train:\n  lr: 1\n bad: 2\n", "is not valid YAML at line 3"),
    ("tab-indent", "name: x\ntrain:\n\tlr: 1\n", "is not valid YAML at line 3: found character '\\t' that cannot "
     "start any token; allowed: indentation with spaces (YAML refuses tabs)"),
    ("python-tag", "name: !!python/object/apply:os.system ['true']\n", "is not valid YAML at line 1"),
    ("unhashable-key", "? [a, b]\n: 1\n", "is not valid YAML at line 1: found unhashable key"),
    ("undefined-alias", "name: *nothing\n", "is not valid YAML at line 1"),
    ("section-not-mapping", "train: 5\n", "train: got 5; expected a mapping of"),
    ("numeric-key", "1: x\n", "1: unknown key"),
    # an empty file was reported as its first missing default ("model: set exactly one of ...")
    ("empty-file", "", "is empty (no keys, only comments or nothing); allowed: a YAML mapping"),
    ("comments-only", "# name: x\n\n", "is empty (no keys, only comments or nothing)"),
    ("null-document", "~\n", "is empty (no keys"),
    ("octal-in-file", TINY_TEXT.replace("max_steps: ", "max_steps: 0"), "at line 7: '060' is an octal number in "
     "YAML 1.1 (48), not 60"),
    ("lookalike-key-in-file", TINY_TEXT.replace("max_steps:", "max_st\u0435ps:"), "max_st\u0435ps: unknown key (it "
     "holds U+0435 CYRILLIC SMALL LETTER IE"),
]


@pytest.mark.parametrize("case_id,content,expected", FILES, ids=[c[0] for c in FILES])
def test_bad_recipe_file(case_id, content, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    path = tmp_path / "r.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    _assert_rule(err, expected)
    if case_id not in ("section-not-mapping", "numeric-key", "lookalike-key-in-file"):  # these name the key
        assert str(path) in err  # the file is named


def test_recipe_that_is_a_directory_or_unreadable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert main([str(tmp_path), "--dry-run"]) == 2
    _assert_rule(capsys.readouterr().err, f"recipe: {str(tmp_path)!r} is not a file")
    path = tmp_path / "r.yaml"
    path.write_text("name: x\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("builtins.open", refuse)  # root reads any mode bits; refuse like a read-only share
    assert main([str(path), "--dry-run"]) == 2
    monkeypatch.undo()
    _assert_rule(capsys.readouterr().err, f"recipe: cannot read {path}: Permission denied")


@pytest.mark.integration
def test_alias_bomb_is_refused_with_bounded_memory(tmp_path):
    """A 10-level bomb stands for 9**10 values; refused without growing (the address-space limit is 1 GiB
    above the interpreter's peak so far; before the fix the dry run passed 1.3 GB with no answer)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(10))
    code = ("import resource, sys; from trainer.cli import main; "
            "soft = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024; "
            "resource.setrlimit(resource.RLIMIT_AS, (soft + (1 << 30), resource.RLIM_INFINITY)); "
            f"sys.exit(main([{str(path)!r}, '--dry-run']))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: recipe: ") and "expands to more than" in proc.stderr


def test_anchors_within_the_limit_and_merge_keys_still_work(tmp_path):
    from trainer.config import load_recipe

    path = tmp_path / "ok.yaml"
    path.write_text(TINY_TEXT.replace("  lr: 1.0e-2\n", "  lr: &rate 1.0e-2\n")
                    .replace("  min_lr: 1.0e-3\n", "  min_lr: *rate\n").replace("assets/", str(REPO / "recipes/assets") + "/"))
    r = load_recipe(str(path))
    assert r.train.min_lr == r.train.lr == pytest.approx(1e-2)


@pytest.mark.parametrize("overrides,line", [
    (["train.global_batch_size=0"], "train.global_batch_size: got 0; expected an integer >= 1"),
    (["train.lr=-1"], "train.lr: got -1.0; expected a number > 0"),
    (["model.config=3"], "model.config: got 3 (int); expected a mapping or a string or null"),
    (["model.pth=x"], "model.pth: unknown key; did you mean 'path'?"),
    (["model=null"], "model: got None; expected a mapping of family, path,"),
    (["data.seq_len=99999999999"], "data.seq_len: got 99999999999; expected an integer <= 1048576"),
])
def test_one_mistake_is_one_line_not_its_consequences(overrides, line, capsys, monkeypatch):
    """A refused key is not judged again from the default that replaced it (model.config=3 left the model
    with neither a path nor a config: that is the same mistake, said once)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main([TINY, *overrides, "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {line}"), lines


@pytest.mark.parametrize("env,expected", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE: got 'abc'; expected an integer >= 1 (as torchrun or srun sets it)"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE: got '0'; expected an integer >= 1"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK: got 'abc'; expected an integer >= 0"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK: got 2; expected an integer from 0 to WORLD_SIZE - 1 = 1"),
    ({"LOCAL_RANK": "-1"}, "LOCAL_RANK: got '-1'; expected an integer >= 0"),
    ({"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE: got 4; expected at most WORLD_SIZE (2)"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT: got '0'; expected an integer from 1 to 65535"),
    ({"MASTER_PORT": "99999"}, "MASTER_PORT: got '99999'; expected an integer from 1 to 65535"),
    ({"MASTER_PORT": "http"}, "MASTER_PORT: got 'http'; expected an integer from 1 to 65535"),
    ({"RANK": "0", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
     "LOCAL_RANK: got 1 beside RANK 0; expected at most RANK (a node's local ranks count its ranks from 0"),
])
def test_bad_launcher_environment(env, expected, capsys, monkeypatch):
    """A launcher variable that is not a usable number is one line naming it, before anything reads it
    (a real run too: torch's rendezvous would raise a ValueError)."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([TINY, "--dry-run"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines


@pytest.mark.parametrize("env,expected", [({"WORLD_SIZE": "2"}, "WORLD_SIZE: got 2 but RANK is unset"),
                                          ({"RANK": "3"}, "RANK: got 3 but WORLD_SIZE is unset"),
                                          ({"LOCAL_WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE: got 2; expected at most "
                                           "WORLD_SIZE (1, unset: one process)"),
                                          # srun -n 2 python -m trainer: two runs of one process, one output_dir
                                          ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"},
                                           "SLURM_STEP_NUM_TASKS: got 2, but RANK and WORLD_SIZE are unset")])
def test_a_launcher_variable_alone_is_one_line_before_the_run_starts(env, expected, tmp_path, capsys, monkeypatch):
    """A real run (not --dry-run) with WORLD_SIZE and no RANK failed with torch's mesh traceback; with RANK and no
    WORLD_SIZE it exited 0 with no run.json (rank 3 of one process). Now one line, nothing created."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    assert main([TINY, f"output_dir={out}", "max_steps=1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), lines
    assert not out.exists()


def test_bad_command_line_is_one_error_line(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as info:
        main([TINY, "--dry-run", "--world-size", "two"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: argument --world-size: invalid int value: 'two'; allowed: a whole number; see python -m trainer --help"]
    with pytest.raises(SystemExit):  # overrides are optional: only the recipe is named as missing
        main([])
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: the following arguments are required: recipe; see python -m trainer --help"]


def test_one_rank_prints_under_torchrun_whichever_fails_first(capsys, monkeypatch):
    """Every rank finds the same problem; the first to report it prints (rank 1 here), the next does not."""
    import uuid

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", f"test-{uuid.uuid4().hex}")  # this test's own launcher key
    monkeypatch.setenv("RANK", "1")
    assert main([TINY, "train.lr=nan", "--dry-run"]) == 2
    assert capsys.readouterr().err.count("error: train.lr") == 1
    monkeypatch.setenv("RANK", "0")
    assert main([TINY, "train.lr=nan", "--dry-run"]) == 2
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- model configs (no process group needed)

def _config_error(spec, cls_name: str) -> str:
    from trainer.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import transformers

    from trainer.workloads.hf import ModelError, config_fields

    with pytest.raises(ModelError) as info:
        config_fields(spec, getattr(transformers, cls_name))
    return str(info.value)


LLAMA = {"vocab_size": 260, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2}
MODEL_CONFIGS = [
    ("misspelt-layers", {**LLAMA, "num_hiden_layers": 2}, "LlamaConfig",
     "model.config.num_hiden_layers: unknown key for LlamaConfig (did you mean 'num_hidden_layers'?)"),
    ("bert-unknown", {"hidden_size": 128, "num_attention_heads": 4, "hidden_layers": 2}, "BertConfig",
     "model.config.hidden_layers: unknown key for BertConfig"),
    ("zero-layers", {**LLAMA, "num_hidden_layers": 0}, "LlamaConfig", "model.config.num_hidden_layers: got 0"),
    ("negative-hidden", {**LLAMA, "hidden_size": -128}, "LlamaConfig", "model.config.hidden_size: got -128"),
    ("float-vocab", {**LLAMA, "vocab_size": 260.5}, "LlamaConfig", "model.config.vocab_size: got 260.5"),
    ("huge-vocab", {**LLAMA, "vocab_size": 1 << 40}, "LlamaConfig", "model.config.vocab_size: got 1099511627776"),
    ("heads-not-dividing", {**LLAMA, "hidden_size": 130}, "LlamaConfig",
     "model.config.hidden_size: 130 is not divisible by num_attention_heads 4"),
    ("kv-heads-not-dividing", {**LLAMA, "num_key_value_heads": 3}, "LlamaConfig",
     "model.config.num_key_value_heads: 3 does not divide num_attention_heads 4"),
    ("nan-eps", {**LLAMA, "rms_norm_eps": float("nan")}, "LlamaConfig", "model.config.rms_norm_eps: NaN or infinity"),
    ("bert-inf-dropout", {"hidden_size": 128, "num_attention_heads": 4, "hidden_dropout_prob": float("inf")},
     "BertConfig", "model.config.hidden_dropout_prob: NaN or infinity"),
]


@pytest.mark.parametrize("case_id,spec,cls_name,expected", MODEL_CONFIGS, ids=[c[0] for c in MODEL_CONFIGS])
def test_bad_model_config(case_id, spec, cls_name, expected):
    message = _config_error(spec, cls_name)
    assert message.startswith(expected) and "\n" not in message


@pytest.mark.parametrize("text,expected", [
    ("[1, 2]", "model.config ({path}): got list; expected a mapping"),
    ('{"hidden_size": NaN}', "model.config.hidden_size: NaN or infinity"),
    ('{"hidden_size": 12', "model.config: '{path}' is not JSON"),
    (b"\xff\xfe{}", "model.config: '{path}' is not JSON"),
])
def test_bad_model_config_file(tmp_path, text, expected):
    path = tmp_path / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert _config_error(str(path), "LlamaConfig").startswith(expected.format(path=path))


# ---------------------------------------------------------------- data files (no process group needed)

DOLLY = '{"instruction": "a", "context": "", "response": "b"}\n'
DATA_FILES = [
    ("malformed-line", DOLLY * 3 + '{"instruction": "a", oops}\n', "line 4 is not valid JSON"),
    ("truncated-last-line", DOLLY * 2 + '{"instruction": "a", "resp', "line 3 is not valid JSON"),
    ("row-is-list", DOLLY + "[1, 2]\n", "line 2 holds a JSON list; expected one JSON object per line"),
    ("first-row-scalar", "5\n" + DOLLY, "line 1 holds a JSON int"),
    ("empty-file", "", "is empty; expected JSON lines"),
    ("blank-lines-only", "\n\n  \n", "is empty; expected JSON lines"),
    ("not-utf8", DOLLY.encode() + b'{"instruction": "\xe9"}\n', "line 2 is not UTF-8 text"),
]


@pytest.mark.parametrize("case_id,content,expected", DATA_FILES, ids=[c[0] for c in DATA_FILES])
def test_bad_data_file(case_id, content, expected, tmp_path):
    from trainer.data.sft import DataError, load_table

    path = tmp_path / "d.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as info:
        load_table(str(path), "data.dataset")
    message = str(info.value)
    assert message.startswith("data.dataset: ") and expected in message and "\n" not in message
    if case_id not in ("empty-file", "blank-lines-only"):
        assert str(path) in message


class _Tok:
    eos_token_id, pad_token_id = 2, 0


@pytest.mark.parametrize("fmt,rows,expected", [
    ("dolly", [{"instruction": 5, "context": "", "response": "b"}], "field 'instruction' holds"),
    ("dolly", [{"instruction": ["a"], "context": "", "response": "b"}], "field 'instruction' holds"),
    ("dolly", [{"question": "a"}], "lacks the Dolly field(s) instruction, context, response"),
    ("pretokenized", [{"input_ids": "abc"}], "column 'input_ids' holds"),
    ("pretokenized", [{"input_ids": [1.5, 2.5]}], "column 'input_ids' holds"),
    ("pretokenized", [{"input_ids": [1, 2], "labels": "x"}], "column 'labels' holds"),
    ("pretokenized", [{"tokens": [1, 2]}], "needs an 'input_ids' column"),
])
def test_rows_of_the_wrong_schema(tmp_path, fmt, rows, expected):
    from trainer.config import DataConfig
    from trainer.data.sft import DataError, build_datasets

    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError) as info:
        build_datasets(DataConfig(dataset=str(path), format=fmt, seq_len=16), _Tok(), need_eval=False)
    assert expected in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- the real CLI (a few, they start torch)

FAST = ["max_steps=2", "data.seq_len=64", "train.eval_every_samples=null", "distributed.timeout_s=60"]


@pytest.mark.integration
def test_cli_output_dir_that_is_a_file(tmp_path):
    target = tmp_path / "taken"
    target.write_text("x")
    res = run_cli(target, *FAST, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: output_dir: {str(target)!r} is a file, not a directory; allowed: a new or existing directory"]
    assert target.read_text() == "x"


@pytest.mark.integration
def test_cli_output_dir_not_permitted(tmp_path):
    # /proc refuses new directories to everyone, root included
    res = run_cli(Path("/proc/fabric-harness-test/run"), *FAST, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: output_dir: cannot write to '/proc/fabric-harness-test/run'")


@pytest.mark.integration
def test_cli_malformed_data_sets_run_json_error(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(DOLLY * 5 + "{broken\n")
    res = run_cli(tmp_path / "out", *FAST, f"data.dataset={data}", timeout=180)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: data.dataset: {data}: line 6 is not valid JSON: Expecting property name enclosed "
                      "in double quotes; expected one JSON object per line"]
    assert "Traceback" not in res.stderr
    run = res.run_json()
    assert run["exit_code"] == 2 and "line 6 is not valid JSON" in run["error"]


@pytest.mark.integration
def test_cli_token_ids_past_the_vocabulary(tmp_path):
    # pretokenized rows made for another tokenizer: one line before any step, not an embedding traceback
    data = tmp_path / "tokens.jsonl"
    data.write_text("".join(json.dumps({"input_ids": [3 + (i * 7 + j) % 250 for j in range(40)] + [128000]}) + "\n"
                            for i in range(32)))
    res = run_cli(tmp_path / "out", *FAST, f"data.dataset={data}", "data.format=pretokenized", timeout=180)
    assert res.returncode == 2, res.stderr[-2000:]
    assert [line for line in res.stderr.splitlines() if line.startswith("error:")] == [
        "error: data.dataset: input_ids holds token id 128000, outside the model's vocabulary; allowed: 0 to 259 "
        "(model vocab_size 260)"]
    assert "Traceback" not in res.stderr and res.run_json()["exit_code"] == 2


@pytest.mark.integration
def test_cli_misspelt_model_config_key(tmp_path):
    res = run_cli(tmp_path / "out", *FAST, "model.config.num_hiden_layers=32", timeout=180)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "error: model.config.num_hiden_layers: unknown key for LlamaConfig (did you mean 'num_hidden_layers'?)" \
        in res.stderr
    assert "Traceback" not in res.stderr and res.run_json()["exit_code"] == 2


def test_without_a_launcher_rank_0_prints(capsys, monkeypatch):
    """WORLD_SIZE set by hand (no torchrun, no srun step): rank 0 says it, the others do not."""
    for var in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for _ in range(2):  # and again: nothing is claimed for good
        monkeypatch.setenv("RANK", "1")
        assert main([TINY, "train.lr=nan", "--dry-run"]) == 2
        assert capsys.readouterr().err == ""
        monkeypatch.setenv("RANK", "0")
        assert main([TINY, "train.lr=nan", "--dry-run"]) == 2
        assert capsys.readouterr().err.count("error: train.lr") == 1


def test_an_override_given_twice_with_different_values_is_said_once_and_the_last_used(capsys, monkeypatch):
    from trainer.binding import repeated_overrides

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main([TINY, "max_steps=10", "train.lr=1e-3", "max_steps=20", "train.lr=1e-3", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["warning: max_steps given 2 times on the command line ('10', then '20'); the last, "
                                "'20', is used"]  # the same value twice says nothing
    assert "\nmax_steps: 20\n" in out
    monkeypatch.setenv("RANK", "1")  # under torchrun only rank 0 says it
    assert main([TINY, "max_steps=10", "max_steps=20", "--dry-run"]) == 0
    assert capsys.readouterr().err == ""
    assert repeated_overrides(["a=1", "b=2", "a=3", "a=1"]) == [
        "a given 3 times on the command line ('1', then '3', then '1'); the last, '1', is used"]


def test_a_dry_run_accepts_a_cluster_recipe_and_names_the_paths_missing_here(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    here = tmp_path / "train.jsonl"
    here.write_text("{}\n")
    assert main([TINY, f"data.dataset={here}", "data.eval_dataset=/cluster/eval.jsonl", "train.resume=/ckpt/step-9",
                 "--dry-run"]) == 0  # accepted: the paths may exist only on the cluster
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: {key}: {value!r} does not exist on this machine; a run refuses it at start unless it "
                   "exists where the run starts (a cluster's path is fine here)"
                   for key, value in (("data.eval_dataset", "/cluster/eval.jsonl"), ("train.resume", "/ckpt/step-9"))]


def test_data_paths_of_a_synthetic_run_are_not_read_so_not_checked(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    recipe = str(Path(REPO) / "recipes" / "tiny_resnet.yaml")
    assert main([recipe, "data.dataset=/data/imagenet", "--dry-run"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_output_dir_that_is_a_symlink_loop_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    assert main([TINY, f"output_dir={tmp_path / 'loop1'}", "max_steps=1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: output_dir: {str(tmp_path / 'loop1')!r} is a symbolic link that leads nowhere (a loop or a missing "
        "target: 'loop2'); allowed: a new or existing directory"]


def test_a_fifo_or_directory_where_a_file_is_named_is_one_line(tmp_path, capsys, monkeypatch):
    """A FIFO as data.dataset passed the dry run and the run waited on it forever; a directory as model.config
    passed the dry run. Each is one line naming the key and what kind of file it is."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    assert main([TINY, f"data.dataset={fifo}", "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: data.dataset: {str(fifo)!r} is a FIFO (named pipe), not a regular file; allowed: a regular file or "
        "a directory, as the key names"]
    assert main([TINY, f"model.config={tmp_path}", "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: model.config: {str(tmp_path)!r} is a directory, not a regular file; allowed: a config.json file (a "
        "checkpoint directory is model.path)"]


def test_an_output_dir_holding_another_recipes_run_is_refused_untouched(tmp_path, capsys, monkeypatch):
    """A run into a directory holding another recipe's run exited 0, its run.json and metrics replaced (kept under
    logs/, but checkpoints of another model were there to resume). Now one line, nothing written."""
    from bench.support.recorded_runs import write_run

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    run = write_run(tmp_path / "bert", name="b", workload="bert_pretraining")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main([TINY, f"output_dir={run}", "max_steps=1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: output_dir: {str(run)!r} holds a run of another recipe ('b', workload bert_pretraining; this one is "
        "'tiny_llama_lora', workload llm_lora); allowed: a new directory, or this recipe's own to resume or rerun it"]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_rank_and_world_size_without_a_rendezvous_address_is_one_line(tmp_path, capsys, monkeypatch):
    """WORLD_SIZE=1 RANK=0 exported by hand (no torchrun) was torch's env:// ValueError traceback, exit 1."""
    for name in ("LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    assert main([TINY, f"output_dir={tmp_path / 'run'}", "max_steps=1"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: MASTER_ADDR and MASTER_PORT: unset, but RANK and "
                                                   "WORLD_SIZE are set"), lines
    assert not (tmp_path / "run").exists()


def test_a_negative_world_size_flag_names_the_flag(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main([TINY, "--dry-run", "--world-size", "-4"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --world-size: got -4; expected an integer >= 1 (the number of ranks)"]


def test_an_output_dir_holding_this_recipes_run_under_a_redacted_name_is_its_own(tmp_path, capsys, monkeypatch):
    """run.json records the recipe redacted: a name shaped like a credential ('sk-0123456789abcdefghijklmn' reads as an
    OpenAI-style key) is '<redacted>' there, and the rerun of that very recipe was refused as another recipe's."""
    import trainer.torch_floor
    from bench.support.recorded_runs import write_run
    from telemetry.redaction import redact_text

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setattr(trainer.torch_floor, "check", lambda: "stop: past the output_dir check")  # no run starts
    assert redact_text("sk-0123456789abcdefghijklmn") != "sk-0123456789abcdefghijklmn"
    run = write_run(tmp_path / "own", name=redact_text("sk-0123456789abcdefghijklmn"), workload="llm_lora")
    assert main([TINY, f"output_dir={run}", "name=sk-0123456789abcdefghijklmn", "max_steps=1"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: stop: past the output_dir check"]


def test_a_run_recorded_under_a_name_an_older_redaction_took_is_still_its_own(tmp_path, capsys, monkeypatch):
    """A name the redaction once took for a key ('sk-image-classification-baseline', before an sk- key needed a
    run of 16 letters and digits) is '<redacted>' in that run.json: unknown, so not another recipe's."""
    import trainer.torch_floor
    from bench.support.recorded_runs import write_run
    from telemetry.redaction import REDACTED, redact_text

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setattr(trainer.torch_floor, "check", lambda: "stop: past the output_dir check")  # no run starts
    assert redact_text("sk-image-classification-baseline") == "sk-image-classification-baseline"
    run = write_run(tmp_path / "own", name=REDACTED, workload="llm_lora")
    assert main([TINY, f"output_dir={run}", "name=sk-image-classification-baseline", "max_steps=1"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: stop: past the output_dir check"]
    other = write_run(tmp_path / "other", name=REDACTED, workload="bert_pretraining")  # another workload still is
    assert main([TINY, f"output_dir={other}", "max_steps=1"]) == 2
    assert "holds a run of another recipe" in capsys.readouterr().err
