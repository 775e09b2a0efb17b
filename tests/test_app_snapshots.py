"""Snapshots of the app's main screens at 80x24 and 120x40 (pytest-textual-snapshot).

Deterministic: a preset CPU stands in for detection, the GPU stub finds nothing, the
synthetic trace has a fixed seed, no clock is shown and no notification is raised.
Regenerate after a deliberate change with `pytest tests/test_app_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from tests.test_app import make_app, make_services, settle  # noqa: E402

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
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", SCREENS)
def test_screen(snap_compare, screen, size):
    async def after(pilot):  # type: ignore[no-untyped-def]
        await settle(pilot)
        for key in SCREENS[screen]:
            await pilot.press(key)
        await pilot.pause()
        await settle(pilot)

    app = make_app(make_services())
    assert snap_compare(app, terminal_size=SIZES[size], run_before=after)
