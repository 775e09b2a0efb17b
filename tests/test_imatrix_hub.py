"""`cope trace pull --imatrix` and the imatrix index, against a local fake Hub on
127.0.0.1 (never the internet)."""

from __future__ import annotations

import hashlib
import json
import time
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("gguf")

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main  # noqa: E402
from cope_tui.sources import hub_imatrix  # noqa: E402
from cope_tui.sources.hub_imatrix import imatrix_entries_for, is_imatrix_name, load_imatrix_index  # noqa: E402
from cope_tui.sources.hub_trace import entries_for  # noqa: E402
from cope_tui.sources.imatrix import read_imatrix  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.models.catalog import catalog  # noqa: E402
from engine.traces.imatrix_index import FORMATS, SEEN, ImatrixEntry, parse_index  # noqa: E402
from engine.traces.imatrix_verified import load_verified, record_path  # noqa: E402
from tests.hub_server import FakeHub, refused_endpoint  # noqa: E402
from tests.imatrix_files import moe_counts, write_imatrix_gguf, write_legacy_dat  # noqa: E402

REPO = "org/Tiny-MoE-GGUF"
COUNTS = np.array([[4, 0, 2, 2], [1, 3, 3, 1]])
ASSET = Path(__file__).resolve().parents[1] / "assets" / "imatrix_index.json"
MODEL = "olmoe-1b-7b"  # the entries the tests below put in the index name this catalog model


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own COPE cache: the record of downloads starts empty."""
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cope-cache"))


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


def entry(file: str | None, **kw) -> ImatrixEntry:  # type: ignore[no-untyped-def]
    fields = dict(model=MODEL, repo_id=REPO, repo_type="model", file=file, format="gguf", quantizer="org",
                  seen="file", source="https://example.org/card", convention=None, verified=False,
                  has_expert_counts=None, note="")
    fields.update(kw)
    return ImatrixEntry(**fields)


@pytest.fixture
def indexed(monkeypatch):
    """The index holds three entries of MODEL: the GGUF imatrix and the legacy file (both
    seen), and the repo alone by a convention."""
    entries = (entry("imatrix.gguf"), entry("Tiny-MoE.imatrix", format="unknown"),
               entry(None, repo_id="other/Tiny-MoE-GGUF", seen="none", source=None,
                     convention="other's naming convention, not seen", format="unknown"))
    monkeypatch.setattr(hub_imatrix, "load_imatrix_index", lambda: entries)
    return entries


def listing(capsys, model: str = MODEL) -> list[str]:
    assert main(["trace", "pull", "--list", "--imatrix", "--model", model]) == EXIT_OK
    return capsys.readouterr().out.splitlines()


# --- the shipped index --------------------------------------------------------------------


def test_the_index_lists_every_catalog_model_unverified_saying_what_was_seen():
    doc = json.loads(ASSET.read_text())
    entries = load_imatrix_index()
    ids = set(catalog())
    assert {e.model for e in entries} == ids  # every catalog model has somewhere to look
    for e in entries:
        assert e.model in ids and e.repo_type == "model" and e.verified is False and e.has_expert_counts is None
        assert e.format in FORMATS and e.seen in SEEN
        if e.file:
            assert is_imatrix_name(e.file), e.file
            if e.file.endswith(".dat"):
                assert e.format == "legacy", e
            if e.file.endswith(".gguf"):
                assert e.format == "gguf", e
        if e.seen == "none":  # a convention, never presented as seen
            assert e.source is None and e.convention.endswith("naming convention, not seen")
            assert e.convention.startswith(e.quantizer) and e.repo_id.startswith(e.quantizer + "/")
        else:
            assert e.source.startswith(("https://", "http://"))
        if e.seen == "file":
            assert e.file and e.convention is None
    # Some files were seen named, for several models: the index is not conventions only.
    assert len({e.model for e in entries if e.seen == "file"}) >= 8
    assert "not_searched" not in doc["searched"]


@pytest.mark.parametrize("change, needle", [
    ({"verified": True}, '"verified": false'),
    ({"seen": "file", "source": None}, "needs the page it was seen on"),
    ({"seen": "none", "source": "https://x.org", "convention": None}, "must name its 'convention'"),
    ({"format": "safetensors"}, "is not one of"),
    ({"has_expert_counts": True}, "null until the file is read"),
    ({"repo_id": "no-slash"}, "is not a Hub repo id"),
    ({"file": 3}, "expected a non-empty string"),
])
def test_a_malformed_index_entry_is_one_line_naming_it(change, needle):
    doc = json.loads(ASSET.read_text())
    doc["entries"][0].update(change)
    with pytest.raises(CopeInputError) as exc:
        parse_index(doc, "index.json")
    line = str(exc.value)
    assert line.startswith("index.json: entry 0") and needle in line and "\n" not in line, line


def test_an_index_of_another_version_is_refused():
    doc = json.loads(ASSET.read_text())
    with pytest.raises(CopeInputError, match="imatrix index version 1; this COPE reads 2"):
        parse_index({**doc, "version": 1}, "index.json")


@pytest.mark.parametrize("name, expected", [
    ("imatrix_unsloth.gguf_file", True), ("imatrix_unsloth.dat", True), ("imat-f16-gmerged.dat", True),
    ("DeepSeek-V3-0324.imatrix", True), ("Qwen3-30B-A3B-Q4_K_M.gguf", False),
    ("qwen-2.5-3b-rp-iq4_xs-imat.gguf", False),  # a model quantized with an imatrix
    ("estimate.dat", False), ("imatrix.dataset", False), ("imatrix.log", False),
    ("ggml-model-q4_0_imatrix.gguf", False), ("model-Q4_K_M-imatrix.gguf", False), ("x-IQ3_XXS.imatrix.gguf", False),
    ("Qwen3.5-122B-A10B-f16-imatrix-4735-generic.gguf", True),  # named after the F16 model it was computed on
    ("ggml-mixtral-8x7b-instruct-v0.1-q8_0-imatrix.dat", True),
])
def test_what_counts_as_an_imatrix_file_name(name, expected):
    assert is_imatrix_name(name) is expected


def test_listing_a_model_says_unverified_and_where_each_entry_comes_from(capsys):
    lines = listing(capsys, "qwen3-30b-a3b")
    assert lines and all("\tunverified\t" in ln for ln in lines)
    seen = [ln for ln in lines if ln.startswith("geoffmunn/iMatrix/Qwen3-Coder-30B-A3B-Instruct-f16-imatrix-4697")]
    assert len(seen) == 1 and "GGUF imatrix (per-expert counts expected)" in seen[0]
    assert seen[0].endswith("seen at https://huggingface.co/geoffmunn/iMatrix/commit/"
                            "14636ebe7a5609678acb6e61939d6bb95daf4044")
    bartowski = next(ln for ln in lines if ln.startswith("bartowski/Qwen_Qwen3-30B-A3B-GGUF/"))
    assert "repo seen at https://huggingface.co/models?other=base_model:quantized:Qwen/Qwen3-30B-A3B" in bartowski
    assert bartowski.endswith("file by bartowski's naming convention, not seen")
    mrad = next(ln for ln in lines if ln.startswith("mradermacher/"))
    assert "legacy .dat (no per-expert counts expected)" in mrad and mrad.endswith("not seen")


# --- downloads marked verified in the user's record --------------------------------------


def test_a_download_marks_the_entry_verified_with_its_sha256(hub, indexed, capsys):
    shipped = ASSET.read_bytes()
    before = listing(capsys)
    assert before[0].startswith(f"{REPO}/imatrix.gguf\tunverified\t")
    code, out, _ = run(capsys, f"{REPO}/imatrix.gguf")
    assert code == EXIT_OK
    sha = hashlib.sha256(Path(out.strip()).read_bytes()).hexdigest()
    after = listing(capsys)
    assert after[0].startswith(f"{REPO}/imatrix.gguf\tverified {time.strftime('%Y-%m-%d', time.gmtime())} "
                               f"sha256 {sha[:12]}\tper-expert counts\tseen at https://example.org/card")
    assert "\tunverified\t" in after[1]  # the other file of the repo stays unverified
    record = load_verified()[f"model:{REPO}/imatrix.gguf"]
    assert record.sha256 == sha and record.size_bytes == len(hub.files[("model", REPO, "imatrix.gguf")])
    assert record.revision == hub.commit("model", REPO) and record.has_expert_counts
    assert record.what == "2 MoE blocks x 4 experts (calib.txt; 3 chunks of 64 tokens)"
    assert ASSET.read_bytes() == shipped  # the shipped index is never rewritten


def test_a_legacy_download_is_recorded_as_having_no_counts(hub, indexed, capsys):
    code, _, _ = run(capsys, f"{REPO}/Tiny-MoE.imatrix")
    assert code == EXIT_INPUT
    lines = listing(capsys)
    assert "\tverified " in lines[1] and "no per-expert counts (legacy)" in lines[1]


def test_a_repo_entry_without_a_file_lists_what_was_downloaded_from_it(hub, indexed, capsys):
    hub.add("model", "other/Tiny-MoE-GGUF", "x.imatrix.gguf", hub.files[("model", REPO, "imatrix.gguf")])
    assert run(capsys, "other/Tiny-MoE-GGUF/x.imatrix.gguf")[0] == EXIT_OK
    lines = listing(capsys)
    assert lines[2].startswith("other/Tiny-MoE-GGUF/(file not known)\tverified ")
    assert lines[3].startswith("  other/Tiny-MoE-GGUF/x.imatrix.gguf\tverified ")


def test_a_damaged_record_is_set_aside_with_one_warning(hub, indexed, capsys):
    assert run(capsys, f"{REPO}/imatrix.gguf")[0] == EXIT_OK
    path = record_path()
    path.write_text('{"schema": "cope-imatrix-verified", "schema_version": 1, "files": [{"sha256": "zz"}]}')
    assert main(["trace", "pull", "--list", "--imatrix", "--model", MODEL]) == EXIT_OK
    out, err = capsys.readouterr()
    warned = [ln for ln in err.splitlines() if ln.startswith("cope: warning:")]
    assert len(warned) == 1 and "not used, moved to verified.json.corrupt-" in warned[0], err
    assert "\tunverified\t" in out.splitlines()[0]  # the mark is lost, nothing else
    assert list(path.parent.glob("verified.json.corrupt-*")) and not path.exists()


def test_a_cut_download_resumes_from_where_it_stopped(hub, indexed, capsys, monkeypatch):
    """The connection drops after 100 bytes: huggingface_hub asks for the rest (Range
    bytes=N-, N the bytes it kept) in the same pull, and the file read is whole. Its chunks
    are made small so the cut falls after one (a real imatrix is many 10 MB chunks)."""
    from huggingface_hub import constants, file_download

    monkeypatch.setattr(file_download, "time", types.SimpleNamespace(**{**vars(time), "sleep": lambda s: None}))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 32)
    hub.fail("model", REPO, "imatrix.gguf", truncate_to=100, methods=("GET",), times=1)
    code, out, err = run(capsys, f"{REPO}/imatrix.gguf")
    assert code == EXIT_OK, err
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("/imatrix.gguf")]
    assert len(gets) == 2 and gets[0].range is None and gets[1].status == 206, gets
    kept = int(gets[1].range.removeprefix("bytes=").removesuffix("-"))
    size = len(hub.files[("model", REPO, "imatrix.gguf")])
    assert 0 < kept <= 100 and gets[1].bytes_sent == size - kept  # only the rest was sent again
    assert read_imatrix(out.strip()).counts.tolist() == COUNTS.tolist()


def test_a_second_pull_comes_from_the_hub_cache(hub, indexed, capsys):
    first = run(capsys, f"{REPO}/imatrix.gguf")
    sent = hub.bytes_sent("imatrix.gguf")
    second = run(capsys, f"{REPO}/imatrix.gguf")
    assert first[1] == second[1] and hub.bytes_sent("imatrix.gguf") == sent  # nothing sent again


def test_a_model_without_a_published_trace_is_pointed_at_its_imatrix_entries(capsys):
    """The trace listing of a model the trace index has no trace for names the imatrix
    listing, with how many of its entries were seen named on a page."""
    model = "glm-4.7"  # no published trace; 2 repos seen, 3 by convention
    assert not entries_for(model)
    kinds = [e.seen for e in imatrix_entries_for(model)]
    assert main(["trace", "pull", "--list", "--model", model]) == EXIT_OK
    err = capsys.readouterr().err
    assert "offers no published trace" in err and f"--list --imatrix --model {model}" in err, err
    assert (f"({kinds.count('file')} files and {kinds.count('repo')} repos seen on a page, "
            f"{kinds.count('none')} by quantizers' naming conventions;") in err, err


def test_an_entry_without_a_file_takes_its_repos_one_imatrix(hub):
    """The app's Download of a repo-only entry: the repo's one imatrix file; a repo with
    several is one line naming them."""
    hub.add("model", "solo/Tiny-MoE-GGUF", "Tiny-MoE.imatrix.gguf", hub.files[("model", REPO, "imatrix.gguf")])
    hub.add("model", "solo/Tiny-MoE-GGUF", "Tiny-MoE-Q4_K_M.gguf", b"GGUF not a real model")
    local = hub_imatrix.pull_entry_file("solo/Tiny-MoE-GGUF", None)
    assert read_imatrix(local).counts.tolist() == COUNTS.tolist()
    assert f"model:solo/Tiny-MoE-GGUF/Tiny-MoE.imatrix.gguf" in load_verified()
    with pytest.raises(CopeInputError) as exc:
        hub_imatrix.pull_entry_file(REPO, None)
    assert str(exc.value) == (f"{REPO}: holds 2 imatrix files (Tiny-MoE.imatrix, imatrix.gguf): download one with "
                              f"cope trace pull --imatrix {REPO}/FILE and give its path")


def test_a_file_too_large_for_an_imatrix_is_not_downloaded(hub, monkeypatch, capsys):
    """A listed name can still be a model (20 GB): the size the Hub states is checked first."""
    monkeypatch.setattr(hub_imatrix, "MAX_IMATRIX_BYTES", 1000)  # the test file is 2,432 bytes
    code, out, err = run(capsys, f"{REPO}/imatrix.gguf")
    assert code == EXIT_INPUT and out == ""
    assert err.strip().splitlines()[-1] == (f"cope: error: {REPO}/imatrix.gguf: is 2,432 bytes, more than any imatrix "
                                            "file (1,000 at most): a model file? not downloaded")
    assert not [r for r in hub.requests if r.method == "GET"] and not load_verified()
