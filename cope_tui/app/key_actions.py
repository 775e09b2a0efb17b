"""The app's keys and actions: switching tabs and where the focus lands, the questions that
guard quitting and measuring, probes started and cancelled, a command copied or saved. A
mixin of CopeApp (cope_tui/app/app.py), which holds the state, the workers and the panes
these act on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from textual.widgets import Input, Select, TabbedContent, TabPane, Tabs
from textual.worker import Worker, WorkerState

from cope_tui.app.confirm import ConfirmScreen
from cope_tui.app.panes.export import ExportPane
from cope_tui.app.panes.probes import ProbesPane
from cope_tui.app.panes.results import ResultsPane
from cope_tui.app.panes.trace import TracePane
from cope_tui.service.export import ExportAsk, save_export, write_side_files
from engine.core.errors import CopeInputError
from engine.core.user_paths import output_path, user_path

TABS = ("hardware", "model", "trace", "probes", "results", "export")
TAB_FKEYS = ("f2", "f3", "f4", "f5", "f6", "f7")  # F1 is help
# Asked while a question is shown, these would stack a second one or act behind it.
LETTER_ACTIONS = frozenset({"start_probes", "copy", "save", "recompute", "measure", "paste_command",
                            "toggle_chart", "ask_quit", "help", "show_tab", "cycle_tab"})


class KeyActions:
    """What the app's keys and buttons do (CopeApp's BINDINGS name these actions)."""

    def _focus_into(self, tab: str | None) -> None:
        """Focus the shown pane's first editable text field, so what is typed next goes into
        it and never reaches a single-letter key; a pane without one (Results) focuses its
        table or list, else the tab bar. From a field, F2..F7 and ctrl+pgup/pgdn switch tabs."""
        if tab != self.query_one(TabbedContent).active:
            return
        wanted, self._focus_wanted = self._focus_wanted, None
        # screen.set_focus, not widget.focus(): that one lands later, after a tab key
        # handled meanwhile, and a focused widget of a hidden pane shows its pane again.
        if wanted is not None and wanted[0] == tab:  # asked for with the switch (e: the paste field)
            self.screen.set_focus(self.query_one(wanted[1]))
            return
        pane = self.query_one(f"TabPane#{tab}", TabPane)
        for field in pane.query(Input):
            if field.focusable and field.display:
                self.screen.set_focus(field, scroll_visible=False)  # the pane opens at its top
                return
        for widget in pane.query("DataTable, OptionList"):
            if widget.focusable and not any(isinstance(a, Select) for a in widget.ancestors):  # not a Select's list
                self.screen.set_focus(widget, scroll_visible=False)  # the pane opens at its top
                return
        self.screen.set_focus(self.query_one(TabbedContent).query_one(Tabs))

    # --- actions ------------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        tabbed = self.query_one(TabbedContent)
        if self._focus_wanted is not None and self._focus_wanted[0] != tab:
            self._focus_wanted = None  # asked for with a switch that this one overrides
        if tab != tabbed.active:
            # The tab bar takes the focus first: a focused widget that its pane hides passes
            # the focus to a neighbour, often in the same pane, whose focus switches back to
            # that pane (Hardware's GPU table to its CPU table: 6 stayed on Hardware).
            self.screen.set_focus(tabbed.query_one(Tabs))
        tabbed.active = tab

    def action_cycle_tab(self, step: int) -> None:
        """The previous (-1) or next (+1) tab, round from the last to the first."""
        active = self.query_one(TabbedContent).active
        self.action_show_tab(TABS[(TABS.index(active) + step) % len(TABS)])

    def action_help(self) -> None:
        from cope_tui.app.help import HelpScreen  # Markdown (markdown-it, pygments): imported when first asked for

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_chart(self) -> None:
        """The chart plots decode tok/s, or with a workload prompt tok/s."""
        if self.workload_ranking is None:
            self.notify("choose a Workload (Model tab) to chart prompt tok/s")
            return
        self.chart_metric = "prompt" if self.chart_metric == "decode" else "decode"
        self.query_one(ResultsPane).show_sweep(self)

    def action_paste_command(self) -> None:
        if self.query_one(TabbedContent).active == "export":
            self.screen.set_focus(self.query_one("#paste-command"))
            return
        # Left to the switch, never focused later unasked: focusing a widget of a hidden pane
        # shows that pane, so a tab key pressed meanwhile (e then F2 at once) was undone.
        self._focus_wanted = ("export", "#paste-command")
        self.action_show_tab("export")

    def action_recompute(self) -> None:
        self.compute(self.choices)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a question is shown, only its answers act: a key meant for it (n, y) or a
        stray letter never starts something behind it."""
        if isinstance(self.screen, ConfirmScreen) and action in LETTER_ACTIONS:
            return False
        return True

    def ask(self, question: str, then) -> None:  # type: ignore[no-untyped-def]
        """`then()` after y; n or Escape leaves everything as it was."""
        if isinstance(self.screen, ConfirmScreen):  # one question at a time
            return
        self.push_screen(ConfirmScreen(question), lambda yes: then() if yes else None)

    def work_in_flight(self) -> list[str]:
        """What quitting now would lose: work that runs and keeps nothing until it ends."""
        running = []
        if self._is_active(self._probe_worker):
            running.append("probes (what is measured so far is kept)")
        if self._is_active(self._record_worker):
            running.append("a trace recording or download")
        if any(w.group == "measure" and w.is_running for w in self.workers):
            running.append("the measurement of this machine")
        return running

    def action_ask_quit(self) -> None:
        """q: always asks (a stray q never closes the app); ctrl+q quits at once when
        nothing would be lost."""
        running = self.work_in_flight()
        lost = f" This stops {' and '.join(running)}." if running else ""
        self.ask(f"Quit COPE?{lost} The plan is remembered for the next launch. y/n"
                 if self.settings_path is not None else f"Quit COPE?{lost} y/n", self.exit)

    async def action_quit(self) -> None:
        running = self.work_in_flight()
        if running:
            self.ask(f"Quit COPE? This stops {' and '.join(running)}. y/n", self.exit)
            return
        self.exit()

    def action_measure(self, ask: bool = False) -> None:
        """Measure this machine's bandwidths; from the m key, asked first: it takes seconds,
        loads torch and changes every later ranking."""
        if ask:
            self.ask("Measure this machine's memory and PCIe bandwidths now? It loads torch, takes about 20 s, "
                     "and every later ranking uses what it measures. y/n", self.action_measure)
            return
        expert_bytes = 16 * 1024**2
        if self.advice is not None:
            req = self.advice.request
            expert_bytes = req.model.expert_bytes(req.quant)
        self.say("Measuring this machine's bandwidths (loads torch; a few seconds)")
        self.measure(int(expert_bytes))

    @staticmethod
    def _is_active(worker: Worker | None) -> bool:
        return worker is not None and worker.state in (WorkerState.PENDING, WorkerState.RUNNING)

    def action_start_probes(self, ask: bool = False) -> None:
        """Measure the chosen model's operators on this machine; from the p key, asked first
        (the Start probes button is the asking)."""
        if self.cpu_only is not None:
            self.say("No GPU is planned: there is no GPU/CPU split to probe (cope calibrate measures the CPU "
                     "with llama-bench)", "warning")
            return
        if self.advice is None:
            self.say("Wait for the first ranking before probing", "warning")
            return
        if self._is_active(self._probe_worker):
            self.say("Probes are already running (Escape cancels)", "warning")
            return
        pane = self.query_one(ProbesPane)
        if ask:
            self.ask(f"Start probes now? They measure this machine for {self.advice.request.model.name} for up to "
                     f"{pane.budget_s:.0f} s and reprice the ranking. y/n", self.action_start_probes)
            return
        self.action_show_tab("probes")
        self._probe_cancel = threading.Event()
        self._probe_t0 = time.monotonic()
        self._probe_budget_s = pane.budget_s
        pane.show_progress(0, 1, "planning", None)
        self._probe_worker = self.probe(self.advice.request, pane.fidelity, pane.budget_s, self._probe_cancel)

    def action_cancel(self) -> None:
        cancelled = False
        if self._is_active(self._probe_worker):
            self._probe_cancel.set()
            self._probe_worker.cancel()  # type: ignore[union-attr]
            self.query_one(ProbesPane).show_summary("Cancelling after the current probe...")
            cancelled = True
        if self._is_active(self._record_worker):
            self._record_cancel.set()
            self._record_worker.cancel()  # type: ignore[union-attr]
            self.query_one(TracePane).show_status("Cancelling the recording...")
            cancelled = True
        if not cancelled and self.query_one(TabbedContent).active != "results":
            self.action_show_tab("results")

    def action_copy(self) -> None:
        export = self.query_one(ExportPane).export(self)  # the selected row's, or the expert cache's
        if export is None:
            return
        try:  # the files the command names are written first (the cache folder's exports/), or nothing is copied
            written = write_side_files(export, ExportAsk().side_dir)
        except (OSError, CopeInputError) as exc:
            self.say(f"Not copied: its files could not be written: {getattr(exc, 'strerror', None) or exc}", "error")
            return
        self.copy_to_clipboard(export.display())
        # OSC 52 asks the terminal to take the text; nothing comes back to say it did.
        wrote = f"; wrote {', '.join(str(p) for p in written)}" if written else ""
        self.say(f"Sent the {export.runtime} command of {export.exported_id} to the terminal's clipboard (OSC 52){wrote}; "
                 "if nothing was copied, your terminal does not support it: save it with s instead")

    def action_save(self) -> None:
        """Write the selected command (and its artefacts) to the Save path; asks first when
        that would overwrite a file."""
        if isinstance(self.screen, ConfirmScreen):  # s again while asked: one question at a time
            return
        pane = self.query_one(ExportPane)
        try:  # the CLI's --out check: ~nosuchuser, a NUL byte, a FIFO or a folder is one line, not an exit
            path = user_path(pane.save_path, flag="Save")
            # checked where it will be written: a relative path is under the app's folder
            path = output_path(path if path.is_absolute() else (self.cwd or Path.cwd()) / path, flag="Save")
        except CopeInputError as exc:
            self.say(f"Not saved: {exc}", "error")
            return
        export = self.query_one(ExportPane).export(self, out=path)
        if export is None:
            return
        there = [p for p in (path, *(path.parent / name for name in export.artefact_names)) if p.exists()]
        if not there:
            self._write_export(export, path)
            return
        names = ", ".join(p.name for p in there)

        def answered(yes: bool | None) -> None:
            if yes:
                self._write_export(export, path)
            else:
                self.say(f"Not saved: {', '.join(str(p) for p in there)} left untouched")

        self.push_screen(ConfirmScreen(f"{names} {'exists' if len(there) == 1 else 'exist'}: overwrite? y/n"),
                         answered)

    def _write_export(self, export, path: Path) -> None:  # type: ignore[no-untyped-def]
        try:
            written = save_export(export, path)
        except (OSError, CopeInputError) as exc:
            self.say(f"Could not save {path}: {getattr(exc, 'strerror', None) or exc}", "error")
            return
        self.say("Saved " + ", ".join(str(p) for p in written))
