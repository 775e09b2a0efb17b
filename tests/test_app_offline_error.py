"""An error on Results shows whole (issue 30: the offline GGUF error cut off its own
`hf download` workaround)."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import Static  # noqa: E402

from cope_tui.options import PlanChoices  # noqa: E402
from tests.test_app import make_app, make_services, settle  # noqa: E402


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_the_offline_gguf_error_shows_its_workaround_whole(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    choices = PlanChoices(model="unsloth/Qwen3-30B-A3B-GGUF", gguf_file="Qwen3-30B-A3B-Q4_K_M.gguf", tokens=150)
    app = make_app(make_services(), choices)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.action_show_tab("results")
        await settle(pilot)
        message = app.query_one("#results-message", Static)
        text = str(message.render())
        workaround = "hf download unsloth/Qwen3-30B-A3B-GGUF Qwen3-30B-A3B-Q4_K_M.gguf --local-dir ."
        assert message.display and workaround in text.replace("\n", " ")
        needed = message.get_content_height(message.size, message.size, message.size.width)
        assert message.content_size.height >= needed  # every line of it on the screen, none cropped
