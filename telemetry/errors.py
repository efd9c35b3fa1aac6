"""One base for every error the project raises on purpose. `HarnessError` says "this is ours, with a
message fit for one `error:` line"; its two kinds say what the exit status is: `InputError` (bad input:
recipe, override, path, world size, missing tool; exit 2) and `FaultError` (something broke while
running; exit 1). Modules keep their own named subclasses (RecipeError, RateError, ...)."""
from __future__ import annotations


class HarnessError(Exception):
    """An error of ours; str(exc) is the one line the user sees."""

    exit_code = 1


class InputError(HarnessError):
    """Bad input, found before or during the run: exit 2."""

    exit_code = 2


def print_errors(*problems: object) -> int:
    """Each problem as one `error:` line on stderr (whitespace folded, whatever the cause); returns 2, the
    exit status of bad input. Under a launcher of several ranks, trainer.errors.report decides who prints."""
    import sys

    for problem in problems:
        print(f"error: {' '.join(str(problem).split())}", file=sys.stderr, flush=True)
    return 2
