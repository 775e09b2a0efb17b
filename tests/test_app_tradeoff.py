"""The trade-off table (context 8k to 64k x KV f16/q8_0, engine/advice/tradeoff.py) in the
Results pane (issue 45): below the lead lines it sat under the fold of an 80x24 terminal;
the `k` key, named in the footer, shows it whole in the ranking's place, and again the
ranking."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Footer, Static  # noqa: E402

from cope_tui.app.panes.results import TRADEOFF_KEY  # noqa: E402
from tests.test_app import make_app, make_services, settle, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]


async def test_at_80x24_the_key_in_the_footer_shows_the_whole_tradeoff_table_on_screen():
    app = make_app(make_services())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        tradeoff = app.llama_search.tradeoff
        assert tradeoff is not None and len(tradeoff.cells) == 8
        box, table = app.query_one("#tradeoff-box"), app.query_one("#tradeoff", Static)
        assert not box.display  # the ranking first
        footer = app.query_one(Footer)
        # the key is named in the footer while the focus is in the pane (its table, at start)
        bound = app.screen.active_bindings.get(TRADEOFF_KEY)
        assert bound is not None and bound.binding.show and bound.binding.description
        assert app.focused is app.query_one("#results-table", DataTable)
        await pilot.press(TRADEOFF_KEY)
        await settle(pilot)
        assert box.display and not app.query_one("#results-table").display
        # every line of the table, as advise prints it
        shown = text_of(app, "#tradeoff")
        assert all(line in shown for line in tradeoff.lines())
        # on the screen: the text's whole region within its box (nothing to scroll), the box
        # within the screen above the footer
        assert box.max_scroll_y == 0
        assert box.region.contains_region(table.region) and table.region.height >= len(tradeoff.lines())
        assert box.region.y >= 0 and box.region.bottom <= footer.region.y
        assert app.screen.region.contains_region(box.region)
        # the key again: the ranking, its table focused
        await pilot.press(TRADEOFF_KEY)
        await settle(pilot)
        assert not box.display and app.query_one("#results-table").display
        assert app.focused is app.query_one("#results-table", DataTable)


async def test_the_lead_lines_point_to_the_key_and_no_longer_carry_the_table(first_ranking):
    app = first_ranking.app  # read only
    lead = text_of(app, "#run-now")
    assert f"{TRADEOFF_KEY} shows the table" in lead
    assert app.llama_search.tradeoff.lines()[-1] not in lead


async def test_with_no_gpu_the_key_says_there_is_nothing_to_trade():
    from cope_tui.options import PlanChoices

    app = make_app(make_services(), PlanChoices(gpu="none", cpu="ryzen-3-3100", tokens=150))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.query_one("#cpu-only-plan").display
        await pilot.press(TRADEOFF_KEY)
        await settle(pilot)
        assert "No GPU is planned" in text_of(app, "#tradeoff") and not app.query_one("#cpu-only-plan").display
        await pilot.press(TRADEOFF_KEY)
        await settle(pilot)
        assert app.query_one("#cpu-only-plan").display and not app.query_one("#tradeoff-box").display
