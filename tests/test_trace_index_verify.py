"""The pull's size-before-download and cancellation, `cope trace pull --list` and `--verify-index`,
against the local fake Hub on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")
safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="the CommitMoE entry is safetensors")

from cope_tui.cli import main  # noqa: E402
from cope_tui.sources import hub_trace  # noqa: E402
from cope_tui.sources.hub_trace import IndexEntry, plan_pull, pull_trace  # noqa: E402
from cope_tui.sources.trace_index_verify import UNVERIFIED_NOTE, verify_index  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.core.progress import Cancelled  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from engine.traces import write_llama_moe_trace_csv  # noqa: E402
from tests.hub_server import FakeHub  # noqa: E402

MODEL = "olmoe-1b-7b"
QWEN35 = "qwen3.5-35b-a3b"
LABELS = "layers_v1/chunk_000/labels/part_00000.safetensors"


def _labels_bytes(tmp_path: Path) -> bytes:
    rng = np.random.default_rng(2)
    cells = [(p, t, lyr) for p in (0, 1) for t in range(3) for lyr in range(40)]
    cols = {
        "top_indices": np.stack([rng.choice(256, 8, replace=False) for _ in cells]).astype(np.int16),
        "prompt_idx": np.array([c[0] for c in cells], dtype=np.int32),
        "tok": np.array([c[1] for c in cells], dtype=np.int32),
        "layer": np.array([c[2] for c in cells], dtype=np.int16),
    }
    path = tmp_path / "labels.safetensors"
    safetensors_numpy.save_file(cols, str(path))
    return path.read_bytes()


@pytest.fixture
def csv_bytes(tmp_path) -> bytes:
    trace = synthetic_trace(get_model(MODEL), SyntheticSettings(tokens=40, seed=1, predictor_accuracy=None))
    write_llama_moe_trace_csv(trace, tmp_path / "t.csv")
    return (tmp_path / "t.csv").read_bytes()


@pytest.fixture
def cope_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cope-cache"))
    return tmp_path / "cope-cache"


@pytest.fixture
def hub(hf_env, tmp_path, csv_bytes, cope_cache):
    content = {
        ("dataset", "org/csv", "trace.csv"): csv_bytes,
        ("dataset", "RASMUS/commitmoe-qwen35-fp8-layers-v2", LABELS): _labels_bytes(tmp_path),
        ("dataset", "RASMUS/commitmoe-qwen35-fp8-layers-v2", "layers_v1/chunk_000/prompts.jsonl"): b"{}\n",
        ("dataset", "CMU-FLAME/FLAME-MoE-Traces", "flame-moe-290m/actives/iter_5473/layer_02.parquet"): b"PAR1 junk",
    }
    with FakeHub(content) as server:
        hf_env(server.endpoint)
        yield server


# --- size before download, cancellation -----------------------------------------------------


def test_plan_says_the_file_and_its_size_before_downloading(hub, csv_bytes, monkeypatch):
    plan = plan_pull("org/csv")
    assert (plan.filename, plan.size_bytes) == ("trace.csv", len(csv_bytes))
    assert hub.bytes_sent("trace.csv") == 0  # nothing of the file was fetched to learn its size
    entry = IndexEntry(repo_id="org/csv", repo_type="dataset", format="llama-moe-trace-csv", model=MODEL,
                       files=("trace.csv",), size_bytes={"trace.csv": 12_345_678})
    monkeypatch.setattr(hub_trace, "load_index", lambda: (entry,))
    assert plan_pull("org/csv").describe() == "org/csv/trace.csv (12.3 MB)"  # the index's size when it has one


def test_a_pull_can_be_cancelled_mid_download(hub, csv_bytes, cope_cache, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)  # several progress reports for this small file
    cancel = threading.Event()
    seen = []

    def progress(done: int, total: int, label: str) -> None:
        seen.append((done, total))
        cancel.set()  # the user presses Cancel after the first chunk

    with pytest.raises(Cancelled):
        pull_trace("org/csv/trace.csv", model=MODEL, progress=progress, cancel=cancel)
    assert seen == [(1024, len(csv_bytes))]
    assert hub.bytes_sent("trace.csv") == len(csv_bytes)  # the server sent it; the client stopped reading
    leftovers = [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file() or p.is_symlink()]
    assert not [p for p in leftovers if "blobs" in p.parts or "snapshots" in p.parts]
    assert not cope_cache.exists() or not any(cope_cache.rglob("*.cope.npz"))
    # A later pull without cancelling works.
    assert pull_trace("org/csv/trace.csv", model=MODEL).trace.n_tokens == 40


def test_list_marks_unverified_entries(capsys):
    assert main(["trace", "pull", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(" unverified\t" in ln for ln in lines)
    assert main(["trace", "pull", "--list", "--model", "qwen3.6-35b-a3b"]) == 0
    out = capsys.readouterr().out
    assert "(routing of qwen3.5-35b-a3b, same shape \u2014 not this model's routing) unverified" in out


# --- --verify-index --------------------------------------------------------------------------------


def _index_copy(tmp_path: Path) -> Path:
    shipped = Path(__file__).resolve().parents[1] / "assets" / "trace_index.json"
    target = tmp_path / "trace_index.json"
    target.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def test_verify_index_pins_what_parses_and_leaves_the_rest(hub, tmp_path, capsys):
    pytest.importorskip("pyarrow", reason="the FLAME entry is parquet (the cope[parquet] extra)")
    index = _index_copy(tmp_path)
    rc = main(["trace", "pull", "--verify-index", "--index", str(index)])
    out = capsys.readouterr().out
    assert rc == 2  # the FLAME file on this fake Hub is damaged
    doc = json.loads(index.read_text(encoding="utf-8"))
    by_repo = {e["repo_id"]: e for e in doc["entries"]}
    labels = (tmp_path / "labels.safetensors").read_bytes()
    qwen = by_repo["RASMUS/commitmoe-qwen35-fp8-layers-v2"]
    assert qwen["verified"] is True and qwen["files"] == [LABELS]
    assert qwen["sha256"] == {LABELS: hashlib.sha256(labels).hexdigest()}
    assert qwen["size_bytes"] == {LABELS: len(labels)}
    assert UNVERIFIED_NOTE not in qwen["note"] and "6 tokens x 40 layers, top-8" in qwen["note"]
    flame = by_repo["CMU-FLAME/FLAME-MoE-Traces"]
    assert flame["verified"] is False and flame["sha256"] is None and UNVERIFIED_NOTE in flame["note"]
    gpt = by_repo["AmanPriyanshu/GPT-OSS-20B-MoE-expert-activations"]
    assert gpt["verified"] is False and gpt["files"] is None  # format unknown: skipped, never downloaded
    assert f"RASMUS/commitmoe-qwen35-fp8-layers-v2\tverified\t{LABELS}: sha256 " in out
    assert "CMU-FLAME/FLAME-MoE-Traces\tfailed\t" in out and "not a readable Parquet file" in out
    assert not any(r.path.startswith("/datasets/AmanPriyanshu/") for r in hub.requests)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".trace_index")) == []  # no temp left


def test_a_verified_entry_is_pulled_against_its_pinned_checksum(hub, tmp_path, monkeypatch):
    index = _index_copy(tmp_path)
    verify_index(index)
    doc = json.loads(index.read_text(encoding="utf-8"))
    entries = tuple(hub_trace._entry(e) for e in doc["entries"])
    monkeypatch.setattr(hub_trace, "load_index", lambda: entries)
    match = hub_trace.entries_for(QWEN35)[0]
    assert hub_trace.entry_label(match) == "RASMUS/commitmoe-qwen35-fp8-layers-v2"  # verified: no "unverified"
    result = pull_trace("RASMUS/commitmoe-qwen35-fp8-layers-v2")  # file and model from the index
    assert result.checked_against == "the index" and result.trace.meta.model == QWEN35
    assert result.trace.n_tokens == 6 and result.trace.n_sequences == 2


def test_a_same_shape_pull_says_whose_routing_it_is(hub, tmp_path, monkeypatch):
    index = _index_copy(tmp_path)
    verify_index(index)
    entries = tuple(hub_trace._entry(e) for e in json.loads(index.read_text(encoding="utf-8"))["entries"])
    monkeypatch.setattr(hub_trace, "load_index", lambda: entries)
    result = pull_trace("RASMUS/commitmoe-qwen35-fp8-layers-v2", model="qwen3.6-35b-a3b")
    assert result.trace.meta.model == "qwen3.6-35b-a3b"  # filed where `cope advise --model qwen3.6-35b-a3b` looks
    assert ("routing of qwen3.5-35b-a3b, same shape as qwen3.6-35b-a3b: a stand-in, not this model's routing"
            in result.trace.meta.notes)
