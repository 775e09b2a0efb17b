"""Hostile writes (issue 32): concurrent probe runs, links at an output, artefacts all or none,
runtime output bounded before it is kept, and the most tokens a recording takes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.profile_cache import ProfileCacheWarning, ProfileWriter, is_partial, load_cached, profile_path
from tests.test_profile import measurements, profile

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX locks and FIFOs")

# --- 1. two probe runs of one profile at once --------------------------------------------

# A run that has measured a few things and waits: it writes once more after the other run
# finished, as a slow run's last flush lands after a fast run's commit, then is killed.
SLOW_RUN = """
import sys, time
from pathlib import Path
from probes.profile_cache import ProfileWriter
from tests.test_profile import measurements, profile
root, ready, go = (Path(a) for a in sys.argv[1:4])
ms = measurements()
writer = ProfileWriter(profile(ms=[]), root=root, threads=8)
writer.start()
for m in ms[:3]:
    writer.add(m)
ready.write_text("measured 3")
while not go.exists():
    time.sleep(0.02)
writer.add(ms[3])
ready.write_text("measured 4")
time.sleep(600)
"""

FAST_RUN = """
import sys, warnings
from pathlib import Path
from probes.profile_cache import ProfileWriter
from tests.test_profile import measurements, profile
warnings.simplefilter("always")
writer = ProfileWriter(profile(ms=[]), root=Path(sys.argv[1]), threads=8)
writer.start()
for m in measurements():
    writer.add(m)
writer.commit()
"""


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path: Path, text: str, proc: subprocess.Popen, limit_s: float = 60) -> None:
    end = time.monotonic() + limit_s
    while not (path.exists() and path.read_text() == text):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"the slow run never said {text!r}"
        time.sleep(0.02)


@posix_only
def test_two_concurrent_probe_runs_never_leave_a_partial_profile_taken_as_complete(tmp_path):
    root, ready, go = tmp_path / "cache", tmp_path / "ready", tmp_path / "go"
    slow = _python(SLOW_RUN, root, ready, go)
    try:
        _wait_for(ready, "measured 3", slow)
        fast = _python(FAST_RUN, root)
        out, err = fast.communicate(timeout=120)
        assert fast.returncode == 0, err
        assert "another COPE run is probing this profile now" in err and "kept for this run only" in err
        go.write_text("")
        _wait_for(ready, "measured 4", slow)
    finally:
        slow.send_signal(signal.SIGKILL)  # killed mid-run: its lock goes with it
        slow.communicate(timeout=60)
    key = profile().key
    cached = load_cached(key, root=root)
    assert cached is not None and len(cached.measurements) == 4 < len(measurements())
    assert is_partial(key, root, threads=8)  # the killed run's work stays marked partial

    # The lock died with the run: a third run writes, completes and clears the marker.
    writer = ProfileWriter(profile(ms=[]), root=root, threads=8)
    writer.start()
    for m in measurements():
        writer.add(m)
    writer.commit()
    assert writer.unsaved is None and not is_partial(key, root, threads=8)
    assert len(load_cached(key, root=root).measurements) == len(measurements())


@posix_only
def test_a_fifo_at_the_lock_keeps_the_run_in_memory_without_hanging(tmp_path):
    lock = tmp_path / "locks" / f"profile-{profile().key}.lock"
    lock.parent.mkdir()
    os.mkfifo(lock)
    writer = ProfileWriter(profile(ms=[]), root=tmp_path, threads=8)
    with pytest.warns(ProfileCacheWarning, match="lock is not a regular file"):
        writer.start()
        for m in measurements():
            writer.add(m)
    writer.commit()
    assert len(writer.profile.measurements) == len(measurements())
    assert not profile_path(profile().key, tmp_path).exists()


# --- 2. sizes a command line asks for ------------------------------------------------------


def test_trace_record_tokens_above_the_maximum_is_one_line(tmp_path, monkeypatch, capsys):
    from cope_tui.cli import main
    from cope_tui.exit_codes import EXIT_INPUT

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["trace", "record", "--model", "org/x", "--tokens", "10000000"]) == EXIT_INPUT
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["cope: error: --tokens must be at most 32,768 tokens a prompt, got 10,000,000"]
