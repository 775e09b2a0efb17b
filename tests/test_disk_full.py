"""A full disk (issue 47, defect 2): the compiled loops' on-disk cache is optional, a write
that finds no room is one line, and what a killed run left mid-write is removed later.

The disk is made full the way a person meets it: a file-size limit (`ulimit -f`, which
makes a write past it fail with EFBIG, as a full disk fails with ENOSPC) set in a child
process, with numba's cache folder empty so the loops must be compiled and saved.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.cache_dirs import sweep_temps
from engine.core.files import atomic_write_text, out_of_space, remove_stale_temps

ROOT = Path(__file__).resolve().parents[1]
posix_only = pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs a file-size limit (POSIX)")

# A child that runs one compiled loop (the LRU hit curves) and prints its answer and warnings.
CURVES = """
import json, resource, sys, warnings
import numpy as np
if sys.argv[1] != "none":
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from engine.replays.hit_curves import lru_hit_curves
rng = np.random.default_rng(7)
ids = np.stack([rng.permutation(16)[:4] for _ in range(200 * 3)]).reshape(200, 3, 4)
popularity = np.stack([np.bincount(ids[:, l].ravel(), minlength=16) for l in range(3)])
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    curves = lru_hit_curves(ids, popularity)
print(json.dumps({"curves": curves.tolist(), "said": [str(w.message) for w in said]}))
"""


def _curves(numba_dir: Path, limit: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(numba_dir), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CURVES, limit], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@posix_only
def test_compiled_loops_run_in_memory_when_their_cache_cannot_be_written_or_read(tmp_path):
    # a cache that can be written: saved, then loaded, no warning
    cached = tmp_path / "numba-ok"
    first = _curves(cached, "none")
    assert first["said"] == [] and list(cached.rglob("*lru_depths*.nbc"))
    assert _curves(cached, "none") == first
    # no room for it (an empty cache folder, a 4 KiB file-size limit): the same answer, one warning
    full = _curves(tmp_path / "numba-full", "4096")
    assert full["curves"] == first["curves"]
    assert len(full["said"]) == 1 and "cannot save compiled replay loops in " in full["said"][0]
    assert "File too large" in full["said"][0] and "compiling them in memory" in full["said"][0]
    assert not [p for p in (tmp_path / "numba-full").rglob("*") if ".tmp." in p.name]  # numba's temps removed
    # its entries cut short (a run killed while saving them): compiled again, the same answer
    for entry in cached.rglob("*.nbc"):
        entry.write_bytes(entry.read_bytes()[:100])
    cut = _curves(cached, "none")
    assert cut["curves"] == first["curves"]
    assert len(cut["said"]) == 1 and "cannot read compiled replay loops from " in cut["said"][0]


@posix_only
def test_cope_on_a_full_disk_is_one_line_and_a_non_zero_exit(tmp_path):
    """`cope export --out` past the file-size limit: one line naming the file, the old file kept, no temp."""
    out = tmp_path / "run.sh"
    out.write_text("the user's old script\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "COPE_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": str(ROOT)}

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    done = subprocess.run([sys.executable, "-m", "cope_tui.cli", "export", "--model", "qwen3-30b-a3b", "--gpu",
                           "rtx-4090", "--cpu", "desktop-ddr5", "--tokens", "40", "--candidate", "all-gpu",
                           "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, preexec_fn=limited)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("cope: warning:")]
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("cope: error: ") and "run.sh" in lines[0] and "Traceback" not in done.stderr
    assert out.read_text() == "the user's old script\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["run.sh"]


def test_out_of_space_is_told_from_other_errors():
    import errno

    assert out_of_space(OSError(errno.ENOSPC, "No space left on device"))
    assert out_of_space(OSError(errno.EFBIG, "File too large"))
    assert not out_of_space(OSError(errno.EACCES, "Permission denied"))
    assert not out_of_space(ValueError("no"))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_writers_temp_is_removed_and_nothing_else(tmp_path):
    dead = _dead_pid()
    stale = tmp_path / f".run.sh.cope-{dead}.abcd1234.tmp"
    live = tmp_path / f".run.sh.cope-{os.getpid()}.wxyz5678.tmp"  # a writer still running (this one)
    users = [tmp_path / ".notes.123.abcdefgh.tmp", tmp_path / f".x.cope-{dead}.short.tmp", tmp_path / "run.sh.tmp"]
    for path in (stale, live, *users):
        path.write_text("partial")
    atomic_write_text(tmp_path / "run.sh", "new\n")
    assert not stale.exists() and live.exists() and all(p.exists() for p in users)
    assert (tmp_path / "run.sh").read_text() == "new\n"
    # the temps of a write are named so: a killed write's is found again
    assert remove_stale_temps(tmp_path) == []


def test_every_start_sweeps_the_cache_of_a_killed_runs_temps(tmp_path, monkeypatch):
    dead = _dead_pid()
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    left = []
    for sub in ("", "profiles", "traces", "machine"):
        (tmp_path / sub).mkdir(exist_ok=True)
        left.append(tmp_path / sub / f".entry.json.cope-{dead}.k2j4h5g6.tmp")
        left[-1].write_text("{")
    kept = tmp_path / "profiles" / "entry.json"
    kept.write_text("{}")
    from cope_tui.cli import main

    assert main(["models", "--json"]) == 0
    assert not any(p.exists() for p in left) and kept.read_text() == "{}"
    assert sweep_temps() == []
