"""`cope trace record` -> `cope trace push` -> `cope trace pull` through the local fake Hub (never the internet)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")

from cope_tui.cli import main  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from engine.traces.trace_card import CardFacts, dataset_card, quantization_of, runtime_of  # noqa: E402
from engine.traces import load_trace, save_trace  # noqa: E402
from tests.hub_server import FakeHub  # noqa: E402

REPO = "someone/tiny-moe-routing"
TOKEN = "hf_not_a_real_token"


@pytest.fixture
def hub(hf_env, tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cope-cache"))
    with FakeHub() as server:
        hf_env(server.endpoint)
        yield server


def test_record_push_pull_round_trip(tiny_model_folder, hub, tmp_path, monkeypatch, capsys):
    recorded = tmp_path / "mine.cope.npz"
    assert main(["trace", "record", "--model", str(tiny_model_folder), "--domain", "math", "--tokens", "2",
                 "--device", "cpu", "--out", str(recorded)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("HF_TOKEN", TOKEN)

    rc = main(["trace", "push", REPO, "--trace", str(recorded), "--private", "--licence", "apache-2.0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.strip() == f"{hub.endpoint}/datasets/{REPO}"
    assert hub.created == {("dataset", REPO): "private"}
    assert {f for (t, r, f) in hub.files if (t, r) == ("dataset", REPO)} == {"trace.cope.npz", "routing.csv",
                                                                             "README.md"}
    posts = [r for r in hub.requests if r.method == "POST"]
    assert [p.path for p in posts] == ["/api/repos/create", "/api/validate-yaml",
                                       f"/api/datasets/{REPO}/preupload/main", f"/api/datasets/{REPO}/commit/main"]
    assert all(p.authorization == f"Bearer {TOKEN}" for p in posts)
    assert hub.files[("dataset", REPO, "trace.cope.npz")] == recorded.read_bytes()

    trace = load_trace(recorded)
    card = hub.files[("dataset", REPO, "README.md")].decode()
    assert card.startswith("---\nlicense: apache-2.0\n")
    assert f"| model | {trace.meta.model} |" in card and "| prompts' domain | math |" in card
    assert f"| tokens | {trace.n_tokens:,} decode tokens in {trace.n_sequences} sequences |" in card
    assert "| runtime | transformers " in card and "| quantization | float32 |" in card
    assert f"| date | {dt.datetime.now(dt.timezone.utc).date().isoformat()} |" in card
    assert f"| how recorded | {trace.meta.recorded_with.replace('|', '/')} |" in card
    assert f"cope trace pull {REPO}" in card
    csv_rows = hub.files[("dataset", REPO, "routing.csv")].decode().splitlines()
    assert len(csv_rows) == trace.n_tokens * trace.n_layers

    # What push wrote, pull reads back: COPE's own file, the model named in it.
    assert main(["trace", "pull", REPO, "--out", str(tmp_path / "back.cope.npz")]) == 0
    out, err = capsys.readouterr()
    assert "trace.cope.npz" in err and out.strip() == str(tmp_path / "back.cope.npz")
    back = load_trace(tmp_path / "back.cope.npz")
    np.testing.assert_array_equal(back.expert_ids, trace.expert_ids)
    np.testing.assert_array_equal(back.seq_starts, trace.seq_starts)
    np.testing.assert_allclose(back.weights, trace.weights)
    assert back.meta.model == trace.meta.model and back.meta.origin == "published"
    assert back.meta.source.startswith(f"hf://datasets/{REPO}/trace.cope.npz@")


def test_push_refusals_are_one_line(hub, tmp_path, monkeypatch, capsys):
    trace = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=8, seed=1, predictor_accuracy=None))
    made_up = tmp_path / "synthetic.cope.npz"
    save_trace(trace, made_up)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["trace", "push", REPO, "--trace", str(made_up)]) == 2
    err = capsys.readouterr().err
    assert f"{made_up}: is a synthetic trace: `cope trace push` publishes traces you recorded" in err
    assert main(["trace", "push", REPO, "--model", "olmoe-1b-7b"]) == 2
    assert "no recorded trace of olmoe-1b-7b in the trace cache" in capsys.readouterr().err
    assert not [r for r in hub.requests if r.method == "POST"]  # refused before any upload


def test_push_without_a_token_says_how_to_log_in(hub, tmp_path, monkeypatch, capsys):
    import dataclasses

    trace = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=8, seed=1, predictor_accuracy=None))
    recorded = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, origin="recorded"))
    path = tmp_path / "r.cope.npz"
    save_trace(recorded, path)
    assert main(["trace", "push", REPO, "--trace", str(path)]) == 2
    assert "publishing needs a Hugging Face token with write access: run `hf auth login`" in capsys.readouterr().err
    assert hub.requests == []


def test_card_states_what_it_does_not_know():
    trace = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=8, seed=1, predictor_accuracy=None))
    card = dataset_card(trace, CardFacts(repo_id=REPO, date="2026-11-30", licence="cc-by-4.0"))
    assert "| runtime | not stated |" in card and "| quantization | not stated |" in card
    assert runtime_of("llama-cpp-python 0.3.36, 99 layers on GPU, greedy") == "llama.cpp (llama-cpp-python 0.3.36)"
    import dataclasses

    named = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, model="OLMoE-1B-7B-0125-Instruct-Q4_K_M"))
    assert quantization_of(named) == "Q4_K_M"
