"""The data and tokenizer tools' command lines: an output path they cannot write is one `error:` line,
exit 2, before anything is built (and nothing is left behind)."""
from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("tool, argv, expected", [
    ("make_demo_data", ["/proc/nope/d.jsonl"], "path: '/proc/nope' is not a directory"),
    ("make_demo_data", ["{tmp}"], "is a directory; allowed: a file path"),
    ("make_bert_data", ["/proc/nope"], "out_dir: cannot write to '/proc/nope'"),
    ("make_bert_data", ["{tmp}/file"], "is a file, not a directory"),
    ("make_byte_tokenizer", ["/proc/nope"], "out: cannot write to '/proc/nope'"),
    ("make_byte_tokenizer", ["a", "b"], "unrecognized arguments: b; see python -m tools.make_byte_tokenizer --help"),
])
def test_a_bad_output_path_is_one_line(tmp_path, capsys, tool, argv, expected):
    (tmp_path / "file").write_text("x")
    cli = importlib.import_module(f"tools.{tool}").cli
    try:
        code = cli([a.format(tmp=tmp_path) for a in argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_call_path_and_house_rules_refuse_an_unknown_argument_in_one_line(capsys):
    """tools/call_path.py (run as a file) and tools.house_rules (which takes none) say a stray argument in
    one line instead of argparse's usage block or ignoring it."""
    from tests.test_call_path import call_path
    from tools import house_rules

    for main, argv, prog in ((call_path.main, ["--bogus"], "python tools/call_path.py"),
                             (house_rules.main, ["extra"], "python -m tools.house_rules")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: unrecognized arguments: ") and f"see {prog} --help" in err


def test_a_full_disk_is_one_line_and_the_device_stays(capsys):
    """/dev/full takes the empty file the check opens, then refuses the rows: an OSError traceback before."""
    import os

    from tools.make_demo_data import cli
    assert cli(["/dev/full"]) == 2
    err = capsys.readouterr().err
    assert err == ("error: path: '/dev/full' could not be written (No space left on device); allowed: a file on a "
                   "filesystem with free space that this user can write\n")
    assert os.path.exists("/dev/full")  # only a regular file half-written is removed
