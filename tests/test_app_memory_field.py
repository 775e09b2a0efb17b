"""The Hardware pane's Memory and RAM fields (issue 30: one preset per CPU name, memory
given separately): what is typed there is what --memory and --ram-gib plan with."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, TabbedContent  # noqa: E402

from tests.test_app import make_app, make_services, settle  # noqa: E402


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_memory_typed_on_hardware_replans_with_its_bandwidth():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.query_one(TabbedContent).active = "hardware"
        await settle(pilot)
        before = app.advice.request.platform.cpu.mem_bandwidth_bytes_per_s.value
        field = app.query_one("#memory", Input)
        field.focus()
        field.value = "ddr4-2400x1"  # far below any preset's: 19.2 GB/s
        await pilot.press("enter")
        await settle(pilot)
        assert app.choices.memory is not None and app.choices.memory.text == "ddr4-2400x1"
        cpu = app.advice.request.platform.cpu
        assert cpu.mem_bandwidth_bytes_per_s.value == pytest.approx(19.2e9)
        assert before != cpu.mem_bandwidth_bytes_per_s.value
        ram = app.query_one("#ram-gib", Input)
        ram.focus()
        ram.value = "12"
        await pilot.press("enter")
        await settle(pilot)
        assert app.advice.request.platform.cpu.ram_bytes.value == 12 * 1024**3
