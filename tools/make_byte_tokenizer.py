"""Write the byte-level tokenizer the tiny recipes use (no download needed).

256 byte tokens plus <pad>, <s>, </s>, <unk>; no merges, so every UTF-8 string round-trips.
Saved in Hugging Face format so it loads through the same AutoTokenizer path as a real checkpoint's.

    python tools/make_byte_tokenizer.py recipes/assets/byte_tokenizer
"""
from __future__ import annotations

import sys

from tokenizers import Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def build() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in sorted(ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=1 << 20,
    )


def cli(argv: list[str] | None = None) -> int:
    """The command line: a bad output directory is one `error:` line, exit 2, before anything is built."""
    from telemetry.errors import OneLineParser, output_dir_problem, print_errors

    p = OneLineParser(prog="python -m tools.make_byte_tokenizer", description="Write the byte-level tokenizer.")
    p.add_argument("out", nargs="?", default="recipes/assets/byte_tokenizer", help="the tokenizer's directory")
    args = p.parse_args(argv)
    if problem := output_dir_problem(args.out, "out"):
        return print_errors(problem)
    tok = build()
    tok.save_pretrained(args.out)
    print(f"wrote {args.out} (vocab {len(tok)})")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
