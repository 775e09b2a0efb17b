"""Imatrix files on the Hugging Face Hub: the companion index (assets/imatrix_index.json,
its schema in engine/traces/imatrix_index.py), the imatrix files a GGUF repo holds (the
Hub's file listing), and downloading one.

The download goes through huggingface_hub (cope_tui/sources/hub_download.py: its cache,
resume, offline mode, token; the cache checks each blob's hash), then the file is read
(cope_tui/sources/imatrix.py, through the cache of readings), so a legacy file without
per-expert counts is refused right away with the reason, naming REPO/FILE. Either way the
download is recorded in the user's record (engine/traces/imatrix_verified.py) with its
sha256, which marks the index entry verified. `cope advise --profile-trace` takes the
local path printed.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from cope_tui.sources import hub_download
from cope_tui.sources.hub_download import list_files, sha256_file
from cope_tui.sources.imatrix import load_imatrix
from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.core.progress import Progress
from engine.traces.imatrix import ImatrixCounts, NoExpertCounts
from engine.traces.imatrix_index import FORMAT_WORDS, ImatrixEntry, parse_index
from engine.traces.imatrix_verified import VerifiedFile, load_verified, now_utc, record_download, record_key

INDEX_FILE = "imatrix_index.json"
# unsloth's repos hold `imatrix_unsloth.gguf_file` (a discussion on unsloth/gemma-4-12B-it-qat-GGUF is titled by it).
SUFFIXES = (".gguf", ".dat", ".imatrix", ".gguf_file")
IMAT_WORD = re.compile(r"(?:^|[^a-z])imat(?:[^a-z]|$)")
# A quantization type in a .gguf name (Q4_K_M, Q8_0, IQ3_XXS, ...): the file is a model. F16/BF16 are
# not among them: imatrix files are named after the F16 model they were computed on.
QUANT_WORD = re.compile(r"(?:^|[^a-z0-9])i?q[1-8]_(?:[01]|k(?:_[sml]|_xl)?|xxs|xs|s|m|nl)(?:[^a-z0-9]|$)")
# More than any imatrix holds (DeepSeek-V3's, 256 experts x 58 layers of sums, is a little over 1 GB): a
# file this large is a model, refused before it is downloaded.
MAX_IMATRIX_BYTES = 8 * 1024**3


@dataclass(frozen=True)
class EntryState:
    """An index entry and what the user's record says of it."""

    entry: ImatrixEntry
    downloads: tuple[VerifiedFile, ...]  # the recorded downloads of this entry's file (or repo, without a file)

    @property
    def verified(self) -> bool:
        return bool(self.downloads)

    def words(self) -> str:
        """verified/unverified and what is known of the format, for a listing."""
        if not self.downloads:
            return f"unverified\t{FORMAT_WORDS[self.entry.format]}"
        d = self.downloads[0]
        counts = "per-expert counts" if d.has_expert_counts else "no per-expert counts (legacy)"
        return f"verified {d.verified_at[:10]} sha256 {d.sha256[:12]}\t{counts}"


def load_imatrix_index() -> tuple[ImatrixEntry, ...]:
    return parse_index(load_asset_json(INDEX_FILE), f"assets/{INDEX_FILE}")


def imatrix_entries_for(model_id: str) -> tuple[ImatrixEntry, ...]:
    return tuple(e for e in load_imatrix_index() if e.model == model_id)


def entry_states(model_id: str) -> tuple[EntryState, ...]:
    """The index entries of a model with the user's downloads of each: an entry with a file
    is verified by a download of that file, one without by any download from its repo."""
    records = list(load_verified().values())
    states = []
    for e in imatrix_entries_for(model_id):
        if e.file:
            mine = [r for r in records if r.key == record_key(e.repo_type, e.repo_id, e.file)]
        else:
            mine = [r for r in records if r.repo_type == e.repo_type and r.repo_id == e.repo_id]
        states.append(EntryState(e, tuple(mine)))
    return tuple(states)


def is_imatrix_name(filename: str) -> bool:
    """A file a quantizer publishes as an imatrix: `imatrix` in its name (any case), ending
    in .gguf, .dat, .imatrix or .gguf_file (llama-imatrix's default output is imatrix.gguf),
    or a .dat with the word `imat` (qwp4w3hyb's imat-f16-gmerged.dat; never a .gguf, where
    `-imat` names a model quantized with one)."""
    name = PurePosixPath(filename).name.lower()
    if not name.endswith(SUFFIXES):
        return False
    if name.endswith(".gguf") and QUANT_WORD.search(name):
        return False  # ggml-model-q4_0_imatrix.gguf: a model quantized with an imatrix, not one
    return "imatrix" in name or (name.endswith(".dat") and IMAT_WORD.search(name) is not None)


def list_imatrix_files(repo_id: str, *, repo_type: str = "model", revision: str | None = None) -> list[str]:
    """The imatrix files of a Hub repo, from its file listing; CopeInputError when the repo
    cannot be listed (offline: one line saying so) or holds none."""
    names = [n for n in list_files(repo_id, repo_type, revision) if is_imatrix_name(n)]
    if not names:
        raise CopeInputError("no imatrix file in the repo (no name with 'imatrix' ending in .gguf, .dat, .imatrix "
                             "or .gguf_file, nor an 'imat' .dat)", path=repo_id)
    return sorted(names)


def pull_imatrix(repo_id: str, filename: str, *, repo_type: str = "model", revision: str | None = None,
                 log=None, progress: Progress | None = None,  # type: ignore[no-untyped-def]
                 cancel: threading.Event | None = None) -> tuple[str, ImatrixCounts]:
    """(local path, counts) of REPO/FILE, downloaded through the Hub cache (resumed there
    when a download was cut), read, and recorded as verified with its sha256; a legacy file
    is recorded as having no per-expert counts, then refused with the reason."""
    where = f"{repo_id}/{filename}"
    size = hub_download.file_size(repo_id, filename, repo_type, revision)
    if size is not None and size > MAX_IMATRIX_BYTES:
        raise CopeInputError(f"is {size:,} bytes, more than any imatrix file ({MAX_IMATRIX_BYTES:,} at most): a model "
                             "file? not downloaded", path=where)
    if log is not None:
        log(f"downloading {where}" + (f" ({size:,} bytes)" if size is not None else ""))
    local, commit = hub_download.download(repo_id, filename, repo_type, revision, progress=progress, cancel=cancel)
    record = dict(repo_type=repo_type, repo_id=repo_id, file=filename, revision=commit, sha256=sha256_file(local),
                  size_bytes=os.stat(local).st_size, verified_at=now_utc())
    try:
        counts = load_imatrix(local)
    except NoExpertCounts as exc:  # a genuine imatrix, downloaded intact, without popularity
        record_download(VerifiedFile(**record, has_expert_counts=False, what="legacy: no per-expert counts"))
        raise exc.relabelled(where) from None
    except CopeInputError as exc:
        raise exc.relabelled(where) from None
    record_download(VerifiedFile(**record, has_expert_counts=True, what=describe_counts(counts)))
    return local, counts


def pull_entry_file(repo_id: str, filename: str | None, *, repo_type: str = "model",
                    progress: Progress | None = None, cancel: threading.Event | None = None) -> str:
    """The local path of an index entry's imatrix, downloaded and read; an entry without a
    file takes the repo's one imatrix file (several: one line naming them)."""
    if filename is None:
        names = list_imatrix_files(repo_id, repo_type=repo_type)
        if len(names) > 1:
            more = ", ..." if len(names) > 3 else ""
            raise CopeInputError(f"holds {len(names)} imatrix files ({', '.join(names[:3])}{more}): download one "
                                 f"with cope trace pull --imatrix {repo_id}/FILE and give its path", path=repo_id)
        filename = names[0]
    return pull_imatrix(repo_id, filename, repo_type=repo_type, progress=progress, cancel=cancel)[0]


def describe_counts(counts: ImatrixCounts) -> str:
    return f"{len(counts.moe_blocks)} MoE blocks x {counts.n_experts} experts ({counts.dataset_words()})"


__all__ = ["EntryState", "ImatrixEntry", "describe_counts", "entry_states", "imatrix_entries_for", "is_imatrix_name",
           "list_imatrix_files", "load_imatrix_index", "pull_entry_file", "pull_imatrix"]
