"""Published routing traces on the Hugging Face Hub (`cope trace pull`).

- `load_index()`: the curated index shipped as `assets/trace_index.json` (which trace
  repos exist, their format, shape and checksum, and the catalog model they fit).
- `pull_trace("org/name[/FILE]", model=..., sha256=...)`: downloads one file with
  `hf_hub_download` (dataset repos by default; the Hub's cache, offline mode and token
  handling apply), checks its sha256 against --sha256 or the index (and against the
  Hub's own LFS checksum, the ETag, when it is one), refuses a mismatch and deletes the
  download, converts it with `load_any_trace` (any format engine/traces reads) and
  writes COPE's format atomically to `pulled_trace_path(...)` in the trace cache
  (engine/cache_dirs.py), where `cope advise` finds it.

A failed or refused download leaves no file in COPE's cache and none in the Hub's cache
that a later call would trust. Every failure is one CopeInputError naming repo/file.
huggingface_hub is imported only when something is downloaded.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from engine.assets_io import load_asset_json
from engine.cache_dirs import pulled_trace_path, safe_name
from engine.errors import CopeInputError
from engine.trace import RoutingTrace
from engine.traces.registry import FORMATS, format_for_suffix

INDEX_ASSET = "trace_index.json"
CONVERTIBLE = tuple(f.name for f in FORMATS)
NOT_YET = {"flame-parquet": "parquet", "commitmoe-safetensors": "safetensors", "parquet": "parquet",
           "safetensors": "safetensors"}
_NOT_YET_SUFFIX = ((".parquet", "parquet"), (".safetensors", "safetensors"))
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


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

    def checksum_for(self, filename: str) -> str | None:
        if isinstance(self.sha256, dict):
            return self.sha256.get(filename)
        if isinstance(self.sha256, str) and self.files is not None and len(self.files) == 1 \
                and self.files[0] == filename:
            return self.sha256
        return None


def load_index() -> tuple[IndexEntry, ...]:
    doc = load_asset_json(INDEX_ASSET)
    out = []
    for e in doc["entries"]:
        out.append(IndexEntry(
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
        ))
    return tuple(out)


def index_entry(repo_id: str) -> IndexEntry | None:
    for e in load_index():
        if e.repo_id.lower() == repo_id.lower():
            return e
    return None


def entries_for_model(model_id: str) -> tuple[list[IndexEntry], list[IndexEntry]]:
    """(entries recorded from exactly this model, entries that only share its shape)."""
    exact = [e for e in load_index() if e.model == model_id]
    shaped = [e for e in load_index() if e.model != model_id and model_id in e.shape_fits]
    return exact, shaped


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
    return "/".join(parts[:2]), ("/".join(parts[2:]) or None)


def format_of(filename: str) -> str | None:
    """The format a file's name selects: a registered reader's name, a known one COPE cannot read yet, or None."""
    readable = format_for_suffix(filename)
    if readable is not None:
        return readable.name
    low = filename.lower()
    for suffix, fmt in _NOT_YET_SUFFIX:
        if low.endswith(suffix):
            return fmt
    return None


def _unsupported(repo_id: str, filename: str | None, fmt: str) -> CopeInputError:
    kind = NOT_YET.get(fmt, fmt)
    where = f"{repo_id}/{filename}" if filename else repo_id
    return CopeInputError(
        f"COPE cannot convert {kind} traces yet (format {fmt}); it converts COPE .cope.npz, llama-moe-trace "
        ".csv and generic .jsonl files: convert the data to one of those and pass it to --trace", path=where)


def _check_sha(text: str) -> str:
    hexdigest = text.strip().lower()
    if not _HEX64.match(hexdigest):
        raise CopeInputError(f"--sha256 must be 64 hex digits, got {text!r}")
    return hexdigest


def pull_trace(spec: str, *, model: str | None = None, sha256: str | None = None, out: str | os.PathLike | None = None,
               repo_type: str = "dataset", revision: str | None = None, log=None) -> PullResult:
    say = log or (lambda message: None)
    repo_id, filename = split_spec(spec)
    entry = index_entry(repo_id)
    expected = _check_sha(sha256) if sha256 is not None else None
    if entry is not None and entry.repo_type != repo_type and repo_type == "dataset":
        repo_type = entry.repo_type

    if filename is None:
        filename = _choose_file(repo_id, entry, repo_type, revision)
    where = f"{repo_id}/{filename}"
    fmt = format_of(filename)
    if fmt in NOT_YET:
        raise _unsupported(repo_id, filename, fmt)
    if fmt is None and entry is not None and entry.format in NOT_YET:
        raise _unsupported(repo_id, filename, entry.format)

    checked_against = None
    if expected is not None:
        checked_against = "--sha256"
    elif entry is not None and entry.checksum_for(filename):
        expected, checked_against = _check_sha(entry.checksum_for(filename)), "the index"

    spec_model = None
    model_id = model or (entry.model if entry is not None else None)
    if model_id is not None:
        from cope_tui.sources.resolve import resolve_model  # noqa: PLC0415

        spec_model = resolve_model(model_id)
    elif fmt != "cope-npz":
        hint = ""
        if entry is not None and entry.model_in_card:
            hint = f" (the dataset card names {entry.model_in_card})"
        raise CopeInputError(f"say which model the trace is from with --model ID{hint}: the index maps this repo "
                             "to no catalog model, and a CSV or JSONL trace does not name its model", path=where)

    say(f"downloading {filename} from {repo_type} {repo_id}")
    local, commit = _download(repo_id, filename, repo_type, revision)
    digest = _sha256_file(local)
    blob_sha = Path(os.path.realpath(local)).name
    if _HEX64.match(blob_sha) and blob_sha != digest:
        _forget_download(local)
        raise CopeInputError(f"the download is damaged: its sha256 {digest[:12]}... differs from the Hub's "
                             f"{blob_sha[:12]}...; deleted it, try again", path=where)
    if expected is not None and digest != expected:
        _forget_download(local)
        raise CopeInputError(f"checksum mismatch: sha256 {digest} but {checked_against} says {expected}; "
                             "refused and deleted the download", path=where)

    trace = _convert(local, where, spec_model)
    source = f"hf://{'datasets/' if repo_type == 'dataset' else ''}{repo_id}/{filename}" + (
        f"@{commit}" if commit else "")
    check = f"checked against {checked_against}" if checked_against else "not checked: no checksum known"
    meta = dataclasses.replace(
        trace.meta,
        model=spec_model.id if spec_model is not None else trace.meta.model,
        source=source,
        origin="published",
        notes=trace.meta.notes + (f"pulled from the Hugging Face Hub: {source}, sha256 {digest} ({check})",),
    )
    trace = dataclasses.replace(trace, meta=meta)

    from engine.traces.cope_npz import save_trace  # noqa: PLC0415

    target = Path(out) if out is not None else pulled_trace_path(meta.model or safe_name(repo_id), repo_id, filename)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(target.parent)) from None
    save_trace(trace, target)
    return PullResult(path=target, trace=trace, repo_id=repo_id, filename=filename, sha256=digest,
                      checked_against=checked_against)


def _choose_file(repo_id: str, entry: IndexEntry | None, repo_type: str, revision: str | None) -> str:
    if entry is not None and entry.files is not None and len(entry.files) == 1:
        return entry.files[0]
    if entry is not None and entry.format in NOT_YET:
        raise _unsupported(repo_id, None, entry.format)
    names = _list_files(repo_id, repo_type, revision)
    if entry is not None and entry.files:
        names = [n for n in names if n in entry.files]
    if entry is not None and entry.pattern:
        names = [n for n in names if fnmatch.fnmatch(n, entry.pattern)]
    usable = [n for n in names if format_of(n) in CONVERTIBLE]
    if len(usable) == 1:
        return usable[0]
    if len(usable) > 1:
        shown = ", ".join(usable[:8]) + (f" and {len(usable) - 8} more" if len(usable) > 8 else "")
        raise CopeInputError(f"holds {len(usable)} trace files ({shown}); name one: cope trace pull "
                             f"{repo_id}/FILE", path=repo_id)
    other = sorted({format_of(n) for n in names if format_of(n) in NOT_YET})
    if other:
        raise _unsupported(repo_id, None, other[0])
    raise CopeInputError("holds no trace file COPE reads (.cope.npz, .csv, .jsonl)", path=repo_id)


def _endpoint() -> str:
    from cope_tui.sources.hub_model import _endpoint as endpoint  # noqa: PLC0415

    return endpoint()


def _list_files(repo_id: str, repo_type: str, revision: str | None) -> list[str]:
    from huggingface_hub import HfApi  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    from cope_tui.sources.hub_model import _hub_error, _short  # noqa: PLC0415

    from cope_tui.sources.hub_model import _offline, not_reached  # noqa: PLC0415
    from cope_tui.sources.hub_net import unreachable  # noqa: PLC0415

    endpoint = _endpoint()
    away = None if _offline() else unreachable(endpoint)
    if away is not None:
        raise not_reached(endpoint, away, "its file list cannot be read (name a file: REPO/FILE)", repo_id)
    try:
        return list(HfApi(endpoint=endpoint).list_repo_files(repo_id, repo_type=repo_type, revision=revision))
    except hf.HFValidationError as exc:
        raise CopeInputError(f"not a valid Hugging Face repo id: {_short(exc)}", path=repo_id) from None
    except Exception as exc:  # noqa: BLE001 - any client or network failure: one line
        error = _hub_error(exc, repo_id, "(file list)", endpoint)
        raise CopeInputError(_strip_where(error, f"{repo_id}/(file list)") +
                             " (cannot list the repo's files; name one: REPO/FILE)", path=repo_id) from None


def _strip_where(error: CopeInputError, where: str) -> str:
    text = str(error)
    return text[len(where) + 2:] if text.startswith(where + ": ") else text


def _download(repo_id: str, filename: str, repo_type: str, revision: str | None) -> tuple[str, str | None]:
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    from cope_tui.sources.hub_model import _hub_error, _short  # noqa: PLC0415

    from cope_tui.sources.hub_model import _offline, not_reached  # noqa: PLC0415
    from cope_tui.sources.hub_net import unreachable  # noqa: PLC0415

    endpoint = _endpoint()
    where = f"{repo_id}/{filename}"
    away = None if _offline() else unreachable(endpoint)  # no Hub: the cache, without retries
    try:
        local = hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision, endpoint=endpoint,
                                local_files_only=away is not None)
    except hf.LocalEntryNotFoundError if away is not None else () as exc:  # type: ignore[misc]
        raise not_reached(endpoint, away, f"{filename} is not in the Hub cache", where) from None
    except hf.HFValidationError as exc:
        _remove_incomplete(repo_id, repo_type)
        raise CopeInputError(f"not a valid Hugging Face repo id or file name: {_short(exc)}", path=where) from None
    except (hf.HfHubHTTPError, hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as exc:
        _remove_incomplete(repo_id, repo_type)
        raise _hub_error(exc, repo_id, filename, endpoint) from None
    except Exception as exc:  # noqa: BLE001 - a dropped connection, a short body, a disk error: one line
        _remove_incomplete(repo_id, repo_type)
        raise CopeInputError(f"download from the Hub at {endpoint} failed: {_short(exc)}; nothing was kept, "
                             "try again", path=where) from None
    snapshot = Path(local)
    for _ in Path(filename).parts:
        snapshot = snapshot.parent
    commit = snapshot.name if re.match(r"^[0-9a-f]{40}$", snapshot.name) else None
    return local, commit


def _repo_cache(repo_id: str, repo_type: str) -> Path:
    from huggingface_hub import constants  # noqa: PLC0415

    return Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}"


def _remove_incomplete(repo_id: str, repo_type: str) -> None:
    """Drop the client's partial downloads of this repo, so nothing half-written stays behind."""
    blobs = _repo_cache(repo_id, repo_type) / "blobs"
    try:
        for p in blobs.glob("*.incomplete"):
            _unlink(p)
    except OSError:
        pass


def _forget_download(local: str) -> None:
    """Delete a refused download from the Hub cache: the snapshot entry and its blob."""
    blob = os.path.realpath(local)
    _unlink(Path(local))
    if blob != os.path.abspath(local):
        _unlink(Path(blob))


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _convert(local: str, where: str, model) -> RoutingTrace:
    """COPE's trace from the downloaded file; errors name repo/file (and the line)."""
    from engine.traces.registry import load_any_trace  # noqa: PLC0415

    try:
        # Without a model only a .npz gets here (pull_trace refuses the rest): read as COPE's own.
        return load_any_trace(local, model=model, format=None if model is not None else "cope-npz")
    except CopeInputError as exc:
        raise CopeInputError(exc.message.replace(local, where), path=where, line=exc.line) from None
