"""Errors that reach the user as one line."""

from __future__ import annotations

import re


# Values quoted from a file (a 5,000-digit number, a tensor name of binary junk, 3,000
# brackets) are cut in the middle when one unbroken run of characters is longer than this;
# words and lists (of models, of flags) are left whole.
MAX_RUN_CHARS = 80
_LONG_RUN = re.compile(r"\S{%d,}" % (MAX_RUN_CHARS + 1))


def _one_readable_line(message: str) -> str:
    def cut(m: re.Match) -> str:
        run = m[0]
        if ("/" in run or "\\" in run) and len(run) <= 400:
            return run  # a path named in the message: kept whole
        return f"{run[:50]}...{run[-20:]} ({len(run)} characters)"

    return _LONG_RUN.sub(cut, message)


def shown(value: object, limit: int = 60) -> str:
    """repr(value) for a message, cut in the middle past `limit` characters (a value read
    from a file may be a list of thousands of items)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-12:]}"


class CopeInputError(Exception):
    """Bad input from the user: a file, a flag or a value we cannot use.

    The message is one line that names the file (when there is one) and the problem;
    the command line prints it as is and exits with the input-error code.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        message = _one_readable_line(message)
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


class BudgetTooSmall(CopeInputError):
    """The VRAM budget cannot hold what every candidate keeps on the GPU (the non-expert
    weights, the KV cache of the context, the runtime's buffers): nothing can be ranked. A
    command can still be priced alone (it would not run there, or it runs on a GPU larger
    than the budget)."""
