"""Where the caches live: COPE_CACHE_DIR, else the user cache folder by platformdirs' rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.core import cache_dirs
from engine.core.cache_dirs import (
    cache_root,
    default_trace_path,
    profiles_dir,
    pulled_trace_path,
    safe_name,
    traces_dir,
    user_cache_dir,
)
from probes.profile_cache import profile_path

ROOT = Path(__file__).resolve().parents[1]


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


def test_linux_uses_an_absolute_xdg_cache_home_else_home_dot_cache():
    env = {"HOME": "/home/ann", "XDG_CACHE_HOME": "/fast/cache"}
    assert user_cache_dir(system="linux", environ=env) == "/fast/cache/cope"
    env["XDG_CACHE_HOME"] = "relative/cache"  # not absolute: ignored, as the XDG spec says
    assert user_cache_dir(system="linux", environ=env) == "/home/ann/.cache/cope"
    del env["XDG_CACHE_HOME"]
    assert user_cache_dir(system="linux", environ=env) == "/home/ann/.cache/cope"
    assert user_cache_dir(system="freebsd14", environ={"HOME": "/home/ann/"}) == "/home/ann/.cache/cope"


def test_macos_uses_library_caches_unless_xdg_cache_home_is_set():
    assert user_cache_dir(system="darwin", environ={"HOME": "/Users/ann"}) == "/Users/ann/Library/Caches/cope"
    env = {"HOME": "/Users/ann", "XDG_CACHE_HOME": "/Users/ann/.cache"}
    assert user_cache_dir(system="darwin", environ=env) == "/Users/ann/.cache/cope"


def test_windows_uses_local_appdata_with_platformdirs_author_folder():
    env = {"LOCALAPPDATA": "C:\\Users\\ann\\AppData\\Local", "XDG_CACHE_HOME": "/ignored"}
    assert user_cache_dir(system="win32", environ=env) == "C:\\Users\\ann\\AppData\\Local\\cope\\cope\\Cache"
    env = {"USERPROFILE": "C:\\Users\\ann"}
    assert user_cache_dir(system="win32", environ=env) == "C:\\Users\\ann\\AppData\\Local\\cope\\cope\\Cache"


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="compares the Linux rules with platformdirs")
@pytest.mark.parametrize("xdg", [None, "/tmp/xdg-cache", "not/absolute"])
def test_the_linux_rules_agree_with_platformdirs(monkeypatch, xdg):
    platformdirs = pytest.importorskip("platformdirs")
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert user_cache_dir() == platformdirs.user_cache_dir("cope")


def test_trace_paths_live_under_the_traces_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    assert safe_name(" Qwen/Qwen3-30B-A3B/ ") == "Qwen--Qwen3-30B-A3B"
    assert safe_name("a b:c") == "a_b_c" and safe_name("/") == "model"
    assert default_trace_path("Qwen/Qwen3-30B-A3B", "chat") == tmp_path / "traces" / "Qwen--Qwen3-30B-A3B-chat.cope.npz"
    assert pulled_trace_path("olmoe-1b-7b", "org/traces", "data/Decode.CSV") == (
        tmp_path / "traces" / "olmoe-1b-7b-org--traces--Decode.cope.npz")
    assert pulled_trace_path("m", "o/r", "x.cope.npz").name == "m-o--r--x.cope.npz"
    assert pulled_trace_path("m", "o/r", "notes.txt").name == "m-o--r--notes.txt.cope.npz"


def test_the_cache_module_needs_neither_platformdirs_nor_the_front_end():
    code = ("import sys, engine.core.cache_dirs as c; c.cache_root(); c.user_cache_dir(); "
            "bad = [m for m in ('platformdirs', 'cope_tui', 'probes', 'textual', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
