"""Reading and writing the user's files: atomically, with one-line errors.

A write goes to a temp file beside the target, is flushed to disk, then replaces the
target with os.replace, so an interrupted write never leaves a half-written file and
never destroys what was there.

Only regular files are ever replaced: a device (`/dev/null`), a FIFO, a socket or a
folder at the path is refused with one line. A symbolic link is kept and the file it
points to is written instead (atomically, beside that file); the path returned is the
file actually written, so the caller's "wrote ..." line names it. That is for COPE's own
files (caches); what a person names as an output (`--out`, the app's Save) is written
with `write_all`, which refuses a link, and writes several files all or none.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Callable

from engine.core.errors import CopeInputError
import time


def atomic_write(path: str | os.PathLike, write: Callable[[io.IOBase], None], *, binary: bool) -> Path:
    """Write through `write(handle)` into a temp file beside `path`, then os.replace.

    Returns the file written: `path`, or the file a symbolic link at `path` points to."""
    target = writable_target(path)
    try:
        tmp = _written_temp(target, write, binary)
    except OSError as exc:
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    try:
        os.replace(tmp, target)
    except OSError as exc:
        _remove_quietly(tmp)
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    return target


def write_all(files: list[tuple[str | os.PathLike, Callable[[io.IOBase], None], bool]]) -> list[Path]:
    """Write several files as one: all of them or none (an export's script and its side files).

    `files`: (path, write(handle), binary). Every path is checked before anything is
    written: a symbolic link is refused (a write through it would land on whatever it
    points to; COPE neither follows nor replaces it), as is anything but a regular file.
    Each is then written in full to a temp file beside it; only when every one is
    written (a full disk fails here) are they renamed over the targets. On any failure
    the temps are removed, targets already replaced get their old files back (kept as
    hard links until the end), and the error is one line: no half-written file is left
    and the old ones are intact."""
    targets = [no_link_target(path) for path, _, _ in files]
    temps: list[str] = []
    backups: dict[Path, str] = {}
    done: list[Path] = []
    where = str(files[0][0]) if files else ""
    try:
        for target, (path, write, binary) in zip(targets, files):
            where = str(path)
            temps.append(_written_temp(target, write, binary))
        for target in targets:  # the old files, kept until every new one is in place
            where = str(target)
            if os.path.lexists(target):
                backups[target] = tempfile.mktemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
                os.link(target, backups[target])
        for tmp, target in zip(temps, targets):
            where = str(target)
            os.replace(tmp, target)
            done.append(target)
    except BaseException as exc:
        for tmp in temps[len(done):]:
            _remove_quietly(tmp)
        for target in done:  # undo the renames that happened
            if target in backups:
                try:
                    os.replace(backups[target], target)
                except OSError:
                    pass
            else:
                _remove_quietly(str(target))
        for backup in backups.values():
            _remove_quietly(backup)
        if isinstance(exc, OSError):
            raise CopeInputError(f"cannot write: {exc.strerror or exc}; nothing was written", path=where) from None
        raise
    for backup in backups.values():
        _remove_quietly(backup)
    return targets


def _written_temp(target: Path, write: Callable[[io.IOBase], None], binary: bool) -> str:
    """The name of a temp file beside `target` holding what `write` wrote, flushed to disk."""
    folder = target.parent if str(target.parent) else Path(".")
    remove_stale_temps(folder)
    # The writer's pid in the name: a temp a killed run left is told from a live writer's.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.cope-{os.getpid()}.", suffix=TEMP_SUFFIX)
    try:
        handle = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _new_file_mode(target))
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


# errno of a write that found no room: the disk full, a quota, a file-size limit (ulimit -f)
_NO_SPACE = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` is a write that ran out of room (nothing wrong with the program)."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE


TEMP_SUFFIX = ".tmp"
# ".<target name>.cope-<pid>.<random>.tmp": what _written_temp names its temps (mkstemp's
# random part is 8 characters), so no file of the user's is taken for one
_TEMP_NAME = re.compile(r"\..+\.cope-(\d+)\.[a-z0-9_]{8}\.tmp")


def remove_stale_temps(folder: str | os.PathLike) -> list[str]:
    """Remove the temps of COPE's writes in `folder` whose writer is no longer running (a run
    killed mid-write, SIGKILL or a power cut, leaves its temp beside the target); a live
    writer's temp is kept. Returns the names removed; never fails (a folder that cannot be
    listed has nothing removed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        m = _TEMP_NAME.fullmatch(name)
        if m is None or _running(int(m.group(1))):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def _running(pid: int) -> bool:
    """Whether a process with this id exists (ours, or another user's: kept either way)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # it exists (another user's), or the id cannot be asked about: keep it
    return True


def no_link_target(path: str | os.PathLike) -> Path:
    """`path` when a write may replace it: nothing there yet, or a regular file; a symbolic
    link (to anything) is refused, as is a folder, a FIFO, a device or a socket."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return target  # nothing there yet (a file in the way of a folder is the caller's to say)
    except OSError as exc:
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    if stat.S_ISLNK(mode):
        raise CopeInputError(f"is a symbolic link (to {os.readlink(target)}): refused, COPE does not write "
                             "through a link; remove it or name the file itself", path=str(path))
    if not stat.S_ISREG(mode):
        raise CopeInputError(f"is {file_kind(mode)}, not a regular file: COPE writes only regular files "
                             "and never replaces anything else", path=str(path))
    return target


def writable_target(path: str | os.PathLike) -> Path:
    """The regular file a write to `path` replaces: `path` itself, or the file a link
    there points to; CopeInputError for anything that is not (or would not be) a regular file."""
    target = Path(path)
    try:
        link = stat.S_ISLNK(os.lstat(target).st_mode)
    except OSError:
        return target  # nothing there yet: a new regular file
    if link:
        target = Path(os.path.realpath(target))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target  # a link to a file not yet there: create it
    except OSError as exc:
        raise CopeInputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from None
    if not stat.S_ISREG(mode):
        through = f" (the link points to {target})" if link else ""
        raise CopeInputError(f"is {file_kind(mode)}, not a regular file{through}: COPE writes only regular files "
                             "and never replaces anything else", path=str(path))
    return target


def file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda handle: handle.write(text), binary=False)


def open_regular(path: str | os.PathLike, *, what: str = "file") -> io.BufferedReader:
    """`path` opened for reading in binary, only when it is a regular file.

    A FIFO is opened without blocking and refused, as are devices (`/dev/zero` would
    never end) and folders: one line naming the path and what it is."""
    where = str(path)
    nonblock = getattr(os, "O_NONBLOCK", 0)  # POSIX: opening a FIFO would wait for a writer
    try:
        fd = os.open(path, os.O_RDONLY | nonblock)
    except FileNotFoundError:
        raise CopeInputError(f"no such {what}", path=where) from None
    except IsADirectoryError:
        raise CopeInputError(f"is a folder, expected a {what}", path=where) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CopeInputError(f"is {file_kind(mode)}, expected a regular {what}", path=where)
        if nonblock:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike, *, what: str = "file") -> None:
    """CopeInputError unless `path` is a regular file (see open_regular)."""
    open_regular(path, what=what).close()


def read_text(path: str | os.PathLike, *, what: str = "file") -> str:
    """A UTF-8 text file (a leading BOM is dropped); `what` names it in errors."""
    where = str(path)
    try:
        with open_regular(path, what=what) as handle:
            return handle.read().decode("utf-8-sig")
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


def set_aside(path: Path) -> Path:
    """Rename `path` to `<name>.corrupt-<UTC timestamp>` (never over an existing file), so a
    cache file that cannot be used stops being read but is kept for a look; OSError when it
    cannot be moved."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    os.rename(path, aside)
    return aside


def set_aside_saying(path: Path) -> str:
    """`set_aside`, as the words that end a warning: where it went, or why it stays."""
    try:
        return f"moved to {set_aside(path).name}"
    except OSError as why:
        return f"ignored (it could not be moved aside: {why.strerror or why})"
