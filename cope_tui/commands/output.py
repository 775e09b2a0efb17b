"""What the command line writes: data on stdout (exactly one JSON document with --json),
narration and errors on stderr, every line of it safe to show.

`clean_output()` (entered once, by cope_tui/cli.py) is the one place this is enforced:
- control characters that came from files (a GGUF `general.name` holding escape sequences,
  a trace's notes) are escaped before they reach the terminal (`\\x1b`), newlines and tabs kept;
- Python warnings are one line, `cope: warning: ...`, never a source line and its path;
- an error line (`error_line`) is at most about LINE_LIMIT characters: long lists are
  summarised ("a, b, c, d, ... and 99,995 more") and what is still too long is cut in the
  middle, so the start (what failed) and the end (what to do) stay.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from typing import Any, Iterator, TextIO
from importlib.metadata import PackageNotFoundError, version

import orjson

LINE_LIMIT = 300
LIST_KEPT = 4  # items shown of a long list
_QUOTED = re.compile(r"`[^`]+`")  # a command quoted to be copied
_LONG_LIST = re.compile(r"(?:[^\s,()]+, ){7,}(?:and )?[^\s,()]+")
# C0 and C1 controls but newline and tab, and the bidirectional overrides that reorder text.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# Every JSON document COPE writes says which layout it has, so a script can check before it
# reads: bumped when a field is renamed or removed (adding one does not bump it).
JSON_SCHEMA_VERSION = 1


def cope_version() -> str:
    """The installed cope-tui distribution's version ("unknown" when run from a bare checkout)."""
    try:
        return version("cope-tui")
    except PackageNotFoundError:
        return "unknown"


def versioned(doc: Any) -> Any:
    """A JSON object with its layout's version and COPE's first (a document's own win)."""
    if not isinstance(doc, dict):
        return doc
    return {"schema_version": JSON_SCHEMA_VERSION, "cope_version": cope_version(), **doc}


def json_text(doc: Any) -> str:
    options = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    try:
        return orjson.dumps(versioned(doc), option=options).decode() + "\n"
    except TypeError:  # a file name the OS gave as bytes that are not UTF-8: JSON holds text only
        return orjson.dumps(_utf8(versioned(doc)), option=options).decode() + "\n"


def undecodable_escaped(text: str) -> str:
    """`text` with the bytes of a file name that are not UTF-8 (surrogate-escaped by Python)
    written as \\xNN, as JSON and a UTF-8 terminal can show them."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no byte made: \udXXX
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _utf8(doc: Any) -> Any:
    """`doc` with each string's undecodable bytes written as \\xNN (`undecodable_escaped`)."""
    if isinstance(doc, str):
        return undecodable_escaped(doc)
    if isinstance(doc, dict):
        return {_utf8(k): _utf8(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_utf8(v) for v in doc]
    return doc


def write_json(doc: Any) -> None:
    sys.stdout.write(json_text(doc))


def escape_controls(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def one_line(text: str, limit: int = LINE_LIMIT) -> str:
    """`text` as one printable line of about `limit` characters at most."""
    line = escape_controls(" ".join(str(text).split()))
    line = _LONG_LIST.sub(_summarise_list, line)
    if len(line) <= limit:
        return line
    # A command quoted for the person to copy (`hf download ...`: the workaround) is kept
    # whole with what follows it; the cut goes into what comes before it.
    quoted = _QUOTED.search(line)
    if quoted is not None and len(line) - quoted.start() <= limit - 80:
        kept = line[quoted.start():]
        return _cut(line[:quoted.start()], limit - len(kept)) + kept
    return _cut(line, limit)


def _cut(text: str, limit: int) -> str:
    """`text` cut in the middle to about `limit` characters, saying how much was left out."""
    head, tail = text[: limit * 2 // 3], text[-(limit // 4):]
    gap = f" ... ({len(text) - len(head) - len(tail):,} characters left out) ... "
    return head + gap + tail


def _summarise_list(match: re.Match) -> str:
    items = match.group().split(", ")
    return ", ".join(items[:LIST_KEPT]) + f", ... and {len(items) - LIST_KEPT:,} more"


def error_line(exc: BaseException) -> str:
    return f"cope: error: {one_line(str(exc))}"


class _Escaping:
    """A text stream that escapes control characters on their way out."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_controls(undecodable_escaped(text)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    named = "" if issubclass(category, UserWarning) else f"{category.__name__}: "
    print(f"cope: warning: {one_line(named + str(message))}", file=sys.stderr)


@contextlib.contextmanager
def clean_output() -> Iterator[None]:
    """stdout and stderr escaped, warnings one line each, for as long as it is entered."""
    saved = sys.stdout, sys.stderr, warnings.showwarning
    sys.stdout, sys.stderr = _Escaping(sys.stdout), _Escaping(sys.stderr)  # type: ignore[assignment]
    warnings.showwarning = _show_warning
    try:
        yield
    finally:
        sys.stdout, sys.stderr, warnings.showwarning = saved
