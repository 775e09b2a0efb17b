"""Where the caches live: COPE_CACHE_DIR, else the user cache folder by platformdirs' rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path, PureWindowsPath

import pytest

from engine.core import cache_dirs
from engine.core.cache_dirs import (
    cache_root,
    default_trace_path,
    profiles_dir,
    pulled_trace_path,
    safe_name,
    traces_dir,
)
from probes.profile_cache import profile_path

ROOT = Path(__file__).resolve().parents[1]

# cache_root() under each environment, in a process that takes itself for `system`
# (platformdirs picks its rules by sys.platform when it is first imported).
_ROOTS_ON = """
import json, os, sys
sys.platform = sys.argv[1]
from engine.core.cache_dirs import cache_root
roots = []
for env in json.loads(sys.argv[2]):
    for name in ("COPE_CACHE_DIR", "HOME", "XDG_CACHE_HOME", "WIN_PD_OVERRIDE_LOCAL_APPDATA"):
        os.environ.pop(name, None)
    os.environ.update(env)
    roots.append(str(cache_root()))
print(json.dumps(roots))
"""


# A POSIX system's folders are joined by this system's os.path: with "/" everywhere but Windows.
posix_paths = pytest.mark.skipif(sys.platform == "win32", reason="Windows joins paths with backslashes")


def roots_on(system: str, environments: list[dict[str, str]]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _ROOTS_ON, system, json.dumps(environments)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_root_is_the_argument_then_cope_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert traces_dir() == tmp_path / "env" / "traces"
    assert profiles_dir(tmp_path / "arg") == tmp_path / "arg" / "profiles"
    assert profile_path("ab12", tmp_path / "arg") == tmp_path / "arg" / "profiles" / "ab12.json"
    monkeypatch.setenv("COPE_CACHE_DIR", "")  # empty: as if unset
    monkeypatch.setattr(cache_dirs, "user_cache_dir", lambda: "/from/platform/rules")
    assert cache_root() == Path("/from/platform/rules")


@posix_paths
def test_linux_uses_an_absolute_xdg_cache_home_else_home_dot_cache():
    environments = [
        {"HOME": "/home/ann", "XDG_CACHE_HOME": "/fast/cache"},
        {"HOME": "/home/ann", "XDG_CACHE_HOME": "relative/cache"},  # not absolute: ignored, as the XDG spec says
        {"HOME": "/home/ann"},
        {"HOME": "/home/ann/"},
        {"HOME": "/home/ann", "COPE_CACHE_DIR": "/elsewhere"},
    ]
    assert roots_on("linux", environments) == [
        "/fast/cache/cope", "/home/ann/.cache/cope", "/home/ann/.cache/cope", "/home/ann/.cache/cope", "/elsewhere"]
    assert roots_on("freebsd14", [{"HOME": "/home/ann/"}]) == ["/home/ann/.cache/cope"]


@posix_paths
def test_a_relative_home_is_ignored_for_the_accounts_home():
    pwd = pytest.importorskip("pwd", reason="accounts' homes are a Unix database")
    account_home = pwd.getpwuid(os.getuid()).pw_dir.rstrip("/")
    assert roots_on("linux", [{"HOME": "relative"}]) == [f"{account_home}/.cache/cope"]


@posix_paths
def test_macos_uses_library_caches_unless_xdg_cache_home_is_set():
    environments = [{"HOME": "/Users/ann"}, {"HOME": "/Users/ann", "XDG_CACHE_HOME": "/Users/ann/.cache"},
                    {"HOME": "/Users/ann", "XDG_CACHE_HOME": "relative"}]
    assert roots_on("darwin", environments) == [
        "/Users/ann/Library/Caches/cope", "/Users/ann/.cache/cope", "/Users/ann/Library/Caches/cope"]


def test_windows_uses_local_appdata_with_platformdirs_author_folder():
    # platformdirs asks the shell for Local AppData; its override variable stands in for
    # the shell here. Joined on this system, the separators may be mixed: compared as
    # Windows paths.
    local = "C:\\Users\\ann\\AppData\\Local"
    [root] = roots_on("win32", [{"WIN_PD_OVERRIDE_LOCAL_APPDATA": local, "XDG_CACHE_HOME": "/ignored"}])
    assert PureWindowsPath(root) == PureWindowsPath(local, "cope", "cope", "Cache")


def test_trace_paths_live_under_the_traces_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    assert safe_name(" Qwen/Qwen3-30B-A3B/ ") == "Qwen--Qwen3-30B-A3B"
    assert safe_name("a b:c") == "a_b_c" and safe_name("/") == "model"
    assert default_trace_path("Qwen/Qwen3-30B-A3B", "chat") == tmp_path / "traces" / "Qwen--Qwen3-30B-A3B-chat.cope.npz"
    assert pulled_trace_path("olmoe-1b-7b", "org/traces", "data/Decode.CSV") == (
        tmp_path / "traces" / "olmoe-1b-7b-org--traces--Decode.cope.npz")
    assert pulled_trace_path("m", "o/r", "x.cope.npz").name == "m-o--r--x.cope.npz"
    assert pulled_trace_path("m", "o/r", "notes.txt").name == "m-o--r--notes.txt.cope.npz"


def test_the_cache_module_needs_no_front_end():
    code = ("import sys, engine.core.cache_dirs as c; c.cache_root(); c.user_cache_dir(); "
            "bad = [m for m in ('cope_tui', 'probes', 'textual', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
