"""Models named by a Hugging Face repo id (`org/name`).

- `model_from_hub_config(repo_id)`: fetches only `config.json` with `hf_hub_download`, so
  the Hub's cache, offline mode (HF_HUB_OFFLINE=1: the cached copy or a clear error) and
  token handling (HF_TOKEN, `hf auth login`) all apply; then `model_from_hf_config`.
- `model_from_hub_gguf(repo_id, filename)`: reads a GGUF file's header and tensor table
  remotely with HTTP range requests against the file's resolve URL (token headers from
  huggingface_hub, redirects followed), growing the prefix until the header parses, so
  only the header (a few MiB) crosses the network, never the weights. A split GGUF's
  sibling shards are read the same way. When the whole file is already in the Hub cache
  it is read from there (this also works offline).

The endpoint is huggingface_hub's (HF_ENDPOINT), read again at each call.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from pathlib import Path

from engine.core.errors import CopeInputError
from engine.core.files import set_aside_saying
from engine.core.input_limits import CONFIG_JSON_MAX_BYTES
from engine.models.hf_config import model_from_hf_config
from engine.models.model import ModelSpec

from cope_tui.sources.gguf_header import GGUFHeader, NeedMoreBytes, parse_header_prefix
from cope_tui.sources.gguf_model import model_from_gguf, model_from_gguf_headers, split_names
from cope_tui.sources.hub_net import unreachable
from cope_tui.sources.hub_policy import hub_call, short_error

FIRST_READ_BYTES = 2 * 2**20  # most headers fit; tokenizer-heavy ones take a second read
MAX_HEADER_BYTES = 512 * 2**20
TIMEOUT_S = 30.0


def hub_endpoint() -> str:
    from huggingface_hub import constants  # noqa: PLC0415

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    from huggingface_hub import constants  # noqa: PLC0415

    return bool(constants.is_offline_mode())


def _where(repo_id: str, filename: str) -> str:
    return f"{repo_id}/{filename}"


def hub_error(exc: Exception, repo_id: str, filename: str, endpoint: str) -> CopeInputError:
    """One line for whatever huggingface_hub or the HTTP client raised."""
    from huggingface_hub import errors as hf  # noqa: PLC0415

    where = _where(repo_id, filename)
    login = "if it is private or gated, log in (`hf auth login`) or set HF_TOKEN"
    if isinstance(exc, hf.GatedRepoError):
        return CopeInputError(f"repository {repo_id} is gated: accept its terms on the Hub, then log in "
                              "(`hf auth login`) or set HF_TOKEN", path=where)
    if isinstance(exc, hf.RepositoryNotFoundError):
        return CopeInputError(f"repository {repo_id} not found on the Hub at {endpoint}; {login}", path=where)
    if isinstance(exc, hf.RevisionNotFoundError):
        return CopeInputError(f"revision not found in repository {repo_id}", path=where)
    if isinstance(exc, getattr(hf, "RemoteEntryNotFoundError", hf.EntryNotFoundError)):
        hint = " (a GGUF-only repo? add --gguf-file NAME.gguf)" if filename == "config.json" else ""
        return CopeInputError(f"repository {repo_id} has no file {filename}{hint}", path=where)
    if isinstance(exc, (hf.OfflineModeIsEnabled, hf.LocalEntryNotFoundError)) and hub_offline():
        return CopeInputError(f"offline mode (HF_HUB_OFFLINE) and {filename} of {repo_id} is not in the Hub cache",
                              path=where)
    if isinstance(exc, hf.LocalEntryNotFoundError):
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, hf.HfHubHTTPError):
            return CopeInputError(f"cannot reach the Hugging Face Hub at {endpoint} ({short_error(cause)}) and "
                                  f"{filename} is not in the Hub cache", path=where)
        if isinstance(cause, hf.HfHubHTTPError):
            exc = cause
        else:
            return CopeInputError(f"cannot fetch {filename} from {endpoint} and it is not in the Hub cache",
                                  path=where)
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        if status in (401, 403):
            return CopeInputError(f"the Hub refused access to {repo_id} (HTTP {status}); {login}", path=where)
        return CopeInputError(f"the Hub at {endpoint} answered HTTP {status} for {filename}", path=where)
    return CopeInputError(f"cannot fetch {filename} from the Hub at {endpoint}: {short_error(exc)}", path=where)


def not_reached(endpoint: str, why: str, then: str, where: str) -> CopeInputError:
    return CopeInputError(f"cannot reach the Hugging Face Hub at {endpoint} ({why}) and {then}; check the network, "
                          "or set HF_HUB_OFFLINE=1 to use only the Hub cache", path=where)


# --- config.json ---------------------------------------------------------------------


def model_from_hub_config(repo_id: str, *, revision: str | None = None) -> ModelSpec:
    """The model of `repo_id`'s config.json: its size checked before its body is fetched,
    and a cached copy that cannot be read set aside and fetched again (said in a warning)."""
    endpoint = hub_endpoint()
    where = _where(repo_id, "config.json")
    away = None if hub_offline() else unreachable(endpoint)  # no Hub: the cache, without retries
    url = f"{endpoint}/{repo_id}/resolve/{revision or 'main'}/config.json"
    local, cached = _config_json(repo_id, revision, endpoint, url, away, where)
    try:
        model = model_from_hf_config(local)
    except CopeInputError as exc:
        if not cached:  # fresh from the Hub and unusable: not kept in the Hub cache either
            _forget(local)
            raise exc.relabelled(where) from None
        aside = _set_aside_cached(local)
        warnings.warn(HubCacheWarning(f"{where}: the Hub cache's copy ({local}) cannot be used ({exc.message}); "
                                      f"{aside}"), stacklevel=2)
        if away is not None or hub_offline():
            raise CopeInputError(f"the Hub cache's copy of config.json ({local}) cannot be used ({exc.message}); "
                                 f"{aside}, and the Hub cannot be asked for it again now (offline)",
                                 path=where) from None
        local, _ = _config_json(repo_id, revision, endpoint, url, away, where)
        try:
            model = model_from_hf_config(local)
        except CopeInputError as again:
            _forget(local)
            raise again.relabelled(where) from None
    return dataclasses.replace(model, hf_repo=repo_id,
                               source=f"config.json of {repo_id} on the Hugging Face Hub (cached at {local})")


class HubCacheWarning(UserWarning):
    """A file in the Hub cache that could not be used (set aside, fetched again)."""


def _config_json(repo_id: str, revision: str | None, endpoint: str, url: str, away: str | None,
                 where: str) -> tuple[str, bool]:
    """(the local config.json, whether it was in the Hub cache already), its declared size
    checked before its body is fetched; one line for every failure."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    offline = away is not None or hub_offline()

    def fetch() -> tuple[str, bool]:
        if not offline:
            info = hf_hub_download(repo_id, "config.json", revision=revision, endpoint=endpoint, dry_run=True)
            size = getattr(info, "file_size", None)
            if size is not None and size > CONFIG_JSON_MAX_BYTES:
                raise CopeInputError(f"the Hub declares config.json at {size:,} bytes, more than a config.json "
                                     f"takes ({CONFIG_JSON_MAX_BYTES // 2**20} MiB): not downloaded", path=where)
            cached = bool(getattr(info, "is_cached", False)) and not getattr(info, "will_download", True)
        else:
            cached = True
        return hf_hub_download(repo_id, "config.json", revision=revision, endpoint=endpoint,
                               local_files_only=offline), cached

    try:
        return hub_call(url, fetch, where=where, on_timeout=lambda: remove_incomplete_model(repo_id))
    except (hf.HfHubHTTPError, hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled, hf.HFValidationError,
            hf.EntryNotFoundError) as exc:
        remove_incomplete_model(repo_id)
        if isinstance(exc, hf.HFValidationError):
            raise CopeInputError(f"not a valid Hugging Face repo id: {short_error(exc)}", path=repo_id) from None
        if away is not None:
            raise not_reached(endpoint, away, "config.json is not in the Hub cache", where) from None
        raise hub_error(exc, repo_id, "config.json", endpoint) from None
    except CopeInputError:
        remove_incomplete_model(repo_id)
        raise


def remove_incomplete_model(repo_id: str) -> None:
    """Drop the client's partial downloads of a model repo (a fetch cut short)."""
    from huggingface_hub import constants  # noqa: PLC0415

    try:
        for p in (Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "blobs").glob("*.incomplete"):
            p.unlink(missing_ok=True)
    except OSError:
        pass


def _set_aside_cached(local: str) -> str:
    """Move a Hub cache file that cannot be used out of the way (its blob kept beside, renamed,
    for a look; the snapshot's link removed), so the next fetch gets it again."""
    blob = Path(os.path.realpath(local))
    said = set_aside_saying(blob)
    if Path(local).is_symlink():
        try:
            Path(local).unlink()
        except OSError:
            pass
    return said


def _forget(local: str) -> None:
    """Delete a fetched file that is refused: the snapshot entry and its blob."""
    blob = os.path.realpath(local)
    for path in {local, blob}:
        try:
            os.unlink(path)
        except OSError:
            pass


# --- a remote GGUF's header --------------------------------------------------------


def model_from_hub_gguf(repo_id: str, filename: str, *, revision: str | None = None) -> ModelSpec:
    if not filename.lower().endswith(".gguf"):
        raise CopeInputError("--gguf-file must name a .gguf file in the repo", path=_where(repo_id, filename))
    cached = _cached(repo_id, filename, revision)
    if cached is not None:
        return dataclasses.replace(model_from_gguf(cached), hf_repo=repo_id)
    names = split_names(filename.rsplit("/", 1)[-1])
    if names is not None and "/" in filename:
        folder = filename.rsplit("/", 1)[0]
        names = [f"{folder}/{n}" for n in names]
    headers = [read_remote_header(repo_id, n, revision=revision) for n in (names or [filename])]
    where = _where(repo_id, filename)
    model = model_from_gguf_headers(headers, where=where)
    return dataclasses.replace(model, hf_repo=repo_id,
                               source=model.source.replace(f"GGUF: {where}", f"GGUF: {where} on the Hugging Face "
                                                           "Hub, header read remotely", 1))


def _cached(repo_id: str, filename: str, revision: str | None) -> str | None:
    """The whole file's path when the Hub cache holds it (with all split siblings)."""
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    base = filename.rsplit("/", 1)
    names = split_names(base[-1]) or [base[-1]]
    folder = base[0] + "/" if len(base) == 2 else ""
    paths = []
    for n in names:
        try:
            found = try_to_load_from_cache(repo_id, folder + n, revision=revision)
        except Exception:  # noqa: BLE001 - a cache look-up never decides anything
            return None
        if not isinstance(found, str):
            return None
        paths.append(found)
    return paths[names.index(base[-1])] if base[-1] in names else paths[0]


def read_remote_header(repo_id: str, filename: str, *, revision: str | None = None) -> GGUFHeader:
    """Fetch growing prefixes of the file with Range requests until its header parses."""
    import httpx2  # noqa: PLC0415 - huggingface_hub's HTTP client

    from huggingface_hub import hf_hub_url  # noqa: PLC0415
    from huggingface_hub.utils import build_hf_headers, get_session  # noqa: PLC0415

    endpoint = hub_endpoint()
    where = _where(repo_id, filename)
    download = (f"download it (`hf download {repo_id} {filename} --local-dir .`) and pass its path "
                "to --model")
    if hub_offline():
        raise CopeInputError(f"offline mode (HF_HUB_OFFLINE) and the file is not in the Hub cache; {download}",
                             path=where)
    away = unreachable(endpoint)
    if away is not None:
        raise not_reached(endpoint, away, f"its header cannot be read remotely: {download}", where)
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"
    session = get_session()
    buf = bytearray()
    want = FIRST_READ_BYTES
    total: int | None = None
    while True:
        before = len(buf)
        try:
            asked = total
            total = hub_call(url, lambda: _fetch_range(session, url, headers, buf, want, asked), where=where,
                             raw=True, on_timeout=buf.clear)
            if len(buf) == before:  # nothing more came: the file ends here
                total = len(buf)
        except httpx2.HTTPError as exc:
            raise CopeInputError(f"cannot reach the Hugging Face Hub at {endpoint} ({short_error(exc)}); {download}",
                                 path=where) from None
        except _HTTPStatus as status:
            raise hub_error(status.error, repo_id, filename, endpoint) from None
        try:
            return dataclasses.replace(parse_header_prefix(bytes(buf), where), source=where)
        except NeedMoreBytes as need:
            if total is not None and need.needed > total:
                raise CopeInputError(f"truncated GGUF header: the header needs more than the file's "
                                     f"{total} bytes", path=where) from None
            want = max(need.needed, 2 * len(buf))
            if total is not None:
                want = min(want, total)
            if want > MAX_HEADER_BYTES:
                raise CopeInputError(f"the GGUF header is larger than {MAX_HEADER_BYTES // 2**20} MiB, too "
                                     f"large to read remotely; {download}", path=where) from None


class _HTTPStatus(Exception):
    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


def _fetch_range(session, url: str, headers: dict[str, str], buf: bytearray, want: int,
                 total: int | None) -> int | None:
    """Append bytes [len(buf), want) of the file to `buf`; returns the file size when known."""
    from huggingface_hub.utils import hf_raise_for_status  # noqa: PLC0415
    from huggingface_hub import errors as hf  # noqa: PLC0415

    start = len(buf)
    ranged = {**headers, "Range": f"bytes={start}-{want - 1}"}
    with session.stream("GET", url, headers=ranged, follow_redirects=True, timeout=TIMEOUT_S) as response:
        if response.status_code == 416:
            m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            return int(m[3]) if m and m[3] != "*" else start
        if response.status_code >= 400:
            response.read()
            try:
                hf_raise_for_status(response)
            except hf.HfHubHTTPError as exc:
                raise _HTTPStatus(exc) from None
            raise _HTTPStatus(hf.HfHubHTTPError(f"HTTP {response.status_code}", response=response))
        skip = 0
        if response.status_code == 206:
            m = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if m and m[3] != "*":
                total = int(m[3])
            if m and m[1] is not None and int(m[1]) != start:
                raise httpx2_protocol_error(f"asked for bytes from {start}, got a range from {m[1]}")
        else:  # 200: the server ignored the range and sends the whole file: skip what we have
            skip = start
            length = response.headers.get("Content-Length")
            if length and length.isdigit():
                total = int(length)
        need = want - start
        for chunk in response.iter_bytes():
            if skip:
                cut = min(skip, len(chunk))
                chunk = chunk[cut:]
                skip -= cut
            buf += chunk[:need]
            need -= min(need, len(chunk))
            if need <= 0:
                break
    return total


def httpx2_protocol_error(message: str) -> Exception:
    import httpx2  # noqa: PLC0415

    return httpx2.RemoteProtocolError(message)
