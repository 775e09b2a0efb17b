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
        self.message = message  # without the place: for re-labelling with another one
        self.path = path
        self.line = line

    def relabelled(self, path: str | None, *, line: int | None = None) -> "CopeInputError":
        """The same problem, said of another place (e.g. the Hub file a cached copy came from)."""
        return CopeInputError(self.message, path=path, line=line)
