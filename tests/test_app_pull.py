"""The app's Pull: offered from the trace index, says what it downloads and how large first,
downloads on the second press, and Escape cancels mid-download. Hub calls are faked."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from cope_tui.sources import hub_trace
from cope_tui.sources.hub_trace import IndexEntry, PullPlan
from engine.core.progress import Cancelled
from tests.test_app import FAST, make_app, make_services, settle, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]

MODEL = "olmoe-1b-7b"
ENTRY = IndexEntry(repo_id="org/olmoe-traces", repo_type="dataset", format="jsonl", model="olmoe-1b-7b-0924",
                   shape_fits=(MODEL,))
PLAN = PullPlan(repo_id="org/olmoe-traces", repo_type="dataset", filename="data/routing.jsonl", revision=None,
                size_bytes=12_300_000, entry=ENTRY)


@pytest.fixture
def indexed(monkeypatch):
    monkeypatch.setattr(hub_trace, "load_index", lambda: (ENTRY,))


@pytest.fixture
def pulled_file(tmp_path):
    from engine.models.catalog import get_model
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace
    from engine.traces import save_trace

    path = tmp_path / "pulled.cope.npz"
    save_trace(synthetic_trace(get_model(MODEL), SyntheticSettings(tokens=200, seed=4, sequences=1)), path)
    return path


async def relayout(pilot) -> None:  # type: ignore[no-untyped-def]
    """Let the screen lay out again after a status line changed size."""
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.1)


async def test_pull_says_what_and_how_large_then_downloads_on_the_second_press(indexed, pulled_file):
    planned, asked = [], []

    def plan_pull(spec):  # type: ignore[no-untyped-def]
        planned.append(spec)
        return PLAN

    def pull(spec, model_id, log, progress, cancel):  # type: ignore[no-untyped-def]
        asked.append((spec, model_id))
        progress(6_000_000, 12_300_000, "downloading data/routing.jsonl")
        return str(pulled_file)

    app = make_app(replace(make_services(), plan_pull=plan_pull, pull=pull), choices=FAST.with_(model=MODEL))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.click("#pull")
        await settle(pilot)
        status = text_of(app, "#record-status")
        assert planned == ["org/olmoe-traces"] and asked == []  # nothing downloaded yet
        assert "Pull will download org/olmoe-traces/data/routing.jsonl (12.3 MB)" in status
        assert "routing of olmoe-1b-7b-0924, same shape \u2014 not this model's routing" in status
        assert "unverified" in status and "Press Pull again" in status
        await relayout(pilot)  # the status line just grew: click where the button is now
        await pilot.click("#pull")
        await settle(pilot)
        assert asked == [("org/olmoe-traces/data/routing.jsonl", MODEL)]
        assert app.choices.trace == str(pulled_file)
        assert "Pulled" in text_of(app, "#record-status")


async def test_escape_cancels_a_pull_mid_download(indexed, pulled_file):
    started = threading.Event()
    seen_cancel = []

    def pull(spec, model_id, log, progress, cancel):  # type: ignore[no-untyped-def]
        progress(1_000, 12_300_000, "downloading data/routing.jsonl")
        started.set()
        seen_cancel.append(cancel.wait(timeout=20))  # the download loop checks the event at each chunk
        raise Cancelled

    app = make_app(replace(make_services(), plan_pull=lambda spec: PLAN, pull=pull), choices=FAST.with_(model=MODEL))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        await pilot.click("#pull")
        await settle(pilot)
        await relayout(pilot)  # the status line just grew: click where the button is now
        await pilot.click("#pull")
        # The worker's progress reaches the status as a message: wait for the text, not the event.
        for _ in range(200):
            if started.is_set() and "downloading" in text_of(app, "#record-status"):
                break
            await pilot.pause(0.05)
        assert "downloading data/routing.jsonl (Escape cancels)" in text_of(app, "#record-status")
        await pilot.press("escape")
        await settle(pilot)
        for _ in range(100):
            if "Pull cancelled" in text_of(app, "#record-status"):
                break
            await pilot.pause(0.05)
        assert seen_cancel == [True]
        assert text_of(app, "#record-status") == "Pull cancelled; nothing was kept."
        assert app.choices.trace != str(pulled_file)


async def test_no_pull_offered_where_the_index_has_nothing(monkeypatch):
    monkeypatch.setattr(hub_trace, "load_index", lambda: ())
    app = make_app(make_services(), choices=FAST.with_(model=MODEL))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        pull = app.query_one("#pull")
        assert pull.disabled  # nothing to pull: the button says so rather than offering a download
        assert "has no published trace" in str(pull.tooltip)
        await pilot.click("#pull")
        assert not any("downloading" in text for _, text in app.notices)
