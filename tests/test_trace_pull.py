"""`cope trace pull` and the trace index, against a local fake Hub on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import re

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")

from cope_tui.cli import main  # noqa: E402
from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request  # noqa: E402
from cope_tui.sources import hub_trace  # noqa: E402
from cope_tui.sources.hub_trace import IndexEntry, load_index, pull_trace  # noqa: E402
from engine.models.catalog import get_model, catalog  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from engine.traces import load_trace, save_trace, write_jsonl_trace, write_llama_moe_trace_csv  # noqa: E402
from tests.hub_server import FakeHub, refused_endpoint  # noqa: E402

MODEL = "olmoe-1b-7b"  # 16 MoE blocks x 64 experts, top-8: small
REPO = "org/olmoe-traces"


@pytest.fixture
def source():
    model = get_model(MODEL)
    return synthetic_trace(model, SyntheticSettings(tokens=24, seed=3, sequences=2, predictor_accuracy=None))


@pytest.fixture
def files(source, tmp_path):
    save_trace(source, tmp_path / "own.cope.npz")
    write_llama_moe_trace_csv(source, tmp_path / "decode.csv")
    write_jsonl_trace(source, tmp_path / "routing.jsonl")
    return {name: (tmp_path / name).read_bytes() for name in ("own.cope.npz", "decode.csv", "routing.jsonl")}


@pytest.fixture
def cope_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cope-cache"
    monkeypatch.setenv("COPE_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def hub(hf_env, files, cope_cache):
    content = {("dataset", REPO, f"data/{name}"): data for name, data in files.items()}
    content[("dataset", "org/one-csv", "trace.csv")] = files["decode.csv"]
    content[("dataset", "org/one-csv", "README.md")] = b"# a trace\n"
    content[("dataset", "org/parquet", "layer_02.parquet")] = b"PAR1 not really"
    content[("dataset", "org/two", "a.csv")] = files["decode.csv"]
    content[("dataset", "org/two", "b.jsonl")] = files["routing.jsonl"]
    with FakeHub(content) as server:
        hf_env(server.endpoint)
        yield server


def _cache_files(cope_cache: Path) -> list[Path]:
    return sorted(p for p in cope_cache.rglob("*") if p.is_file()) if cope_cache.exists() else []


def _hf_files(tmp_path: Path) -> list[str]:
    """Downloaded content in the private Hub cache (blobs and snapshot entries)."""
    root = tmp_path / "hf-cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if (p.is_file() or p.is_symlink()) and ("blobs" in p.parts or "snapshots" in p.parts))


# --- the index ---------------------------------------------------------------------------


def test_index_entries_are_unverified_and_fit_their_models():
    entries = load_index()
    assert {e.repo_id for e in entries} >= {
        "RASMUS/commitmoe-qwen35-fp8-layers-v2",
        "CMU-FLAME/FLAME-MoE-Traces",
        "AmanPriyanshu/GPT-OSS-20B-MoE-expert-activations",
    }
    ids = set(catalog())
    doc = json.loads((Path(__file__).resolve().parents[1] / "assets" / "trace_index.json").read_text())
    for e, raw in zip(entries, doc["entries"]):
        # Nothing was downloaded: no entry may claim a checksum, a size or verification.
        assert e.repo_type == "dataset" and e.verified is False and e.sha256 is None and e.size_bytes is None
        assert "unverified until the first real download" in e.note
        assert e.readable or e.format == "unknown"
        shape = raw["shape"]
        for model_id in ([e.model] if e.model else []) + list(e.shape_fits):
            assert model_id in ids
            m = get_model(model_id)
            assert (len(m.moe_blocks), m.n_routed_experts, m.top_k) == (shape["layers"], shape["experts"],
                                                                        shape["top_k"]), (e.repo_id, model_id)
    # Every catalog model has an entry (its own or same-shape routing) or is recorded as searched, none found.
    covered = {m for e in entries for m in ([e.model] if e.model else []) + list(e.shape_fits)}
    none_found = doc["searched"]["none_found"]
    assert ids <= covered | set(none_found)
    # Each says when it was looked up: the index's search date, or a later one for a model added since.
    dates = [re.search(r"none found \((\d{4}-\d\d-\d\d)\)", v) for v in none_found.values()]
    assert all(d is not None and d.group(1) >= doc["searched"]["date"] for d in dates)
    # The asset ships with the package data.
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"*.json"' in pyproject


def test_entries_for_offers_readable_entries_with_their_relation():
    own = hub_trace.entries_for("qwen3.5-35b-a3b")
    assert [(m.entry.repo_id, m.exact) for m in own] == [("RASMUS/commitmoe-qwen35-fp8-layers-v2", True)]
    assert hub_trace.entry_label(own[0]) == "RASMUS/commitmoe-qwen35-fp8-layers-v2 unverified"
    shaped = hub_trace.entries_for("qwen3.6-35b-a3b")
    assert [m.exact for m in shaped] == [False]
    assert hub_trace.entry_label(shaped[0]) == ("RASMUS/commitmoe-qwen35-fp8-layers-v2 (routing of qwen3.5-35b-a3b, "
                                                "same shape \u2014 not this model's routing) unverified")
    # Entries whose file format is unknown are listed in the index but never offered.
    assert hub_trace.entries_for("gpt-oss-20b") == () and hub_trace.entries_for("olmoe-1b-7b") == ()
    assert hub_trace.entries_for("mixtral-8x7b-instruct") == ()


# --- success -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["decode.csv", "routing.jsonl", "own.cope.npz"])
def test_pull_converts_and_caches(hub, source, cope_cache, name, capsys):
    rc = main(["trace", "pull", f"{REPO}/data/{name}", "--model", MODEL])
    out, err = capsys.readouterr()
    assert rc == 0, err
    path = Path(out.strip())
    stem = name.split(".")[0]
    assert path == cope_cache / "traces" / f"{MODEL}-org--olmoe-traces--{stem}.cope.npz"
    assert _cache_files(cope_cache) == [path]
    got = load_trace(path)
    np.testing.assert_array_equal(got.expert_ids, source.expert_ids)
    np.testing.assert_array_equal(got.seq_starts, source.seq_starts)
    if name != "decode.csv":  # the CSV format carries no router weights
        np.testing.assert_allclose(got.weights, source.weights)
    assert got.meta.origin == "published" and got.meta.model == MODEL
    assert got.meta.source.startswith(f"hf://datasets/{REPO}/data/{name}@")
    assert any("not checked: no checksum known" in n for n in got.meta.notes)
    assert all(r.path.startswith(f"/datasets/{REPO}/") for r in hub.requests)


def test_pull_checks_a_given_checksum(hub, files, source):
    good = hashlib.sha256(files["decode.csv"]).hexdigest()
    result = pull_trace(f"{REPO}/data/decode.csv", model=MODEL, sha256=good.upper())
    assert result.checked_against == "--sha256" and result.sha256 == good
    assert any("checked against --sha256" in n for n in load_trace(result.path).meta.notes)


def test_pull_picks_the_only_trace_file_and_writes_out(hub, tmp_path, cope_cache):
    out = tmp_path / "mine.cope.npz"
    result = pull_trace("org/one-csv", model=MODEL, out=out)
    assert result.filename == "trace.csv" and result.path == out and out.is_file()
    assert _cache_files(cope_cache) == []
    with pytest.raises(CopeInputError, match=r"^org/two: holds 2 trace files \(a\.csv, b\.jsonl\); name one: "
                                             r"cope trace pull org/two/FILE"):
        pull_trace("org/two", model=MODEL)
    # Beside other trace files, COPE's own (what `cope trace push` writes) is the one pulled.
    assert pull_trace(REPO, model=MODEL).filename == "data/own.cope.npz"


def test_advise_uses_the_pulled_trace(hub):
    args = PlanChoices(model=MODEL, cpu="desktop-ddr5", tokens=10)
    before = build_request(args)
    assert before.trace.meta.origin == "synthetic"
    result = pull_trace(f"{REPO}/data/routing.jsonl", model=MODEL)
    after = build_request(args)
    assert after.trace.meta.origin == "published" and after.profile.meta.origin == "published"
    assert any(str(result.path) in n and "cached published trace" in n for n in after.notes)
    assert not any("SYNTHETIC" in n for n in after.notes)
    # --trace synthetic still means synthetic.
    forced = build_request(PlanChoices(model=MODEL, cpu="desktop-ddr5", tokens=10, trace="synthetic"))
    assert forced.trace.meta.origin == "synthetic"


def test_advise_offers_an_indexed_trace(monkeypatch, cope_cache):
    entry = IndexEntry(repo_id=REPO, repo_type="dataset", format="jsonl", model=MODEL)
    monkeypatch.setattr(hub_trace, "load_index", lambda: (entry,))
    request = build_request(PlanChoices(model=MODEL, cpu="desktop-ddr5", tokens=10))
    assert request.trace.meta.origin == "synthetic"
    assert any(f"run `cope trace pull {REPO} --model {MODEL}` to use a published trace" in n for n in request.notes)
    assert any("trace: synthetic (no --trace given and no usable cached trace" in n for n in request.notes)


def test_advise_skips_a_damaged_cached_trace(monkeypatch, cope_cache, source):
    folder = cope_cache / "traces"
    folder.mkdir(parents=True)
    save_trace(source, folder / f"{MODEL}-chat.cope.npz")
    (folder / f"{MODEL}-zz.cope.npz").write_bytes(b"PK broken")  # newer, damaged
    request = build_request(PlanChoices(model=MODEL, cpu="desktop-ddr5", tokens=10))
    assert request.trace.meta.origin == source.meta.origin
    assert any("skipped cached trace" in n and "zz.cope.npz" in n for n in request.notes)


# --- failures: one line naming repo/file, nothing partial left ------------------------------


def _assert_nothing_kept(cope_cache, tmp_path, filename):
    assert _cache_files(cope_cache) == []
    assert not [f for f in _hf_files(tmp_path) if f.endswith(filename) or f.endswith(".incomplete")
                or "/blobs/" in f]


def test_missing_file_and_repo(hub, cope_cache, tmp_path):
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/nope\.csv: repository {REPO} has no file data/nope\.csv"):
        pull_trace(f"{REPO}/data/nope.csv", model=MODEL)
    with pytest.raises(CopeInputError, match=r"^org/nothing/t\.csv: repository org/nothing not found on the Hub"):
        pull_trace("org/nothing/t.csv", model=MODEL)
    assert main(["trace", "pull", f"{REPO}/data/nope.csv", "--model", MODEL]) == 2
    _assert_nothing_kept(cope_cache, tmp_path, "nope.csv")


def test_server_error(hub, cope_cache, tmp_path):
    hub.fail("dataset", REPO, "data/decode.csv", status=500, times=None)
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv: .*HTTP 500"):
        pull_trace(f"{REPO}/data/decode.csv", model=MODEL)
    _assert_nothing_kept(cope_cache, tmp_path, "decode.csv")


def test_connection_refused(hf_env, cope_cache, tmp_path):
    endpoint = refused_endpoint()
    hf_env(endpoint)
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv: cannot reach the Hugging Face Hub at "
                                             rf"{endpoint} \(.*\) and data/decode\.csv is not in the Hub cache"):
        pull_trace(f"{REPO}/data/decode.csv", model=MODEL)
    assert _cache_files(cope_cache) == []


def test_truncated_download(hub, cope_cache, tmp_path):
    hub.fail("dataset", REPO, "data/decode.csv", truncate_to=100, methods=("GET",), times=None)
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv: download from the Hub at .* failed: "
                                             r".*nothing was kept"):
        pull_trace(f"{REPO}/data/decode.csv", model=MODEL)
    _assert_nothing_kept(cope_cache, tmp_path, "decode.csv")
    # Once the server behaves, the same pull works.
    hub.failures.clear()
    assert pull_trace(f"{REPO}/data/decode.csv", model=MODEL).path.is_file()


def test_checksum_mismatch_is_refused_and_deleted(hub, cope_cache, tmp_path, capsys):
    rc = main(["trace", "pull", f"{REPO}/data/decode.csv", "--model", MODEL, "--sha256", "0" * 64])
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("cope: error:")]
    assert rc == 2 and len(errors) == 1
    assert errors[0].startswith(f"cope: error: {REPO}/data/decode.csv: checksum mismatch: sha256 ")
    assert errors[0].endswith("--sha256 says " + "0" * 64 + "; refused and deleted the download")
    _assert_nothing_kept(cope_cache, tmp_path, "decode.csv")


def test_checksum_from_the_index(hub, files, cope_cache, tmp_path, monkeypatch):
    entry = IndexEntry(repo_id="org/one-csv", repo_type="dataset", format="llama-moe-trace-csv", model=MODEL,
                       files=("trace.csv",), sha256="f" * 64)
    monkeypatch.setattr(hub_trace, "load_index", lambda: (entry,))
    with pytest.raises(CopeInputError, match=r"^org/one-csv/trace\.csv: checksum mismatch: .* but the index says f+"):
        pull_trace("org/one-csv")
    _assert_nothing_kept(cope_cache, tmp_path, "trace.csv")
    good = dataclass_replace(entry, sha256=hashlib.sha256(files["decode.csv"]).hexdigest())
    monkeypatch.setattr(hub_trace, "load_index", lambda: (good,))
    result = pull_trace("org/one-csv")  # model and file from the index
    assert result.checked_against == "the index" and result.trace.meta.model == MODEL


def test_corrupted_body_is_refused_even_without_a_checksum(hub, cope_cache, tmp_path):
    hub.fail("dataset", REPO, "data/decode.csv", corrupt=True, methods=("GET",))
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv: the download is damaged"):
        pull_trace(f"{REPO}/data/decode.csv", model=MODEL)
    _assert_nothing_kept(cope_cache, tmp_path, "decode.csv")


def test_unknown_formats_and_damaged_files(hub, cope_cache):
    pytest.importorskip("pyarrow", reason="the parquet reader needs pyarrow (the cope[parquet] extra)")
    with pytest.raises(CopeInputError, match=r"^org/parquet/layer_02\.parquet: not a readable Parquet file"):
        pull_trace("org/parquet/layer_02.parquet", model=MODEL)
    entry = IndexEntry(repo_id="org/cardonly", repo_type="dataset", format="unknown", model=MODEL)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hub_trace, "load_index", lambda: (entry,))
        before = len(hub.requests)
        with pytest.raises(CopeInputError, match=r"^org/cardonly: COPE cannot convert this dataset's traces "
                                                 r"\(format unknown"):
            pull_trace("org/cardonly")
        assert len(hub.requests) == before  # refused before any request
        assert hub_trace.entries_for(MODEL) == ()  # and never offered
    assert _cache_files(cope_cache) == []


def test_bad_inputs(hub):
    with pytest.raises(CopeInputError, match=r"expected a Hugging Face repo id org/name"):
        pull_trace("justaname")
    with pytest.raises(CopeInputError, match=r"--sha256 must be 64 hex digits"):
        pull_trace(f"{REPO}/data/decode.csv", model=MODEL, sha256="abc")
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv: say which model the trace is from"):
        pull_trace(f"{REPO}/data/decode.csv")
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/decode\.csv:1: expected 8 comma-separated fields"):
        pull_trace(f"{REPO}/data/decode.csv", model="deepseek-v2-lite-chat")  # top-6, not top-8
    with pytest.raises(CopeInputError, match=rf"^{REPO}/data/own\.cope\.npz: trace \(from {MODEL}\) does not fit"):
        pull_trace(f"{REPO}/data/own.cope.npz", model="qwen3-30b-a3b")


def dataclass_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_index_json_is_valid():
    doc = json.loads((Path(__file__).resolve().parents[1] / "assets" / "trace_index.json").read_text())
    assert doc["format"] == "cope-trace-index" and len(doc["entries"]) == len(load_index()) == 5
