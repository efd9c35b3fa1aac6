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
