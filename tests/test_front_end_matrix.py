"""The CLI and the app answer the same input the same way (issue 29).

A matrix of plans (two catalog models on two GPUs, decode-only and with a workload, and a
GGUF file outside the working folder) goes through the CLI's JSON, `cope advise --json
--export`, `cope export --json` for every runtime in the registry and `cope estimate
--json` for pasted commands with `-c 0`, `-ngl N` and `-ot` (each run in-process through
`cope_tui.cli.main`), and through the app's state with the Pilot: its ranking and
workload ranking, the Export pane's command for the run-now pick and for each runtime
(the pane's runtime, program and `-m` set as a person sets them) and its paste field.
The figures, the argv and the notes must be the same. Neither side finds runtimes: both
get the same empty scan, so the commands are spelled for the shipped flag manifests.
"""

from __future__ import annotations

import json
import shlex

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, Select, Static  # noqa: E402

from cope_tui.app.panes.export import ExportPane  # noqa: E402
from cope_tui.cli import main  # noqa: E402
from cope_tui.service.cache_export import NOT_OFFERED  # noqa: E402
from cope_tui.commands.output import json_text  # noqa: E402
from cope_tui.exit_codes import EXIT_OK  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from engine.advice.report import recommendation_to_dict  # noqa: E402
from engine.runtimes import REGISTRY, STOCK_NAME  # noqa: E402
from probes.runtimes import RuntimeScan  # noqa: E402
from tests.test_app import make_app, make_services, settle  # noqa: E402

NO_RUNTIMES = RuntimeScan((), ("test stub: no runtime looked for",))
CPU = "desktop-ddr5"
TOKENS = 150  # a short synthetic trace keeps each ranking quick

# Each catalog model on each GPU once; a workload on every other plan.
PLANS = [
    pytest.param({"model": "qwen3-30b-a3b", "gpu": "rtx-4090"}, id="qwen3-30b-a3b/rtx-4090"),
    pytest.param({"model": "qwen3-30b-a3b", "gpu": "rtx-3060-12gb", "workload": "chat"},
                 id="qwen3-30b-a3b/rtx-3060-12gb/chat"),
    pytest.param({"model": "gpt-oss-20b", "gpu": "rtx-3060-12gb"}, id="gpt-oss-20b/rtx-3060-12gb"),
    pytest.param({"model": "gpt-oss-20b", "gpu": "rtx-4090", "workload": "rag"}, id="gpt-oss-20b/rtx-4090/rag"),
    # a slow CPU: llama.cpp's expert cache beats the plain partition, so the Export pane offers it
    pytest.param({"model": "qwen3-30b-a3b", "gpu": "rtx-3060-12gb", "cpu": "ryzen-3-3100", "workload": "chat"},
                 id="qwen3-30b-a3b/rtx-3060-12gb/ryzen-3-3100/chat"),
]

PASTED = [
    "llama-server -m {m} -ngl 99 --n-cpu-moe 6 -c 0 -t 8",  # -c 0: the model's trained context
    "llama-server -m {m} -ngl 10 -t 8",  # -ngl N: whole blocks on the CPU
    "llama-server -m {m} -ngl 99 -ot blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU -t 6",
]


VERSIONS = ("schema_version", "cope_version")  # what every JSON document of the CLI leads with


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == EXIT_OK, argv
    doc = json.loads(capsys.readouterr().out)
    return {k: v for k, v in doc.items() if k not in VERSIONS}


def _same(app_side: dict) -> dict:
    """What the app holds, written as the CLI writes its JSON (cope_tui.commands.output)."""
    return {k: v for k, v in json.loads(json_text(app_side)).items() if k not in VERSIONS}


def _flags(plan: dict) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in {"cpu": CPU, "tokens": TOKENS, **plan}.items()]


def _export_doc(capsys, argv: list[str]) -> dict:
    """`cope export --json`'s document less what only the command line has: the plan it says it
    used and the files it wrote."""
    return {k: v for k, v in _json(capsys, argv).items() if k not in ("plan", "written")}


def _cli_side(capsys, plan: dict, model_path: str | None, pasted_model: str) -> dict:
    flags = _flags(plan)
    doc = _json(capsys, ["advise", "--json", "--export", *flags])
    rows = doc["candidates"]
    exports = {}
    for runtime in REGISTRY:
        name = runtime.info.name
        # The fastest row this runtime runs (exactly or not): the app's runtime list offers it there.
        row = next((r for r in rows if r["identical_to"] is None and any(x["name"] == name for x in r["runtimes"])),
                   None)
        if row is None:
            continue
        path = ["--model-path", model_path] if model_path is not None else []
        exports[(row["id"], name, None)] = _export_doc(
            capsys, ["export", "--json", "--candidate", row["id"], "--runtime", name, *path, *flags])
    bench_row = next(r["id"] for r in rows if r["identical_to"] is None and
                     any(x["name"] == STOCK_NAME and x["exact"] for x in r["runtimes"]))
    path = ["--model-path", model_path] if model_path is not None else []
    exports[(bench_row, STOCK_NAME, "llama-bench")] = _export_doc(
        capsys, ["export", "--json", "--candidate", bench_row, "--binary", "llama-bench", *path, *flags])
    # llama.cpp's expert-cache command, as `cope export --candidate llama-cache` writes it
    exports[("llama-cache", STOCK_NAME, None)] = _export_doc(
        capsys, ["export", "--json", "--candidate", "llama-cache", *path, *flags])
    estimates = {}
    for command in PASTED:
        line = command.format(m=shlex.quote(pasted_model))
        estimates[line] = _json(capsys, ["estimate", *flags, "--json", "--", *shlex.split(line)])
    return {"advise": doc, "exports": exports, "estimates": estimates}


async def _check_app(plan: dict, cli: dict, model_path: str | None) -> None:
    choices = PlanChoices(**{"cpu": CPU, "tokens": TOKENS, **plan})
    app = make_app(make_services(scan_runtimes=lambda: NO_RUNTIMES), choices)
    doc = cli["advise"]
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rec = app.advice.rec
        # the ranking: every candidate's figures, in the same order
        cli_rows = doc["candidates"]
        assert [e.candidate.id for e in rec.estimates] == [r["id"] for r in cli_rows]
        for e, r in zip(rec.estimates, cli_rows):
            assert (e.tpot_s, e.vram_used_bytes) == (r["tpot_s"], r["vram_used_bytes"]), r["id"]
        # the whole document the CLI writes, from the app's advice and its runs (less what the CLI adds)
        whole = {k: v for k, v in doc.items() if k not in ("runtimes", "workload", "export")}
        assert _same({**recommendation_to_dict(rec, app.runs), **app.llama_search.to_dict()}) == whole
        # and the Results pane says them as the CLI's text does
        search, shown = app.llama_search, str(app.query_one("#run-now", Static).render())
        assert search.cache is not None and search.cache.verdict() in shown
        assert search.default is None or search.default.line() in shown
        # the trade-off table in its own view of the pane (the k key), as advise prints it
        table = str(app.query_one("#tradeoff", Static).render())
        assert search.tradeoff is None or all(line in table for line in search.tradeoff.lines())
        assert (app.workload_ranking is None) == ("workload" not in doc)
        if app.workload_ranking is not None:
            assert _same(app.workload_ranking.to_dict()) == doc["workload"]
        # the run-now pick, as the Export pane shows it first
        now = doc["recommendation"]["run_now"]
        assert (app.runs.run_now.row.id, app.runs.run_now.runtime) == (now["candidate"], now["runtime"])
        assert app.selected_id == now["candidate"]
        shown = app.current_export()
        assert (list(shown.argv), dict(shown.env), list(shown.notes)) == (now["argv"], now["env"], now["notes"])
        # every runtime's command, the pane set as a person sets it
        pane_path = app.query_one("#model-path", Input)
        cache_doc = cli["exports"].pop(("llama-cache", STOCK_NAME, None))
        for (candidate, runtime, binary), exported in cli["exports"].items():
            app.select_candidate(candidate)
            await pilot.pause()
            app.query_one("#runtime", Select).value = runtime
            app.query_one("#binary", Select).value = binary or "llama-server"
            pane_path.value = model_path or ""
            await pilot.pause()
            export = app.current_export()
            assert _same(export.to_dict()) == exported, (candidate, runtime, binary)
        # the Export pane's expert-cache command where the search found it faster, else why not
        pane = app.query_one(ExportPane)
        if search.cache.cache_wins:
            assert plan.get("cpu") == "ryzen-3-3100", search.cache.verdict()  # where it was meant to win
            app.query_one("#export-what", Select).value = "llama-cache"
            pane_path.value = model_path or ""
            await pilot.pause()
            assert _same(pane.export(app).to_dict()) == cache_doc
            app.query_one("#export-what", Select).value = "row"
        else:
            assert plan.get("cpu") != "ryzen-3-3100", search.cache.verdict()
            assert str(app.query_one("#cache-line", Static).render()) == NOT_OFFERED + search.cache.verdict()
        app.query_one("#binary", Select).value = "llama-server"
        pane_path.value = ""
        # the fastest estimate's command (`cope advise --export`): stock llama.cpp, with the workload's -b/-ub
        best = doc["export"]["candidate"]
        app.select_candidate(best)
        await pilot.pause()
        app.query_one("#runtime", Select).value = STOCK_NAME
        await pilot.pause()
        assert _same(app.current_export().to_dict()) == doc["export"]
        # pasted commands, priced as `cope estimate` prices them
        for line, est_doc in cli["estimates"].items():
            app.pasted_estimate = None
            app.query_one("#paste-command", Input).value = line
            app.estimate_pasted(line)
            await settle(pilot)
            est = app.pasted_estimate
            assert est is not None, line
            yours = est.yours
            assert (yours.runs, yours.tpot_s if yours.runs else None, yours.refusal) == (
                est_doc["yours"]["runs"], est_doc["yours"]["tpot_s"], est_doc["yours"]["refusal"]), line
            assert est.best.tpot_s == est_doc["best"]["tpot_s"], line
            assert est.runnable.candidate.id == est_doc["best_that_runs"]["id"], line
            assert list(est.export.argv) == est_doc["export"]["argv"], line
            assert list(est.notes + est.ranking_notes) == est_doc["notes"], line


@pytest.fixture
def no_runtime_scan(monkeypatch):
    """The CLI finds the runtimes the app's stub finds: none."""
    monkeypatch.setattr("cope_tui.service.runtimes.detect_runtimes", lambda llama_bin=None: NO_RUNTIMES)


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches", "no_runtime_scan")
@pytest.mark.parametrize("plan", PLANS)
async def test_cli_and_app_agree_on_catalog_models(plan, capsys, tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    # the GGUF named for the commands lies outside the working folder
    model_path = str(tmp_path / "models" / f"{plan['model']}-Q4_K_M.gguf")
    cli = _cli_side(capsys, plan, model_path, "model.gguf")
    await _check_app(plan, cli, model_path)


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches", "no_runtime_scan")
async def test_cli_and_app_agree_on_a_gguf_outside_the_working_folder(capsys, tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from tests.tiny_gguf import random_weights, write_gguf

    (tmp_path / "models").mkdir()
    (tmp_path / "work").mkdir()
    gguf = tmp_path / "models" / "tiny-F32.gguf"
    write_gguf(gguf, random_weights(0))
    monkeypatch.chdir(tmp_path / "work")
    plan = {"model": "../models/tiny-F32.gguf", "gpu": "rtx-4090"}  # decode: -c 0 is its trained 256 tokens
    cli = _cli_side(capsys, plan, None, plan["model"])
    # every command loads the file as it was given, from the working folder
    argv = cli["advise"]["recommendation"]["run_now"]["argv"]
    assert argv[argv.index("-m") + 1] == plan["model"]
    await _check_app(plan, cli, None)
