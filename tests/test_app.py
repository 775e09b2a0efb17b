"""The Textual app, driven with the Pilot: every journey of issue 6.

Nothing here probes the machine or touches the network: the CPU is a preset stub, GPU
detection is a stub, probes are a fake runner posting scripted progress, and the
profile and trace caches live in a temporary folder.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("textual")

from textual import events  # noqa: E402
from textual.widgets import DataTable, Input, Static, TabbedContent  # noqa: E402
from textual.worker import WorkerCancelled  # noqa: E402

from cope_tui.app.app import CopeApp  # noqa: E402
from cope_tui.app.help import HelpScreen  # noqa: E402
from cope_tui.app.state import Services  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.service.pricing import Pricing, ProbeOutcome, ProbeReport  # noqa: E402
from engine.cost.cost_model import Fidelity  # noqa: E402
from engine.hardware.platform import unknown_gpu  # noqa: E402
from engine.hardware.cpu_presets import get_cpu_preset

PROBES = ("cpu_experts n=1 threads=8", "cpu_experts n=2 threads=8", "h2d_copy n=1", "sync")


class FakeRunner:
    """Posts scripted progress. With `hold`, waits after the second probe until released
    or cancelled; with `forever`, runs until cancelled."""

    def __init__(self, *, hold: bool = False, forever: bool = False, fail: bool = False):
        self.hold, self.forever, self.fail = hold, forever, fail
        self.release = threading.Event()
        self.reached = threading.Event()
        self.calls = 0

    def __call__(self, request, *, fidelity, budget_s, progress, cancel):  # type: ignore[no-untyped-def]
        self.calls += 1
        total = len(PROBES)
        done = 0
        for label in PROBES:
            if cancel.is_set():
                return ProbeOutcome(Fidelity(fidelity), ProbeReport(measured=done, left=total - done,
                                                                    stopped="cancelled"),
                                    None, source="/cache/profiles/fake.json")
            progress(done, total, label)
            if done == 1:
                self.reached.set()
                if self.forever:
                    cancel.wait(30)
                    continue
                if self.hold:
                    self.release.wait(30)
            if self.fail and done == 2:
                raise RuntimeError("the fake prober broke")
            done += 1
        progress(done, total, "done")
        from engine.cost.analytic_cost import AnalyticCostModel

        model = AnalyticCostModel(request.model, request.quant, request.platform,
                                  context_tokens=request.context_tokens)
        pricing = Pricing(model, Fidelity(fidelity), "fake probes", "/cache/profiles/fake.json")
        return ProbeOutcome(Fidelity(fidelity), ProbeReport(measured=done), pricing, source="/cache/profiles/fake.json")


def make_services(runner=None, **kw) -> Services:  # type: ignore[no-untyped-def]
    from probes.runtimes import RuntimeScan

    kw.setdefault("scan_runtimes", lambda: RuntimeScan((), ("test stub: no runtime looked for",)))
    return Services(
        detect_cpu=lambda: get_cpu_preset("desktop-ddr5"),
        detect_gpu=lambda: unknown_gpu("test stub: no GPU looked for"),
        run_probes=runner or FakeRunner(),
        measure_platform=lambda *a: pytest.fail("a test measured the machine"),
        record=lambda **a: pytest.fail("a test recorded a trace"),
        plan_pull=lambda *a: pytest.fail("a test looked up a pull"),
        pull=lambda *a: pytest.fail("a test pulled a trace"),
        sweep_points=3,
        **kw,
    )


FAST = PlanChoices(tokens=150)  # a short synthetic trace keeps each ranking quick


def make_app(services: Services, choices: PlanChoices = FAST, **kw) -> CopeApp:  # type: ignore[no-untyped-def]
    return CopeApp(services=services, choices=choices, **kw)


pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("app_caches")]


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    """Wait until no worker runs (a cancelled one counts as done)."""
    for _ in range(50):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause()
        if not any(w.is_running for w in pilot.app.workers):
            await pilot.pause()
            return
    raise AssertionError("workers did not finish")


async def wait_for(pilot, predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(400):
        if predicate():
            return
        await pilot.pause(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def submit(pilot, selector: str, text: str) -> None:  # type: ignore[no-untyped-def]
    """`text` in the Input `selector`, then Enter in it: a path as it is submitted, without a
    key press per character (typing into a field is tested with short words elsewhere)."""
    field = pilot.app.query_one(selector, Input)
    field.value = text
    pilot.app.screen.set_focus(field)
    await pilot.press("enter")


def text_of(app, selector: str) -> str:  # type: ignore[no-untyped-def]
    widget = app.query_one(selector, Static)
    return str(widget.render())


def runnable_rows(app) -> list:  # type: ignore[no-untyped-def]
    """The ranking's shown rows that some runtime runs, the run-now row first (what the Results
    table lists)."""
    from cope_tui.text_report import run_now_first

    return [row for row in run_now_first(app.runs) if row.runs]


def paper_rows(app) -> list:  # type: ignore[no-untyped-def]
    """The Policy Matrix's cells no runtime runs (listed only on demand)."""
    from cope_tui.text_report import run_now_first

    return [row for row in run_now_first(app.runs) if not row.runs]


def table_column(app, column: int) -> list[str]:  # type: ignore[no-untyped-def]
    table = app.query_one("#results-table", DataTable)
    return [str(table.get_row_at(i)[column]) for i in range(table.row_count)]


async def test_default_opens_on_ranked_results_without_any_action(first_ranking):
    app = first_ranking.app  # the module's shared app: this test only reads it
    rec = app.advice.rec
    assert app.query_one(TabbedContent).active == "results"
    table = app.query_one("#results-table", DataTable)
    # What some runtime runs is listed; the Policy Matrix's paper-only cells are counted below it.
    assert table.row_count == len(runnable_rows(app)) > 10
    assert text_of(app, "#paper-line").startswith(f"On paper only: {len(paper_rows(app))} more cells")
    # The run-now row (the best stock llama.cpp runs: no runtime is installed) is pinned
    # on top, then the ranking in order without it.
    now = app.runs.run_now
    assert now is not None and now.runtime == "llama.cpp" and not now.installed
    ranks = table_column(app, 0)
    now_rank = str([e.candidate.id for e in rec.estimates].index(now.row.id) + 1)
    assert ranks[0] == "▶" + now_rank
    assert [int(r) for r in ranks[1:]] == sorted(int(r) for r in ranks[1:]) and now_rank not in ranks[1:]
    summary = text_of(app, "#results-summary")
    assert "SYNTHETIC" in summary and "Qwen3-30B-A3B" in summary
    assert "(base)" in " ".join(table_column(app, 1))
    words = {w for cell in table_column(app, 9) for w in cell.split()}
    assert words <= {"stock", "ik", "fork", "kt", "~kt", "~fork", "none", "no", "RAM"} and "stock" in words
    assert app.selected_id == now.row.id and now.row.id in text_of(app, "#breakdown")
    assert len(app.sweep_points) == 3 and app.query_one("ThroughputChart").series
    assert app.detected_gpu.name == "unknown GPU"
    assert not app.notices


async def test_compact_table_at_80_columns(first_ranking_80x24):
    app = first_ranking_80x24.app  # the module's shared app: this test only reads it
    table = app.query_one("#results-table", DataTable)
    assert [str(c.label) for c in table.columns.values()][:3] == ["#", "flags, or candidate", "tok/s ±band"]
    assert "stock" in table_column(app, 5)[0].split()  # the pinned run-now row


async def test_pick_a_model_from_the_searchable_catalog():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        assert app.query_one(TabbedContent).active == "model"
        app.query_one("#search", Input).focus()
        await pilot.press(*"olmoe")
        assert app.query_one("#catalog").option_count == 1
        await pilot.press("enter")
        await settle(pilot)
        assert app.advice.request.model.id == "olmoe-1b-7b"
        assert "OLMoE" in text_of(app, "#model-now")
        assert "OLMoE" in text_of(app, "#results-summary")


async def test_context_and_threads_apply():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        app.query_one("#context", Input).value = "4096"
        app.query_one("#threads", Input).value = "6"
        await pilot.click("#apply")
        await settle(pilot)
        assert app.advice.request.context_tokens == 4096 and app.advice.request.threads == 6
        assert "6 threads" in text_of(app, "#results-summary")


async def test_plan_for_another_gpu_preset():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("1")
        await pilot.pause()
        await pilot.press(*"rtx-4090", "enter")  # the tab's first field: the GPU to plan for
        await settle(pilot)
        assert app.advice.request.platform.gpu.preset_id == "rtx-4090"
        assert "RTX 4090" in text_of(app, "#gpu-title")
        gpu_rows = app.query_one("#gpu-facts", DataTable)
        assert "preset" in {str(gpu_rows.get_row_at(i)[2]) for i in range(gpu_rows.row_count)}


async def test_probes_show_progress_then_reprice():
    runner = FakeRunner(hold=True)
    app = make_app(make_services(runner))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("p", "y")  # p asks first
        assert app.query_one(TabbedContent).active == "probes"
        await wait_for(pilot, runner.reached.is_set, "the second probe")
        await wait_for(pilot, lambda: "probe 2/4" in text_of(app, "#probe-current"), "progress")
        assert "cpu_experts n=2" in text_of(app, "#probe-current")
        assert app.query_one("#probe-bar").progress == 1
        await pilot.press("4")  # the app stays responsive while probing
        runner.release.set()
        await settle(pilot)
        summary = text_of(app, "#probe-summary")
        assert "Probes done: 4 measurements" in summary and "repriced" in summary
        assert app.notices[-1][0] == "information"


async def test_escape_cancels_probes_and_keeps_what_was_measured():
    runner = FakeRunner(forever=True)
    app = make_app(make_services(runner))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("p", "y")  # p asks first
        await wait_for(pilot, runner.reached.is_set, "the second probe")
        await pilot.press("escape")
        await settle(pilot)
        severity, text = app.notices[-1]
        assert severity == "warning"
        assert "Probes cancelled: 1 measurements taken, kept" in text and "resumes" in text
        assert "cancelled" in text_of(app, "#probe-summary")
        assert app.advice is before  # nothing repriced from a partial run
        await pilot.press("f6")  # the Probes tab opened in its budget field: a digit would type there
        assert app.query_one(TabbedContent).active == "results"


async def test_a_failed_probe_run_is_a_notification_not_a_traceback():
    app = make_app(make_services(FakeRunner(fail=True)))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("p", "y")  # p asks first
        await settle(pilot)
        severity, text = app.notices[-1]
        assert severity == "error" and "Probes failed" in text and "the fake prober broke" in text


async def test_select_a_result_and_export_it_to_a_file(tmp_path):
    app = make_app(make_services(), cwd=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        rec = app.advice.rec
        table = app.query_one("#results-table", DataTable)
        table.focus()
        await pilot.press("down", "down")
        chosen = rec.estimate_of(table.coordinate_to_cell_key((2, 0)).row_key.value)
        assert app.selected_id == chosen.candidate.id
        assert chosen.candidate.id in text_of(app, "#breakdown")
        await pilot.press("6")
        app.query_one("#save-path", Input).value = "out/run.sh"
        # a long head (kt-kernel's row: its activation file) puts the button below the fold: scrolled to, as a person does
        app.query_one("#save").scroll_visible(animate=False)
        await pilot.pause()
        await pilot.click("#save")
        await pilot.pause()
        written = (tmp_path / "out" / "run.sh").read_text()
        export = app.current_export(out=tmp_path / "out" / "run.sh")
        shebang, *comments, command = written.splitlines()
        assert shebang == "#!/bin/sh" and command == export.display() and comments == [f"# {n}" for n in export.notes]
        if export.runtime == "sglang-kt":  # the only runtime that runs this row: its activation file too
            assert "python -m sglang.launch_server" in command
            assert (tmp_path / "out" / export.tensors[0][0]).stat().st_size > 0
        else:
            assert command.startswith(("llama-server", "GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server"))
            assert "--fit off" in command
        head = text_of(app, "#export-head")
        from engine.runtimes.llamacpp import label_text

        assert chosen.candidate.id in head and label_text(app.labels[chosen.candidate.id]) in head
        assert app.labels[chosen.candidate.id] not in head  # the label in words, not the internal one
        if export.nearest_id is not None:
            assert f"nearest that runs here: {export.nearest_id}" in head
        assert app.notices[-1][0] == "information" and app.notices[-1][1].endswith(f"{tmp_path / 'out' / 'run.sh'}")


async def test_not_expressible_export_names_the_nearest_with_its_speed():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        ids = [e.candidate.id for e in app.advice.rec.estimates]
        # One no runtime runs (SGLang runs some not-expressible ones, cut to its pool): stock's nearest.
        target = next(i for i in ids if app.labels[i] == "not-expressible" and not app.runs.row(i).runs)
        app.select_candidate(target)
        await pilot.press("6")
        await pilot.pause()
        head = text_of(app, "#export-head")
        assert "no llama.cpp expresses it" in head and "nearest that runs here" in head and "tok/s" in head
        export = app.current_export()
        assert export.exported_id != target and export.exported_id in head
        assert text_of(app, "#command") == export.display()


async def test_copy_puts_the_command_on_the_clipboard(first_ranking_80x24):
    pilot = first_ranking_80x24  # the module's shared app: Copy changes only the clipboard and the notices
    app = pilot.app
    await pilot.press("c")
    assert app.clipboard == app.current_export().display()
    assert app.clipboard.startswith(("llama-server", "GGML_OP_OFFLOAD_MIN_BATCH"))
    # OSC 52 gets no answer: the notice says where it went, never that it was copied.
    text = app.notices[-1][1]
    assert "Copied" not in text and "OSC 52" in text and "does not support it" in text


async def test_help_screen_opens_and_closes(first_ranking_80x24):
    pilot = first_ranking_80x24  # the module's shared app: the help closes again, as the test checks
    app = pilot.app
    await pilot.press("question_mark")
    assert isinstance(app.screen, HelpScreen)
    markdown = app.screen.query_one("Markdown")
    assert "Escape" in markdown.source and "SYNTHETIC" in markdown.source
    await pilot.press("escape")
    assert not isinstance(app.screen, HelpScreen)


async def test_bad_model_keeps_results_and_says_why(tmp_path):
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("2")
        await submit(pilot, "#gguf", str(tmp_path / "missing.gguf"))
        await settle(pilot)
        severity, text = app.notices[-1]
        assert severity == "error" and "missing.gguf" in text and "previous results stay" in text
        assert app.advice is before and app.choices.model is None


async def test_import_a_trace_file_and_use_synthetic_again(tmp_path):
    from engine.models.catalog import get_model
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace
    from engine.traces import save_trace

    trace = synthetic_trace(get_model("qwen3-30b-a3b"), SyntheticSettings(tokens=200, seed=3, sequences=1))
    path = tmp_path / "mine.cope.npz"
    save_trace(trace, path)
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        assert "SYNTHETIC" in text_of(app, "#trace-info")
        pull = app.query_one("#pull")  # the index names no trace of this model: not offered
        assert pull.disabled and "no published trace" in str(pull.tooltip)
        await submit(pilot, "#import", str(path))
        await settle(pilot)
        assert app.choices.trace == str(path)
        req = app.advice.request
        assert req.trace.n_tokens + req.profile.n_tokens == 200  # the file's tokens, split in half
        await pilot.click("#synthetic")
        await settle(pilot)
        assert app.choices.trace == "synthetic" and app.advice.request.trace.n_tokens == 150


def test_no_arguments_without_a_terminal_still_means_advise(capsys):
    from cope_tui.cli import main

    assert main(["advise", "--tokens", "50", "--cpu", "desktop-ddr5"]) == 0
    capsys.readouterr()
    assert main([]) == 0  # pytest's stdio is not a terminal: headless advise, no app
    assert "COPE advise" in capsys.readouterr().out


def test_the_app_module_loads_without_torch():
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from cope_tui.app.app import CopeApp\n"
        "CopeApp()\n"
        "assert 'torch' not in sys.modules, 'torch imported at startup'\n"
        "print(time.perf_counter() - t)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr  # startup time is a figure for bench/, not a test


PASTED = "llama-server -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 --n-cpu-moe 30 -t 8 -c 8192 -fa on --foo"


async def test_paste_the_command_you_run_and_see_it_beside_copes_best():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")  # the Export pane, with the paste field focused
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "export"
        field = app.query_one("#paste-command", Input)
        assert app.focused is field
        field.post_message(events.Paste(PASTED))  # as a terminal delivers a paste: one event
        await pilot.pause()
        assert field.value == PASTED
        await pilot.press("enter")
        await settle(pilot)
        shown = text_of(app, "#estimate-result")
        assert "maps to partition-first: 30 of 48 MoE layers' experts on the CPU (blocks 0..29)" in shown
        assert "Priced at 8 threads, context 8192" in shown  # the command's -t and -c are honoured
        lines = shown.splitlines()
        speed = next(line for line in lines if "faster than your command" in line)
        assert speed.startswith("It is ") and speed.split()[2].endswith("x")
        assert float(speed.split()[2][:-1]) > 1.0
        # what runs leads; the paper optimum, when it is another candidate, follows with what it needs
        runs = next(i for i, line in enumerate(lines) if line.startswith("COPE's best that stock llama.cpp runs: "))
        runnable = lines[runs].split(": ")[1]
        assert app.advice is not None and runnable in {e.candidate.id for e in app.advice.rec.estimates}
        paper = [i for i, line in enumerate(lines) if line.startswith("Fastest on paper (")]
        assert all(i > runs for i in paper)
        assert "tok/s" in shown and "ms/token" in shown
        # every figure carries its band, as `cope estimate` prints it (engine/advice/error_band.py)
        est = app.pasted_estimate
        figures = [i for i, line in enumerate(lines) if " tok/s" in line and "ms/token" in line]
        assert figures and all(lines[i + 1].startswith("  error band: ") for i in figures)
        assert lines[figures[0] + 1] == f"  error band: {est.yours.band.text()}" and "±" in lines[figures[0] + 1]
        unknown = next(line for line in shown.splitlines() if line.startswith("Not understood"))
        assert "--foo" in unknown
        assert "priced as" not in shown  # the -m file is named after the model in use: nothing to say
        assert not [n for n in app.notices if n[0] == "error"]


async def test_the_pasted_estimate_agrees_with_cope_estimate(first_ranking):
    import shlex

    import numpy as np

    from cope_tui.service.advice import estimate_command, parse_pasted
    from engine.advice.advise import advise
    from tests.factories import replay_priced_layer_set

    advice = first_ranking.app.advice  # the module's shared app: this test only reads it
    command = parse_pasted(PASTED)
    assert command.unknown == ("--foo",) and shlex.split(PASTED)[0] == command.binary
    result = estimate_command(advice, command)
    from dataclasses import replace

    from cope_tui.service.pricing import choose_cost_model

    request = replace(advice.request, threads=8, context_tokens=8192)
    cost_model = choose_cost_model(request).cost_model
    cpu = np.arange(48) < 30
    assert result.yours.tpot_s == pytest.approx(replay_priced_layer_set(request, cost_model, cpu), rel=1e-9)
    assert result.best.tpot_s == pytest.approx(advise(request, cost_model).best.tpot_s)


async def test_an_unreadable_pasted_command_is_one_line_not_a_traceback():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("6")
        app.query_one("#paste-command", Input).focus()
        await pilot.press(*"llama-server -m 'my model.gguf --n-cpu-moe 4", "enter")
        await settle(pilot)
        shown = text_of(app, "#estimate-result")
        assert shown == "Could not read the command: no closing quotation (check its quotes and backslashes)"
        assert "\n" not in shown.strip() and "Traceback" not in shown
        app.query_one("#paste-command", Input).value = "llama-server --n-cpu-moe lots"
        await pilot.press("enter")
        await settle(pilot)
        assert text_of(app, "#estimate-result") == (
            "Could not read the command: the llama.cpp command: --n-cpu-moe needs a whole number, got 'lots'")


async def test_a_multiline_paste_is_joined_into_one_command():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        field = app.query_one("#paste-command", Input)
        field.post_message(events.Paste("GGML_OP_OFFLOAD_MIN_BATCH=1 ./build/bin/llama-cli \\\n"
                                        "  -m 'my model.gguf' \\\n  -ot 'blk\\.(4|5)\\.ffn_.*_exps=CPU' -t 6\n"))
        await pilot.pause()
        assert field.value == ("GGML_OP_OFFLOAD_MIN_BATCH=1 ./build/bin/llama-cli -m 'my model.gguf' "
                               "-ot 'blk\\.(4|5)\\.ffn_.*_exps=CPU' -t 6")
        await pilot.press("enter")
        await settle(pilot)
        shown = text_of(app, "#estimate-result")
        assert "maps to layer set (stage): 2 of 48 MoE layers' experts on the CPU (blocks 4..5)" in shown
        assert "6 threads" in shown and "Not understood" not in shown


def recorded_trace_file(path, *, tokens: int, note: str = ""):  # type: ignore[no-untyped-def]
    """A small synthetic trace saved as if `cope trace record` had made it (origin "recorded")."""
    from dataclasses import replace

    from engine.models.catalog import get_model
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace
    from engine.traces import save_trace

    trace = synthetic_trace(get_model("qwen3-30b-a3b"), SyntheticSettings(tokens=tokens, seed=7, sequences=1))
    meta = replace(trace.meta, origin="recorded", source="fake/recorder", model="Qwen3-30B-A3B", domain="code",
                   recorded_with="a test fake", notes=(note,) if note else ())
    save_trace(replace(trace, meta=meta), path)
    return str(path)


class FakeRecorder:
    """Stands in for services.record: posts scripted per-token progress and writes a small
    trace. With `hold`, waits after `hold` tokens until cancelled, then keeps what it has
    (as probes.record_hf does); with `nothing`, is cancelled before the first token."""

    def __init__(self, folder, *, hold: int | None = None, nothing: bool = False):
        self.folder, self.hold, self.nothing = folder, hold, nothing
        self.reached = threading.Event()
        self.calls: list[dict] = []
        self.thread = None

    def __call__(self, *, model, domain, tokens, progress, cancel):  # type: ignore[no-untyped-def]
        self.calls.append(dict(model=model, domain=domain, tokens=tokens))
        self.thread = threading.current_thread()
        total = 2 * tokens  # two prompts
        done = 0
        progress(done, total, "prompt 1/2")
        if self.nothing:
            self.reached.set()
            cancel.wait(30)
            from probes.record_hf import RecordingCancelled

            raise RecordingCancelled("cancelled before the first token was recorded")
        while done < total:
            if cancel.is_set():
                break
            done += 1
            progress(done, total, f"prompt {1 + (done - 1) // tokens}/2")
            if done == self.hold:
                self.reached.set()
                cancel.wait(30)
        note = f"cancelled: {done} of {total} tokens recorded" if done < total else ""
        return recorded_trace_file(self.folder / f"rec-{done}.cope.npz", tokens=done, note=note)


async def test_record_a_trace_in_a_worker_then_rank_with_it(tmp_path):
    from dataclasses import replace

    from textual.widgets import ProgressBar

    recorder = FakeRecorder(tmp_path, hold=None)
    hold = threading.Event()
    seen: list[tuple[int, int]] = []

    def record(**kw):  # type: ignore[no-untyped-def]
        progress = kw.pop("progress")

        def slow(done, total, label):  # type: ignore[no-untyped-def]
            seen.append((done, total))
            progress(done, total, label)
            if done == 20:  # pause mid-way so the test can look at the progress
                recorder.reached.set()
                hold.wait(30)

        return recorder(progress=slow, **kw)

    app = make_app(replace(make_services(), record=record))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("3")
        assert "SYNTHETIC" in text_of(app, "#trace-info")
        assert app.query_one("#record-model", Input).value  # the catalog's Hub repo, prefilled
        app.query_one("#record-model", Input).value = "fake/Qwen3-30B-A3B"
        app.query_one("#record-tokens", Input).value = "32"
        await pilot.click("#record")
        await wait_for(pilot, recorder.reached.is_set, "the recorder to reach token 20")
        await wait_for(pilot, lambda: app.query_one("#record-progress", ProgressBar).progress == 20, "progress")
        assert app.query_one("#record-progress", ProgressBar).total == 64
        assert "recording: prompt 1/2 (Escape cancels)" in text_of(app, "#record-status")
        await pilot.press("4")  # the app stays responsive while recording
        await pilot.press("3")
        hold.set()
        await wait_for(pilot, lambda: app.choices.trace is not None, "the recorded trace")
        await settle(pilot)
        assert recorder.calls == [dict(model="fake/Qwen3-30B-A3B", domain="chat", tokens=32)]
        assert recorder.thread is not threading.main_thread()
        assert seen[-1] == (64, 64)
        path = str(tmp_path / "rec-64.cope.npz")
        assert app.choices.trace == path and app.choices.profile_trace is None
        req = app.advice.request
        assert app.advice is not before  # recomputed with the recorded trace
        assert req.trace.meta.origin == "recorded" and req.profile.meta.origin == "recorded"
        assert req.trace.n_tokens + req.profile.n_tokens == 64
        info = text_of(app, "#trace-info")
        assert " RECORDED " in info and "SYNTHETIC" not in info and "fake/recorder" in info
        assert "SYNTHETIC" not in text_of(app, "#results-summary")
        assert f"Recorded {path}; it is now the trace in use." == text_of(app, "#record-status")
        assert app.notices[-1] == ("information", f"Recorded {path}; it is now the trace in use.")
        assert app.query_one("#results-table", DataTable).row_count == len(runnable_rows(app))


async def test_escape_cancels_a_recording_and_says_what_was_kept(tmp_path):
    from dataclasses import replace

    recorder = FakeRecorder(tmp_path, hold=10)
    app = make_app(replace(make_services(), record=recorder))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        app.query_one("#record-tokens", Input).value = "16"
        await pilot.click("#record")
        await wait_for(pilot, recorder.reached.is_set, "the recorder to reach token 10")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.choices.trace is not None, "the kept part of the recording")
        await settle(pilot)
        path = str(tmp_path / "rec-10.cope.npz")
        severity, text = app.notices[-1]
        assert text == f"Recording cancelled: kept the 10 of 32 tokens recorded in {path}; it is now the trace in use."
        assert "Traceback" not in text and not [n for n in app.notices if n[0] == "error"]
        assert text_of(app, "#record-status") == text
        assert app.choices.trace == path
        req = app.advice.request
        assert req.trace.meta.origin == "recorded" and req.trace.n_tokens + req.profile.n_tokens == 10
        assert app.query_one(TabbedContent).active == "trace"  # Escape cancelled, it did not leave the pane


async def test_a_recording_cancelled_before_any_token_keeps_nothing(tmp_path):
    from dataclasses import replace

    recorder = FakeRecorder(tmp_path, nothing=True)
    app = make_app(replace(make_services(), record=recorder))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("3")
        await pilot.click("#record")
        await wait_for(pilot, recorder.reached.is_set, "the recorder to start")
        await pilot.press("escape")
        await wait_for(pilot, lambda: "nothing was saved" in text_of(app, "#record-status"), "the cancel")
        await settle(pilot)
        assert app.notices[-1] == ("warning", "Recording cancelled; nothing was saved.")
        assert app.advice is before and app.choices.trace is None


async def test_a_bad_token_count_is_a_warning_not_a_crash(tmp_path):
    app = make_app(make_services())  # the recorder fails the test if called
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("3")
        app.query_one("#record-tokens", Input).value = "-"
        await pilot.click("#record")
        await pilot.pause()
        assert app.notices[-1] == ("warning", "Record: '-' is not a number of tokens")
        app.query_one("#record-tokens", Input).value = "0"
        app.query_one("#record").press()  # the first warning's toast may cover the button
        await pilot.pause()
        assert app.notices[-1] == ("warning", "Record: tokens per prompt must be at least 1, got 0")
        assert app.is_running


async def test_measure_this_machine_shows_the_measured_cpu_bandwidth():
    from dataclasses import replace

    from engine.hardware.platform import Fact, Platform

    asked = []

    def measure_platform(progress, expert_bytes):  # type: ignore[no-untyped-def]
        # stands in for probes.detect.detect_platform(measure=True, ...): no torch, no timing
        asked.append((expert_bytes, threading.current_thread() is threading.main_thread()))
        progress("measuring CPU memory bandwidth")
        cpu = replace(get_cpu_preset("desktop-ddr5"), name="Fake CPU 9000", preset_id=None,
                      mem_bandwidth_bytes_per_s=Fact.measured(61.3e9, "fake: streamed 1 GiB 5 times"))
        return Platform(gpu=unknown_gpu("fake: no GPU on this machine"), cpu=cpu)

    app = make_app(replace(make_services(), measure_platform=measure_platform))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        before = app.advice
        await pilot.press("1")
        assert text_of(app, "#cpu-title") != "CPU: Fake CPU 9000"
        await pilot.click("#measure")
        await wait_for(pilot, lambda: app.advice is not before, "the ranking recomputed")
        await settle(pilot)
        req = before.request
        assert asked == [(req.model.expert_bytes(req.quant), False)]  # in a worker thread
        cpu = app.advice.request.platform.cpu
        assert cpu.name == "Fake CPU 9000"
        assert cpu.mem_bandwidth_bytes_per_s == Fact.measured(61.3e9, "fake: streamed 1 GiB 5 times")
        assert text_of(app, "#cpu-title") == "CPU: Fake CPU 9000"
        table = app.query_one("#cpu-facts", DataTable)
        rows = {str(table.get_row_at(i)[0]): [str(c) for c in table.get_row_at(i)[1:]]
                for i in range(table.row_count)}
        assert rows["memory bandwidth"][:2] == ["61.3 GB/s", "measured"]
        assert "fake: streamed" in rows["memory bandwidth"][2]
        assert "this machine: unknown GPU" in text_of(app, "#detected-gpu")
        assert app.notices[0][1].startswith("Measuring this machine's bandwidths")
        assert app.notices[-1] == ("information",
                                   "Measured this machine: the CPU figures are now measured; recomputing")
        assert not [n for n in app.notices if n[0] == "error"]


async def test_the_app_starts_on_the_detected_gpu_and_warns_when_torch_cannot_use_it():
    from dataclasses import replace as with_fields

    from engine.hardware.gpu_match import with_preset_figures
    from engine.hardware.platform import CudaProblem, Fact

    detected = with_fields(
        with_preset_figures(with_fields(unknown_gpu("not asked"), name="NVIDIA GeForce RTX 4090",
                                        vram_bytes=Fact.measured(24 * 2**30, "NVML"),
                                        vram_free_bytes=Fact.measured(23 * 2**30, "NVML"))),
        cuda_problem=CudaProblem("cpu-build", "an NVIDIA GPU is present but torch 2.13.0 is a CPU-only build",
                                 "pip uninstall -y torch && pip install torch --index-url https://x/cu124"))
    from dataclasses import replace

    app = make_app(replace(make_services(), detect_gpu=lambda: detected))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        gpu = app.advice.request.platform.gpu
        assert gpu.name == "NVIDIA GeForce RTX 4090" and app.advice.request.vram_budget_bytes == 24 * 2**30
        await pilot.press("1")
        await pilot.pause()
        shown = text_of(app, "#detected-gpu")
        assert "this machine: NVIDIA GeForce RTX 4090" in shown
        assert "warning: an NVIDIA GPU is present but torch 2.13.0 is a CPU-only build" in shown
        assert "fix: pip uninstall -y torch" in shown
        assert "RTX 4090" in text_of(app, "#gpu-title")
        # Naming a preset plans for it; clearing the choice goes back to this machine's GPU.
        await submit(pilot, "#gpu", "rtx-3090")
        await settle(pilot)
        assert app.advice.request.platform.gpu.preset_id == "rtx-3090"
        await submit(pilot, "#gpu", "")
        await settle(pilot)
        assert app.advice.request.platform.gpu.name == "NVIDIA GeForce RTX 4090"


async def test_a_workload_shows_both_speeds_and_the_request_time_and_the_chart_plots_either():
    app = make_app(make_services(), FAST.with_(workload="rag", gpu="rtx-4060-ti-16gb"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        ranking = app.workload_ranking
        assert ranking is not None and ranking.workload.prompt_tokens == 8000
        summary = text_of(app, "#results-summary")
        assert "fastest request" in summary and "TTFT" in summary and "prompt" in summary
        breakdown = text_of(app, "#breakdown")
        assert "request" in breakdown and "prompt tok/s at -ub" in breakdown and "decode tok/s" in breakdown
        chart = app.query_one("ThroughputChart")
        decode_series = chart.series
        assert all(p.prompt_tokens_per_s for p in app.sweep_points)
        await pilot.press("t")
        assert app.chart_metric == "prompt" and chart.series != decode_series
        await pilot.press("t")
        assert app.chart_metric == "decode"


async def test_with_a_workload_the_pinned_row_and_the_export_follow_request_time():
    app = make_app(make_services(), FAST.with_(workload="rag", gpu="rtx-4060-ti-16gb"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        from engine.advice.run_advice import plan_runs

        ranking, runs = app.workload_ranking, app.runs
        assert runs.ranking is ranking
        now = runs.run_now
        # The pinned row is the fastest request stock llama.cpp runs (nothing is installed),
        # here not the decode pick: a long prompt favours every expert on the CPU.
        fastest = next(w.candidate_id for w in ranking.estimates
                       if runs.row(w.candidate_id).same_as is None
                       and "llama.cpp" in runs.row(w.candidate_id).exact_runtimes())
        assert now.row.id == fastest != plan_runs(app.advice.rec).run_now.row.id
        table = app.query_one("#results-table", DataTable)
        assert table.coordinate_to_cell_key((0, 0)).row_key.value == fastest
        assert table_column(app, 0)[0].startswith("▶") and app.selected_id == fastest
        # Its export carries the -b/-ub chosen for the request and a context that holds it.
        await pilot.press("6")
        await pilot.pause()
        argv = list(app.current_export().argv)
        chosen = ranking.of(fastest).prefill
        assert argv[argv.index("-ub") + 1] == str(chosen.ubatch) and argv[argv.index("-b") + 1] == str(chosen.batch)
        assert int(argv[argv.index("-c") + 1]) >= 8000 + 300
        assert text_of(app, "#command") == app.current_export().display()
