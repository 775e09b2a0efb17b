"""Downloading one file from the Hub for a trace pull: its size first, then the bytes, cancellable.

huggingface_hub does the transfer (its cache, offline mode, token, resume); COPE passes
it a progress-bar class whose `update` reports bytes and checks the cancel event, so a
pull stops mid-download by raising `engine.core.progress.Cancelled`. A failed, refused or
cancelled download leaves no partial file in the Hub cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path

from cope_tui.sources.hub_model import hub_endpoint, hub_error, hub_offline, not_reached, short_error
from cope_tui.sources.hub_net import unreachable
from cope_tui.sources.hub_policy import hub_call, progressed
from engine.core.errors import CopeInputError
from engine.core.progress import Cancelled, Progress


def endpoint() -> str:
    return hub_endpoint()


def _unreachable(where: str) -> str | None:
    """Why the Hub at `where` cannot be reached (None: it answers, or HF_HUB_OFFLINE asks for the cache only)."""
    return None if hub_offline() else unreachable(where)


def list_files(repo_id: str, repo_type: str, revision: str | None) -> list[str]:
    from huggingface_hub import HfApi  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    where = endpoint()
    away = _unreachable(where)
    if away is not None:
        raise not_reached(where, away, "its file list cannot be read (name a file: REPO/FILE)", repo_id)
    url = f"{where}/api/{repo_type}s/{repo_id}/tree/{revision or 'main'}"
    try:
        return hub_call(url, lambda: list(HfApi(endpoint=where).list_repo_files(repo_id, repo_type=repo_type,
                                                                                 revision=revision)), where=repo_id)
    except CopeInputError:
        raise
    except hf.HFValidationError as exc:
        raise CopeInputError(f"not a valid Hugging Face repo id: {short_error(exc)}", path=repo_id) from None
    except Exception as exc:  # noqa: BLE001 - any client or network failure: one line
        error = hub_error(exc, repo_id, "(file list)", where)
        raise CopeInputError(_strip_where(error, f"{repo_id}/(file list)") +
                             " (cannot list the repo's files; name one: REPO/FILE)", path=repo_id) from None


def _strip_where(error: CopeInputError, where: str) -> str:
    text = str(error)
    return text[len(where) + 2:] if text.startswith(where + ": ") else text


def file_size(repo_id: str, filename: str, repo_type: str, revision: str | None) -> int | None:
    """The file's size in bytes as the Hub states it (None when it does not say), without downloading it."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    where = endpoint()
    away = _unreachable(where)
    if away is not None:
        return None  # the size is unknown; the download itself says what is wrong
    url = resolve_url(where, repo_id, filename, repo_type, revision)
    try:
        info = hub_call(url, lambda: hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision,
                                                     endpoint=where, dry_run=True), where=f"{repo_id}/{filename}")
    except hf.HFValidationError as exc:
        raise CopeInputError(f"not a valid Hugging Face repo id or file name: {short_error(exc)}",
                             path=f"{repo_id}/{filename}") from None
    except (hf.HfHubHTTPError, hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as exc:
        raise hub_error(exc, repo_id, filename, where) from None
    return getattr(info, "file_size", None)


def _progress_class(progress: Progress | None, cancel: threading.Event | None, label: str):
    """A tqdm class for hf_hub_download that reports bytes and stops when `cancel` is set."""
    from huggingface_hub.utils import tqdm as hub_tqdm  # noqa: PLC0415

    class _Reporting(hub_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True  # the caller shows progress; nothing on the terminal
            super().__init__(*args, **kwargs)
            self._done = int(kwargs.get("initial") or 0)
            self._total = int(kwargs.get("total") or 0)

        def update(self, n=1):
            if cancel is not None and cancel.is_set():
                raise Cancelled
            self._done += int(n or 0)
            progressed()  # the download's stall clock (hub_policy)
            if progress is not None:
                progress(self._done, self._total, label)
            return super().update(n)

    return _Reporting


def download(repo_id: str, filename: str, repo_type: str, revision: str | None, *,
             progress: Progress | None = None, cancel: threading.Event | None = None) -> tuple[str, str | None]:
    """(local path, commit) of the downloaded file; CopeInputError naming repo/file, or Cancelled."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    where_hub = endpoint()
    where = f"{repo_id}/{filename}"
    if cancel is not None and cancel.is_set():
        raise Cancelled
    away = _unreachable(where_hub)  # no Hub: the cache, without the client's retries
    url = resolve_url(where_hub, repo_id, filename, repo_type, revision)
    try:
        # held to the deadline only while no byte arrives (hub_policy): a big trace takes its time
        local = hub_call(url, lambda: hf_hub_download(
            repo_id, filename, repo_type=repo_type, revision=revision, endpoint=where_hub,
            tqdm_class=_progress_class(progress, cancel, f"downloading {filename}"),
            local_files_only=away is not None), where=where, stall_only=True, raw=True, cancel=cancel,
            on_timeout=lambda: remove_incomplete(repo_id, repo_type))
    except hf.LocalEntryNotFoundError if away is not None else () as exc:  # type: ignore[misc]
        raise not_reached(where_hub, away, f"{filename} is not in the Hub cache", where) from None
    except Cancelled:
        remove_incomplete(repo_id, repo_type)
        raise
    except hf.HFValidationError as exc:
        remove_incomplete(repo_id, repo_type)
        raise CopeInputError(f"not a valid Hugging Face repo id or file name: {short_error(exc)}", path=where) from None
    except (hf.HfHubHTTPError, hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled) as exc:
        remove_incomplete(repo_id, repo_type)
        raise hub_error(exc, repo_id, filename, where_hub) from None
    except CopeInputError:  # the deadline, or a fault hub_call named
        remove_incomplete(repo_id, repo_type)
        raise
    except Exception as exc:  # noqa: BLE001 - a dropped connection, a short body, a disk error: one line
        remove_incomplete(repo_id, repo_type)
        raise CopeInputError(f"download from the Hub at {where_hub} failed: {short_error(exc)}; nothing was kept, "
                             "try again", path=where) from None
    snapshot = Path(local)
    for _ in Path(filename).parts:
        snapshot = snapshot.parent
    commit = snapshot.name if re.match(r"^[0-9a-f]{40}$", snapshot.name) else None
    return local, commit


def resolve_url(endpoint: str, repo_id: str, filename: str, repo_type: str, revision: str | None) -> str:
    """The file's URL on the Hub, as said in errors."""
    prefix = {"dataset": "datasets/", "space": "spaces/"}.get(repo_type, "")
    return f"{endpoint}/{prefix}{repo_id}/resolve/{revision or 'main'}/{filename}"


def _repo_cache(repo_id: str, repo_type: str) -> Path:
    from huggingface_hub import constants  # noqa: PLC0415

    return Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}"


def remove_incomplete(repo_id: str, repo_type: str) -> None:
    """Drop the client's partial downloads of this repo, so nothing half-written stays behind."""
    blobs = _repo_cache(repo_id, repo_type) / "blobs"
    try:
        for p in blobs.glob("*.incomplete"):
            _unlink(p)
    except OSError:
        pass


def forget_download(local: str) -> None:
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


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
