"""Names as people type them: compared squashed (case, spaces and dashes do not count),
and the "did you mean" of a one-line error."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


def squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def did_you_mean(query: str, choices: Iterable[str]) -> str:
    """" (did you mean X?)" for the choices closest to a mistyped name (compared squashed:
    case, spaces and dashes do not count; a choice that starts with the query comes first),
    "" when none is close."""
    by_key: dict[str, str] = {}
    for choice in choices:
        by_key.setdefault(squash(choice), choice)
    key = squash(query)
    if not key:
        return ""
    close = [c for k, c in by_key.items() if k.startswith(key) or key.startswith(k)]
    if not close:
        close = [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n=3, cutoff=0.75)]
    close = close[:3]
    if not close:
        return ""
    return f" (did you mean {' or '.join(close)}?)"
