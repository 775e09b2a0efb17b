"""Where COPE keeps what it caches between runs: recorded and pulled traces, measured profiles.

The cache root is, first found: a `root` argument, the COPE_CACHE_DIR environment
variable, or the user cache folder for "cope" by platformdirs' rules (reproduced here
with the standard library, so probes/ and cope_tui/ share one answer without a
dependency):

- Linux and other Unix: `$XDG_CACHE_HOME/cope` when XDG_CACHE_HOME is an absolute
  path, else `~/.cache/cope`;
- macOS: `$XDG_CACHE_HOME/cope` likewise, else `~/Library/Caches/cope`;
- Windows: `%LOCALAPPDATA%\\cope\\cope\\Cache` (platformdirs names the app twice, as
  author and as app; it asks the shell for Local AppData, which %LOCALAPPDATA% holds).

Under the root: `traces/<model>-<what>.cope.npz`, `profiles/<key>.json`,
`machine/cpu-bandwidth-<key>.json` (engine.hardware.bandwidth_store) and
`machine/calibration-<key>-<model>-<quant>.json` (engine.cost.calibration_io).
"""

from __future__ import annotations

import ntpath
import os
import posixpath
import re
import sys
from pathlib import Path
from typing import Mapping

CACHE_ENV = "COPE_CACHE_DIR"
APP_NAME = "cope"
TRACE_SUFFIX = ".cope.npz"
# File name endings dropped from a pulled file's name before it becomes a cache name.
_PULLED_SUFFIXES = (".cope.npz", ".npz", ".csv", ".jsonl", ".ndjson", ".parquet", ".safetensors")


# --- the root -------------------------------------------------------------------------


def _posix_home(environ: Mapping[str, str]) -> str:
    """HOME when it is absolute, else the account's home (platformdirs treats a relative HOME as unset)."""
    home = environ.get("HOME", "")
    if posixpath.isabs(home):
        return home.rstrip("/") or "/"
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return os.path.expanduser("~")


def user_cache_dir(
    app: str = APP_NAME, *, system: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """platformdirs.user_cache_dir(app) for `system` (default sys.platform) and `environ` (default os.environ)."""
    system = sys.platform if system is None else system
    env = os.environ if environ is None else environ
    if system == "win32":
        home = env.get("USERPROFILE") or os.path.expanduser("~")
        base = env.get("LOCALAPPDATA") or ntpath.join(home, "AppData", "Local")
        return ntpath.join(ntpath.normpath(base), app, app, "Cache")
    xdg = env.get("XDG_CACHE_HOME", "")
    if posixpath.isabs(xdg):
        return posixpath.join(xdg, app)
    under = ("Library", "Caches") if system == "darwin" else (".cache",)
    return posixpath.join(_posix_home(env), *under, app)


def cache_root(root: str | os.PathLike | None = None) -> Path:
    """The folder that holds traces/ and profiles/."""
    if root is not None:
        return Path(root)
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(user_cache_dir())


def traces_dir(root: str | os.PathLike | None = None) -> Path:
    return cache_root(root) / "traces"


def profiles_dir(root: str | os.PathLike | None = None) -> Path:
    return cache_root(root) / "profiles"


def locks_dir(root: str | os.PathLike | None = None) -> Path:
    """Lock files of runs that write a cache entry (probes/profile_cache.py), kept apart so
    no cache folder holds anything but its entries."""
    return cache_root(root) / "locks"


def machine_dir(root: str | os.PathLike | None = None) -> Path:
    """Measurements of this machine kept between runs (its CPU memory bandwidth)."""
    return cache_root(root) / "machine"


# --- trace names ----------------------------------------------------------------------


def safe_name(name: str) -> str:
    """A file-name-safe form of a model id, repo id or domain ("org/name" -> "org--name")."""
    name = name.strip().rstrip("/").replace("/", "--")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"


def default_trace_path(model: str, domain: str) -> Path:
    """Where a recorded trace goes: `<cache>/traces/<model>-<domain>.cope.npz`."""
    return traces_dir() / f"{safe_name(model)}-{safe_name(domain)}{TRACE_SUFFIX}"


def pulled_trace_path(model_id: str, repo_id: str, filename: str) -> Path:
    """Where a trace pulled from the Hub goes: `<cache>/traces/<model>-<org>--<name>--<file stem>.cope.npz`."""
    stem = Path(filename).name
    for suffix in _PULLED_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return traces_dir() / f"{safe_name(model_id)}-{safe_name(repo_id)}--{safe_name(stem)}{TRACE_SUFFIX}"


def cached_traces(model_id: str) -> list[Path]:
    """Files `<cache>/traces/<model>-*.cope.npz`, newest first (the caller checks they fit)."""
    folder = traces_dir()
    prefix = safe_name(model_id) + "-"
    try:
        found = [p for p in folder.iterdir()
                 if p.name.startswith(prefix) and p.name.endswith(TRACE_SUFFIX) and p.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
