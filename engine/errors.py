"""Errors that reach the user as one line."""

from __future__ import annotations


class CopeInputError(Exception):
    """Bad input from the user: a file, a flag or a value we cannot use.

    The message is one line that names the file (when there is one) and the problem;
    the command line prints it as is and exits with the input-error code.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line
