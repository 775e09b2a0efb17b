"""The profile cache: measured profiles kept between runs, one file per cache key.

Where: `<cache dir>/profiles/<key>.json`, the cache dir being, first found, the `root`
argument, the COPE_CACHE_DIR environment variable, or the user cache folder for "cope"
(engine/core/cache_dirs.py).

A corrupt, foreign or implausible file (a time of 0 s or of more than 1000 s, a FIFO
or a device in its place) is never trusted and never deleted: it is renamed aside to
`<key>.json.corrupt-<UTC timestamp>` and reported with a ProfileCacheWarning, or only
ignored (said the same way) when it cannot be moved; COPE then goes on as if there were
no profile. A cache that cannot be written (a read-only file system, a file where the
folder should be) is reported once and the run goes on with what it measured in memory.

`ProfileWriter` saves as it goes, so a probe run that is interrupted keeps what it
measured; the next run resumes from the cached file and asks `missing(planned)`.
While a run is under way a marker `<key>.json.partial` sits beside the profile, naming
the thread count the run measures at (one file holds every thread count): a thread
count the marker names is an interrupted run's partial work, never taken as complete
nor as a stand-in for another count, until a run at that count completes. A marker
that names no count (an older COPE's) puts every count in doubt. A run that replaces a profile (`--reprobe`) writes `<key>.json.reprobe`
instead and swaps it in only when it completes (`commit`), so the old profile stays
whole until the new one is.

Concurrent runs: a run writes the profile of a key only while it holds an exclusive
fcntl lock on `<cache dir>/locks/profile-<key>.lock`, taken before its first write (its
partial marker) and held until it commits or ends; the system drops the lock of a run
that dies, so no lock is ever stale. A second run of the same key that finds the lock
held measures as usual but keeps its measurements for itself, says so once
(ProfileCacheWarning), and never writes the profile or the marker: otherwise its last
write of its own, smaller view could land after the first run's commit cleared the
marker, leaving a profile with some entries and no marker that later runs would take as
complete.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from engine.core.cache_dirs import locks_dir, profiles_dir
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, set_aside_saying
from engine.profiles.profile import Measurement, Profile, Refusal
from engine.profiles.profile_io import load_profile, save_profile
from engine.profiles.profile_keys import Ident


class ProfileCacheWarning(UserWarning):
    """A cached profile could not be used and was set aside."""


def profile_path(key: str, root: str | os.PathLike | None = None) -> Path:
    if not key or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"not a profile cache key: {key!r}")
    return profiles_dir(root) / f"{key}.json"


def load_cached(key: str, root: str | os.PathLike | None = None) -> Profile | None:
    """The cached profile for `key`, or None when there is none or it was unusable.

    An unusable file (damaged, foreign, another schema version, or a profile of a
    different key) is renamed aside and reported with a ProfileCacheWarning.
    """
    path = profile_path(key, root)
    if not os.path.lexists(path):
        return None
    try:
        profile = load_profile(path)
        if profile.key != key:
            raise CopeInputError(f"holds the profile of key {profile.key}, not {key}", path=str(path))
    except CopeInputError as exc:
        fate = set_aside_saying(path)
        warnings.warn(f"{exc}; not used, {fate}", ProfileCacheWarning, stacklevel=2)
        return None
    return profile



def partial_marker(key: str, root: str | os.PathLike | None = None) -> Path:
    """The file that says the profile of `key` is an interrupted run's partial work."""
    path = profile_path(key, root)
    return path.with_name(path.name + ".partial")


_MARKER_HEAD = "an interrupted probe run"


def partial_threads(key: str, root: str | os.PathLike | None = None) -> frozenset[int] | None:
    """The thread counts whose measurements are an interrupted run's partial work: None
    when there is no marker; an empty set when the marker names none (every count)."""
    path = partial_marker(key, root)
    if not os.path.lexists(path):
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        text = ""  # unreadable: every count stays in doubt
    counts = set()
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "threads" and value.strip().isdigit():
            counts.add(int(value))
    return frozenset(counts)


def is_partial(key: str, root: str | os.PathLike | None = None, threads: int | None = None) -> bool:
    """Whether the profile of `key` holds an interrupted run's partial work (at `threads`,
    when given)."""
    doubted = partial_threads(key, root)
    if doubted is None:
        return False
    return threads is None or not doubted or threads in doubted


def _write_marker(key: str, root, threads: frozenset[int]) -> None:
    lines = [_MARKER_HEAD, *(f"threads={t}" for t in sorted(threads))]
    atomic_write_text(partial_marker(key, root), "\n".join(lines) + "\n")


def staging_path(key: str, root: str | os.PathLike | None = None) -> Path:
    """Where a run that replaces the profile of `key` writes until it completes."""
    path = profile_path(key, root)
    return path.with_name(path.name + ".reprobe")


def store(profile: Profile, root: str | os.PathLike | None = None, *, path: Path | None = None) -> Path:
    """Write `profile` to its cache file (or `path`) atomically; returns the path."""
    path = profile_path(profile.key, root) if path is None else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot make the profile cache folder: {exc.strerror or exc}",
                             path=str(path.parent)) from None
    save_profile(profile, path)
    return path


def lock_path(key: str, root: str | os.PathLike | None = None) -> Path:
    """The lock a run holds while it writes the profile of `key`."""
    profile_path(key, root)  # checks the key
    return locks_dir(root) / f"profile-{key}.lock"


# Locks this process holds, by path: [fd, writers holding it]. flock excludes other open
# files even within one process, so writers of one process share the lock: runs in one
# process are ordered by their caller (the app runs one probe run at a time), and an
# abandoned writer (a Ctrl-C that ended its run) must not lock the next one out.
_HELD: dict[str, list[int]] = {}


def _take_lock(path: Path) -> tuple[str | None, str | None]:
    """(path, None) with an exclusive lock on `path` held for this process; (None, why
    not) when another process holds it or a special file stands there; (None, None) when
    no lock can be made (a cache that cannot be written, which the profile's own write
    then reports)."""
    try:
        import fcntl  # noqa: PLC0415 - POSIX only
    except ImportError:  # pragma: no cover - no fcntl: writes as before, one run at a time assumed
        return None, None
    name = str(path)
    if name in _HELD:
        _HELD[name][1] += 1
        return name, None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO put at the lock's path must not hang the run.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError:
        return None, None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None, f"{path}: the profile's lock is not a regular file"
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None, (f"another COPE run is probing this profile now ({path} is locked): this run's "
                      "measurements are kept for this run only")
    _HELD[name] = [fd, 1]
    return name, None


def _drop_lock(name: str) -> None:
    held = _HELD.get(name)
    if held is not None:
        held[1] -= 1
        if held[1] <= 0:
            del _HELD[name]
            os.close(held[0])


class ProfileWriter:
    """Merges measurements into the cached profile as they come.

    Starts from `base` (provenance, shape and hardware of this run), adding what the
    cache already holds for the same key when `resume` is set. Every `every`
    measurements, and on leaving a `with` block, the profile is rewritten atomically,
    so an interrupted run loses at most the last `every - 1` measurements. `start()`
    marks the profile partial until `commit()`; with `staging` the writes go to the
    staging file, which `commit()` swaps in for the cached profile.
    """

    def __init__(self, base: Profile, *, root: str | os.PathLike | None = None, resume: bool = True, every: int = 1,
                 staging: bool = False, threads: int | None = None):
        if every < 1:
            raise ValueError("every must be at least 1")
        self.root = root
        self.threads = threads  # the thread count this run measures at (None: not said)
        self.every = every
        self.staging = staging
        self.resumed = 0  # measurements an earlier, interrupted run left (0 unless it was interrupted)
        self._pending = 0
        self.unsaved: str | None = None  # why the cache could not be written, once it could not
        self._lock: str | None = None
        self._locked = False  # whether the lock was tried (taken, or refused: then unsaved says why)
        profile = base
        if resume:
            cached = load_cached(base.key, root)
            if cached is not None:
                # This run's provenance, with the probe time of the earlier runs added.
                provenance = replace(
                    base.provenance, probe_used_s=cached.provenance.probe_used_s + base.provenance.probe_used_s
                )
                merged = cached.merged(base.measurements).measurements
                profile = Profile(provenance, base.model_shape, base.hardware, merged, refused=cached.refused)
                if is_partial(base.key, root, threads):
                    self.resumed = len(cached.measurements)
        self._profile = profile

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def path(self) -> Path:
        return profile_path(self._profile.key, self.root)

    @property
    def file(self) -> Path:
        return staging_path(self._profile.key, self.root) if self.staging else self.path

    def start(self) -> None:
        """Mark the cached profile partial at this run's thread count until `commit` (a
        replacing run leaves it alone)."""
        if self.staging or not self._claim():
            return
        key = self._profile.key
        doubted = partial_threads(key, self.root)
        if doubted is not None and not doubted:
            return  # a marker that puts every count in doubt stays so
        mine = frozenset() if self.threads is None else frozenset({self.threads})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write_marker(key, self.root, (doubted or frozenset()) | mine)
        except (OSError, CopeInputError):
            pass  # an unwritable cache is reported by flush(); nothing is kept to mislead a later run

    def commit(self) -> Path:
        """The run completed: write the profile, swap a staged one in, clear this run's
        thread count from the partial marker (all of it for a staged one: the profile it
        replaces, and whatever was in doubt there, is gone)."""
        self.flush()
        if self.unsaved is None:
            try:
                if self.staging:
                    os.replace(self.file, self.path)
                self._clear_marker()
            except OSError as exc:
                self.unsaved = f"{self.path}: cannot finish the profile: {exc.strerror or exc}"
                warnings.warn(self.unsaved, ProfileCacheWarning, stacklevel=2)
        self.release()
        return self.path

    def _claim(self) -> bool:
        """Whether this run may write the cache: takes the key's lock on the first call
        (once refused, the run keeps its measurements in memory, said once)."""
        if not self._locked and self.unsaved is None:
            self._locked = True
            self._lock, why = _take_lock(lock_path(self._profile.key, self.root))
            if why is not None:
                self.unsaved = why
                warnings.warn(why, ProfileCacheWarning, stacklevel=3)
        return self.unsaved is None

    def release(self) -> None:
        """Let another run write the profile (the lock goes with the process anyway)."""
        if self._lock is not None:
            _drop_lock(self._lock)
            self._lock = None

    def _clear_marker(self) -> None:
        key = self._profile.key
        doubted = partial_threads(key, self.root)
        if doubted is None:
            return
        left = frozenset() if self.staging or self.threads is None else doubted - {self.threads}
        if left:
            _write_marker(key, self.root, left)
        else:
            os.unlink(partial_marker(key, self.root))

    def refuse(self, refusal: Refusal) -> None:
        """Drop the series `refusal` names from the profile and record why (the next run
        measures it again)."""
        self._profile = self._profile.refusing(refusal)
        self.flush()

    def accept(self, operator: str, fixed: dict) -> None:
        """The series passed its check: forget an earlier refusal of it."""
        before = self._profile
        self._profile = before.accepting(operator, fixed)
        if self._profile.refused != before.refused:
            self.flush()

    def add(self, measurement: Measurement, *, elapsed_s: float = 0.0) -> None:
        """Merge one measurement (replacing an older one of the same thing); `elapsed_s`
        is the probe time it took, added to the provenance."""
        self._profile = self._profile.merged([measurement], probe_used_s=elapsed_s)
        self._pending += 1
        if self._pending >= self.every:
            self.flush()

    def flush(self) -> Path:
        """Write the profile to the cache; when the cache cannot be written, say so once
        (ProfileCacheWarning) and keep the measurements in memory for this run."""
        self._pending = 0
        if self._claim():
            try:
                return store(self._profile, self.root, path=self.file)
            except CopeInputError as exc:
                self.unsaved = str(exc)
                warnings.warn(f"{exc}; the profile is kept for this run only", ProfileCacheWarning, stacklevel=2)
        return self.path

    def missing(self, planned: Iterable[Ident]) -> list[Ident]:
        return self._profile.missing(planned)

    def __enter__(self) -> ProfileWriter:
        return self

    def __exit__(self, *exc) -> None:
        if self._pending:
            self.flush()
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the lock goes with the process
            pass
