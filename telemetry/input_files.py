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
