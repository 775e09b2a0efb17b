"""The Results pane says what `cope advise` says, in llama.cpp's words (issue 45 items 2-3,
issue 44 item 6): the lead block is the CLI's own lines (its run-now pick, the search of
stock llama.cpp's commands with its expert cache, llama.cpp's own --fit placement), the
table lists what a runtime runs by its flags with each figure's cross-validated band, and
the Policy Matrix's paper-only cells are listed only on demand, under a line naming the
routing they rest on.
"""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import Checkbox, DataTable  # noqa: E402

from cope_tui.cli import main  # noqa: E402
from cope_tui.exit_codes import EXIT_OK  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.app.panes.results import PAPER_KEY, TRADEOFF_KEY  # noqa: E402
from engine.advice.error_band import CV_BY_REGIME, PARTIAL, estimate_band  # noqa: E402
from engine.replays.policy import Kind  # noqa: E402
from probes.runtimes import RuntimeScan  # noqa: E402
from tests.test_app import make_app, make_services, paper_rows, runnable_rows, settle, table_column, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]

NO_RUNTIMES = RuntimeScan((), ("test stub: no runtime looked for",))
PLAN = {"gpu": "rtx-3060-12gb", "cpu": "desktop-ddr5", "tokens": 150}  # persona A's card


@pytest.fixture
def no_runtime_scan(monkeypatch):
    monkeypatch.setattr("cope_tui.service.runtimes.detect_runtimes", lambda llama_bin=None: NO_RUNTIMES)


@pytest.mark.usefixtures("no_runtime_scan")
async def test_the_lead_block_is_the_clis_with_a_band_for_each_figure(capsys):
    assert main(["advise", *[f"--{k}={v}" for k, v in PLAN.items()]]) == EXIT_OK
    cli = capsys.readouterr().out
    lead = cli.split("\nCOPE advise:")[0].strip().splitlines()
    app = make_app(make_services(scan_runtimes=lambda: NO_RUNTIMES), PlanChoices(**PLAN))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        shown = text_of(app, "#run-now").splitlines()
        search = app.llama_search
        # every line the CLI leads with, in its order, less the command's notes (the Export tab's);
        # its trade-off table (after a blank line) is the pane's own view (the k key), pointed to
        said = [line for line in lead if not line.lstrip().startswith("#")]
        cut = said.index(search.tradeoff.lines()[0])
        assert said[cut - 1] == "" and said[cut:] == search.tradeoff.lines()
        assert [line for line in shown if not line.lstrip().startswith("error band")] == [
            *said[:cut - 1], f"What context and KV cache type cost: {TRADEOFF_KEY} shows the table"]
        assert all(line in text_of(app, "#tradeoff").splitlines() for line in said[cut:])
        assert any("llama.cpp's own placement" in line for line in said)  # the --fit comparison is there
        now = app.runs.run_now.estimate
        bands = [line for line in shown if line.lstrip().startswith("error band")]
        assert bands[0] == f"  error band of {now.tokens_per_s:.1f} tok/s: {estimate_band(now).text()}"
        default = search.default
        assert f"  error band of {1 / default.tpot_s:.1f} tok/s (llama.cpp's own placement): {default.band.text()}" \
            in bands
        # a command that sets the expert cache rests on COPE's replay of it: no band, said why
        assert search.cache.with_cache.band.band is None
        assert any("no published run used llama.cpp's expert cache" in line for line in bands)
        # the trade-off table's figures: plain --n-cpu-moe commands, some layers' experts on the CPU
        assert f"  error band of its tok/s: {CV_BY_REGIME[PARTIAL].text()}" in text_of(app, "#tradeoff").splitlines()


async def test_the_table_lists_what_runs_by_its_flags_with_bands_and_paper_rows_on_demand():
    app = make_app(make_services(), PlanChoices(**PLAN))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.query_one("#results-table", DataTable)
        runnable, paper = runnable_rows(app), paper_rows(app)
        assert paper and table.row_count == len(runnable)
        assert "none" not in table_column(app, 9)  # runs on: every listed row runs somewhere
        flags = table_column(app, 1)
        model = app.advice.request.model
        for row, cell, band in zip(runnable, flags, table_column(app, 3)):
            kind = row.estimate.candidate.kind
            if kind is Kind.ALL_CPU:
                assert cell.startswith("--cpu-moe")
            elif kind is Kind.PARTITION_FIRST:
                assert cell.startswith("--n-cpu-moe ") and int(cell.split()[1]) <= model.n_blocks
            answer = estimate_band(row.estimate)
            # a llama.cpp placement carries its regime's band; a Policy Matrix cell none (no published run)
            assert band == (f"±{answer.band.mape:.0%}" if answer.band is not None else "none")
            assert (answer.band is None) == (kind is Kind.MATRIX)
        assert any(c.startswith("--n-cpu-moe ") for c in flags) and any(c.startswith("--cpu-moe") for c in flags)
        selected = app.selected_id
        # on demand: the paper-only cells below a line naming the routing they rest on
        app.query_one("#show-paper", Checkbox).value = True
        await settle(pilot)
        assert table.row_count == len(runnable) + 1 + len(paper)
        keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
        assert keys == [r.id for r in runnable] + [PAPER_KEY] + [r.id for r in paper]
        assert "SYNTHETIC routing" in str(table.get_row_at(len(runnable))[1])
        assert set(table_column(app, 9)[len(runnable) + 1:]) == {"none"}
        table.move_cursor(row=len(runnable))  # the heading line selects nothing
        await pilot.pause()
        assert app.selected_id == selected
        table.move_cursor(row=len(runnable) + 1)
        await pilot.pause()
        assert app.selected_id == paper[0].id
        app.query_one("#show-paper", Checkbox).value = False
        await settle(pilot)
        assert table.row_count == len(runnable)


async def test_a_search_that_fails_is_one_line_above_the_table_and_the_ranking_stays(monkeypatch):
    from engine.core.errors import CopeInputError

    def broken(*a, **kw):  # type: ignore[no-untyped-def]
        raise CopeInputError("the test's search broke")

    monkeypatch.setattr("cope_tui.service.llama_search.search_cache", broken)
    app = make_app(make_services(), PlanChoices(**PLAN))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.llama_search is None and app.search_failed == "the test's search broke"
        shown = text_of(app, "#run-now")
        assert shown.startswith("Run this now: ") and "not searched: the test's search broke" in shown
        assert app.query_one("#results-table", DataTable).row_count == len(runnable_rows(app)) > 0
        assert not [n for n in app.notices if n[0] == "error"]
