"""The user's record of imatrix files downloaded from the Hub: which index entries are verified.

The shipped index (assets/imatrix_index.json) never changes on a user's machine; a file
downloaded and read once is recorded here, in `<cache>/imatrix/verified.json`, with its
sha256, size, the commit it came from and what reading it found (per-expert counts or a
legacy file without them). Listings mark an entry verified when this record holds its
repo and file. Written atomically (read, update, replace: two downloads finishing at the
same moment may keep only one of them, which the next download of the other restores). A
record that cannot be used is renamed aside with one ImatrixCacheWarning and treated as
empty: nothing downloaded is lost, only the mark.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, set_aside_saying
from engine.core.input_limits import CACHE_JSON_MAX_BYTES, read_json
from engine.traces.imatrix_cache import ImatrixCacheWarning, imatrix_cache_dir

SCHEMA = "cope-imatrix-verified"
SCHEMA_VERSION = 1
MAX_RECORDS = 10_000  # far more than anyone downloads; a bigger file is not COPE's


@dataclass(frozen=True)
class VerifiedFile:
    repo_type: str
    repo_id: str
    file: str
    revision: str | None  # the commit the Hub served, when known
    sha256: str
    size_bytes: int
    verified_at: str  # ISO 8601 UTC, to the second
    has_expert_counts: bool
    what: str  # what reading it found ("2 MoE blocks x 4 experts (calib.txt; 3 chunks of 64 tokens)")

    @property
    def key(self) -> str:
        return record_key(self.repo_type, self.repo_id, self.file)


def record_key(repo_type: str, repo_id: str, file: str) -> str:
    return f"{repo_type}:{repo_id}/{file}"


def record_path(root: str | os.PathLike | None = None) -> Path:
    return imatrix_cache_dir(root) / "verified.json"


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def load_verified(root: str | os.PathLike | None = None) -> dict[str, VerifiedFile]:
    """The record, by record_key; {} when none is kept or it cannot be used (then set aside)."""
    path = record_path(root)
    if not os.path.lexists(path):
        return {}
    try:
        return _from_doc(read_json(path, what="COPE imatrix record", cap=CACHE_JSON_MAX_BYTES), str(path))
    except CopeInputError as exc:
        warnings.warn(ImatrixCacheWarning(f"{exc}; not used, {set_aside_saying(path)}"), stacklevel=2)
        return {}


def record_download(entry: VerifiedFile, root: str | os.PathLike | None = None) -> Path:
    """Add (or replace) one downloaded file in the record, written atomically."""
    records = load_verified(root)
    records[entry.key] = entry
    path = record_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
           "files": [asdict(r) for _, r in sorted(records.items())]}
    return atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def _from_doc(doc, where: str) -> dict[str, VerifiedFile]:  # type: ignore[no-untyped-def]
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("schema_version") != SCHEMA_VERSION:
        raise CopeInputError(f"not a version {SCHEMA_VERSION} COPE imatrix record", path=where)
    files = doc.get("files")
    if not isinstance(files, list) or len(files) > MAX_RECORDS:
        raise CopeInputError("'files' is not a list of downloaded files", path=where)
    out: dict[str, VerifiedFile] = {}
    for i, f in enumerate(files):
        v = _file(f, f"{where}: file {i}")
        out[v.key] = v
    return out


def _file(f, where: str) -> VerifiedFile:  # type: ignore[no-untyped-def]
    if not isinstance(f, dict):
        raise CopeInputError("not an object", path=where)
    texts = ("repo_type", "repo_id", "file", "sha256", "verified_at", "what")
    if not all(isinstance(f.get(k), str) and f[k] for k in texts):
        raise CopeInputError(f"one of {', '.join(texts)} is missing or not text", path=where)
    sha = f["sha256"]
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise CopeInputError("sha256 is not 64 lowercase hex digits", path=where)
    size, counts, revision = f.get("size_bytes"), f.get("has_expert_counts"), f.get("revision")
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0) or not isinstance(counts, bool):
        raise CopeInputError("size_bytes or has_expert_counts is not what it should be", path=where)
    if revision is not None and not isinstance(revision, str):
        raise CopeInputError("revision is not text", path=where)
    return VerifiedFile(f["repo_type"], f["repo_id"], f["file"], revision, sha, size, f["verified_at"], counts,
                        f["what"])


__all__ = ["VerifiedFile", "load_verified", "now_utc", "record_download", "record_key", "record_path"]
