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


# --- 3. outputs: no write through a link, artefacts all or none -----------------------------

KT_EXPORT = ["export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.uniform", "--model", "qwen3-30b-a3b",
             "--gpu", "rtx-4090", "--fidelity", "analytic", "--tokens", "50"]
PT = "cope-qwen3-30b-a3b-kt-activation.pt"  # what sglang-kt's export writes beside the script


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    from cope_tui.cli import main
    from cope_tui.exit_codes import EXIT_INPUT

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run(*args: str) -> str:
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == EXIT_INPUT, err
        lines = [line for line in err.strip().splitlines() if not line.startswith("cope: warning: ")]
        assert len(lines) == 1 and lines[0].startswith("cope: error: ") and "Traceback" not in err, err
        return lines[0]

    return run


def _old_files(folder: Path) -> dict[str, bytes]:
    (folder / "run.sh").write_bytes(b"old script")
    (folder / PT).write_bytes(b"old counts")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.is_symlink()}


def test_export_out_onto_a_link_is_refused_and_its_target_untouched(cli, tmp_path):
    real = tmp_path / "elsewhere.sh"
    real.write_text("precious")
    (tmp_path / "run.sh").symlink_to(real)
    line = cli(*KT_EXPORT, "--out", str(tmp_path / "run.sh"))
    assert "is a symbolic link" in line and "refused" in line and "--out" in line
    assert real.read_text() == "precious" and (tmp_path / "run.sh").is_symlink()
    assert not (tmp_path / PT).exists()  # nothing beside it either


def test_a_link_as_a_side_file_is_refused_before_anything_is_written(cli, tmp_path):
    real = tmp_path / "elsewhere.pt"
    real.write_bytes(b"precious")
    (tmp_path / PT).symlink_to(real)
    line = cli(*KT_EXPORT, "--out", str(tmp_path / "run.sh"))
    assert PT in line and "is a symbolic link" in line
    assert real.read_bytes() == b"precious" and not (tmp_path / "run.sh").exists()


def _export_with_counts():
    from engine.llamacpp.command_line import Arg, CommandLine
    from engine.runtimes.base import SideFile
    from engine.runtimes.export import Export
    import numpy as np

    command = CommandLine("llama-server", (Arg("model", ("-m", "m.gguf")),))
    return Export("c", "c", "needs-fork", "", command, side_files=(SideFile("a.csv", lambda: "new csv"),),
                  tensors=((PT, np.ones((2, 4), dtype=np.int64)),))


def test_a_full_disk_during_an_artefact_leaves_the_old_files_and_no_temp(tmp_path):
    import errno

    from engine.core.errors import CopeInputError
    from engine.runtimes.export import write_export

    (tmp_path / "a.csv").write_text("old csv")
    before = _old_files(tmp_path)

    def fills_the_disk(handle, counts):
        handle.write(b"half of it")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CopeInputError, match=f"{PT}: cannot write: No space left on device; nothing was written"):
        write_export(_export_with_counts(), tmp_path / "run.sh", write_tensor=fills_the_disk)
    assert _listing(tmp_path) == before  # no temp file, no half-written one, every old one intact


def test_a_rename_failing_midway_puts_back_what_it_replaced(tmp_path, monkeypatch):
    from engine.core.errors import CopeInputError
    from engine.runtimes.export import write_export

    (tmp_path / "a.csv").write_text("old csv")
    before = _old_files(tmp_path)
    real_replace, calls = os.replace, []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(CopeInputError, match="Input/output error; nothing was written"):
        write_export(_export_with_counts(), tmp_path / "run.sh", write_tensor=lambda h, c: h.write(b"new counts"))
    monkeypatch.undo()
    assert _listing(tmp_path) == before


def test_every_artefact_is_written_when_all_can_be(tmp_path):
    from engine.runtimes.export import write_export

    _old_files(tmp_path)
    written = write_export(_export_with_counts(), tmp_path / "run.sh", write_tensor=lambda h, c: h.write(b"new"))
    assert [p.name for p in written] == ["a.csv", PT, "run.sh"]
    assert _listing(tmp_path) == {"a.csv": b"new csv", PT: b"new", "run.sh": (tmp_path / "run.sh").read_bytes()}
    assert os.access(tmp_path / "run.sh", os.X_OK)


def _can_mount_tmpfs(where: Path) -> bool:
    try:
        done = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs '{where}'"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_export_onto_a_full_tmpfs_leaves_no_partial_artefact(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _can_mount_tmpfs(mnt):
        pytest.skip("cannot mount a tmpfs here (unshare -rm mount -t tmpfs)")
    # 40 KiB: the old files and the script fit, the .pt (48 x 128 int64 counts) does not.
    script = (f"mount -t tmpfs -o size=40k tmpfs '{mnt}' && cd '{mnt}' && printf old > run.sh && printf old > {PT} && "
              f"{sys.executable} -m cope_tui.cli {' '.join(KT_EXPORT)} --out run.sh; echo rc=$?; "
              "for f in .* *; do [ -f \"$f\" ] && echo \"file $f $(cat \"$f\")\"; done")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COPE_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    out = done.stdout.splitlines()
    errors = [line for line in done.stderr.splitlines() if line.startswith("cope: error: ")]
    assert "rc=2" in out, done.stderr
    assert len(errors) == 1 and PT in errors[0] and "nothing was written" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(line for line in out if line.startswith("file ")) == [f"file {PT} old", "file run.sh old"]


# --- 4. what a runtime prints, bounded before it is kept ------------------------------------


def test_output_past_the_cap_stops_the_program_and_keeps_only_the_cap():
    from probes.bounded_run import run_capped

    flood = "import sys\nwhile True:\n    sys.stderr.buffer.write(b'\\xff' * 65536)\n"
    done = run_capped([sys.executable, "-c", flood], timeout_s=300, max_bytes=2**20)
    assert done.overflowed and done.returncode != 0
    assert done.stdout == "" and done.stderr == "\ufffd" * 2**20  # decoded with replacement, never raised


def test_output_within_the_cap_is_kept_whole_with_the_exit_code():
    from probes.bounded_run import run_capped

    code = "import sys\nsys.stdout.write('a' * 300000)\nsys.stderr.write('said')\nsys.exit(3)\n"
    done = run_capped([sys.executable, "-c", code], timeout_s=300, max_bytes=2**20)
    assert (done.returncode, len(done.stdout), done.stderr, done.overflowed) == (3, 300000, "said", False)


def test_a_silent_program_past_its_time_is_killed():
    from probes.bounded_run import run_capped

    with pytest.raises(subprocess.TimeoutExpired):
        run_capped([sys.executable, "-c", "import time; time.sleep(120)"], timeout_s=0.5)


# --- 5. a declared top-k sizes the replay's state counts squared ------------------------------


def test_a_config_declaring_thousands_of_experts_a_token_is_refused(tmp_path):
    import json

    from engine.core.errors import CopeInputError
    from engine.models.hf_config import model_from_hf_config
    from tests.test_hostile_inputs import QWEN_CONFIG

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_CONFIG, "num_experts": 4096, "num_hidden_layers": 64,
                                "num_experts_per_tok": 4096}))
    with pytest.raises(CopeInputError, match=r"declares 4,096 experts a token \(top-k\), more than the 64"):
        model_from_hf_config(path)
    path.write_text(json.dumps({**QWEN_CONFIG, "num_experts_per_tok": 64}))
    assert model_from_hf_config(path).top_k == 64  # at the cap: read
