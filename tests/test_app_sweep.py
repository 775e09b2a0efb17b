"""The tok/s-vs-VRAM chart never waits (issue 30, part 6): it draws what the one-pass
curves give as soon as they are there and fills in the step-wise replays as they finish,
its title saying how far; the app takes keys meanwhile. The step-wise stages are held
back here until the test lets them go, so "before the sweep ends" is a state, not a race."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("textual")

from textual.widgets import TabbedContent  # noqa: E402

from cope_tui.app.widgets.chart import charted  # noqa: E402
from cope_tui.service.advice import sweep_stages  # noqa: E402
from tests.test_app import make_app, make_services, settle, wait_for  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]

SERIES = 12  # deep enough in the ranking for caches that need a step-wise replay


def held_after_the_first_stage(release: threading.Event):  # type: ignore[no-untyped-def]
    def stages(advice, n_points, **kw):  # type: ignore[no-untyped-def]
        for i, stage in enumerate(sweep_stages(advice, n_points, **kw)):
            yield stage
            if i == 0:
                release.wait(120)
    return stages


async def test_the_chart_draws_the_one_pass_curves_before_the_sweep_ends():
    release = threading.Event()
    app = make_app(make_services(sweep_stages=held_after_the_first_stage(release), chart_series=SERIES))
    chart = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.sweep_points, "the first stage of the sweep")
            chart = app.query_one("ThroughputChart")
            done, total = app.sweep_progress
            assert 0 < done < total and "filling in" in chart.border_title
            first = dict(chart.series)
            drawn = dict(charted(app.advice.rec, SERIES))
            # What is drawn already: the lines the one-pass curves count, none of the others.
            assert first and all(not drawn[m].startswith(("layer.", "pool.")) for m in first)
            assert any(cid.startswith(("layer.", "pool.")) for cid in drawn.values())
            # The app answers keys while the sweep runs.
            await pilot.press("2")
            await pilot.pause()
            assert app.query_one(TabbedContent).active == "model"
            await pilot.press("5")
            release.set()
            await settle(pilot)
            assert app.sweep_progress[0] == app.sweep_progress[1]
            assert "filling in" not in chart.border_title
            final = dict(chart.series)
            assert set(first) < set(final) and all(final[m] == first[m] for m in first)
            assert any(drawn[m].startswith(("layer.", "pool.")) for m in final)
    finally:
        release.set()
