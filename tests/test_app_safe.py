"""An app that is safe to type in and remembers (issue 45): single letters never act while
text is typed and never destroy (quit and measurements ask first), the focus lands in each
tab's first field, the last plan is remembered in a settings file (a damaged one is a
warning, never a crash), `cope FLAGS` starts from advise's flags, and the app plans what
the CLI plans: several GPUs, no GPU, a backend."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Input, Static, TabbedContent  # noqa: E402

from cope_tui import cli  # noqa: E402
from cope_tui.app.app import TABS  # noqa: E402
from cope_tui.app.confirm import ConfirmScreen  # noqa: E402
from cope_tui.app_settings import (  # noqa: E402
    choices_from_flags,
    flags_of,
    load_settings,
    save_settings,
    settings_path,
)
from cope_tui.options import PlanChoices  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from tests.test_app import FAST, FakeRunner, make_app, make_services, settle, submit, text_of  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]

TAB_KEYS = dict(zip(TABS, ("f2", "f3", "f4", "f5", "f6", "f7")))


class Watched:
    """Services whose measurement is counted, on an app whose exit is counted."""

    def __init__(self, **kw):  # type: ignore[no-untyped-def]
        self.measured: list[int] = []
        self.runner = FakeRunner()
        self.services = dataclasses.replace(make_services(self.runner, **kw), measure_platform=self._measure)

    def _measure(self, progress, expert_bytes):  # type: ignore[no-untyped-def]
        self.measured.append(expert_bytes)
        raise CopeInputError("test stub: measured nothing")

    def app(self, choices: PlanChoices = FAST, **kw):  # type: ignore[no-untyped-def]
        app = make_app(self.services, choices, **kw)
        self.exits: list[object] = []
        app.exit = lambda *a, **k: self.exits.append(a)  # type: ignore[method-assign]
        return app


async def test_typing_qwen3_q_and_m_into_every_tab_s_first_field_neither_quits_nor_measures():
    w = Watched()
    app = w.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for tab in TABS:
            await pilot.press(TAB_KEYS[tab])
            await pilot.pause()
            await pilot.pause()
            assert app.query_one(TabbedContent).active == tab
            if tab == "results":  # no text field: its table has the focus, and q asks
                assert isinstance(app.focused, DataTable)
                await pilot.press("q")
                await pilot.pause()
                assert "Quit COPE?" in str(app.screen.query_one("#question", Static).render())
                # n answers no, 3 then switches to Trace, whose first field takes " qm"
                await pilot.press(*"wen3 q", "m")
                await pilot.pause()
                assert not isinstance(app.screen, ConfirmScreen)
                assert app.focused.id == "import" and app.focused.value == " qm"
                app.focused.value = ""
            else:
                await pilot.press(*"qwen3 q", "m")
                await pilot.pause()
                field = app.focused
                assert isinstance(field, Input), (tab, field)
                # a number field takes the digit alone; no letter reaches a key either way
                kept = "3" if field.type in ("number", "integer") else "qwen3 qm"
                assert field.value.endswith(kept), (tab, field.id, field.value)
                assert not isinstance(app.screen, ConfirmScreen)
                field.value = ""  # the next tab starts from a quiet app
            await settle(pilot)
            assert w.exits == [] and w.measured == [], tab
        assert w.runner.calls == 0  # and no probe was started


async def test_q_asks_n_keeps_y_quits_and_ctrl_q_quits_at_once_when_nothing_would_be_lost():
    w = Watched()
    app = w.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.focused, DataTable)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and w.exits == []
        await pilot.press("q", "m", "3")  # while asked, the letters act on nothing behind it
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.query_one(TabbedContent).active == "results"
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and w.exits == [] and w.measured == []
        await pilot.press("q", "y")
        await pilot.pause()
        assert len(w.exits) == 1
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert len(w.exits) == 2 and not isinstance(app.screen, ConfirmScreen)


async def test_ctrl_q_asks_while_probes_run():
    w = Watched()
    w.runner.forever = True
    app = w.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.action_start_probes()
        await pilot.pause()
        w.runner.reached.wait(10)
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and w.exits == []
        assert "This stops probes" in str(app.screen.query_one("#question", Static).render())
        await pilot.press("n")
        await pilot.press("escape")  # cancels the probes
        await settle(pilot)
        assert w.exits == []


async def test_m_and_p_ask_first_and_act_only_on_y():
    w = Watched()
    app = w.app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and w.measured == []
        await pilot.press("escape")
        await settle(pilot)
        assert w.measured == []
        await pilot.press("m", "y")
        await settle(pilot)
        assert len(w.measured) == 1  # measured once asked (the stub then fails, said in one line)
        await pilot.press("p")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and w.runner.calls == 0
        await pilot.press("n")
        await settle(pilot)
        assert w.runner.calls == 0
        await pilot.press("p", "y")
        await settle(pilot)
        assert w.runner.calls == 1


async def test_the_app_plans_two_gpus_a_backend_and_no_gpu():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f2")
        await pilot.pause()
        await pilot.pause()
        assert app.focused is app.query_one("#gpu", Input)
        await pilot.press(*"2x rtx-3090", "enter")
        await settle(pilot)
        gpu = app.advice.request.platform.gpu
        assert gpu.name == "2x NVIDIA GeForce RTX 3090" and gpu.vram_bytes.value == 2 * 23.5 * 2**30
        assert "2x NVIDIA GeForce RTX 3090" in text_of(app, "#gpu-title")
        assert app.choices.gpu == "2x rtx-3090"

        await submit(pilot, "#gpu", "rx-7900-xtx@vulkan")
        await settle(pilot)
        assert app.advice.request.platform.gpu.backend == "Vulkan"
        assert "Vulkan0" in app.current_export().display() or "-dev" not in app.current_export().display()

        await submit(pilot, "#gpu", "none")
        await settle(pilot)
        assert app.advice is None and app.cpu_only is not None
        assert app.cpu_only.price.runs and app.cpu_only.price.tokens_per_s > 0
        shown = text_of(app, "#cpu-only-plan")
        assert "CPU only" in shown and "-ngl 0" in shown
        price = app.cpu_only.price  # its figure with its band, CPU-only regime
        assert f"error band of {price.tokens_per_s:.1f} tok/s: {price.band.text()}" in shown and "CPU-only" in shown
        assert "no GPU" in text_of(app, "#results-summary")
        export = app.current_export()
        assert export.argv == app.cpu_only.argv and "-ngl" in export.argv
        await pilot.press("f7")
        await pilot.pause()
        assert "-ngl 0" in text_of(app, "#command")

        await submit(pilot, "#gpu", "")  # back to a GPU: the ranking again
        await settle(pilot)
        assert app.cpu_only is None and app.advice is not None
        assert app.query_one("#results-table", DataTable).row_count > 0


async def test_a_plan_for_no_gpu_with_a_workload_is_one_line_not_a_crash():
    app = make_app(make_services(), FAST.with_(gpu="none", workload="chat"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.advice is None and app.cpu_only is None
        assert any("decode only" in text for _, text in app.notices)


# --- remembered between launches -------------------------------------------------------


async def test_the_plan_survives_a_restart(tmp_path):
    path = tmp_path / "config" / "app.json"
    app = make_app(make_services(), settings_path=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await submit(pilot, "#gpu", "2x rtx-3090")
        await settle(pilot)
        await submit(pilot, "#context", "4096")
        await settle(pilot)
    remembered, warning = load_settings(path)
    assert warning is None
    assert remembered.gpu == "2x rtx-3090" and remembered.context == 4096 and remembered.tokens == FAST.tokens
    again = make_app(make_services(), remembered, settings_path=path)  # as `cope` starts: run_app
    async with again.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        req = again.advice.request
        assert req.platform.gpu.name == "2x NVIDIA GeForce RTX 3090" and req.context_tokens == 4096
    assert not list(path.parent.glob("*.tmp*"))  # written atomically: no temp file left


@pytest.mark.parametrize("text, problem", [
    ("{not json", "Expecting property name"),
    ('{"schema": 7, "flags": []}', "not a COPE settings file of schema 1"),
    ('{"schema": 1, "flags": "--gpu"}', '"flags" must be a list of strings'),
    ('{"schema": 1, "flags": ["--context", "-5"]}', "--context must be positive"),
    ('{"schema": 1, "flags": ["--no-such-flag"]}', "unrecognized arguments: --no-such-flag"),
    (b"\xff\xfe", "codec can't decode"),
])
def test_a_damaged_settings_file_is_one_warning_and_the_defaults(tmp_path, text, problem):
    path = tmp_path / "app.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    remembered, warning = load_settings(path)
    assert remembered is None
    assert warning.startswith(f"{path}: ") and problem in warning and "\n" not in warning
    assert "started from the defaults" in warning
    assert path.read_bytes() == (text if isinstance(text, bytes) else text.encode())  # left as it was


def test_a_settings_folder_is_refused_in_one_line(tmp_path):
    (tmp_path / "app.json").mkdir()
    remembered, warning = load_settings(tmp_path / "app.json")
    assert remembered is None and "started from the defaults" in warning


async def test_a_damaged_settings_file_is_said_in_the_app_which_still_ranks(tmp_path, monkeypatch):
    from cope_tui.app import app as app_module

    monkeypatch.setenv("COPE_CONFIG_DIR", str(tmp_path))
    settings_path().write_text("{broken")
    started = {}

    class Recorded(app_module.CopeApp):
        def run(self):  # type: ignore[no-untyped-def, override]
            started["app"] = self

    monkeypatch.setattr(app_module, "CopeApp", Recorded)
    from cope_tui.app import run_app

    assert run_app() == 0
    app = started["app"]
    assert app.choices == PlanChoices() and app.settings_path == settings_path()
    assert len(app._start_notes) == 1 and "started from the defaults" in app._start_notes[0]


def test_the_flags_are_advise_s_and_round_trip():
    choices = choices_from_flags(["--model", "olmoe-1b-7b", "--gpu", "2x rtx-3090", "--memory", "ddr5-6000x2",
                                  "--ram-gib", "61.5", "--eviction", "lru,score", "--workload", "rag",
                                  "--threads", "8", "--tokens", "300"])
    assert choices.gpu == "2x rtx-3090" and choices.memory.peak_bytes_per_s == 96e9 and choices.threads == 8
    assert choices_from_flags(flags_of(choices)) == choices
    assert flags_of(PlanChoices()) == []
    with pytest.raises(CopeInputError, match="unrecognized arguments: --fidelity"):
        choices_from_flags(["--fidelity", "combined"])  # the app never probes unasked
    with pytest.raises(CopeInputError, match="--threads must be positive"):
        choices_from_flags(["--threads", "0"])


def test_save_settings_writes_the_flags(tmp_path):
    path = save_settings(tmp_path / "deeper" / "app.json", PlanChoices(model="olmoe-1b-7b", gpu="none"))
    assert json.loads(path.read_text()) == {"schema": 1, "flags": ["--model", "olmoe-1b-7b", "--gpu", "none"]}


def test_cope_with_flags_opens_the_app_from_them_in_a_terminal(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(cli, "run_app", lambda flags: started.append(flags) or 0)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli.main(["--gpu", "2x rtx-3090", "--model", "olmoe-1b-7b"]) == 0
    assert cli.main([]) == 0
    assert started == [["--gpu", "2x rtx-3090", "--model", "olmoe-1b-7b"], []]


def test_cope_with_an_output_flag_of_advise_s_is_advise_even_in_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(cli, "run_app", lambda flags: pytest.fail("the app was opened"))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli.main(["--model", "olmoe-1b-7b", "--gpu", "rtx-3090", "--cpu", "7950x", "--tokens", "50",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommendation"]


def test_a_wrong_flag_for_the_app_is_one_line_before_the_screen_is_taken(monkeypatch, capsys):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli.main(["--threads", "zero"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cope: ") and "--threads" in err and err.count("\n") == 1
