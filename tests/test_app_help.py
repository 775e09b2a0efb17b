"""The help matches the screens (issue 30): its keys are the app's bindings, its tabs the
app's tabs, its Results columns the table's headers (wide and narrow, with a Workload
too), and the pickers it names are on the tab it names."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, Select  # noqa: E402

from cope_tui.app.app import TABS, CopeApp  # noqa: E402
from cope_tui.app.help import HELP, HelpScreen  # noqa: E402
from cope_tui.app.panes.hardware import HardwarePane  # noqa: E402
from cope_tui.app.panes.results import ResultsPane  # noqa: E402
from tests.test_app import FAST, make_app, make_services, settle  # noqa: E402

SPELLED = {"?": "question_mark", "ctrl+pgup": "ctrl+pageup", "ctrl+pgdn": "ctrl+pagedown"}
RANGE = re.compile(r"`([^`]+)`\.\.`([^`]+)`")


def help_table(header: str) -> list[tuple[str, str]]:
    """(first cell, second cell) of each row of the help's table headed `header`."""
    lines = HELP.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip().startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0], cells[1]))
    return rows


def keys_named(cell: str) -> set[str]:
    """Textual's key names for a cell such as "`1`..`6`, or `F2`..`F7`" or "`alt+1`..`6`"."""
    keys = set()
    for first, last in RANGE.findall(cell):
        prefix, a = re.match(r"(.*?)(\d+)$", first.lower()).groups()
        b = int(re.search(r"(\d+)$", last).group(1))
        keys |= {f"{prefix}{n}" for n in range(int(a), b + 1)}
    for name in re.findall(r"`([^`]+)`", RANGE.sub("", cell)):
        keys.add(SPELLED.get(name.lower(), name.lower()))
    return keys


def bound(bindings) -> set[str]:  # type: ignore[no-untyped-def]
    return {key.strip() for b in bindings for key in b.key.split(",")}


def test_the_help_lists_every_binding_and_only_bindings():
    rows = help_table("| key |")
    helped = set().union(*(keys_named(first) for first, _ in rows))
    # the app's keys, and the Results pane's own (the trade-off table, shown in its footer there)
    assert helped == bound(CopeApp.BINDINGS) | bound(ResultsPane.BINDINGS)


def test_the_help_names_the_tabs_in_the_order_the_keys_take():
    rows = help_table("| key |")
    tab_row = next(does for first, does in rows if first == "`1`..`6`")
    assert [w.strip().lower() for w in tab_row.split(",")] == list(TABS)
    bullets = re.findall(r"^- \*\*(\w+)\*\*", HELP, flags=re.M)
    assert set(b.lower() for b in bullets) <= set(TABS)


def test_the_keys_the_help_says_close_it_close_it():
    closing = next(does for first, does in help_table("| key |") if "`?`" in first)
    assert closing == "this help"
    assert {"escape", "question_mark", "f1"} <= bound(HelpScreen.BINDINGS)


def help_columns() -> tuple[list[str], list[str]]:
    """(wide headers, narrow headers) in the help's order: a cell's code spans before any
    parenthesis are wide, those inside it narrow (none: the same narrow; "wide only": none)."""
    wide, narrow = [], []
    for first, _ in help_table("| column"):
        outside, _, inside = first.partition("(")
        names = re.findall(r"`([^`]+)`", outside)
        wide += names
        narrow += re.findall(r"`([^`]+)`", inside) or ([] if "wide only" in inside else names)
    return wide, narrow


def headers(app) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(c.label) for c in app.query_one("#results-table", DataTable).columns.values()]


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
@pytest.mark.parametrize("workload", [None, "rag"])
async def test_the_help_columns_are_the_tables_wide_and_narrow(workload):
    """With a Workload too: the help promises no request-time columns, and the table has none."""
    wide, narrow = help_columns()
    app = make_app(make_services(), FAST.with_(workload=workload))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert headers(app) == wide
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert headers(app) == narrow


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_the_hardware_tab_has_the_pickers_the_help_names():
    assert "the GPU preset to plan for, the CPU (this machine's, or a\n  preset) and the VRAM budget" in HELP
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        pane = app.query_one(HardwarePane)
        assert "cpu" in {s.id for s in pane.query(Select)}
        assert pane.query_one("#gpu", Input).suggester is not None  # free text: 2x NAME, NAME@vulkan, none
        assert pane.query_one("#vram-budget-gib") is not None
