"""Imatrix files on the Hugging Face Hub: the companion index (assets/imatrix_index.json),
the imatrix files a GGUF repo holds (the Hub's file listing), and downloading one.

The download goes through huggingface_hub (cope_tui/sources/hub_download.py: its cache,
resume, offline mode, token; the cache checks each blob's hash), then the file is read
(cope_tui/sources/imatrix.py), so a legacy file without per-expert counts is refused
right away with the reason, naming REPO/FILE. `cope advise --profile-trace` takes the
local path printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from cope_tui.sources import hub_download
from cope_tui.sources.hub_download import list_files
from cope_tui.sources.imatrix import read_imatrix
from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.traces.imatrix import ImatrixCounts

INDEX_FILE = "imatrix_index.json"
SUFFIXES = (".gguf", ".dat", ".imatrix")


@dataclass(frozen=True)
class ImatrixEntry:
    model: str  # catalog id
    repo_id: str
    repo_type: str
    file: str | None
    has_expert_counts: bool | None  # None until the file is read
    verified: bool
    seen_at: str  # the page it was seen on
    note: str


def load_imatrix_index() -> tuple[ImatrixEntry, ...]:
    doc = load_asset_json(INDEX_FILE)
    return tuple(ImatrixEntry(e["model"], e["repo_id"], e["repo_type"], e.get("file"), e.get("has_expert_counts"),
                              bool(e.get("verified", False)), e["seen_at"], e.get("note", ""))
                 for e in doc["entries"])


def imatrix_entries_for(model_id: str) -> tuple[ImatrixEntry, ...]:
    return tuple(e for e in load_imatrix_index() if e.model == model_id)


def is_imatrix_name(filename: str) -> bool:
    """A file a quantizer publishes as an imatrix: `imatrix` in its name (any case), ending
    in .gguf, .dat or .imatrix (llama-imatrix's default output is imatrix.gguf)."""
    name = PurePosixPath(filename).name.lower()
    return name.endswith(SUFFIXES) and "imatrix" in name


def list_imatrix_files(repo_id: str, *, repo_type: str = "model", revision: str | None = None) -> list[str]:
    """The imatrix files of a Hub repo, from its file listing; CopeInputError when the repo
    cannot be listed (offline: one line saying so) or holds none."""
    names = [n for n in list_files(repo_id, repo_type, revision) if is_imatrix_name(n)]
    if not names:
        raise CopeInputError("no imatrix file in the repo (no name with 'imatrix' ending in .gguf, .dat or .imatrix)",
                             path=repo_id)
    return sorted(names)


def pull_imatrix(repo_id: str, filename: str, *, repo_type: str = "model",
                 revision: str | None = None, log=None) -> tuple[str, ImatrixCounts]:  # type: ignore[no-untyped-def]
    """(local path, counts) of REPO/FILE, downloaded through the Hub cache and read."""
    where = f"{repo_id}/{filename}"
    size = hub_download.file_size(repo_id, filename, repo_type, revision)
    if log is not None:
        log(f"downloading {where}" + (f" ({size:,} bytes)" if size is not None else ""))
    local, _ = hub_download.download(repo_id, filename, repo_type, revision)
    try:
        counts = read_imatrix(local)
    except CopeInputError as exc:
        raise exc.relabelled(where) from None
    return local, counts


__all__ = ["ImatrixEntry", "imatrix_entries_for", "is_imatrix_name", "list_imatrix_files", "load_imatrix_index",
           "pull_imatrix"]
