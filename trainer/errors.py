"""Errors that mean "the input is wrong" (exit 2, one line), as opposed to bugs or crashes (exit 1). Both
are the project's one error base (telemetry/errors.py)."""
from telemetry.errors import HarnessError
from telemetry.errors import InputError as _Input


class InputError(_Input):
    """Bad recipe value, path, data set, model or checkpoint; str() is one line naming the key."""


class FaultError(HarnessError):
    """A fault the harness recognises (disk full, a lost rank or agent, a cut link): str() is one line
    naming what failed and where; exit 1, no traceback. `everywhere`: every rank raises it (rank 0 says it)."""

    def __init__(self, message: str, everywhere: bool = True):
        super().__init__(message)
        self.everywhere = everywhere


def one_line(exc: BaseException, limit: int = 500) -> str:
    """`Type: message` on one line, for run.json's `error`."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__

