"""A profile cache that cannot be used: set aside (or ignored) with one line, never a crash or a hang."""

from __future__ import annotations

import errno
import json
import math
import os
import sys

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.cost.cost_model import StateCosts
from engine.cost.estimate import price
from engine.replays.policy import Execution
from engine.replays.replay import ReplayStats
from probes.profile_cache import ProfileCacheWarning, ProfileWriter, load_cached, profile_path, store
from tests.test_profile import measurements, profile

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")


def _with_medians(path, value) -> None:
    doc = json.loads(path.read_text())
    for m in doc["measurements"]:
        m["median_s"] = value
    path.write_text(json.dumps(doc))  # json writes NaN/Infinity for the non-finite ones


@pytest.mark.parametrize("value, reason", [
    (0.0, r"median_s' is 0 for gpu_experts, which cannot take no time"),
    (1e308, r"takes 1e\+308 s, more than any step could"),
    (math.nan, r"not valid JSON \(NaN is not a number JSON allows\)"),
    (math.inf, r"not valid JSON \(Infinity is not a number JSON allows\)"),
    (-1e-4, r"expected seconds: a finite number >= 0"),
])
def test_an_implausible_profile_is_set_aside_and_reads_as_absent(tmp_path, value, reason):
    p = profile()
    path = store(p, root=tmp_path)
    _with_medians(path, value)
    with pytest.warns(ProfileCacheWarning, match=reason + ".*moved to " + path.name + r"\.corrupt-"):
        assert load_cached(p.key, root=tmp_path) is None
    assert not path.exists() and len(os.listdir(path.parent)) == 1
    assert load_cached(p.key, root=tmp_path) is None  # now simply absent: no second warning


def test_a_profile_that_cannot_be_moved_is_ignored_and_said_so(tmp_path, monkeypatch):
    p = profile()
    path = store(p, root=tmp_path)
    _with_medians(path, 0.0)

    def read_only(*_args):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "rename", read_only)
    with pytest.warns(ProfileCacheWarning, match=r"not used, ignored \(it could not be moved aside: Read-only"):
        assert load_cached(p.key, root=tmp_path) is None
    assert path.exists()


@posix_only
def test_a_read_only_cache_folder_by_chmod(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes through a read-only mode; the monkeypatched test covers this")
    p = profile()
    path = store(p, root=tmp_path)
    _with_medians(path, 0.0)
    os.chmod(path.parent, 0o500)
    try:
        with pytest.warns(ProfileCacheWarning, match="could not be moved aside"):
            assert load_cached(p.key, root=tmp_path) is None
        with pytest.warns(ProfileCacheWarning, match="kept for this run only"):
            writer = ProfileWriter(p, root=tmp_path, resume=False)
            writer.flush()
    finally:
        os.chmod(path.parent, 0o700)


def test_a_cache_folder_that_is_a_file_keeps_the_run_going(tmp_path):
    root = tmp_path / "cache"
    root.write_text("not a folder")
    p = profile()
    assert load_cached(p.key, root=root) is None
    writer = ProfileWriter(profile(ms=[]), root=root)
    with pytest.warns(ProfileCacheWarning, match=r"cannot make the profile cache folder.*kept for this run only"):
        for m in measurements():
            writer.add(m)
    assert writer.unsaved is not None
    assert len(writer.profile.measurements) == len(measurements())  # nothing lost in memory
    assert root.read_text() == "not a folder"


def test_a_read_only_file_system_on_write_is_one_warning(tmp_path, monkeypatch):
    import engine.core.files

    def refuse(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(engine.core.files.tempfile, "mkstemp", refuse)
    writer = ProfileWriter(profile(ms=[]), root=tmp_path)
    with pytest.warns(ProfileCacheWarning) as seen:
        for m in measurements():
            writer.add(m)
    assert len(seen) == 1 and "cannot write: Read-only file system" in str(seen[0].message)


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_special_file_as_the_profile_is_set_aside_without_hanging(tmp_path, kind):
    p = profile()
    path = profile_path(p.key, tmp_path)
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.warns(ProfileCacheWarning, match=r"is a (FIFO \(named pipe\)|device), expected a regular file.*moved to"):
        assert load_cached(p.key, root=tmp_path) is None
    assert not os.path.lexists(path)
    assert os.path.exists("/dev/zero")  # the link was moved, never what it points to


def test_no_nan_reaches_a_ranking():
    stats = ReplayStats("c0", np.ones((1, 2, 1), dtype=np.int64), 1, np.zeros(1, dtype=np.int64), 0, 0)
    nan = np.array([np.nan, 1e-4])
    costs = StateCosts(Execution.SEQUENTIAL, total_s=nan, gpu_s=nan, cpu_s=nan, copy_s=np.zeros(2),
                       sync_s=np.zeros(2), copied=np.zeros(2, dtype=np.int64), prefetch_s=np.zeros(1))
    with pytest.raises(CopeInputError, match=r"priced a token at nan s \(candidate c0\)"):
        price(stats, costs, shared_per_token_s=1e-4, token_overhead_s=0.0)
    zero = np.zeros(2)
    with pytest.raises(CopeInputError, match="priced a token at 0.0 s"):
        price(stats, StateCosts(Execution.SEQUENTIAL, zero, zero, zero, zero, zero, zero.astype(np.int64),
                                np.zeros(1)), shared_per_token_s=0.0,
              token_overhead_s=0.0)


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.__setitem__("median_s", 10**400), r"median_s' is 1000.*, expected seconds"),
    (lambda m: m["key"].__setitem__("execution", {"a": 1}), r"key field 'execution' is \{'a': 1\}, not an execution"),
    (lambda m: m["key"].__setitem__("execution", [1, 2]), r"key field 'execution' is \[1, 2\], not an execution"),
    (lambda m: m.__setitem__("basis", "x" * 5000), r"basis is 'xxx.*xxx', expected one of"),
], ids=["400-digit-seconds", "object-execution", "list-execution", "5000-char-basis"])
def test_fuzz_finds_in_a_measurement_are_one_short_line(tmp_path, edit, match):
    from engine.profiles.profile_io import load_profile

    path = store(profile(), root=tmp_path)
    doc = json.loads(path.read_text())
    schedule = next(m for m in doc["measurements"] if m["operator"] == "schedule")
    edit(schedule)
    path.write_text(json.dumps(doc))
    with pytest.raises(CopeInputError, match=match) as info:
        load_profile(path)
    assert len(str(info.value)) < 300 + len(str(path))
