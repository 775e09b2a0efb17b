"""The Export pane exports llama.cpp's expert-cache command (issue 45): offered where the
plan's search of stock llama.cpp's commands found it faster, and written exactly as `cope
export --candidate llama-cache` writes it for the same plan; elsewhere one line says why not."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, Select  # noqa: E402

from cope_tui.cli import main  # noqa: E402
from cope_tui.exit_codes import EXIT_OK  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.service.cache_export import LLAMA_CACHE_ID, NOT_OFFERED, cache_export, cache_offer  # noqa: E402
from cope_tui.service.llama_search import LlamaSearch  # noqa: E402
from cope_tui.service.workload import workload_of  # noqa: E402
from engine.advice.cache_search import CacheAdvice, PricedCommand  # noqa: E402
from engine.llamacpp.builds import build_from_help  # noqa: E402
from engine.runtimes import STOCK_NAME  # noqa: E402
from engine.runtimes.export import command_file_text  # noqa: E402
from tests.test_app import make_app, make_services, settle, submit, text_of  # noqa: E402

# A slow 4-core CPU beside a 12 GiB budget of an RTX 4090: the cache's command is 1.5x the best
# plain partition (checked below, not assumed), with the chat workload's -b/-ub.
CACHE_PLAN = PlanChoices(gpu="rtx-4090", vram_budget_gib=12, cpu="ryzen-3-3100", tokens=150, workload="chat")
MODEL_FILE = "/models/Qwen3-30B-A3B-Q4_K_M.gguf"


def offered(app) -> list[str]:  # type: ignore[no-untyped-def]
    """The values the pane's Export picker offers."""
    return [value for _, value in app.query_one("#export-what", Select)._options if value is not Select.BLANK]


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_the_export_pane_saves_the_expert_cache_command_as_cope_export_writes_it(tmp_path):
    app = make_app(make_services(), CACHE_PLAN, cwd=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("6")
        await settle(pilot)
        search = app.llama_search
        assert search.cache.cache_wins, search.cache.verdict()
        assert offered(app) == ["row", LLAMA_CACHE_ID] and app.query_one("#what-row").display
        assert not app.query_one("#cache-line").display
        row_command = text_of(app, "#command")
        app.query_one("#export-what", Select).value = LLAMA_CACHE_ID
        app.query_one("#model-path", Input).value = MODEL_FILE
        await pilot.pause()
        assert app.query_one("#runtime", Select).disabled and app.query_one("#binary", Select).disabled
        await submit(pilot, "#save-path", "out/cache.sh")
        await settle(pilot)
        shown = text_of(app, "#command")
        choices = app.choices
        advice = app.advice
        # ranked and searched anew (r), the pane keeps the person's choice once the search is back
        app.action_recompute()
        await settle(pilot)
        assert app.advice is not advice and app.llama_search is not search
        assert app.query_one("#export-what", Select).value == LLAMA_CACHE_ID
        assert text_of(app, "#command") == shown
    saved = (tmp_path / "out" / "cache.sh").read_text()
    # the function `cope export --candidate llama-cache` composes with, searching afresh for this plan
    expected = cache_export(advice, runtime=STOCK_NAME, binary=None, model_path=MODEL_FILE,
                            workload=workload_of(choices))
    assert saved == command_file_text(expected)
    assert shown == expected.display() != row_command
    assert {"--moe-cache-mib", "-ub"} <= set(expected.argv) and MODEL_FILE in expected.argv
    # and the CLI itself, on the plan the app recorded for it
    assert main(["export", "--candidate", LLAMA_CACHE_ID, "--model-path", MODEL_FILE,
                 "--out", str(tmp_path / "cli.sh")]) == EXIT_OK
    assert (tmp_path / "cli.sh").read_text() == saved


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_where_a_plain_partition_is_faster_the_cache_is_not_offered_and_the_line_says_why(tmp_path):
    app = make_app(make_services(), cwd=tmp_path)  # the default plan: RTX 4060 Ti 16GB + Ryzen 9 7950X
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("6")
        await settle(pilot)
        verdict = app.llama_search.cache.verdict()
        assert not app.llama_search.cache.cache_wins
        assert offered(app) == ["row"] and not app.query_one("#what-row").display
        assert text_of(app, "#cache-line") == NOT_OFFERED + verdict  # one line, cut to the screen's width
        assert app.query_one("#cache-line").region.height == 1
        await submit(pilot, "#save-path", "row.sh")
        await settle(pilot)
        row = app.current_export()
    assert (tmp_path / "row.sh").read_text() == command_file_text(row)  # Save writes the selected row's


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_with_no_gpu_planned_the_line_says_there_is_no_cache_to_export():
    app = make_app(make_services(), PlanChoices(gpu="none", cpu="ryzen-3-3100", tokens=150))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("6")
        await settle(pilot)
        assert offered(app) == ["row"]
        assert text_of(app, "#cache-line").startswith(NOT_OFFERED + "no GPU is planned")
        assert "-ngl 0" in text_of(app, "#command")  # the CPU-only command is the one exported


def _priced(argv: tuple[str, ...], tpot_s: float, cache_mib: int) -> PricedCommand:
    return PricedCommand(argv, 22, 22, cache_mib, False, tpot_s, 10 * 2**30, "priced")


CACHED = _priced(("llama-server", "-m", "m.gguf", "--fit", "off", "--cpu-moe", "--moe-cache-mib", "900"), 0.02, 900)
PLAIN = _priced(("llama-server", "-m", "m.gguf", "--fit", "off", "--n-cpu-moe", "22"), 0.04, 0)
WINS = LlamaSearch(CacheAdvice(CACHED, PLAIN, 2), None, True)
OLD_BUILD = build_from_help("llama.cpp", {"llama-server": "-m, --model FNAME   model path\n--n-cpu-moe N   experts"},
                            "llama-server --help in /opt/llama")
NEW_BUILD = build_from_help("llama.cpp", {"llama-server": "-m, --model FNAME   model path\n--moe-cache-mib N   cache"},
                            "llama-server --help in /opt/llama")


@pytest.mark.parametrize("search, kw, says", [
    (WINS, {}, None),
    (WINS, {"build": NEW_BUILD}, None),
    (WINS, {"build": OLD_BUILD}, "your stock llama.cpp (llama-server --help in /opt/llama) has no --moe-cache-mib"),
    (LlamaSearch(CacheAdvice(_priced(CACHED.argv, 0.05, 900), PLAIN, 2), None, False), {},
     "a plain partition is faster than llama.cpp's expert cache here"),
    (LlamaSearch(None, None, False), {}, "COPE models the cache of one GPU, and this plan has several"),
    (None, {"failed": "the search broke"}, "stock llama.cpp's commands were not searched: the search broke"),
    (WINS, {"cpu_only": True}, "no GPU is planned"),
])
def test_the_cache_is_offered_only_where_it_wins_and_the_build_takes_it(search, kw, says):
    offer = cache_offer(search, **{"cpu_only": False, "failed": None, "build": None, **kw})
    if says is None:
        assert offer.found is WINS.cache and offer.line == WINS.cache.verdict()
    else:
        assert offer.found is None and offer.line.startswith(NOT_OFFERED + says)
