"""A path the person typed, checked once before anything opens it.

`user_path` expands `~` and `~user` and refuses, with one line naming the flag, what the
operating system would otherwise answer with an exception deep inside a command: a NUL
byte, a `~user` that names no account, a name longer than the file system allows.
`input_kind` says whether an existing input is a regular file or a folder without opening
it, so a FIFO (which would wait forever for a writer) or a device (which never ends) is
refused before any read. `output_path` checks where a command will write before the
command does any work.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from engine.core.errors import CopeInputError
from engine.core.files import file_kind, no_link_target

NAME_MAX = 255  # bytes of one name: ext4, XFS, btrfs, APFS, NTFS
PATH_MAX = 4096  # bytes of a whole path (Linux)


def user_path(text: str | os.PathLike, *, flag: str | None = None) -> Path:
    """`text` as a Path, `~` expanded; CopeInputError naming `flag` for a path no file can have."""
    raw = os.fspath(text)
    if not raw:
        raise CopeInputError("the path is empty", path=flag)
    if "\x00" in raw:
        raise CopeInputError("the path holds a NUL byte, which no file name can", path=_where(flag, repr(raw)))
    expanded = os.path.expanduser(raw)
    if expanded.startswith("~"):  # os.path.expanduser leaves a ~user it cannot find as it is
        user = expanded[1:].split(os.sep, 1)[0].split("/", 1)[0]
        raise CopeInputError(f"~{user} names no user of this machine (there is no home folder to put in its "
                             "place)", path=_where(flag, raw))
    _check_lengths(expanded, flag)
    return Path(expanded)


def _where(flag: str | None, path: str) -> str:
    """How an error names the input: the flag and the path, or the path alone."""
    return f"{flag} {path}" if flag else path


def _check_lengths(path: str, flag: str | None) -> None:
    encoded = os.fsencode(path)
    if len(encoded) >= PATH_MAX:
        raise CopeInputError(f"the path is {len(encoded):,} bytes long, more than the {PATH_MAX:,} a path can be",
                             path=_where(flag, path[:60] + "..."))
    for name in encoded.split(b"/"):
        if len(name) > NAME_MAX:
            raise CopeInputError(f"a name in the path is {len(name)} bytes long, more than the {NAME_MAX} a file "
                                 "system allows for one name", path=_where(flag, os.fsdecode(name[:40]) + "..."))


def input_kind(path: str | os.PathLike, *, what: str = "file", flag: str | None = None) -> str | None:
    """"file" or "folder" for an existing input (a link followed), None when nothing is
    there; CopeInputError for a FIFO, a device or a socket (never opened) or a path the
    system cannot look at."""
    where = _where(flag, str(path))
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise CopeInputError("a name in the path is longer than the file system allows",
                                 path=_where(flag, str(path)[:60] + "...")) from None
        raise CopeInputError(f"cannot be read: {exc.strerror or exc}", path=where) from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    through = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
    raise CopeInputError(f"is {file_kind(mode)}{through}, expected a regular {what}: COPE reads only "
                         "regular files and folders", path=where)


def output_path(text: str | os.PathLike, *, flag: str) -> Path:
    """Where a command will write `text`, checked before it starts any work: a regular
    file or nothing yet, under a folder (or where the command can make one). A FIFO, a
    device, a folder or a symbolic link (to anything: a write would land on what it
    points to) is refused with one line."""
    path = user_path(text, flag=flag)
    try:
        target = no_link_target(path)
    except CopeInputError as exc:
        raise CopeInputError(exc.message, path=_where(flag, str(exc.path))) from None
    # The folder may be missing (commands make it), but what is there must be a folder.
    folder = target.parent if str(target.parent) else Path(".")
    while input_kind(folder, what="folder", flag=flag) is None and folder != folder.parent:
        folder = folder.parent
    if input_kind(folder, what="folder", flag=flag) == "file":
        raise CopeInputError("is a file, not a folder to write into", path=_where(flag, str(folder)))
    return path
