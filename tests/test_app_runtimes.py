"""The app and the runtimes: the run-now row pinned on top, the Export pane opening on
it, and a runtime selector that shows the command of each runtime that runs the row."""

from __future__ import annotations

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Select  # noqa: E402

from probes.runtimes import InstalledRuntime, RuntimeScan  # noqa: E402
from tests.test_app import make_app, make_services, settle, table_column, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]


def runtime_options(app) -> list[str]:  # type: ignore[no-untyped-def]
    select = app.query_one("#runtime", Select)
    return [value for _, value in select._options if value is not Select.BLANK]


async def test_export_opens_on_the_run_now_row_and_offers_each_runtime_of_a_row():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        now = app.runs.run_now
        assert now.row.id == "partition-first" and app.selected_id == now.row.id
        await pilot.press("6")
        await pilot.pause()
        export = app.current_export()
        assert export.candidate_id == "partition-first" and export.runtime == "llama.cpp"
        assert text_of(app, "#command") == export.display() and "--n-cpu-moe" in export.display()
        # The layer partition: stock llama.cpp, ik_llama.cpp and the fork run it.
        assert runtime_options(app) == ["llama.cpp", "ik_llama.cpp", "fork"]
        app.query_one("#runtime", Select).value = "ik_llama.cpp"
        await pilot.pause()
        ik = app.current_export()
        assert ik.runtime == "ik_llama.cpp" and "-ot" in ik.argv and text_of(app, "#command") == ik.display()
        assert "ik_llama.cpp runs it exactly" in text_of(app, "#export-head")
        # Every expert on the CPU: kt-kernel runs it too; its command is SGLang's.
        app.select_candidate("all-cpu")
        await pilot.pause()
        assert runtime_options(app) == ["llama.cpp", "ik_llama.cpp", "fork", "sglang-kt"]
        app.query_one("#runtime", Select).value = "sglang-kt"
        await pilot.pause()
        kt = app.current_export()
        assert kt.argv[:3] == ("python", "-m", "sglang.launch_server") and "--kt-num-gpu-experts" in kt.argv
        assert "github.com/kvcache-ai/ktransformers" in text_of(app, "#export-head")
        # A row only kt-kernel runs opens on it.
        app.select_candidate("fixed.parallel.nonuniform")
        await pilot.pause()
        assert runtime_options(app) == ["sglang-kt"] and app.current_export().runtime == "sglang-kt"
        # A row nothing runs offers stock llama.cpp with its nearest candidate.
        ready_first = next(e.candidate.id for e in app.advice.rec.estimates
                           if e.candidate.id.startswith("fixed.ready-first"))
        app.select_candidate(ready_first)
        await pilot.pause()
        assert runtime_options(app) == ["llama.cpp"]
        assert "nearest that runs here" in text_of(app, "#export-head")


async def test_an_installed_runtime_moves_the_pinned_row():
    kt = InstalledRuntime("sglang-kt", "sglang-kt 0.5.7, kt-kernel 0.4.2", "/site")
    services = make_services(scan_runtimes=lambda: RuntimeScan((kt,), ()))
    app = make_app(services)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.installed == ("sglang-kt",)
        now = app.runs.run_now
        assert now.runtime == "sglang-kt" and now.installed
        table = app.query_one("#results-table", DataTable)
        assert table.coordinate_to_cell_key((0, 0)).row_key.value == now.row.id
        assert table_column(app, 0)[0].startswith("▶") and "kt" in table_column(app, 9)[0].split()
        await pilot.press("6")
        await pilot.pause()
        assert app.current_export().runtime == "sglang-kt"
        labels = {value: str(label) for label, value in app.query_one("#runtime", Select)._options}
        assert labels["sglang-kt"] == "SGLang + kt-kernel (installed)"
