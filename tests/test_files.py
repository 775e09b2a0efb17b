"""engine/core/files.py: atomic writes replace only regular files; reads refuse special files."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, check_regular, read_text

needs_posix = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/null are POSIX")


def test_writes_and_replaces_a_regular_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    assert atomic_write_text(target, "new") == target
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temp file left behind


@needs_posix
def test_a_fifo_is_refused_and_kept(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CopeInputError, match=r"pipe: is a FIFO \(named pipe\), not a regular file"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(CopeInputError, match="is a folder, not a regular file"):
        atomic_write_text(tmp_path, "x")
    assert tmp_path.is_dir()


@needs_posix
def test_a_device_is_refused_before_anything_is_written():
    # Checked without writing: the refusal comes before the temp file is made.
    with pytest.raises(CopeInputError, match="/dev/null: is a device, not a regular file"):
        atomic_write_text("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@needs_posix
def test_a_symlink_is_kept_and_its_target_written(tmp_path):
    real = tmp_path / "real" / "data.txt"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    written = atomic_write_text(link, "new")
    assert written == real.resolve()  # the caller's "wrote ..." names the file written
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(p.name for p in real.parent.iterdir()) == ["data.txt"]


@needs_posix
def test_a_symlink_to_a_device_is_refused(tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    with pytest.raises(CopeInputError, match=r"is a device, not a regular file \(the link points to /dev/null\)"):
        atomic_write_text(link, "x")
    assert link.is_symlink()


@needs_posix
def test_reading_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(CopeInputError, match="is a FIFO"):
        read_text(fifo)
    with pytest.raises(CopeInputError, match="/dev/zero: is a device"):
        check_regular("/dev/zero")
