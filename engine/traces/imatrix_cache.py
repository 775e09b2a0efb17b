"""The per-expert counts read from an imatrix file, kept in COPE's cache so a second run
with the same file does not read it again.

A file is known by its fingerprint: real path, size, modification time (ns) and inode, so
an edited or replaced file is read afresh (hashing the file instead would cost more than
reading its counts: a DeepSeek-V3 imatrix is over 1 GB, its counts a few KB). The counts
and the file's metadata go to `<cache>/imatrix/counts-<16 hex of the fingerprint>.json`,
written atomically. A cache file that cannot be used (damaged, another schema, another
fingerprint, counts of a shape no model has, a FIFO or a link to a device) is never an
error: it is renamed aside to `<name>.corrupt-<UTC timestamp>` with one
ImatrixCacheWarning, as the other caches do, and the imatrix is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from engine.core.cache_dirs import cache_root
from engine.core.errors import CopeInputError, shown
from engine.core.files import atomic_write_text, set_aside_saying
from engine.core.input_limits import CACHE_JSON_MAX_BYTES, MAX_MODEL_BLOCKS, MAX_MODEL_EXPERTS, read_json
from engine.traces.imatrix import ImatrixCounts

SCHEMA = "cope-imatrix-counts"
SCHEMA_VERSION = 1


class ImatrixCacheWarning(UserWarning):
    """A cached imatrix reading, or the record of downloaded imatrix files, could not be
    used and was set aside."""


def imatrix_cache_dir(root: str | os.PathLike | None = None) -> Path:
    return cache_root(root) / "imatrix"


def fingerprint(path: str | os.PathLike) -> dict:
    """What identifies this version of the file: OSError when it cannot be looked at."""
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def cache_path(print_: dict, root: str | os.PathLike | None = None) -> Path:
    text = json.dumps(print_, sort_keys=True, separators=(",", ":"))
    return imatrix_cache_dir(root) / f"counts-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"


def load_cached(path: str | os.PathLike, root: str | os.PathLike | None = None) -> ImatrixCounts | None:
    """The counts cached for this version of `path`, or None (never read, changed since, or
    a cache file that could not be used: then set aside with one ImatrixCacheWarning)."""
    try:
        print_ = fingerprint(path)
    except OSError:
        return None  # the reader says what is wrong with the file
    cached = cache_path(print_, root)
    if not os.path.lexists(cached):
        return None
    try:
        doc = read_json(cached, what="COPE imatrix cache entry", cap=CACHE_JSON_MAX_BYTES)
        return counts_from_doc(doc, print_, str(cached), source=str(path))
    except CopeInputError as exc:
        warnings.warn(ImatrixCacheWarning(f"{exc}; not used, {set_aside_saying(cached)}"), stacklevel=2)
        return None


def save_cached(path: str | os.PathLike, counts: ImatrixCounts, root: str | os.PathLike | None = None) -> Path | None:
    """Keep `counts` for this version of `path`; None when the cache cannot be written
    (a read-only cache costs a re-read next time, nothing more)."""
    try:
        print_ = fingerprint(path)
        target = cache_path(print_, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_text(target, json.dumps(counts_to_doc(counts, print_)) + "\n")
    except OSError:
        return None


def counts_to_doc(counts: ImatrixCounts, print_: dict) -> dict:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "file": print_,
            "counts": counts.counts.tolist(), "moe_blocks": list(counts.moe_blocks), "tensor": counts.tensor,
            "chunk_count": counts.chunk_count, "chunk_size": counts.chunk_size, "datasets": list(counts.datasets),
            "notes": list(counts.notes)}


def counts_from_doc(doc, print_: dict, where: str, *, source: str) -> ImatrixCounts:  # type: ignore[no-untyped-def]
    """The ImatrixCounts a cache document holds, checked field by field; CopeInputError naming `where`."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("schema_version") != SCHEMA_VERSION:
        raise CopeInputError(f"not a version {SCHEMA_VERSION} COPE imatrix cache entry", path=where)
    if doc.get("file") != print_:
        raise CopeInputError(f"cached for another file ({shown(doc.get('file'))})", path=where)
    blocks, rows = doc.get("moe_blocks"), doc.get("counts")
    if not (isinstance(blocks, list) and isinstance(rows, list) and 0 < len(blocks) == len(rows) <= MAX_MODEL_BLOCKS):
        raise CopeInputError("counts and MoE blocks missing or of different lengths", path=where)
    if not all(isinstance(r, list) and 0 < len(r) == len(rows[0]) <= MAX_MODEL_EXPERTS for r in rows):
        raise CopeInputError("counts rows of different or impossible widths", path=where)
    values = [v for r in rows for v in r] + list(blocks)
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**62 for v in values):
        raise CopeInputError("a count or block that is not a whole number >= 0", path=where)
    texts = doc.get("datasets"), doc.get("notes")
    if not all(isinstance(t, list) and all(isinstance(s, str) for s in t) for t in texts):
        raise CopeInputError("datasets or notes are not lists of strings", path=where)
    whole = [doc.get(k) for k in ("chunk_count", "chunk_size")]
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0) for v in whole):
        raise CopeInputError("chunk count or size is not a whole number", path=where)
    if not isinstance(doc.get("tensor"), str):
        raise CopeInputError("the tensor name is missing", path=where)
    return ImatrixCounts(counts=np.asarray(rows, dtype=np.int64), moe_blocks=tuple(blocks), tensor=doc["tensor"],
                         chunk_count=whole[0], chunk_size=whole[1], datasets=tuple(texts[0]), source=source,
                         notes=tuple(texts[1]))


__all__ = ["ImatrixCacheWarning", "cache_path", "counts_from_doc", "counts_to_doc", "fingerprint",
           "imatrix_cache_dir", "load_cached", "save_cached"]
