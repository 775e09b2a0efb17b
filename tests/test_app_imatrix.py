"""The Trace tab's imatrix files (issue 31): it lists the imatrix index's entries of the model
(verified by the user's downloads, or not), downloads one in a cancellable worker and
prices with it, and takes a local imatrix as the profile with the same ranking as
`cope advise --profile-trace`. Hub calls are faked; the real download is tested against a
local server in tests/test_imatrix_hub.py."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("textual")
pytest.importorskip("gguf")

from textual.widgets import Input, Select  # noqa: E402

from cope_tui.cli import EXIT_OK, main  # noqa: E402
from cope_tui.sources import hub_imatrix  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.core.progress import Cancelled  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.traces.imatrix_index import ImatrixEntry  # noqa: E402
from engine.traces.imatrix_verified import VerifiedFile, now_utc, record_download  # noqa: E402
from engine.traces.popularity import PopularityProfile  # noqa: E402
from tests.imatrix_files import moe_counts, write_imatrix_gguf  # noqa: E402
from tests.test_app import FAST, make_app, make_services, settle, text_of  # noqa: E402
from tests.test_imatrix import DS, distinct_counts  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]

CHOICES = FAST.with_(model=DS, cpu="desktop-ddr5", gpu="rtx-4090", tokens=100)
REPO = "org/DeepSeek-V2-Lite-Chat-GGUF"
ENTRIES = (
    ImatrixEntry(model=DS, repo_id=REPO, repo_type="model", file="imatrix.gguf", format="gguf", quantizer="org",
                 seen="file", source="https://example.org/card", convention=None, verified=False,
                 has_expert_counts=None, note=""),
    ImatrixEntry(model=DS, repo_id="bartowski/x_DeepSeek-V2-Lite-Chat-GGUF", repo_type="model", file=None,
                 format="unknown", quantizer="bartowski", seen="none", source=None,
                 convention="bartowski's naming convention, not seen", verified=False, has_expert_counts=None,
                 note=""),
)


@pytest.fixture
def indexed(monkeypatch):
    monkeypatch.setattr(hub_imatrix, "load_imatrix_index", lambda: ENTRIES)


@pytest.fixture
def ds_file(tmp_path) -> Path:
    model = get_model(DS)
    counts = distinct_counts(model.n_moe_layers, model.n_routed_experts, model.top_k, seed=5)
    return write_imatrix_gguf(tmp_path / "ds.imatrix.gguf", moe_counts(counts, tuple(model.moe_blocks)),
                              datasets=("groups_merged.txt",), chunk_count=40, chunk_size=512)


def labels(app) -> list[str]:  # type: ignore[no-untyped-def]
    select = app.query_one("#imatrix-entry", Select)
    return [str(prompt) for prompt, value in select._options if value is not Select.NULL]


def fake_download(path: Path, calls: list):  # type: ignore[no-untyped-def]
    """A pull_imatrix service that 'downloads' `path` and records it, as the real one does."""

    def pull(repo_id, filename, *, repo_type, progress, cancel):  # type: ignore[no-untyped-def]
        calls.append((repo_id, filename))
        progress(50, 100, f"downloading {filename}")
        data = path.read_bytes()
        record_download(VerifiedFile(repo_type, repo_id, filename, None, hashlib.sha256(data).hexdigest(), len(data),
                                     now_utc(), True, "26 MoE blocks x 64 experts"))
        return str(path)

    return pull


async def test_the_trace_tab_lists_the_index_entries_with_where_they_come_from(indexed):
    app = make_app(make_services(), choices=CHOICES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        assert labels(app) == [f"unverified  {REPO}/imatrix.gguf",
                               "unverified  bartowski/x_DeepSeek-V2-Lite-Chat-GGUF/(file not known)"]
        info = text_of(app, "#imatrix-info")
        assert info == ("unverified; GGUF imatrix (per-expert counts expected); seen at https://example.org/card")
        app.query_one("#imatrix-entry", Select).value = 1
        await pilot.pause()
        assert text_of(app, "#imatrix-info").endswith("by bartowski's naming convention, not seen")


async def test_download_prices_with_the_imatrix_and_marks_it_verified(indexed, ds_file):
    calls: list = []
    app = make_app(replace(make_services(), pull_imatrix=fake_download(ds_file, calls)), choices=CHOICES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.click("#imatrix-pull")
        await settle(pilot)
        assert calls == [(REPO, "imatrix.gguf")]
        assert app.choices.profile_trace == str(ds_file)
        profile = app.advice.request.profile
        assert isinstance(profile, PopularityProfile) and profile.meta.source == str(ds_file)
        assert text_of(app, "#record-status").startswith(f"Downloaded {REPO}/imatrix.gguf to {ds_file}")
        assert labels(app)[0] == f"verified  {REPO}/imatrix.gguf"
        assert text_of(app, "#imatrix-info").startswith("verified ")


async def test_escape_cancels_an_imatrix_download(indexed, ds_file):
    started, seen = threading.Event(), []

    def pull(repo_id, filename, *, repo_type, progress, cancel):  # type: ignore[no-untyped-def]
        progress(1_000, 10_000_000, f"downloading {filename}")
        started.set()
        seen.append(cancel.wait(timeout=20))  # the download loop checks the event at each chunk
        raise Cancelled

    app = make_app(replace(make_services(), pull_imatrix=pull), choices=CHOICES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.click("#imatrix-pull")
        for _ in range(200):
            if started.is_set() and "downloading" in text_of(app, "#record-status"):
                break
            await pilot.pause(0.05)
        assert "downloading imatrix.gguf (Escape cancels)" in text_of(app, "#record-status")
        await pilot.press("escape")
        await settle(pilot)
        assert seen == [True]
        assert text_of(app, "#record-status") == "Imatrix download cancelled; nothing was kept."
        assert app.choices.profile_trace is None


async def test_offline_is_one_line(indexed):
    def pull(repo_id, filename, **kw):  # type: ignore[no-untyped-def]
        raise CopeInputError("cannot reach the Hugging Face Hub at https://huggingface.co (connection refused) and "
                             "imatrix.gguf is not in the Hub cache", path=f"{repo_id}/{filename}")

    app = make_app(replace(make_services(), pull_imatrix=pull), choices=CHOICES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.click("#imatrix-pull")
        await settle(pilot)
        status = text_of(app, "#record-status")
        assert status.startswith(f"Imatrix download failed: {REPO}/imatrix.gguf: cannot reach the Hugging Face Hub")
        assert "\n" not in status and app.choices.profile_trace is None


async def test_a_local_imatrix_as_profile_ranks_as_the_cli_does(ds_file, capsys):
    """The Profile field takes the file as --profile-trace does: the same candidates in the
    same order with the same time per token as `cope advise --profile-trace`."""
    assert main(["advise", "--json", "--model", DS, "--cpu", "desktop-ddr5", "--gpu", "rtx-4090", "--tokens", "100",
                 "--profile-trace", str(ds_file)]) == EXIT_OK
    cli = [(c["id"], c["tpot_s"]) for c in json.loads(capsys.readouterr().out)["candidates"]]
    app = make_app(make_services(), choices=CHOICES)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        field = app.query_one("#profile-path", Input)
        field.value = str(ds_file)
        app.screen.set_focus(field)
        await pilot.press("enter")
        await settle(pilot)
        assert app.choices.profile_trace == str(ds_file)
        got = [(e.candidate.id, e.tpot_s) for e in app.advice.rec.estimates]
    assert [i for i, _ in got] == [i for i, _ in cli]
    assert [t for _, t in got] == pytest.approx([t for _, t in cli], rel=1e-9)


async def test_download_through_the_hub_client_from_a_local_server(indexed, ds_file, hf_env, monkeypatch):
    """The app's own pull service, not a fake: the file comes from a local stand-in for the
    Hub through huggingface_hub's cache, is read, recorded verified and priced with."""
    from tests.hub_server import FakeHub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # app_caches sets it; this test has a Hub
    with FakeHub({("model", REPO, "imatrix.gguf"): ds_file.read_bytes()}) as server:
        hf_env(server.endpoint)
        app = make_app(make_services(), choices=CHOICES)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await pilot.press("3")
            await pilot.click("#imatrix-pull")
            await settle(pilot)
            local = app.choices.profile_trace
            assert local and Path(local).read_bytes() == ds_file.read_bytes() and local != str(ds_file)
            assert labels(app)[0] == f"verified  {REPO}/imatrix.gguf"
            assert isinstance(app.advice.request.profile, PopularityProfile)
