"""Files a user names as input (a config.json, an nccl-tests table, a reference output), read with a limit: a
device such as /dev/zero, or a file far larger than any such input, is refused once `limit` bytes are read,
not read until memory runs out; a directory, FIFO or device where a file is expected is named as such."""
from __future__ import annotations

import os
import stat

from telemetry.errors import InputError

MiB = 1 << 20


class InputFileError(InputError, ValueError):
    """The reason, worded to follow the path: '<path>: ' + str(exc) (the caller adds what is allowed)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def what_is_there(path: str) -> str:
    """What `path` is, for a line saying it is not the file wanted: 'a directory', 'a FIFO (named pipe)', 'a
    character device', 'a symbolic link that leads nowhere', 'no such file or directory', ..."""
    try:
        return _kind(os.stat(path).st_mode) if not os.path.isfile(path) else "a regular file"
    except OSError:
        return "a symbolic link that leads nowhere" if os.path.islink(path) else "no such file or directory"


def not_a_file(path: str) -> str | None:
    """'is a directory' (a FIFO, a device, ...) when `path` exists and is not a regular file, else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else f"is {_kind(mode)}, not a regular file"


def read_limited(path: str, limit: int, streams: bool = False) -> bytes:
    """The bytes of `path`, at most `limit` of them. `streams`: a pipe or device is read too (process
    substitution, /dev/stdin), still bounded; otherwise only a regular file. OSError when it cannot be
    opened; InputFileError for the wrong kind of file or one past the limit."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode) or not (stat.S_ISREG(mode) or streams):
        raise InputFileError(f"is {_kind(mode)}, not a regular file")
    with open(path, "rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise InputFileError(f"holds more than {limit // MiB} MiB" if limit >= MiB else
                             f"holds more than {limit} bytes")
    return raw


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def decode_text(raw: bytes) -> str:
    """Text as a user's tools save it: UTF-8 (a byte-order mark dropped), or UTF-16 with its byte-order mark
    (PowerShell's `>` and Out-File write that); bytes that do not decode are replaced, not fatal."""
    if raw.startswith(UTF16_BOMS):
        return raw.decode("utf-16", errors="replace")
    return raw.decode("utf-8-sig", errors="replace")


def text_encoding(path: str) -> str:
    """The encoding to open `path` with, by the same rule as decode_text; a FIFO or stdin is not peeked at
    (its bytes would be lost to the reader) and is read as UTF-8."""
    if not os.path.isfile(path):
        return "utf-8"
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return "utf-8"
    return "utf-16" if head in UTF16_BOMS else "utf-8-sig"
