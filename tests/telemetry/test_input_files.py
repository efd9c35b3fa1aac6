"""Input files read with a limit: a device or FIFO where a file is expected is named, not read until memory
runs out or waited on forever; the redaction of error lines that name a credential."""
from __future__ import annotations

import os

import pytest

from telemetry.errors import print_errors
from telemetry.input_files import InputFileError, not_a_file, read_limited


def test_a_regular_file_within_the_limit_is_read(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"abc")
    assert read_limited(str(path), 3) == b"abc"
    assert not_a_file(str(path)) is None


def test_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"abcd")
    with pytest.raises(InputFileError, match="holds more than 3 bytes"):
        read_limited(str(path), 3)


def test_a_device_is_refused_or_read_bounded():
    with pytest.raises(InputFileError, match="is a character device, not a regular file"):
        read_limited("/dev/zero", 1 << 20)
    with pytest.raises(InputFileError, match="holds more than 1 MiB"):  # streams: still bounded
        read_limited("/dev/zero", 1 << 20, streams=True)


def test_a_fifo_and_a_directory_are_named_not_opened(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="is a FIFO"):
        read_limited(str(fifo), 10)  # opening it would wait for a writer forever
    assert not_a_file(str(fifo)) == "is a FIFO (named pipe), not a regular file"
    assert not_a_file(str(tmp_path)) == "is a directory, not a regular file"
    assert not_a_file(str(tmp_path / "absent")) is None  # absence is the caller's own message


def test_an_error_line_never_carries_a_credential(capsys):
    assert print_errors("data.dataset: path 'https://user:pa55word@example.com/x.jsonl' does not exist") == 2
    err = capsys.readouterr().err
    assert "pa55word" not in err and err.startswith("error: data.dataset: ")


def test_text_saved_as_utf16_or_with_a_bom_is_read_as_written(tmp_path):
    from telemetry.input_files import decode_text, text_encoding
    assert decode_text("# size count\n".encode("utf-16")) == "# size count\n"
    assert decode_text(b"\xef\xbb\xbf# size") == "# size"
    assert decode_text(b"plain \xff") == "plain \ufffd"
    path = tmp_path / "log"
    path.write_bytes("NCCL INFO\n".encode("utf-16"))
    assert text_encoding(str(path)) == "utf-16"
    path.write_bytes(b"NCCL INFO\n")
    assert text_encoding(str(path)) == "utf-8-sig"
    os.mkfifo(tmp_path / "fifo")
    assert text_encoding(str(tmp_path / "fifo")) == "utf-8"  # not peeked at: its bytes are the reader's


def test_error_lines_show_control_characters_rather_than_obey_them(capsys):
    print_errors("/tmp/no\x1b[2Jsuch: not a directory")
    assert capsys.readouterr().err == "error: /tmp/no\\x1b[2Jsuch: not a directory\n"
