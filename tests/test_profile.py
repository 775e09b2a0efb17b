"""The Profile file, its cache and incremental saving."""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import pytest

from engine.core.errors import CopeInputError
from engine.profiles.profile import Measurement, ProbedModel, Profile, Provenance
from engine.profiles.profile_io import load_profile, save_profile
from engine.profiles.profile_keys import cache_key, measurement_id
from probes.profile_cache import ProfileCacheWarning, ProfileWriter, load_cached, profile_path, store

HARDWARE = {"gpu": "NVIDIA H200", "vram_bytes": 150_000_000_000, "cpu": "Xeon", "threads": 16}
SHAPE = ProbedModel(model_id="qwen3-30b-a3b", expert_bytes=1_769_472, quantization="Q4_K_M")


def provenance(**kw) -> Provenance:
    fields = dict(
        host="box", gpu_name="NVIDIA H200", driver="550.54", torch_version="2.4.0",
        date_iso="2025-01-02T03:04:05+00:00", probe_budget_s=60.0, probe_used_s=0.0,
        kernel_stand_ins={"Q4_K_M": "int8 matmul at Q4_K_M byte size"},
    )
    fields.update(kw)
    return Provenance(**fields)


def measurements() -> list[Measurement]:
    return [
        Measurement("gpu_experts", {"n": 1}, 2.5e-5, 1e-6, 50),
        Measurement("gpu_experts", {"n": 2}, 3.1e-5, 1.2e-6, 50),
        Measurement("cpu_experts", {"threads": 8, "n": 1}, 1.9e-4, 1e-5, 20),
        Measurement("h2d_copy", {"n": 1}, 7.0e-5, 2e-6, 30),
        Measurement("sync", {}, 2.0e-5, 1e-6, 100),
        Measurement("shared_layer", {"block": 3}, 9.0e-5, 3e-6, 40),
        Measurement("token_head", {}, 4.0e-4, 1e-5, 20),
        Measurement("schedule", {"execution": "parallel", "hits": 5, "misses": 3, "prefetches": 0, "threads": 8},
                    2.2e-4, 9e-6, 25),
        Measurement("schedule", {"execution": "stage", "hits": 8, "misses": 0, "prefetches": 2, "threads": 8},
                    1.0e-4, 4e-6, 25, basis="estimated-from-atomic"),
    ]


def profile(ms=None, **prov) -> Profile:
    return Profile(provenance(**prov), SHAPE, HARDWARE, tuple(measurements() if ms is None else ms))


def write_doc(path, doc) -> None:
    path.write_text(json.dumps(doc), encoding="utf-8")


# --- the file ----------------------------------------------------------------------------


def test_round_trip_keeps_every_field_and_value(tmp_path):
    p = profile()
    path = tmp_path / "p.json"
    save_profile(p, path)
    back = load_profile(path)
    assert back == p
    assert back.find("schedule", {"threads": 8, "execution": "parallel", "misses": 3, "hits": 5, "prefetches": 0}).median_s == 2.2e-4
    assert back.find("cpu_experts", {"n": 1, "threads": 8}).repeats == 20
    assert back.find("cpu_experts", {"n": 1, "threads": 4}) is None
    assert dict(back.provenance.kernel_stand_ins) == {"Q4_K_M": "int8 matmul at Q4_K_M byte size"}
    doc = json.loads(path.read_text())
    assert doc["schema"] == "cope-profile" and doc["schema_version"] == 1 and doc["key"] == p.key
    assert [f for f in os.listdir(tmp_path)] == ["p.json"]  # no temp file left behind


def test_cache_key_is_canonical_and_stable():
    key = cache_key(HARDWARE, SHAPE.to_dict())
    shuffled = dict(reversed(list(HARDWARE.items())))
    assert cache_key(shuffled, dict(reversed(list(SHAPE.to_dict().items())))) == key
    assert len(key) == 24 and int(key, 16) >= 0
    assert cache_key({**HARDWARE, "threads": 8}, SHAPE.to_dict()) != key
    assert cache_key(HARDWARE, {**SHAPE.to_dict(), "quantization": "Q8_0"}) != key
    # Pinned: a file name must not change between runs or releases of the same schema.
    canonical = '{"hardware":{"gpu":"x"},"model_shape":{"expert_bytes":1,"model_id":"m","quantization":"q"},"schema_version":1}'
    assert hashlib.sha256(canonical.encode()).hexdigest()[:24] == "f51cbc4c64d41015dcc4c236"
    assert cache_key({"gpu": "x"}, {"model_id": "m", "expert_bytes": 1, "quantization": "q"}) == "f51cbc4c64d41015dcc4c236"
    assert profile().key == key


def test_values_are_checked_when_built():
    with pytest.raises(ValueError, match="unknown operator"):
        Measurement("gpu_expert", {"n": 1}, 1e-5, 0.0, 1)
    with pytest.raises(ValueError, match="lacks threads"):
        Measurement("cpu_experts", {"n": 1}, 1e-5, 0.0, 1)
    with pytest.raises(ValueError, match="not an execution"):
        Measurement("schedule", {"execution": "fast", "hits": 1, "misses": 0, "prefetches": 0, "threads": 1}, 1e-5, 0.0, 1)
    with pytest.raises(ValueError, match="median_s"):
        Measurement("sync", {}, -1.0, 0.0, 1)
    with pytest.raises(ValueError, match="two measurements"):
        profile([Measurement("sync", {}, 1e-5, 0.0, 1), Measurement("sync", {}, 2e-5, 0.0, 1)])


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(schema="cope-trace"), "not a COPE profile: field 'schema'"),
        (lambda d: d.update(schema_version=2), "field 'schema_version' is 2"),
        (lambda d: d.pop("measurements"), "field 'measurements' is missing"),
        (lambda d: d.update(extra=1), "field 'extra' is not a profile field"),
        (lambda d: d["measurements"][0].update(median_s="fast"), "field 'measurements[0].median_s'"),
        (lambda d: d["measurements"][1].update(spread_s=-1.0), "field 'measurements[1].spread_s'"),
        (lambda d: d["measurements"][2].update(repeats=1.5), "field 'measurements[2].repeats'"),
        (lambda d: d["measurements"][0].update(operator="warp"), "field 'measurements[0]': unknown operator"),
        (lambda d: d["measurements"][0]["key"].update(n="one"), "field 'measurements[0]': key field 'n'"),
        (lambda d: d["measurements"][0].update(basis="guessed"), "field 'measurements[0]': basis"),
        (lambda d: d["provenance"].update(date_iso="yesterday"), "field 'provenance': date_iso"),
        (lambda d: d["provenance"].pop("driver"), "field 'provenance.driver' is missing"),
        (lambda d: d["model_shape"].update(expert_bytes=0), "field 'model_shape': expert_bytes"),
        (lambda d: d["hardware"].update(gpu=["a"]), "field 'hardware'"),
        (lambda d: d["hardware"].update(gpu="other"), "field 'key' is"),
    ],
)
def test_foreign_or_damaged_fields_name_the_file_and_field(tmp_path, edit, message):
    path = tmp_path / "p.json"
    save_profile(profile(), path)
    doc = json.loads(path.read_text())
    edit(doc)
    write_doc(path, doc)
    with pytest.raises(CopeInputError) as err:
        load_profile(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    assert err.value.path == str(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"PK\x03\x04 not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[1, 2]", "top level is not a JSON object"),
        (b'{"format": "cope-trace"}', "not a COPE profile"),
        (b'{"schema": "cope-profile", "schema_version": 1, "x": NaN}', "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_foreign_files_are_rejected_in_one_line(tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(CopeInputError, match="not") as err:
        load_profile(path)
    assert message in str(err.value) and str(err.value).startswith(str(path))


def test_missing_file_and_folder_are_named(tmp_path):
    with pytest.raises(CopeInputError, match="no such file"):
        load_profile(tmp_path / "absent.json")
    with pytest.raises(CopeInputError, match="is a folder"):
        load_profile(tmp_path)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    save_profile(profile(), path)
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(CopeInputError, match="cannot write: No space left"):
        save_profile(profile(measurements()[:2]), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["p.json"]


def test_merged_replaces_the_same_measurement_and_adds_time():
    p = profile(measurements()[:3], probe_used_s=2.0)
    newer = Measurement("gpu_experts", {"n": 1}, 9e-5, 0.0, 3)
    added = Measurement("gpu_experts", {"n": 3}, 4e-5, 0.0, 3)
    q = p.merged([newer, added], probe_used_s=1.5)
    assert [m.median_s for m in q.of("gpu_experts")] == [9e-5, 3.1e-5, 4e-5]
    assert q.provenance.probe_used_s == 3.5
    assert p.find("gpu_experts", {"n": 1}).median_s == 2.5e-5  # values do not change


# --- the cache ---------------------------------------------------------------------------


def test_cache_stores_and_reuses_a_profile(tmp_path):
    p = profile()
    path = store(p, root=tmp_path)
    assert path == tmp_path / "profiles" / f"{p.key}.json"
    assert load_cached(p.key, root=tmp_path) == p
    assert load_cached(cache_key({"gpu": "none"}, SHAPE.to_dict()), root=tmp_path) is None


def test_cache_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "env"))
    p = profile()
    store(p)
    assert (tmp_path / "env" / "profiles" / f"{p.key}.json").is_file()
    assert load_cached(p.key) == p
    assert profile_path(p.key, tmp_path / "arg") == tmp_path / "arg" / "profiles" / f"{p.key}.json"
    with pytest.raises(ValueError):
        profile_path("../escape", tmp_path)


def test_a_corrupt_cache_file_is_set_aside_and_reported(tmp_path):
    p = profile()
    path = store(p, root=tmp_path)
    path.write_bytes(b'{"schema": "cope-profile", "schema_vers')  # a torn write from another tool
    with pytest.warns(ProfileCacheWarning, match=f"{path.name}.*not valid JSON.*moved to {path.name}.corrupt-"):
        assert load_cached(p.key, root=tmp_path) is None
    assert not path.exists()
    aside = [f for f in os.listdir(path.parent) if f.startswith(f"{path.name}.corrupt-")]
    assert len(aside) == 1
    assert (path.parent / aside[0]).read_bytes() == b'{"schema": "cope-profile", "schema_vers'  # kept, not deleted
    # The next store writes a fresh file; a second bad file gets its own name.
    store(p, root=tmp_path)
    assert load_cached(p.key, root=tmp_path) == p
    path.write_text("nonsense")
    with pytest.warns(ProfileCacheWarning):
        load_cached(p.key, root=tmp_path)
    assert len([f for f in os.listdir(path.parent) if ".corrupt-" in f]) == 2


def test_a_profile_filed_under_another_key_is_not_trusted(tmp_path):
    other = Profile(provenance(), SHAPE, {"gpu": "RTX 4090"}, tuple(measurements()))
    p = profile()
    wrong_place = profile_path(p.key, tmp_path)
    wrong_place.parent.mkdir(parents=True)
    save_profile(other, wrong_place)
    with pytest.warns(ProfileCacheWarning, match="holds the profile of key"):
        assert load_cached(p.key, root=tmp_path) is None
    assert not wrong_place.exists()


def test_an_interrupted_writer_keeps_what_it_measured_and_resumes(tmp_path):
    planned = measurements()[:5]
    base = profile([])
    with pytest.raises(KeyboardInterrupt):
        writer = ProfileWriter(base, root=tmp_path)
        for i, m in enumerate(planned):
            if i == 2:
                raise KeyboardInterrupt  # the user pressed Ctrl-C during the third probe
            writer.add(m, elapsed_s=0.5)
    on_disk = load_cached(base.key, root=tmp_path)
    assert on_disk is not None
    assert [m.ident for m in on_disk.measurements] == [m.ident for m in planned[:2]]
    assert on_disk.provenance.probe_used_s == 1.0

    resumed = ProfileWriter(profile([], date_iso="2025-01-03T00:00:00+00:00"), root=tmp_path)
    wanted = [(m.operator, m.key_dict) for m in planned]
    assert resumed.missing(wanted) == [m.ident for m in planned[2:]]
    assert resumed.profile.provenance.date_iso == "2025-01-03T00:00:00+00:00"
    with resumed:
        for m in planned[2:]:
            resumed.add(m, elapsed_s=0.5)
    done = load_cached(base.key, root=tmp_path)
    assert done.missing(wanted) == []
    assert done.provenance.probe_used_s == 2.5
    assert load_profile(resumed.path) == resumed.profile


def test_a_batching_writer_flushes_when_the_block_ends(tmp_path):
    base = profile([])
    with pytest.raises(RuntimeError):
        with ProfileWriter(base, root=tmp_path, every=10) as writer:
            for m in measurements()[:3]:
                writer.add(m)
            assert load_cached(base.key, root=tmp_path) is None  # nothing written yet
            raise RuntimeError("probe failed")
    assert len(load_cached(base.key, root=tmp_path).measurements) == 3
    # Without resume the cached measurements are ignored (and overwritten on flush).
    fresh = ProfileWriter(base, root=tmp_path, resume=False)
    assert fresh.missing([measurement_id("sync", {})]) == [("sync", ())]


def test_a_writer_sets_aside_a_corrupt_cache_and_starts_clean(tmp_path):
    base = profile([])
    path = profile_path(base.key, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = ProfileWriter(base, root=tmp_path)
    assert any(issubclass(w.category, ProfileCacheWarning) for w in caught)
    assert writer.profile.measurements == ()


def test_a_schedule_says_whether_it_was_one_timed_step_or_composed(tmp_path):
    key = {"execution": "ready-first", "hits": 6, "misses": 2, "prefetches": 1, "threads": 8}
    timed = Measurement("schedule", key, 3e-4, 1e-5, 9, method="timed-step")
    composed = Measurement("schedule", {**key, "prefetches": 0}, 2e-4, 1e-5, 9, basis="measured+preset", method="composed")
    p = profile([*measurements(), timed, composed])
    path = tmp_path / "p.json"
    save_profile(p, path)
    back = load_profile(path)
    assert back == p
    assert back.find("schedule", key).method == "timed-step"
    doc = json.loads(path.read_text())
    methods = [m.get("method") for m in doc["measurements"]]
    assert methods.count("timed-step") == 1 and methods.count("composed") == 1
    assert methods.count(None) == len(measurements())  # written only when set: older files read the same
    with pytest.raises(ValueError, match="method"):
        Measurement("schedule", key, 3e-4, 1e-5, 9, method="guessed")
    doc["measurements"][-1]["method"] = "guessed"
    write_doc(path, doc)
    with pytest.raises(CopeInputError, match=r"measurements\[\d+\]"):
        load_profile(path)
