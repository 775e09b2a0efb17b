"""The cache of imatrix readings (engine/traces/imatrix_cache.py): a second
`cope advise --profile-trace X.imatrix.gguf` takes the counts from the cache, a changed file
is read again, and a bad cache entry is set aside with one warning."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

pytest.importorskip("gguf")

from cope_tui.cli import EXIT_OK, main  # noqa: E402
from cope_tui.sources import imatrix as imatrix_source  # noqa: E402
from cope_tui.sources.imatrix import load_imatrix, read_imatrix  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.traces.imatrix_cache import ImatrixCacheWarning, cache_path, fingerprint  # noqa: E402
from tests.imatrix_files import moe_counts, write_imatrix_gguf  # noqa: E402
from tests.test_imatrix import DS, FAST, distinct_counts  # noqa: E402


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cope-cache"))


@pytest.fixture
def imatrix(tmp_path):
    model = get_model(DS)
    counts = distinct_counts(model.n_moe_layers, model.n_routed_experts, model.top_k, seed=3)
    path = write_imatrix_gguf(tmp_path / "ds.imatrix.gguf", moe_counts(counts, tuple(model.moe_blocks)),
                              datasets=("groups_merged.txt",), chunk_count=40, chunk_size=512)
    return counts, path


def no_reading(path):  # type: ignore[no-untyped-def]
    raise AssertionError(f"{path} was read again")


def advise(capsys, path) -> dict:  # type: ignore[no-untyped-def]
    assert main(["advise", "--json", *FAST, "--model", DS, "--vram-budget", "6", "--profile-trace", str(path)]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_a_second_advise_takes_the_counts_from_the_cache(capsys, imatrix, monkeypatch):
    counts, path = imatrix
    first = advise(capsys, path)
    assert cache_path(fingerprint(path)).is_file()
    monkeypatch.setattr(imatrix_source, "read_imatrix", no_reading)
    second = advise(capsys, path)
    assert second["candidates"] == first["candidates"] and second["inputs"] == first["inputs"]
    assert second["inputs"]["profile_trace"]["tokens"] == int(counts[0].sum()) // get_model(DS).top_k


def test_the_cached_reading_equals_the_fresh_one(imatrix):
    _, path = imatrix
    fresh = read_imatrix(path)
    load_imatrix(path)  # reads and keeps
    cached = load_imatrix(path)
    assert cached.counts.tolist() == fresh.counts.tolist() and cached.counts.dtype == np.int64
    assert (cached.moe_blocks, cached.tensor, cached.chunk_count, cached.chunk_size, cached.datasets, cached.source,
            cached.notes) == (fresh.moe_blocks, fresh.tensor, fresh.chunk_count, fresh.chunk_size, fresh.datasets,
                              fresh.source, fresh.notes)


def test_a_changed_file_is_read_again(imatrix, monkeypatch):
    counts, path = imatrix
    load_imatrix(path)
    changed = counts[:, ::-1].copy()
    write_imatrix_gguf(path, moe_counts(changed, tuple(get_model(DS).moe_blocks)))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new mtime even on a coarse clock
    assert load_imatrix(path).counts.tolist() == changed.tolist()


@pytest.mark.parametrize("damage", [
    lambda doc: "{not json",
    lambda doc: json.dumps({**doc, "schema_version": 9}),
    lambda doc: json.dumps({**doc, "counts": doc["counts"][:-1]}),
    lambda doc: json.dumps({**doc, "counts": [[-1] * len(r) for r in doc["counts"]]}),
    lambda doc: json.dumps({**doc, "file": {**doc["file"], "path": "/elsewhere"}}),
])
def test_a_bad_cache_entry_is_set_aside_with_one_warning_and_the_file_read(imatrix, damage):
    counts, path = imatrix
    load_imatrix(path)
    cached = cache_path(fingerprint(path))
    cached.write_text(damage(json.loads(cached.read_text())))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = load_imatrix(path)
    assert got.counts.tolist() == counts.tolist()
    notes = [w for w in caught if issubclass(w.category, ImatrixCacheWarning)]
    assert len(notes) == 1 and "not used, moved to counts-" in str(notes[0].message), [str(w.message) for w in caught]
    assert list(cached.parent.glob(cached.name + ".corrupt-*"))
    assert cached.is_file()  # written again from the fresh reading


def test_a_refused_file_is_not_cached(tmp_path):
    bad = tmp_path / "x.dat"
    bad.write_bytes(b"\x01\x00\x00\x00nonsense")
    for _ in range(2):
        with pytest.raises(Exception, match="x.dat"):
            load_imatrix(bad)
    assert not cache_path(fingerprint(bad)).exists()
