"""Published routing traces on the Hugging Face Hub (`cope trace pull`).

- `load_index()`: the curated index shipped as `assets/trace_index.json` (which trace
  repos exist, their format, shape, files, size and checksum, and the catalog model
  they fit); `entries_for(model)` the entries COPE can pull for a model, each with how
  it relates to it (recorded from it, or only of the same shape); `entry_label` the
  words the CLI and the app show beside one ("unverified" until a real download).
- `plan_pull(...)`: which file a pull would download and how large it is, before any
  byte is fetched.
- `pull_trace("org/name[/FILE]", model=..., sha256=...)`: downloads one file with
  `hf_hub_download` (dataset repos by default; the Hub's cache, offline mode and token
  handling apply; progress reported and cancellable through `cope_tui/sources/
  hub_download.py`), checks its sha256 against --sha256 or the index (and against the
  Hub's own LFS checksum, the ETag, when it is one), refuses a mismatch and deletes the
  download, converts it with `load_any_trace` (any format engine/traces reads) and
  writes COPE's format atomically to `pulled_trace_path(...)` in the trace cache
  (engine/core/cache_dirs.py), where `cope advise` finds it.

A failed, refused or cancelled download leaves no file in COPE's cache and none in the
Hub's cache that a later call would trust. Every failure is one CopeInputError naming
repo/file. huggingface_hub is imported only when something is downloaded.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from cope_tui.sources import hub_download
from cope_tui.sources.resolve import resolve_model
from engine.core.assets_io import load_asset_json
from engine.core.cache_dirs import pulled_trace_path, safe_name
from engine.core.errors import CopeInputError
from engine.core.progress import Progress
from engine.traces.cope_npz import save_trace
from engine.traces.registry import FORMATS, format_for_suffix, load_any_trace
from engine.traces.trace import RoutingTrace

INDEX_ASSET = "trace_index.json"
CONVERTIBLE = tuple(f.name for f in FORMATS)
NOT_YET = {"unknown": "unknown-format"}  # index formats COPE cannot read (the card does not say the file format)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
SAME_SHAPE = "routing of {other}, same shape \u2014 not this model's routing"


# --- the index -------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexEntry:
    repo_id: str
    repo_type: str
    format: str
    model: str | None = None
    model_in_card: str | None = None
    shape_fits: tuple[str, ...] = ()
    files: tuple[str, ...] | None = None
    pattern: str | None = None
    sha256: str | dict | None = None
    verified: bool = False
    note: str = ""
    size_bytes: int | dict | None = None

    def checksum_for(self, filename: str) -> str | None:
        return self._per_file(self.sha256, filename)

    def size_for(self, filename: str) -> int | None:
        size = self._per_file(self.size_bytes, filename)
        return int(size) if size is not None else None

    def _per_file(self, value, filename: str):
        if isinstance(value, dict):
            return value.get(filename)
        if value is not None and self.files is not None and len(self.files) == 1 and self.files[0] == filename:
            return value
        return None

    @property
    def readable(self) -> bool:
        """Whether COPE reads this entry's format (only those are offered to pull)."""
        return self.format in CONVERTIBLE


@dataclass(frozen=True)
class IndexMatch:
    """An index entry offered for a model: its own routing (exact) or another model's of the same shape."""

    entry: IndexEntry
    exact: bool


def _entry(e: dict) -> IndexEntry:
    return IndexEntry(
        repo_id=e["repo_id"],
        repo_type=e.get("repo_type", "dataset"),
        format=e.get("format", "unknown"),
        model=e.get("model"),
        model_in_card=e.get("model_in_card"),
        shape_fits=tuple(e.get("shape_fits") or ()),
        files=tuple(e["files"]) if e.get("files") else None,
        pattern=e.get("pattern"),
        sha256=e.get("sha256"),
        verified=bool(e.get("verified", False)),
        note=e.get("note", ""),
        size_bytes=e.get("size_bytes"),
    )


def load_index() -> tuple[IndexEntry, ...]:
    return tuple(_entry(e) for e in load_asset_json(INDEX_ASSET)["entries"])


def index_entry(repo_id: str) -> IndexEntry | None:
    for e in load_index():
        if e.repo_id.lower() == repo_id.lower():
            return e
    return None


def entries_for(model_id: str) -> tuple[IndexMatch, ...]:
    """The entries COPE can pull for `model_id`: its own routing first, then same-shape routing of other models."""
    entries = [e for e in load_index() if e.readable]
    exact = [IndexMatch(e, True) for e in entries if e.model == model_id]
    shaped = [IndexMatch(e, False) for e in entries if e.model != model_id and model_id in e.shape_fits]
    return tuple(exact + shaped)


def entries_for_model(model_id: str) -> tuple[list[IndexEntry], list[IndexEntry]]:
    """(entries recorded from exactly this model, entries that only share its shape); pullable ones only."""
    matches = entries_for(model_id)
    return [m.entry for m in matches if m.exact], [m.entry for m in matches if not m.exact]


def same_shape_words(match: IndexMatch) -> str | None:
    """For routing of another model with the same shape: the words that say so (None for the model's own)."""
    e = match.entry
    return None if match.exact else SAME_SHAPE.format(other=e.model or e.model_in_card or "another model")


def entry_label(match: IndexMatch) -> str:
    """How the CLI and the app name an offered entry: repo, whose routing it is, "unverified" until downloaded."""
    e = match.entry
    words = [e.repo_id]
    if not match.exact:
        words.append(f"({same_shape_words(match)})")
    if not e.verified:
        words.append("unverified")
    return " ".join(words)


def pull_command(entry: IndexEntry, model_id: str) -> str:
    return f"cope trace pull {entry.repo_id} --model {model_id}"


# --- pull ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PullResult:
    path: Path
    trace: RoutingTrace
    repo_id: str
    filename: str
    sha256: str
    checked_against: str | None  # "--sha256", "the index", or None (not checked)


def split_spec(spec: str) -> tuple[str, str | None]:
    """"org/name" or "org/name/path/to/file" -> (repo id, file or None)."""
    parts = [p for p in spec.strip().split("/") if p]
    if len(parts) < 2 or spec.strip().startswith(("/", ".")):
        raise CopeInputError("expected a Hugging Face repo id org/name, optionally followed by /FILE", path=spec)
    if any(p in (".", "..") for p in parts):  # huggingface_hub refuses these deep inside, with a ValueError
        raise CopeInputError("a repo id and file name cannot hold a '.' or '..' segment", path=spec)
    return "/".join(parts[:2]), ("/".join(parts[2:]) or None)


def format_of(filename: str) -> str | None:
    """The format a file's name selects (a registered reader's name), or None."""
    readable = format_for_suffix(filename)
    return readable.name if readable is not None else None


def _readable_names() -> str:
    return ", ".join(f.label for f in FORMATS)


def _unsupported(repo_id: str, filename: str | None, fmt: str) -> CopeInputError:
    where = f"{repo_id}/{filename}" if filename else repo_id
    return CopeInputError(
        f"COPE cannot convert this dataset's traces (format {fmt}: the dataset card does not say how its files are "
        f"laid out); it reads {_readable_names()}: convert the data to one of those and pass it to --trace",
        path=where)


def _check_sha(text: str) -> str:
    hexdigest = text.strip().lower()
    if not _HEX64.match(hexdigest):
        raise CopeInputError(f"--sha256 must be 64 hex digits, got {text!r}")
    return hexdigest


@dataclass(frozen=True)
class PullPlan:
    """What a pull will download, known before any byte of it is fetched."""

    repo_id: str
    repo_type: str
    filename: str
    revision: str | None
    size_bytes: int | None  # None when neither the index nor the Hub states it
    entry: IndexEntry | None

    @property
    def where(self) -> str:
        return f"{self.repo_id}/{self.filename}"

    def describe(self) -> str:
        size = "size unknown" if self.size_bytes is None else _human_bytes(self.size_bytes)
        return f"{self.where} ({size})"


def _human_bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# A Hub revision: a branch, a tag, a commit or refs/pr/N, as git spells refs (git
# check-ref-format): no "..", no leading or trailing "/", no space, control or ~^:?*[\ character.
_REVISION_RE = re.compile(r"^(?!/)(?!.*\.\.)(?!.*//)[^\x00-\x20\x7f~^:?*\[\\]{1,255}(?<![/.])$")


def check_revision(revision: str | None) -> None:
    """CopeInputError naming --revision for what is no branch, tag or commit."""
    if revision is not None and not _REVISION_RE.match(revision):
        raise CopeInputError(f"--revision {revision!r}: not a branch, tag or commit name (names hold no '..', "
                             "no leading or trailing '/', no spaces and none of ~^:?*[\\)")


def plan_pull(spec: str, *, repo_type: str = "dataset", revision: str | None = None,
              ask_hub_size: bool = True) -> PullPlan:
    """The file a pull of `spec` downloads and its size (the index's, else the Hub's), without downloading it."""
    check_revision(revision)  # huggingface_hub would answer '../..' with a ValueError deep inside
    repo_id, filename = split_spec(spec)
    entry = index_entry(repo_id)
    if entry is not None and entry.repo_type != repo_type and repo_type == "dataset":
        repo_type = entry.repo_type
    if filename is None:
        filename = _choose_file(repo_id, entry, repo_type, revision)
    if format_of(filename) is None and entry is not None and entry.format in NOT_YET:
        raise _unsupported(repo_id, filename, entry.format)
    size = entry.size_for(filename) if entry is not None else None
    if size is None and ask_hub_size:
        size = hub_download.file_size(repo_id, filename, repo_type, revision)
    return PullPlan(repo_id=repo_id, repo_type=repo_type, filename=filename, revision=revision, size_bytes=size,
                    entry=entry)


def pull_trace(spec: str, *, model: str | None = None, sha256: str | None = None, out: str | os.PathLike | None = None,
               repo_type: str = "dataset", revision: str | None = None, log=None, plan: PullPlan | None = None,
               progress: Progress | None = None, cancel: threading.Event | None = None) -> PullResult:
    """Download, check and convert one published trace (see the module doc); `cancel` stops it mid-download."""
    say = log or (lambda message: None)
    expected = _check_sha(sha256) if sha256 is not None else None
    plan = plan or plan_pull(spec, repo_type=repo_type, revision=revision, ask_hub_size=False)
    repo_id, filename, entry, where = plan.repo_id, plan.filename, plan.entry, plan.where
    fmt = format_of(filename)

    checked_against = None
    if expected is not None:
        checked_against = "--sha256"
    elif entry is not None and entry.checksum_for(filename):
        expected, checked_against = _check_sha(entry.checksum_for(filename)), "the index"

    spec_model = _model_for(model, entry, fmt, where)
    say(f"downloading {plan.describe()} from {plan.repo_type} {repo_id}")
    local, commit = hub_download.download(repo_id, filename, plan.repo_type, plan.revision,
                                          progress=progress, cancel=cancel)
    digest = hub_download.sha256_file(local)
    blob_sha = Path(os.path.realpath(local)).name
    if _HEX64.match(blob_sha) and blob_sha != digest:
        hub_download.forget_download(local)
        raise CopeInputError(f"the download is damaged: its sha256 {digest[:12]}... differs from the Hub's "
                             f"{blob_sha[:12]}...; deleted it, try again", path=where)
    if expected is not None and digest != expected:
        hub_download.forget_download(local)
        raise CopeInputError(f"checksum mismatch: sha256 {digest} but {checked_against} says {expected}; "
                             "refused and deleted the download", path=where)

    trace = _convert(local, where, spec_model)
    source = f"hf://{'datasets/' if plan.repo_type == 'dataset' else ''}{repo_id}/{filename}" + (
        f"@{commit}" if commit else "")
    check = f"checked against {checked_against}" if checked_against else "not checked: no checksum known"
    notes = (f"pulled from the Hugging Face Hub: {source}, sha256 {digest} ({check})",)
    if spec_model is not None and entry is not None and entry.model and entry.model != spec_model.id:
        # Filed under the model it stands in for (so advise finds it), but said whose routing it is.
        notes += (f"routing of {entry.model}, same shape as {spec_model.id}: a stand-in, not this model's routing",)
    meta = dataclasses.replace(
        trace.meta,
        model=spec_model.id if spec_model is not None else trace.meta.model,
        source=source,
        origin="published",
        notes=trace.meta.notes + notes,
    )
    trace = dataclasses.replace(trace, meta=meta)

    target = Path(out) if out is not None else pulled_trace_path(meta.model or safe_name(repo_id), repo_id, filename)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(target.parent)) from None
    save_trace(trace, target)
    return PullResult(path=target, trace=trace, repo_id=repo_id, filename=filename, sha256=digest,
                      checked_against=checked_against)


def _model_for(model: str | None, entry: IndexEntry | None, fmt: str | None, where: str):
    model_id = model or (entry.model if entry is not None else None)
    if model_id is not None:
        return resolve_model(model_id)
    if fmt == "cope-npz":
        return None  # COPE's own format names its model
    hint = ""
    if entry is not None and entry.model_in_card:
        hint = f" (the dataset card names {entry.model_in_card})"
    raise CopeInputError(f"say which model the trace is from with --model ID{hint}: the index maps this repo "
                         "to no catalog model, and this trace format does not name its model", path=where)


def _choose_file(repo_id: str, entry: IndexEntry | None, repo_type: str, revision: str | None) -> str:
    if entry is not None and entry.files is not None and len(entry.files) == 1:
        return entry.files[0]
    if entry is not None and entry.format in NOT_YET:
        raise _unsupported(repo_id, None, entry.format)
    names = hub_download.list_files(repo_id, repo_type, revision)
    if entry is not None and entry.files:
        names = [n for n in names if n in entry.files]
    if entry is not None and entry.pattern:
        names = [n for n in names if fnmatch.fnmatch(n, entry.pattern)]
    usable = [n for n in names if format_of(n) in CONVERTIBLE]
    own = [n for n in usable if format_of(n) == "cope-npz"]
    if len(own) == 1:
        return own[0]  # what `cope trace push` wrote: COPE's own file beside its CSV copy
    if len(usable) == 1:
        return usable[0]
    if len(usable) > 1:
        shown = ", ".join(usable[:8]) + (f" and {len(usable) - 8} more" if len(usable) > 8 else "")
        raise CopeInputError(f"holds {len(usable)} trace files ({shown}); name one: cope trace pull "
                             f"{repo_id}/FILE", path=repo_id)
    raise CopeInputError(f"holds no trace file COPE reads ({_readable_names()})", path=repo_id)


def _convert(local: str, where: str, model) -> RoutingTrace:
    """COPE's trace from the downloaded file; errors name repo/file (and the line)."""
    try:
        # Without a model only a .npz gets here (pull_trace refuses the rest): read as COPE's own.
        return load_any_trace(local, model=model, format=None if model is not None else "cope-npz")
    except CopeInputError as exc:
        raise CopeInputError(exc.message.replace(local, where), path=where, line=exc.line) from None
