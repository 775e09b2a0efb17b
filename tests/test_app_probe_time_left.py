"""The Probes pane's time left never exceeds what the budget leaves (issue 30: a 60 s
budget was shown with "about 450 s left" after a slow first probe)."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("textual")

from textual.widgets import Static  # noqa: E402

from cope_tui.app.messages import Progress  # noqa: E402
from tests.test_app import make_app, make_services, settle  # noqa: E402


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_time_left_is_capped_by_the_budget():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app._probe_budget_s = 60.0
        app._probe_t0 = time.monotonic() - 50.0  # 50 s into a 60 s budget, 1 of 10 probes done
        app.post_message(Progress("probes", 1, 10, "cpu_experts"))
        await settle(pilot)
        shown = str(app.query_one("#probe-current", Static).render())
        left = int(re.search(r"about (\d+) s left", shown).group(1))
        assert left <= 10  # not the 450 s the pace alone implies
        assert "probe 2/10: cpu_experts" in shown
