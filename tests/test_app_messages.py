"""The app says what the CLI says: no row to run, a failed ranking, a misspelt model, a
refused probe series, an overwrite asked about first. Driven with the Pilot; nothing
probes the machine or touches the network (tests/test_app.py's stubs)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable  # noqa: E402

from cope_tui.app.panes.results import ResultsPane  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.text_report import nothing_fits, render_run_now  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.runtimes import STOCK_NAME  # noqa: E402
from tests.test_app import make_app, make_services, settle, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]


def shown(app, selector: str) -> str:  # type: ignore[no-untyped-def]
    """A Static's text, and only when it is on the screen (a hidden one says nothing)."""
    widget = app.query_one(selector)
    return text_of(app, selector) if widget.display else ""


# --- Results: no row to run ---------------------------------------------------------------


async def test_nothing_fits_ram_says_what_cope_advise_says():
    # gpt-oss-120b keeps 46 GiB in host memory on the default card: 16 GiB of RAM holds none.
    app = make_app(make_services(), PlanChoices(model="gpt-oss-120b", ram_gib=16, tokens=150))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.runs.run_now is None
        message = shown(app, "#results-message")
        assert message == nothing_fits(app.runs) == render_run_now(app.advice.rec, app.runs)[0]
        assert "fits this machine's RAM" in message and "16.0 GiB" in message
        table = app.query_one("#results-table", DataTable)
        assert table.row_count > 0 and not str(table.get_row_at(0)[0]).startswith("▶")  # no row pinned to run
        assert "no RAM" in {str(table.get_row_at(i)[9]) for i in range(table.row_count)}  # runs on


async def test_a_ranking_with_a_row_to_run_shows_no_message(first_ranking):
    app = first_ranking.app  # the module's shared app: this test only reads it
    assert app.runs.run_now is not None
    assert shown(app, "#results-message") == ""


def without_stock(runs):  # type: ignore[no-untyped-def]
    """The run state where stock llama.cpp runs none of the ranked candidates (and so nothing runs now)."""
    rows = tuple(replace(row, runs=tuple(r for r in row.runs if r.support.runtime != STOCK_NAME)) for row in runs.rows)
    return replace(runs, rows=rows, run_now=None)


async def test_no_runtime_for_any_candidate_says_so(first_ranking):
    pilot = first_ranking  # the module's shared app, given its run state back at the end
    app, runs = pilot.app, pilot.app.runs
    pane = app.query_one(ResultsPane)
    try:
        app.runs = without_stock(runs)
        pane.update_from(app)
        await pilot.pause()
        message = shown(app, "#results-message")
        assert message == nothing_fits(app.runs) == "Run this now: nothing COPE ranked runs on this machine"
    finally:
        app.runs = runs
        pane.update_from(app)
        await pilot.pause()
    assert shown(app, "#results-message") == "", "a row to run again: the message goes"


async def test_a_first_ranking_that_fails_says_why_on_results():
    def no_cpu():  # type: ignore[no-untyped-def]
        raise CopeInputError("the test's CPU cannot be read")

    app = make_app(replace(make_services(), detect_cpu=no_cpu))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.advice is None
        message = shown(app, "#results-message")
        assert message == "Could not compute the ranking: the test's CPU cannot be read"
        assert "computing" not in text_of(app, "#results-summary")


async def test_a_later_ranking_that_fails_keeps_the_rows_and_says_why(tmp_path):
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rows = app.query_one("#results-table", DataTable).row_count
        app.compute(app.choices.with_(model=str(tmp_path / "missing.gguf")))
        await settle(pilot)
        message = shown(app, "#results-message")
        assert message.startswith("Could not compute the ranking:") and "missing.gguf" in message
        assert message.endswith("the previous results stay")
        assert app.query_one("#results-table", DataTable).row_count == rows
        app.compute(app.choices)  # a ranking that works again clears it
        await settle(pilot)
        assert shown(app, "#results-message") == ""


# --- Save asks before it overwrites -------------------------------------------------------


async def test_save_asks_before_it_overwrites_a_file_and_only_then(tmp_path):
    """One app, three saves: to a new file (nothing asked), over that file when it holds
    something else (asked; n keeps the bytes), and again (asked; y writes the command)."""
    from cope_tui.app.confirm import ConfirmScreen

    target = tmp_path / "cope-command.sh"
    app = make_app(make_services(), cwd=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen), "a save to a new file asks nothing"
        assert target.read_text().splitlines()[-1] == app.current_export().display(), "the new file: the command"

        target.write_bytes(b"#!/bin/sh\necho mine\n")
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen), "a save over an existing file asks"
        assert text_of(app.screen, "#question") == "cope-command.sh exists: overwrite? y/n"
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert target.read_bytes() == b"#!/bin/sh\necho mine\n", "n keeps the file's bytes"
        assert app.notices[-1] == ("information", f"Not saved: {target} left untouched")

        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen), "asked again: n answered only that save"
        await pilot.press("y")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        export = app.current_export(out=target)
        assert target.read_text().splitlines()[-1] == export.display(), "y writes the command"
        assert app.notices[-1][1].startswith("Saved ") and app.notices[-1][1].endswith(str(target))


# --- the catalog search suggests ----------------------------------------------------------


async def into_catalog_search(pilot) -> None:  # type: ignore[no-untyped-def]
    """The first ranking shown, then the Model tab with the focus in its catalog search."""
    from textual.widgets import Input

    await settle(pilot)
    await pilot.press("2")
    pilot.app.query_one("#search", Input).focus()


async def test_the_catalog_search_hints_at_the_closest_names_and_enter_picks_one():
    """One app, the search typed afresh for each case (cleared between): nothing close, a
    misspelling from the start of a name, an alias, and a misspelling Enter then picks."""
    from textual.widgets import Input

    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await into_catalog_search(pilot)
        search, catalog = app.query_one("#search", Input), app.query_one("#catalog")
        assert shown(app, "#catalog-hint") == ""

        await pilot.press(*"zzzzzz")
        await pilot.pause()
        assert shown(app, "#catalog-hint") == "no catalog model matches 'zzzzzz'", "nothing close: no guess"
        assert catalog.option_count == 0

        search.value = ""
        await pilot.press(*"deepsek")
        await pilot.pause()
        hint = shown(app, "#catalog-hint")
        ids = [catalog.get_option_at_index(i).id for i in range(catalog.option_count)]
        assert ids and all(i.startswith("deepseek-") for i in ids), "typed from a name's start: its family"
        assert hint == f"no catalog model matches 'deepsek' (did you mean {' or '.join(ids)}?)"
        await pilot.press("backspace", "e", "k")  # deepseek: now it matches, and the hint goes
        await pilot.pause()
        assert shown(app, "#catalog-hint") == "", "a match clears the hint"
        await pilot.press(*" r1")  # an alias, as `cope advise --model DeepSeek-R1` reads it
        await pilot.pause()
        assert catalog.get_option_at_index(0).id == "deepseek-v3", "an alias finds its model"

        search.value = ""
        await pilot.press(*"gpt-oss-12b")
        await pilot.pause()
        hint = shown(app, "#catalog-hint")
        assert hint.startswith("no catalog model matches 'gpt-oss-12b' (did you mean gpt-oss-120b"), "the closest"
        assert catalog.get_option_at_index(0).id == "gpt-oss-120b"
        await pilot.press("enter")
        await settle(pilot)
        assert app.advice.request.model.id == "gpt-oss-120b", "Enter picks the closest"


# --- a refused probe series is named ------------------------------------------------------


def refused_runner(measured: int):  # type: ignore[no-untyped-def]
    """A prober whose cpu_experts series failed its consistency check twice: the outcome
    probe_then_price returns for it (no pricing; the refusal line as the error)."""
    from cope_tui.service.pricing import ProbeOutcome, ProbeReport
    from engine.cost.cost_model import Fidelity
    from engine.profiles.probe_consistency import SeriesRef, SeriesVerdict, refusal_note

    verdict = SeriesVerdict(SeriesRef("cpu_experts", (("threads", 8),)),
                            "3 experts measured 40.0 ms, slower than 4 experts at 20.0 ms", "monotone", (3, 4))
    note = refusal_note(verdict, verdict)

    def run(request, *, fidelity, budget_s, progress, cancel):  # type: ignore[no-untyped-def]
        progress(measured, measured, "done")
        report = ProbeReport(measured=measured, left=2, stopped="refused", refused=(note,))
        return ProbeOutcome(Fidelity(fidelity), report, None, "/cache/profiles/fake.json", note)

    return run, note


@pytest.mark.parametrize("measured", [0, 5])  # nothing new measured (a recheck only) is no failure either
async def test_a_refused_probe_series_is_named_in_the_summary_and_the_notice(measured):
    run, note = refused_runner(measured)
    app = make_app(make_services(run))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("p", "y")  # p asks first
        await settle(pilot)
        severity, text = app.notices[-1]
        assert note == "cpu_experts at 8 threads refused: 3 experts measured 40.0 ms, slower than 4 experts at " \
                       "20.0 ms, twice"
        assert severity == "warning" and note in text
        assert "Probes failed" not in text and "Too little measured" not in text
        assert text_of(app, "#probe-summary") == text
        assert app.advice is before  # nothing repriced from it
