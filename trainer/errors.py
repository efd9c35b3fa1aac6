"""Errors that mean "the input is wrong" (exit 2, one line), as opposed to bugs or crashes (exit 1)."""


class InputError(Exception):
    """Bad recipe value, path, data set, model or checkpoint; str() is one line naming the key."""
