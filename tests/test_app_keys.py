"""The app's keys and small honesty rules, driven with the Pilot (issue 14): tab keys never
type into an input, a new ranking shows its first row and takes Up/Down, Pull only when
the trace index has a trace, the Record field follows the model."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import Button, DataTable, Input, TabbedContent  # noqa: E402

from tests.test_app import make_app, make_services, settle  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]


def typed(app) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {i.id: i.value for i in app.query(Input)}


async def test_tab_keys_switch_tabs_and_the_focus_lands_in_the_first_field():
    """A digit switches tabs from where no text is typed (Results' table); the focus then
    lands in the tab's first text field, so what is typed next goes into it; from a field,
    digits are the field's and F2..F7 / alt+digit switch."""
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = typed(app)
        await pilot.press("2")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "model"
        assert isinstance(app.focused, Input) and app.focused.id == "search"
        assert typed(app) == before  # the digit switched; nothing was typed
        threads = app.query_one("#threads", Input)
        threads.focus()
        await pilot.press("1", "2")
        assert threads.value == "12" and app.query_one(TabbedContent).active == "model"
        for key, tab, first in (("f2", "hardware", "gpu"), ("f4", "trace", "import"), ("f5", "probes", "budget"),
                                ("f7", "export", "model-path")):
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            assert app.query_one(TabbedContent).active == tab
            assert isinstance(app.focused, Input) and app.focused.id == first, (key, app.focused)
        await pilot.press("alt+5")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "results"
        assert isinstance(app.focused, DataTable)  # Results has no text field: its table


async def test_after_switching_gpu_the_results_show_row_one_and_take_up_down():
    app = make_app(make_services())
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        table = app.query_one("#results-table", DataTable)
        table.focus()
        await pilot.press(*["down"] * 12)  # far down the old ranking
        assert table.cursor_row == 12
        await pilot.press("1")
        await pilot.pause()
        await pilot.press(*"rtx-4090", "enter")  # the focus is in the GPU field
        await settle(pilot)
        await pilot.press("f6")
        await pilot.pause()
        assert app.advice.request.platform.gpu.preset_id == "rtx-4090"
        assert table.cursor_row == 0 and table.scroll_y == 0 and app.focused is table
        assert app.selected_id == table.coordinate_to_cell_key((0, 0)).row_key.value
        await pilot.press("down")
        assert table.cursor_row == 1 and app.selected_id == table.coordinate_to_cell_key((1, 0)).row_key.value
        await pilot.press("up")
        assert table.cursor_row == 0


async def test_pull_is_offered_only_when_the_index_has_a_trace_for_the_model(monkeypatch):
    from cope_tui.app.panes.trace import TracePane
    from cope_tui.sources import hub_trace

    indexed: dict[str, tuple[list, list]] = {}  # what the trace index holds, as its lookup says
    monkeypatch.setattr(hub_trace, "entries_for_model", lambda model_id: indexed.get(model_id, ([], [])))
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        pane, pull = app.query_one(TracePane), app.query_one("#pull", Button)
        assert pull.disabled and "no published trace of qwen3-30b-a3b" in str(pull.tooltip)
        indexed["qwen3-30b-a3b"] = ([], ["a trace of the same shape"])
        pane.update_from(app)
        assert not pull.disabled
        indexed["qwen3-30b-a3b"] = (["its own trace"], [])
        pane.update_from(app)
        assert not pull.disabled


async def test_the_record_field_follows_the_model():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        record = app.query_one("#record-model", Input)
        assert record.value == app.advice.request.model.hf_repo
        app.compute(app.choices.with_(model="olmoe-1b-7b"))
        await settle(pilot)
        assert app.advice.request.model.id == "olmoe-1b-7b"
        assert record.value == app.advice.request.model.hf_repo and "OLMoE" in record.value
        record.value = "me/my-finetune"  # typed by the person: kept while the model stays
        app.compute(app.choices.with_(context=4096))
        await settle(pilot)
        assert record.value == "me/my-finetune"
