"""`cope trace pull --imatrix` and the imatrix index, against a local fake Hub on
127.0.0.1 (never the internet)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("gguf")

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main  # noqa: E402
from cope_tui.sources.hub_imatrix import imatrix_entries_for, is_imatrix_name, load_imatrix_index  # noqa: E402
from cope_tui.sources.hub_trace import entries_for  # noqa: E402
from cope_tui.sources.imatrix import read_imatrix  # noqa: E402
from engine.models.catalog import catalog  # noqa: E402
from tests.hub_server import FakeHub, refused_endpoint  # noqa: E402
from tests.imatrix_files import moe_counts, write_imatrix_gguf, write_legacy_dat  # noqa: E402

REPO = "org/Tiny-MoE-GGUF"
COUNTS = np.array([[4, 0, 2, 2], [1, 3, 3, 1]])


@pytest.fixture
def hub(hf_env, tmp_path):
    gguf = write_imatrix_gguf(tmp_path / "made.gguf", moe_counts(COUNTS, (0, 1)), datasets=("calib.txt",))
    legacy = write_legacy_dat(tmp_path / "made.dat", {"blk.0.ffn_up_exps.weight": 16})
    content = {
        ("model", REPO, "Tiny-MoE-Q4_K_M.gguf"): b"GGUF not a real model",
        ("model", REPO, "imatrix.gguf"): gguf.read_bytes(),
        ("model", REPO, "Tiny-MoE.imatrix"): legacy.read_bytes(),
        ("model", REPO, "README.md"): b"# quants\n",
        ("model", "org/no-imatrix", "model.gguf"): b"GGUF",
    }
    with FakeHub(content) as server:
        hf_env(server.endpoint)
        yield server


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["trace", "pull", "--imatrix", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_lists_the_imatrix_files_of_a_gguf_repo(hub, capsys):
    code, out, _ = run(capsys, REPO)
    assert code == EXIT_OK
    assert out.split() == [f"{REPO}/Tiny-MoE.imatrix", f"{REPO}/imatrix.gguf"]  # not the model, not the README


def test_a_repo_without_one_is_one_line(hub, capsys):
    code, _, err = run(capsys, "org/no-imatrix")
    assert code == EXIT_INPUT and err.strip().count("\n") == 0 and "no imatrix file in the repo" in err


def test_downloads_one_reads_it_and_prints_its_path(hub, capsys):
    code, out, err = run(capsys, f"{REPO}/imatrix.gguf")
    assert code == EXIT_OK, err
    local = out.strip()
    assert read_imatrix(local).counts.tolist() == COUNTS.tolist()
    assert "per-expert counts of 2 MoE blocks x 4 experts (calib.txt; 3 chunks of 64 tokens)" in err
    assert "--profile-trace" in err


def test_a_legacy_one_is_refused_naming_the_hub_file(hub, capsys):
    code, out, err = run(capsys, f"{REPO}/Tiny-MoE.imatrix")
    assert code == EXIT_INPUT and out == ""
    line = err.strip().splitlines()[-1]  # after the "downloading" narration
    assert line == (f"cope: error: {REPO}/Tiny-MoE.imatrix: a legacy llama-imatrix file (1 tensors): it keeps no "
                    "per-expert counts, so no expert popularity; llama-imatrix -m MODEL.gguf -f TEXT -o imatrix.gguf "
                    "writes one with them")


def test_offline_is_one_line(hf_env, capsys):
    hf_env(refused_endpoint())
    code, _, err = run(capsys, REPO)
    assert code == EXIT_INPUT and err.strip().count("\n") == 0 and "cannot reach the Hugging Face Hub" in err


def test_the_index_lists_where_imatrix_files_are_published_unverified(capsys):
    entries = load_imatrix_index()
    assert entries
    ids = set(catalog())
    doc = json.loads((Path(__file__).resolve().parents[1] / "assets" / "imatrix_index.json").read_text())
    assert set(doc["searched"]["not_searched"]) <= ids
    for e in entries:
        assert e.model in ids and e.repo_type == "model" and e.verified is False and e.has_expert_counts is None
        assert e.seen_at.startswith("https://") and e.file and is_imatrix_name(e.file)
    # Every catalog model is either looked up (an entry) or said not to be.
    assert {e.model for e in entries} | set(doc["searched"]["not_searched"]) == ids
    code = main(["trace", "pull", "--imatrix", "--list", "--model", entries[0].model])
    out = capsys.readouterr().out
    assert code == EXIT_OK and f"{entries[0].repo_id}/{entries[0].file} unverified" in out


def test_a_model_without_a_published_trace_is_pointed_at_its_published_imatrix(capsys):
    """The trace listing of a model the index has no trace for, but an imatrix, names the
    imatrix listing; one without either says only that no trace is published."""
    entry = next(e for e in load_imatrix_index() if not entries_for(e.model))
    assert main(["trace", "pull", "--list", "--model", entry.model]) == EXIT_OK
    err = capsys.readouterr().err
    assert "offers no published trace" in err and f"--list --imatrix --model {entry.model}" in err, err
    bare = next(m for m in catalog() if not entries_for(m) and not imatrix_entries_for(m))
    assert main(["trace", "pull", "--list", "--model", bare]) == EXIT_OK
    assert "imatrix" not in capsys.readouterr().err
