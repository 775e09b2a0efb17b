"""Snapshots of the app's main screens at 80x24 and 120x40 (pytest-textual-snapshot).

Deterministic: a preset CPU stands in for detection, the GPU stub finds nothing, the
synthetic trace has a fixed seed, no clock is shown and no notification is raised.
Regenerate after a deliberate change with `pytest tests/test_app_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from textual.widgets import Input, TabbedContent  # noqa: E402

from cope_tui.app.help import HelpScreen  # noqa: E402
from tests.test_app import make_app, make_services, settle, wait_for  # noqa: E402

pytestmark = pytest.mark.usefixtures("app_caches")

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
SCREENS = {
    "results": (),
    "hardware": ("1",),
    "model": ("2",),
    "trace": ("3",),
    "probes": ("4",),
    "export": ("6",),
    "help": ("question_mark",),
    "tradeoff": ("k",),  # Results' trade-off table in the ranking's place (the k key)
}
TAB_OF = {"tradeoff": "results"}  # a screen that is a view of a tab


async def shown(pilot, screen: str) -> None:  # type: ignore[no-untyped-def]
    """Wait for the screen's state, not for a number of frames: the tab (or the help) shown,
    the focus handed over after the switch (a pane opens at its top only once its focus is
    placed), no worker running, and then one frame that repaints nothing the last did not
    (a scroll or a late refresh still under way changes it)."""
    app = pilot.app

    def there() -> bool:
        if screen == "help":
            return isinstance(app.screen, HelpScreen)
        return app.query_one(TabbedContent).active == TAB_OF.get(screen, screen) and app.focused is not None

    await wait_for(pilot, there, f"the {screen} screen")
    for field in app.query(Input):  # a tab opens in its first field: its cursor shown, not blinking
        field.cursor_blink = False
    last = None
    for _ in range(100):
        await settle(pilot)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        frame = app.export_screenshot()
        if frame == last:
            return
        last = frame
    raise AssertionError(f"the {screen} screen never settled")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", SCREENS)
def test_screen(snap_compare, screen, size):
    async def after(pilot):  # type: ignore[no-untyped-def]
        await settle(pilot)
        for key in SCREENS[screen]:
            await pilot.press(key)
        await shown(pilot, screen)

    app = make_app(make_services())
    assert snap_compare(app, terminal_size=SIZES[size], run_before=after)


@pytest.mark.parametrize("size", ["80x24"])
def test_export_of_the_expert_cache(snap_compare, size):
    """The Export pane exporting llama.cpp's expert-cache command, on a plan where the search
    found it faster (tests/test_app_export_cache.py)."""
    from textual.widgets import Select

    from tests.test_app_export_cache import CACHE_PLAN

    async def after(pilot):  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("6")
        await shown(pilot, "export")
        pilot.app.query_one("#export-what", Select).value = "llama-cache"
        await shown(pilot, "export")

    app = make_app(make_services(), CACHE_PLAN)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=after)
