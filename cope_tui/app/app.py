"""CopeApp: a thin App that owns the state, starts the workers and tells the panes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, TabbedContent, TabPane
from textual.worker import Worker

from cope_tui.app.head_start import HeadStart, gpu_of
from cope_tui.app.key_actions import TAB_FKEYS, TABS, KeyActions
from cope_tui.app.messages import (
    AdviceReady,
    CommandEstimated,
    CpuOnlyReady,
    GpuDetected,
    ProbesFinished,
    Progress,
    RuntimesFound,
    SearchReady,
    SweepReady,
    WorkFailed,
)
from cope_tui.app.panes import Apply
from cope_tui.app.panes.export import ExportPane
from cope_tui.app.panes.hardware import HardwarePane
from cope_tui.app.panes.model import ModelPane
from cope_tui.app.panes.probes import ProbesPane
from cope_tui.app.panes.results import ResultsPane
from cope_tui.app.panes.trace import TracePane
from cope_tui.app.state import Services
from cope_tui.app.trace_actions import TraceActions
from cope_tui.app.widgets.chart import charted
from cope_tui.app.workers import Workers, why
from cope_tui.app_settings import anchored, save_settings
from cope_tui.options import PlanChoices
from cope_tui.service.advice import Advice, SweepPoint, parse_pasted
from cope_tui.service.export import ExportAsk, export_command
from cope_tui.service.last_plan import record_plan
from cope_tui.service.workload import rank, workload_of
from engine.advice.run_advice import plan_runs
from engine.core.errors import CopeInputError
from engine.runtimes import STOCK_NAME, runtime_named
from engine.runtimes.export import Export



class Tabbed(TabbedContent):
    """TabbedContent that shows a pane for a focus only while that focus is still there.

    A widget focused in a pane tells its TabbedContent through messages that climb one
    container at a time; a tab key handled meanwhile has moved the focus (to the tab bar)
    and shown another pane, and the late message then showed the old pane again (in tmux
    under load, F6 right after a tab opened in its first field stayed there)."""

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        focused = self.screen.focused
        if focused is None or event.tab_pane not in focused.ancestors_with_self:
            event.prevent_default()  # stale: TabbedContent's own handler does not switch
            event.stop()


class CopeApp(KeyActions, TraceActions, Workers, App[None]):
    TITLE = "COPE"
    SUB_TITLE = "MoE experts between GPU and CPU"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        *[Binding(str(i + 1), f"show_tab('{t}')", t.capitalize(), show=False) for i, t in enumerate(TABS)],
        # From inside an input (which takes the digits) the tab keys must arrive as keys:
        # F2..F7 and ctrl+pgup/pgdn do in xterm, tmux and VS Code. alt+digit arrives only in
        # terminals with the kitty keyboard protocol; elsewhere Textual reads ESC+digit as
        # macOS Option characters (ESC 1 is '¡'), typed into the input.
        *[Binding(key, f"show_tab('{t}')", t.capitalize(), show=False, priority=True)
          for i, t in enumerate(TABS) for key in (TAB_FKEYS[i], f"alt+{i + 1}")],
        Binding("ctrl+pageup", "cycle_tab(-1)", "Previous tab", show=False, priority=True),
        Binding("ctrl+pagedown", "cycle_tab(1)", "Next tab", show=False, priority=True),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        # Single letters reach these only where no text is typed (an input takes its letters),
        # and none is destructive: a measurement and quitting ask first.
        Binding("p", "start_probes(True)", "Probe"),
        Binding("escape", "cancel", "Cancel"),
        Binding("c", "copy", "Copy"),
        Binding("s", "save", "Save"),
        Binding("r", "recompute", "Recompute", show=False),
        Binding("m", "measure(True)", "Measure", show=False),
        Binding("e", "paste_command", "Estimate yours", show=False),
        Binding("t", "toggle_chart", "Chart decode/prompt", show=False),
        Binding("q", "ask_quit", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, services: Services | None = None, choices: PlanChoices | None = None, *,
                 cwd: str | os.PathLike | None = None, settings_path: Path | None = None,
                 notes: tuple[str, ...] = (), head_start: HeadStart | None = None) -> None:
        super().__init__()
        self.services = services or Services()
        self.choices = choices or PlanChoices()
        self.cwd = Path(cwd) if cwd is not None else None
        # Where each new plan is remembered (cope_tui/app_settings.py); None: not remembered.
        self.settings_path = settings_path
        self._settings_failed = False  # said once: a read-only config folder is no reason to nag
        self._start_notes = notes  # said once the screen is up (a damaged settings file)
        self._head_start = head_start  # the first ranking, planned in a child while the app starts
        self.cpu_only = None  # cope_tui.service.cpu_only.CpuOnlyPlan: the plan when no GPU is planned
        self.cpu_spec = None
        self.detected_gpu = None
        self.advice: Advice | None = None
        self.sweep_points: list[SweepPoint] = []
        self.workload_ranking = None  # engine.advice.workload.WorkloadRanking when a workload is chosen
        self.chart_metric = "decode"  # or "prompt" (with a workload)
        self.sweep_message = "computing the VRAM sweep..."
        self.sweep_progress = (0, 0)  # (budget, candidate) pairs priced, of all to price
        self.selected_id: str | None = None
        self.labels: dict[str, str] = {}
        self.notices: list[tuple[str, str]] = []  # (severity, text), newest last
        self._probe_worker: Worker | None = None
        self._probe_cancel = threading.Event()
        self._probe_t0 = 0.0
        self._probe_budget_s = 60.0
        self._record_worker: Worker | None = None
        self._record_cancel = threading.Event()
        self._pull_plan: tuple[str, object] | None = None  # (model id, hub_trace.PullPlan) shown, not started
        self.pasted_command = None  # the last llama.cpp command pasted in Export, parsed
        self.pasted_estimate = None  # its CommandEstimate, as cope estimate gives it
        self.installed: tuple[str, ...] = ()  # runtimes found on this machine
        self.builds: dict = {}  # their builds, by runtime: what the commands are spelled for
        self.runs = None  # engine.advice.run_advice.RunAdvice of the advice, for these runtimes
        # cope_tui.service.llama_search.LlamaSearch of the advice (None until its worker is done),
        # or why there is none
        self.llama_search = None
        self.search_failed: str | None = None
        # (tab, widget): the widget a switch to that tab focuses (else _focus_into's pick)
        self._focus_wanted: tuple[str, str] | None = None

    # --- layout -------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Tabbed(initial="results"):
            with TabPane("1 Hardware", id="hardware"):
                yield HardwarePane()
            with TabPane("2 Model", id="model"):
                yield ModelPane()
            with TabPane("3 Trace", id="trace"):
                yield TracePane()
            with TabPane("4 Probes", id="probes"):
                yield ProbesPane()
            with TabPane("5 Results", id="results"):
                yield ResultsPane()
            with TabPane("6 Export", id="export"):
                yield ExportPane()
        yield Footer()

    def on_mount(self) -> None:
        for note in self._start_notes:  # long enough to be read while the first ranking is computed
            self.notices.append(("warning", f"Settings: {note}"))
            self.notify(f"Settings: {note}", severity="warning", timeout=30)
        self.compute(self.choices)  # detects this machine's GPU first (this_gpu), and plans for it
        if self.services.scan_runtimes is not None:
            self.find_runtimes()

    def this_gpu(self):  # type: ignore[no-untyped-def]
        """This machine's GPU: detected once (NVML, no torch), or as last measured."""
        if self.detected_gpu is None:
            self.detected_gpu = gpu_of(self.services.detect_gpu)
        return self.detected_gpu

    def panes(self):  # type: ignore[no-untyped-def]
        return [self.query_one(cls) for cls in (HardwarePane, ModelPane, TracePane, ProbesPane, ResultsPane,
                                                ExportPane)]

    def say(self, text: str, severity: str = "information") -> None:
        self.notices.append((severity, text))
        self.notify(text, severity=severity, timeout=8)  # type: ignore[arg-type]

    # --- state --------------------------------------------------------------------

    @property
    def request(self):  # type: ignore[no-untyped-def]
        """The request planned for: the ranking's, or the CPU-only plan's (None before either)."""
        if self.advice is not None:
            return self.advice.request
        return self.cpu_only.request if self.cpu_only is not None else None

    def remember(self, choices: PlanChoices) -> None:
        """Write the plan in use to the settings file, for the next launch (atomic)."""
        if self.settings_path is None:
            return
        try:
            save_settings(self.settings_path, anchored(choices, self.cwd or Path.cwd()))
        except (OSError, CopeInputError) as exc:
            if not self._settings_failed:
                self._settings_failed = True
                self.say(f"The plan is not remembered for the next launch: {exc}", "warning")

    def selected_estimate(self):  # type: ignore[no-untyped-def]
        if self.advice is None:
            return None
        for e in self.advice.rec.estimates:
            if e.candidate.id == self.selected_id:
                return e
        return self.advice.rec.best

    def select_candidate(self, candidate_id: str) -> None:
        self.selected_id = candidate_id
        self.query_one(ResultsPane).show_selected(self)
        self.query_one(ExportPane).update_from(self)

    def export_ask(self, *, out: Path | None = None) -> ExportAsk | None:
        """What the Export pane asks for: the selected candidate on the pane's runtime and
        program, the pane's -m (else the GGUF the model was read from, as the CLI), saved to
        `out` (its artefacts beside it)."""
        estimate = self.selected_estimate()
        if estimate is None:
            return None
        pane = self.query_one(ExportPane)
        runtime = runtime_named(pane.runtime).info
        binary = pane.binary if pane.binary in runtime.binaries else None
        return ExportAsk(candidate_id=estimate.candidate.id, runtime=runtime.name, binary=binary,
                         model_path=pane.model_path, out=out)

    def current_export(self, *, out: Path | None = None):  # type: ignore[no-untyped-def]
        """The selected command, composed as `cope export` composes it (cope_tui/service/export.py),
        with the workload's -b/-ub."""
        if self.cpu_only is not None:  # no GPU: the one CPU-only command
            plan = self.cpu_only
            return Export("cpu-only", "cpu-only", "runs-on-stock", "no GPU: every layer on the CPU (-ngl 0)",
                          plan.line, runtime=STOCK_NAME, binary=plan.line.argv[0])
        ask = self.export_ask(out=out)
        if ask is None:
            return None
        try:
            return export_command(self.advice, ask, ranking=self.workload_ranking, builds=self.builds)
        except CopeInputError as exc:
            self.say(f"Export: {exc}", "error")
            return None

    # --- messages -----------------------------------------------------------------

    def on_apply(self, message: Apply) -> None:
        self.compute(self.choices.with_(**message.changes))

    def on_progress(self, message: Progress) -> None:
        if message.task == "probes":
            elapsed = time.monotonic() - self._probe_t0
            left = elapsed / message.done * (message.total - message.done) if message.done else None
            if left is not None:  # the run stops at its budget: never promise longer
                left = max(0.0, min(left, self._probe_budget_s - elapsed))
            self.query_one(ProbesPane).show_progress(message.done, message.total, message.label, left)
        elif message.task == "record":
            self.query_one(TracePane).show_progress(message.done, message.total, message.label)
        elif message.task == "advice" and self.advice is None:
            self.query_one("#results-summary").update(
                f"computing the default recommendation: {message.done}/{message.total} candidates")

    def on_cpu_only_ready(self, message: CpuOnlyReady) -> None:
        """No GPU planned: the CPU-only command and its price, nothing to rank or sweep."""
        self.workers.cancel_group(self, "sweep")
        self.advice, self.cpu_only, self.choices = None, message.plan, message.choices
        self.workload_ranking, self.runs, self.selected_id = None, None, None
        self.llama_search, self.search_failed = None, None
        self.sweep_points = []
        self.sweep_message = "no GPU planned: no VRAM to sweep"
        for pane in self.panes():
            pane.update_from(self)
        self.remember(self.choices)

    def on_advice_ready(self, message: AdviceReady) -> None:
        first = self.advice is None
        replanned = first or message.choices != self.choices  # another GPU, model, ...: a new ranking
        self.advice, self.choices = message.advice, message.choices
        try:  # the plan `cope export`, verify and estimate reuse (cope_tui/service/last_plan.py)
            record_plan(self.choices, by="the app")
        except (OSError, CopeInputError):
            pass  # a cache folder that cannot take it changes nothing the app shows
        self.cpu_only = None
        self.llama_search, self.search_failed = None, None
        workload = workload_of(self.choices)
        self.workload_ranking = rank(self.advice, workload) if workload is not None else None
        self.runs = self._plan_runs()  # after the workload's ranking: with one, the picks follow it
        ids = [e.candidate.id for e in self.advice.rec.estimates]
        if replanned or self.selected_id not in ids:  # a new ranking starts at its first row
            self.selected_id = self.run_now_id() or ids[0]
        self.sweep_points = []
        self.sweep_message = "computing the VRAM sweep..."
        for pane in self.panes():
            pane.update_from(self)
        table = self.query_one("#results-table", DataTable)
        if replanned:
            table.scroll_home(animate=False)
        if self.query_one(TabbedContent).active == "results" and (first or self.focused is None):
            table.focus()
        self.sweep_progress = (0, 0)
        charted_ids = [cid for _, cid in charted(self.advice.rec, self.services.chart_series)]
        # only the lines the chart draws; started once the table is on the screen, so that its
        # thread does not hold the interpreter while the first ranked table is painted
        self.call_after_refresh(self._start_sweep, self.advice, workload, charted_ids)
        self.call_after_refresh(self._start_search, self.advice, workload)
        if self.pasted_command is not None:  # reprice the pasted command with the new ranking
            self.query_one(ExportPane).show_estimate_status("repricing your command...")
            self.estimate(self.advice, self.pasted_command)
        if replanned:  # the person's new choices (a repricing after probes keeps them)
            self.remember(self.choices)

    def _start_sweep(self, advice, workload, charted_ids) -> None:  # type: ignore[no-untyped-def]
        if advice is self.advice:  # a newer ranking starts its own
            self.sweep(advice, workload, charted_ids)

    def _start_search(self, advice, workload) -> None:  # type: ignore[no-untyped-def]
        if advice is self.advice:
            self.search_llama(advice, self.runs, workload)

    def on_search_ready(self, message: SearchReady) -> None:
        """Stock llama.cpp's commands searched beside the ranking: shown above the table as
        `cope advise` prints them; one made with older picks (runtimes found since) is redone
        from its search."""
        if message.advice is not self.advice:
            return
        if message.runs is not self.runs:
            self.search_llama(self.advice, self.runs, workload_of(self.choices), message.search)
            return
        self.llama_search = message.search
        self.query_one(ResultsPane).show_run_now(self)
        self.query_one(ExportPane).update_from(self, sync=False)  # its expert-cache offer follows the search

    def _plan_runs(self):  # type: ignore[no-untyped-def]
        if self.advice is None:
            return None
        return plan_runs(self.advice.rec, self.installed, self.workload_ranking, self.builds)

    def run_now_id(self) -> str | None:
        pick = self.runs.run_now if self.runs is not None else None
        return pick.estimate.candidate.id if pick is not None else None

    def on_runtimes_found(self, message: RuntimesFound) -> None:
        self.installed = tuple(message.scan.names)
        self.builds = message.scan.builds
        if self.advice is None:
            return
        self.runs = self._plan_runs()
        self.selected_id = self.run_now_id() or self.selected_id
        if self.llama_search is not None:  # the picks moved: the search's lead and --fit comparison follow
            self.search_llama(self.advice, self.runs, workload_of(self.choices), self.llama_search)
            self.llama_search = None
        self.query_one(ResultsPane).update_from(self)
        self.query_one(ExportPane).update_from(self)

    def on_sweep_ready(self, message: SweepReady) -> None:
        """A stage of the sweep: drawn as it comes (one of an older ranking is dropped)."""
        if message.advice is not self.advice:
            return
        self.sweep_points = message.points
        self.sweep_progress = (message.done, message.total)
        self.query_one(ResultsPane).show_sweep(self)

    def on_work_failed(self, message: WorkFailed) -> None:
        if message.task == "sweep":
            self.sweep_message = f"no VRAM sweep: {message.text}"
            self.query_one(ResultsPane).show_sweep(self)
            return
        if message.task == "search":
            self.search_failed = message.text
            self.query_one(ResultsPane).show_run_now(self)
            self.query_one(ExportPane).update_from(self, sync=False)
            return
        if message.task == "estimate":
            self.query_one(ExportPane).show_estimate_status(f"Could not estimate your command: {message.text}",
                                                            error=True)
            return
        what = {"advice": "Could not compute the ranking", "detect": "GPU detection failed",
                "measure": "Measuring failed", "runtimes": "Looking for runtimes failed"}.get(message.task, message.task)
        keep = "; the previous results stay" if self.advice is not None else ""
        self.say(f"{what}: {message.text}{keep}", "error")
        if message.task == "advice":  # a notification fades: Results keeps saying why
            self.query_one(ResultsPane).show_failure(f"{what}: {message.text}{keep}", ranked=self.advice is not None)

    def on_command_estimated(self, message: CommandEstimated) -> None:
        self.pasted_estimate = message.result
        self.query_one(ExportPane).show_estimate(message.result)

    def estimate_pasted(self, text: str) -> None:
        """Parse a pasted llama.cpp command now (a one-line error if it cannot be read),
        then price it beside COPE's best in a worker."""
        pane = self.query_one(ExportPane)
        try:
            command = parse_pasted(text)
        except Exception as exc:  # noqa: BLE001 - one line in the pane, never a traceback
            self.pasted_command = None
            pane.show_estimate_status(f"Could not read the command: {why(exc)}", error=True)
            return
        self.pasted_command = command
        if self.cpu_only is not None:
            pane.show_estimate_status("No GPU is planned, so there is no ranking to price your command beside: plan "
                                      "for a GPU (Hardware tab), or run `cope estimate --gpu none -- COMMAND` to "
                                      "price it on the CPU alone")
            return
        if self.advice is None:
            pane.show_estimate_status("waiting for the first ranking; your command is priced after it")
            return
        pane.show_estimate_status("estimating your command...")
        self.estimate(self.advice, command)

    def on_gpu_detected(self, message: GpuDetected) -> None:
        self.detected_gpu = message.gpu
        if message.cpu is not None:
            self.cpu_spec = message.cpu
            self.say("Measured this machine: the CPU figures are now measured; recomputing")
            self.compute(self.choices)
        self.query_one(HardwarePane).update_from(self)

    def on_probes_finished(self, message: ProbesFinished) -> None:
        o, r = message.outcome, message.outcome.report
        kept = f"{r.measured} measurements taken" + (f", {r.skipped} already cached" if r.skipped else "")
        where = f" in the profile cache ({o.source})" if o.source else ""
        refused = r.refused or ((o.error,) if r.stopped == "refused" and o.error else ())
        if r.stopped == "cancelled":
            text = f"Probes cancelled: {kept}, kept{where}; {r.left} not run. The next run resumes."
            severity = "warning"
        elif refused:  # which figure failed its consistency check twice, and how (engine/profiles/probe_consistency.py)
            text = f"Probes done: {kept}" + (f", {r.left} left" if r.left else "") + f"{where}; " + "; ".join(refused) + "."
            severity = "warning"
        elif r.stopped == "failed" or o.error and o.pricing is None and r.measured == 0:
            text = f"Probes failed: {o.error or 'unknown error'}; {kept}, kept{where}."
            severity = "error"
        else:
            text = f"Probes done: {kept}" + (f", {r.left} left ({r.stopped})" if r.left else "") + f"{where}."
            severity = "information"
        if o.pricing is not None:
            text += f" Ranking repriced with the {o.fidelity.value} profile."
        elif refused:
            text += " A refused series prices nothing; the ranking stays as it was."
        elif r.stopped != "failed":
            text += " Too little measured to price with; the ranking stays as it was."
        self.query_one(ProbesPane).show_summary(text)
        self.say(text, severity)
        if o.pricing is not None and self.advice is not None:
            self.compute(self.choices, request=self.advice.request, pricing=o.pricing)

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "export":
            self.query_one(ExportPane).update_from(self)
        self.call_after_refresh(self._focus_into, event.pane.id)
