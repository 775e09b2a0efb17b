"""How much of a trace COPE will read: a bound the user can raise.

A trace holds tokens x layers x k routing entries. Every reader counts them from what
the file declares (an array's shape, its number of lines) before it builds arrays for
them, and refuses a file over the limit with one line: the environment variable
COPE_MAX_TRACE_ENTRIES, default 2**28 (268,435,456 entries: 512 MiB of int16 ids, e.g.
350,000 tokens of a 96-layer top-8 model). So a small compressed file that inflates to
gigabytes, or a forged shape, never allocates more than the limit allows.

Text formats are refused before they are read when larger than TEXT_BYTES_PER_ENTRY
bytes for each permitted entry, and only regular files are read (a FIFO or /dev/zero
would never end). They are read in chunks, and a NUL byte, which no text trace holds,
ends the read at once: a sparse 9 GiB file of zeros is refused after its first chunk,
not after 9 GiB of memory.
"""

from __future__ import annotations

import os

from engine.core.errors import CopeInputError
from engine.core.files import open_regular

MAX_ENTRIES_ENV = "COPE_MAX_TRACE_ENTRIES"
DEFAULT_MAX_ENTRIES = 2**28
TEXT_BYTES_PER_ENTRY = 64  # generous: a JSONL record with router weights spends ~20 bytes an entry
_CHUNK_BYTES = 16 * 2**20


def max_entries() -> int:
    raw = os.environ.get(MAX_ENTRIES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_ENTRIES
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise CopeInputError(f"{MAX_ENTRIES_ENV}={raw!r}: expected a whole number >= 1 "
                             "(the most routing entries, tokens x layers x k, a trace may hold)")
    return int(raw)


def check_entries(n: int, where: str, what: str = "the trace") -> None:
    """CopeInputError naming `where` when `n` routing entries exceed the limit."""
    limit = max_entries()
    if n > limit:
        count = f"{n:,}" if n < 10**15 else f"{n:.2e}"  # a forged shape's product may have 40 digits
        raise CopeInputError(f"{what} holds {count} routing entries (tokens x layers x k), more than "
                             f"{MAX_ENTRIES_ENV}={limit:,}: raise it to read this trace", path=where)


def read_text_bounded(path: str | os.PathLike, *, k: int) -> str:
    """A UTF-8 text trace of one row per (token, layer) with `k` ids: refused when it is
    not a regular file, is larger than the limit's bytes, or has more rows x k entries
    than the limit (checked before any row is parsed)."""
    where = str(path)
    limit = max_entries()
    with open_regular(path, what="file") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit * TEXT_BYTES_PER_ENTRY:
            raise CopeInputError(f"{size:,} bytes of text, more than {MAX_ENTRIES_ENV}={limit:,} routing entries "
                                 "could take: raise it to read this trace", path=where)
        raw = _read_text_bytes(handle, where)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not UTF-8 text (byte {exc.start})", path=where) from None
    check_entries((text.count("\n") + 1) * max(k, 1), where)
    return text


def _read_text_bytes(handle, where: str) -> bytes:
    chunks = []
    while chunk := handle.read(_CHUNK_BYTES):
        at = chunk.find(b"\x00")
        if at >= 0:
            offset = sum(len(c) for c in chunks) + at
            raise CopeInputError(f"a NUL byte at byte {offset:,}: not a text trace (a binary or sparse file)",
                                 path=where)
        chunks.append(chunk)
    return b"".join(chunks)
