"""Reading and writing the user's files: atomically, with one-line errors.

A write goes to a temp file beside the target, is flushed to disk, then replaces the
target with os.replace, so an interrupted write never leaves a half-written file and
never destroys what was there.
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Callable

from engine.errors import CopeInputError


def atomic_write(path: str | os.PathLike, write: Callable[[io.IOBase], None], *, binary: bool) -> Path:
    """Write through `write(handle)` into a temp file beside `path`, then os.replace."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    try:
        handle = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except OSError as exc:
        _remove_quietly(tmp)
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda handle: handle.write(text), binary=False)


def read_text(path: str | os.PathLike, *, what: str = "file") -> str:
    """A UTF-8 text file (a leading BOM is dropped); `what` names it in errors."""
    where = str(path)
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return handle.read()
    except FileNotFoundError:
        raise CopeInputError(f"no such {what}", path=where) from None
    except IsADirectoryError:
        raise CopeInputError(f"is a folder, expected a {what}", path=where) from None
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not UTF-8 text (byte {exc.start})", path=where) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None


def _new_file_mode(target: Path) -> int:
    """The mode a plain open() would give: the old file's, else 0o666 less the umask
    (mkstemp creates 0o600 files)."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass
