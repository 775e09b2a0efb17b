"""Where COPE keeps what it caches between runs: recorded and pulled traces, measured profiles.

The cache root is, first found: a `root` argument, the COPE_CACHE_DIR environment
variable, or platformdirs' user cache folder for "cope" (platformdirs 4.14 or later: the
first to ignore a relative XDG_CACHE_HOME or HOME and to read XDG_CACHE_HOME on macOS):

- Linux and other Unix: `$XDG_CACHE_HOME/cope` when XDG_CACHE_HOME is an absolute
  path, else `~/.cache/cope`;
- macOS: `$XDG_CACHE_HOME/cope` likewise, else `~/Library/Caches/cope`;
- Windows: `%LOCALAPPDATA%\\cope\\cope\\Cache` (the app named as its own author too:
  platformdirs puts the author's folder above the app's; it asks the shell for Local
  AppData, which %LOCALAPPDATA% holds).

Under the root: `traces/<model>-<what>.cope.npz`, `profiles/<key>.json`,
`machine/cpu-bandwidth-<key>.json` (engine.hardware.bandwidth_store) and
`machine/calibration-<key>-<model>-<quant>.json` (engine.cost.calibration_io), `exports/`
(an export's artefacts when no --out names a folder) and `plans/last.json` (the last plan
advise or the app made, which export, verify and estimate reuse).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs

from engine.core.files import remove_stale_temps

CACHE_ENV = "COPE_CACHE_DIR"
APP_NAME = "cope"
TRACE_SUFFIX = ".cope.npz"
# File name endings dropped from a pulled file's name before it becomes a cache name.
_PULLED_SUFFIXES = (".cope.npz", ".npz", ".csv", ".jsonl", ".ndjson", ".parquet", ".safetensors")


# --- the root -------------------------------------------------------------------------


def user_cache_dir() -> str:
    """This system's user cache folder for COPE, by platformdirs' rules."""
    return platformdirs.user_cache_dir(APP_NAME, APP_NAME)


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


def exports_dir(root: str | os.PathLike | None = None) -> Path:
    """Where an export's artefacts (the fork's profile CSV, kt-kernel's counts) go when no
    --out names a folder, so the command printed names files that are there."""
    return cache_root(root) / "exports"


def plans_dir(root: str | os.PathLike | None = None) -> Path:
    """The last plan `cope advise` or the app made (cope_tui/service/last_plan.py)."""
    return cache_root(root) / "plans"


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


def sweep_temps(root: str | os.PathLike | None = None) -> list[str]:
    """Remove what killed runs left mid-write in the cache (their temps: see
    engine.core.files.remove_stale_temps), in the root and the folders under it: done at
    every start, so a run killed while writing a cache entry costs nothing later."""
    base = cache_root(root)
    removed = []
    for folder in (base, traces_dir(root), profiles_dir(root), locks_dir(root), machine_dir(root), base / "imatrix"):
        removed += [str(folder / name) for name in remove_stale_temps(folder)]
    return removed
