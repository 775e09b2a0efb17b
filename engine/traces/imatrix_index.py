"""The imatrix index (assets/imatrix_index.json): where the llama.cpp imatrix files of each
catalog model are published on the Hugging Face Hub, and how much of that was seen.

An entry names a repo and, where known, a file, and says what its source showed (`seen`):
- "file": the repo and the file by name, on the page at `source`;
- "repo": the repo only, at `source`; a file named beside it follows `convention`;
- "none": neither was seen anywhere; both follow `convention` (a quantizer's usual naming).
`format` is what the name or the source suggests, never a reading of the file: "gguf"
(llama-imatrix's GGUF format, with per-expert counts), "legacy" (the .dat layout, none) or
"unknown" (a `.imatrix` name: llama-imatrix writes GGUF whatever the name unless given
`--output-format dat`, ggml-org/llama.cpp tools/imatrix/imatrix.cpp save_imatrix at
006e7ef9913f4ed2dc7ebc00890f4e287b6cfcea, while ik_llama.cpp writes the legacy layout).

Every shipped entry is `"verified": false`: a download is recorded in the user's own file
(engine/traces/imatrix_verified.py), never in the asset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.core.errors import CopeInputError, shown

INDEX_FORMAT = "cope-imatrix-index"
INDEX_VERSION = 2
FORMATS = ("gguf", "legacy", "unknown")
SEEN = ("file", "repo", "none")
FORMAT_WORDS = {
    "gguf": "GGUF imatrix (per-expert counts expected)",
    "legacy": "legacy .dat (no per-expert counts expected)",
    "unknown": "format unknown until read",
}


@dataclass(frozen=True)
class ImatrixEntry:
    model: str  # catalog id
    repo_id: str
    repo_type: str
    file: str | None  # None: only the repo is known
    format: str  # one of FORMATS
    quantizer: str
    seen: str  # one of SEEN
    source: str | None  # the page read (seen "file" or "repo")
    convention: str | None  # the naming rule the unseen parts follow
    verified: bool
    has_expert_counts: bool | None  # None until the file is read
    note: str

    @property
    def where(self) -> str:
        return f"{self.repo_id}/{self.file}" if self.file else f"{self.repo_id}/(file not known)"

    def basis(self) -> str:
        """Where the entry comes from, in words: what was seen and what is a convention."""
        if self.seen == "file":
            return f"seen at {self.source}"
        if self.seen == "repo":
            rest = f"file by {self.convention}" if self.file else "file not named there"
            return f"repo seen at {self.source}; {rest}"
        return f"by {self.convention}"


def parse_index(doc: Any, where: str) -> tuple[ImatrixEntry, ...]:
    """The entries of an imatrix index document; CopeInputError naming `where` and the
    entry for anything that does not follow the schema above."""
    kind = doc.get("format") if isinstance(doc, dict) else None
    if kind != INDEX_FORMAT:
        raise CopeInputError(f"not a COPE imatrix index (format {shown(kind)})", path=where)
    if doc.get("version") != INDEX_VERSION:
        raise CopeInputError(f"imatrix index version {shown(doc.get('version'))}; this COPE reads {INDEX_VERSION}",
                             path=where)
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise CopeInputError("'entries' is not a list", path=where)
    return tuple(_entry(e, f"{where}: entry {i}") for i, e in enumerate(raw))


def _entry(e: Any, where: str) -> ImatrixEntry:
    if not isinstance(e, Mapping):
        raise CopeInputError("not an object", path=where)
    try:
        entry = ImatrixEntry(
            model=_text(e, "model", where), repo_id=_text(e, "repo_id", where),
            repo_type=_text(e, "repo_type", where), file=_text(e, "file", where, optional=True),
            format=_text(e, "format", where), quantizer=_text(e, "quantizer", where),
            seen=_text(e, "seen", where), source=_text(e, "source", where, optional=True),
            convention=_text(e, "convention", where, optional=True), verified=e.get("verified") is True,
            has_expert_counts=e.get("has_expert_counts"), note=str(e.get("note", "")))
    except KeyError as exc:
        raise CopeInputError(f"field {exc} is missing", path=where) from None
    problem = _problem(entry, e)
    if problem:
        raise CopeInputError(f"{entry.where}: {problem}", path=where)
    return entry


def _text(e: Mapping, key: str, where: str, *, optional: bool = False) -> str | None:
    value = e[key] if not optional else e.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise CopeInputError(f"field {key!r} is {shown(value)}, expected a non-empty string", path=where)
    return value


def _problem(entry: ImatrixEntry, raw: Mapping) -> str | None:
    if entry.repo_id.count("/") != 1 or entry.repo_type not in ("model", "dataset"):
        return f"repo {entry.repo_id!r} of type {entry.repo_type!r} is not a Hub repo id"
    if entry.format not in FORMATS or entry.seen not in SEEN:
        return f"format {entry.format!r} or seen {entry.seen!r} is not one of {FORMATS} / {SEEN}"
    if raw.get("verified") is not False:
        return "a shipped entry must say \"verified\": false (downloads are recorded in the user's cache)"
    if entry.has_expert_counts is not None:
        return "has_expert_counts must be null until the file is read"
    if entry.seen != "none" and not (entry.source or "").startswith(("https://", "http://")):
        return f"seen {entry.seen!r} needs the page it was seen on as 'source'"
    if entry.seen == "none" and (entry.source is not None or not entry.convention):
        return "an entry not seen anywhere has no 'source' and must name its 'convention'"
    if entry.seen == "file" and not entry.file:
        return "seen 'file' needs the file's name"
    if entry.seen == "repo" and entry.file and not entry.convention:
        return "a file named beside a repo seen alone must name the 'convention' it follows"
    return None


__all__ = ["FORMATS", "FORMAT_WORDS", "INDEX_FORMAT", "INDEX_VERSION", "ImatrixEntry", "SEEN", "parse_index"]
