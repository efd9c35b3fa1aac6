"""One base for every error the project raises on purpose. `HarnessError` says "this is ours, with a
message fit for one `error:` line"; its two kinds say what the exit status is: `InputError` (bad input:
recipe, override, path, world size, missing tool; exit 2) and `FaultError` (something broke while
running; exit 1). Modules keep their own named subclasses (RecipeError, RateError, ...)."""
from __future__ import annotations

import argparse
import sys


class HarnessError(Exception):
    """An error of ours; str(exc) is the one line the user sees."""

    exit_code = 1


class InputError(HarnessError):
    """Bad input, found before or during the run: exit 2."""

    exit_code = 2


class InputProblems(InputError):
    """Bad input with one or more problems found together (a recipe, an evaluation file, what a recipe
    names); each entry of `problems` is one complete line, without the `error: ` prefix."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class FaultError(HarnessError):
    """A fault the harness recognises (disk full, a lost rank or agent, a cut link): str() is one line
    naming what failed and where; exit 1, no traceback. `everywhere`: every rank raises it (rank 0 says it)."""

    def __init__(self, message: str, everywhere: bool = True):
        super().__init__(message)
        self.everywhere = everywhere


def print_errors(*problems: object) -> int:
    """Each problem as one `error:` line on stderr (whitespace folded, whatever the cause); returns 2, the
    exit status of bad input. Under a launcher of several ranks, trainer.error_report.report decides who prints.
    Credential-shaped parts (a URL's password, a token) are redacted: a launcher keeps stderr in a log file."""
    from telemetry.redaction import redact_text

    for problem in problems:
        print(f"error: {redact_text(printable(' '.join(str(problem).split())))}", file=sys.stderr, flush=True)
    return 2


def printable(text: str) -> str:
    """`text` with control characters (ESC, NUL, DEL, ...) written as escapes: a path or value holding a
    terminal's escape sequence is shown, not obeyed (it could clear the screen or hide the rest of the line)."""
    import re

    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], text)


def exit_quietly_on_closed_pipe(main, *args) -> int:
    """main(*args), where a reader that stops early (`... --dry-run | head`) ends the command quietly rather
    than with a BrokenPipeError traceback: stdout is pointed at /dev/null so the interpreter's final flush
    fails no more, and the status is 141 (128 + SIGPIPE), as a shell tool killed by the closed pipe gives."""
    import os

    try:
        return main(*args)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose mistakes (a missing argument, a bad choice, a value of the wrong type) are
    one `error:` line naming the command's --help, exit 2, instead of argparse's usage block. Sub-command
    parsers are of the same kind (argparse makes them of the parent's class). No abbreviated options: a
    mistyped `--dry-ru` is refused, not taken for `--dry-run` (nor `--out` for a later `--output`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._argv_seen = list(sys.argv[1:] if args is None else args)  # for error(): what the user typed
        return super().parse_known_args(args, namespace)

    def explained(self, message: str) -> str:
        """argparse's message with what is allowed (with_allowed), for subclasses' own error()."""
        return with_allowed(message, getattr(self, "_argv_seen", sys.argv[1:]))

    def error(self, message):
        sys.exit(print_errors(f"{self.explained(message)}; see {self.prog} --help"))


_ALLOWED_FOR_TYPE = {"int": "a whole number", "float": "a number"}


def with_allowed(message: str, argv: list[str]) -> str:
    """argparse's own lines, completed with what is allowed: the kind of number a typed option takes, and
    how to give a value that starts with '-' (argparse reads `--rate -5gbit` as two options)."""
    import re

    typed = re.search(r"invalid (int|float) value: ", message)
    if typed:
        return f"{message}; allowed: {_ALLOWED_FOR_TYPE[typed.group(1)]}"
    missing = re.match(r"argument (\S+): expected one argument$", message)
    if missing:
        names = missing.group(1).split("/")
        for i, arg in enumerate(argv[:-1]):
            if arg in names and argv[i + 1].startswith("-") and len(argv[i + 1]) > 1:
                return (f"{message}; a value that starts with '-' is written {arg}={argv[i + 1]} "
                        f"(here {argv[i + 1]!r} was read as an option)")
    return message


def dangling_link_problem(path: str, what: str) -> str | None:
    """A symbolic link on `path` that leads nowhere (a loop, or a missing target) does not exist to
    os.path.exists, yet nothing can be created there: makedirs fails with EEXIST or ELOOP."""
    import os

    probe = os.path.abspath(path)
    while probe != os.path.dirname(probe):
        if os.path.islink(probe) and not os.path.exists(probe):
            return (f"{what}: {probe!r} is a symbolic link that leads nowhere (a loop or a missing target: "
                    f"{os.readlink(probe)!r}); allowed: a new or existing directory")
        probe = os.path.dirname(probe)
    return None


def name_length_problem(path: str, existing: str, what: str) -> str | None:
    """The line for a path the filesystem cannot hold: a name of its still missing part longer than the
    filesystem's name limit (NAME_MAX, 255 bytes on Linux filesystems) or the whole path over PATH_MAX; a probe
    in `existing` (its deepest existing directory) cannot see either. None where it fits."""
    import os

    def limit(name: str, default: int) -> int:
        try:
            return os.pathconf(existing, name)
        except (OSError, ValueError):
            return default
    full = os.fsencode(os.path.abspath(path))
    if len(full) >= (path_max := limit("PC_PATH_MAX", 4096)):
        return (f"{what}: the path is {len(full)} bytes long; allowed: a path under {path_max} bytes (this host's "
                "PATH_MAX)")
    name_max = limit("PC_NAME_MAX", 255)
    for name in os.path.relpath(os.path.abspath(path), existing).split(os.sep):
        if len(os.fsencode(name)) > name_max:
            return (f"{what}: {path!r} has a name of {len(os.fsencode(name))} bytes ({name[:16]}...); allowed: names "
                    f"of at most {name_max} bytes each (this filesystem's limit)")
    return None


def output_dir_problem(path: str, what: str) -> str | None:
    """None when `path` is a directory this process can write in, or one it can create; else the one line
    saying why not, naming `what` (the option or key). Creates nothing: bad input leaves no empty directory."""
    import os

    if not path.strip():  # '' is not "the default": os.path.abspath('') is the current directory
        return f"{what}: got {path!r}; allowed: a non-empty directory path"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{what}: {path!r} is a file, not a directory; allowed: a new or existing directory"
    if problem := dangling_link_problem(path, what):
        return problem
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{what}: {existing!r} is a file, so {path!r} cannot be a directory; allowed: a writable directory"
    if problem := name_length_problem(path, existing, what):
        return problem
    probe = os.path.join(existing, f".write-test.{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        return f"{what}: cannot write to {path!r}: {exc.strerror or exc}; allowed: a writable directory"
    return None


_READ_FIFOS: list[int] = []  # write ends kept open: a reader that found no writer yet would otherwise see EOF


def unread_fifo_problem(path: str, what: str) -> str | None:
    """The line for an output that is a FIFO (named pipe) no process reads: opening it to write would wait for
    a reader forever. A pipe with its reader running (`>(gzip > x)`, `cat FIFO &` started first) is fine."""
    import errno
    import os
    import stat

    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return None
        _READ_FIFOS.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: a FIFO without a reader
            return None
        return (f"{what}: {path!r} is a FIFO (named pipe) that no process reads, so writing it would wait forever; "
                "allowed: a regular file, or a pipe whose reader is already running")
    return None


def output_file_problem(path: str, what: str) -> str | None:
    """None when `path` can be written as a file (its directory exists and is writable); else the one line
    saying why not. Leaves no file behind where there was none."""
    import os

    if not path.strip():
        return f"{what}: got {path!r}; allowed: a non-empty file path"
    if os.path.isdir(path):
        return f"{what}: {path!r} is a directory; allowed: a file path"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{what}: {parent!r} is not a directory; allowed: a file in an existing, writable directory"
    if problem := unread_fifo_problem(path, what):
        return problem
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
        if not existed:
            os.remove(path)
    except OSError as exc:
        return f"{what}: cannot write {path!r}: {exc.strerror or exc}; allowed: a file in a writable directory"
    return None
