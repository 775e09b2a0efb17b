"""`cope trace pull --verify-index`: download each readable index entry, check it parses, pin it.

Run by a maintainer on a machine with network. For every entry whose format COPE reads,
one file is downloaded (the entry's own, else the first the pattern matches on the Hub),
read with its format (against the catalog model when the entry names one, else against
the card's shape), and on success its sha256 and size are pinned and `verified` set.
A failure leaves the entry as it was and is reported. Entries of unknown format are
skipped. The index is rewritten atomically; nothing else is kept (the Hub cache aside).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

from cope_tui.sources import hub_download
from cope_tui.sources.resolve import resolve_model
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, read_text
from engine.traces.registry import FORMATS, detect_format, load_any_trace

UNVERIFIED_NOTE = "Format and checksum unverified until the first real download."


@dataclass(frozen=True)
class EntryCheck:
    repo_id: str
    outcome: str  # "verified", "failed", "skipped"
    detail: str


def shipped_index_path() -> Path:
    """The index shipped in the `assets` package (where a maintainer's checkout keeps it)."""
    return Path(str(resources.files("assets").joinpath("trace_index.json")))


def _pick_file(entry: dict) -> str:
    if entry.get("files"):
        return entry["files"][0]
    names = hub_download.list_files(entry["repo_id"], entry.get("repo_type", "dataset"), None)
    pattern = entry.get("pattern")
    readable = tuple(f for f in FORMATS if f.name == entry["format"])
    names = sorted(n for n in names if (pattern is None or fnmatch.fnmatch(n, pattern))
                   and any(f.claims(n) for f in readable))
    if not names:
        raise CopeInputError(f"no file matches {pattern or 'the format'} {entry['format']}", path=entry["repo_id"])
    return names[0]


def _stand_in(entry: dict):
    """The card's shape as a model, for entries that map to no catalog model."""
    shape = entry.get("shape") or {}
    layers = int(shape.get("layers") or 1)
    return SimpleNamespace(id=entry.get("model_in_card") or entry["repo_id"], moe_blocks=tuple(range(layers)),
                           n_routed_experts=int(shape["experts"]), top_k=int(shape["top_k"]))


def _parse(local: str, entry: dict):
    if entry.get("model"):
        return load_any_trace(local, model=resolve_model(entry["model"]))
    return detect_format(local, format=entry["format"]).read(local, model=_stand_in(entry))


def _verify_entry(entry: dict, today: str, log, cancel: threading.Event | None) -> EntryCheck:
    repo_id = entry["repo_id"]
    if entry.get("format") not in {f.name for f in FORMATS}:
        return EntryCheck(repo_id, "skipped", f"format {entry.get('format')!r} is not one COPE reads")
    try:
        filename = _pick_file(entry)
        log(f"verifying {repo_id}/{filename}")
        local, _ = hub_download.download(repo_id, filename, entry.get("repo_type", "dataset"), None, cancel=cancel)
        digest = hub_download.sha256_file(local)
        blob = Path(os.path.realpath(local)).name
        if len(blob) == 64 and blob != digest:  # the Hub's LFS checksum (the blob's name) disagrees
            hub_download.forget_download(local)
            raise CopeInputError(f"the download is damaged: sha256 {digest[:12]}... but the Hub says {blob[:12]}...",
                                 path=f"{repo_id}/{filename}")
        size = os.path.getsize(local)
        trace = _parse(local, entry)
    except CopeInputError as exc:
        return EntryCheck(repo_id, "failed", str(exc).replace(str(Path.home()), "~"))
    entry["files"] = [filename]
    entry["sha256"] = {filename: digest}
    entry["size_bytes"] = {filename: size}
    entry["verified"] = True
    found = (f"Verified {today}: {filename} ({size:,} bytes) parsed as {entry['format']}, "
             f"{trace.n_tokens:,} tokens x {trace.n_layers} layers, top-{trace.top_k}.")
    note = entry.get("note", "")
    entry["note"] = note.replace(UNVERIFIED_NOTE, found) if UNVERIFIED_NOTE in note else f"{note} {found}".strip()
    return EntryCheck(repo_id, "verified", f"{filename}: sha256 {digest}, {size:,} bytes")


def verify_index(path: str | os.PathLike | None = None, *, log=None, cancel: threading.Event | None = None,
                 today: str | None = None) -> list[EntryCheck]:
    """Verify every readable entry of the index at `path` (default: the shipped one) and rewrite it atomically."""
    say = log or (lambda message: None)
    target = Path(path) if path is not None else shipped_index_path()
    try:
        doc = json.loads(read_text(target, what="trace index"))
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg}", path=str(target), line=exc.lineno) from None
    if not isinstance(doc, dict) or doc.get("format") != "cope-trace-index":
        raise CopeInputError("not a COPE trace index (format cope-trace-index)", path=str(target))
    day = today or dt.datetime.now(dt.timezone.utc).date().isoformat()
    checks = [_verify_entry(entry, day, say, cancel) for entry in doc["entries"]]
    atomic_write_text(target, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return checks
