"""Export: the llama.cpp command of the selected candidate; copy it or save it."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from cope_tui.app.panes.results import RUNS_STYLE
from cope_tui.service.cache_export import LLAMA_CACHE_ID, CacheOffer, cache_export, cache_offer
from cope_tui.service.workload import workload_of
from cope_tui.text_report import runnable_label, runtime_line
from engine.advice.error_band import BandAnswer, estimate_band
from engine.core.errors import CopeInputError
from engine.core.spans import count_of
from engine.hardware.memory import GIB
from engine.runtimes import STOCK_NAME, runtime_named
from engine.runtimes.llamacpp import label_text

PASTE_HINT = "llama-server -m model.gguf -ngl 99 --n-cpu-moe 24 -t 8"
# What the pane exports: the row selected in Results, or llama.cpp's expert-cache command
# that the Results pane shows beside the ranking (`cope export --candidate llama-cache`).
ROW = "row"
ROW_TITLE = "the row selected in Results"


class CommandInput(Input):
    """One line; a pasted multi-line command (backslash continuations) is joined, not cut."""

    def _on_paste(self, event: events.Paste) -> None:
        event.prevent_default()
        event.stop()
        parts = []
        for raw in event.text.splitlines():
            part = raw.strip()
            if part.endswith("\\"):  # a shell line continuation
                part = part[:-1].rstrip()
            if part:
                parts.append(part)
        line = " ".join(parts)
        if not line:
            return
        if self.selection.is_empty:
            self.insert_text_at_cursor(line)
        else:
            self.replace(line, *self.selection)


def _append_band(text: Text, answer: BandAnswer) -> None:
    """How far off the figure above may be, as `cope estimate` says it (engine/advice/error_band.py)."""
    text.append(f"  error band: {answer.text()}\n", style="italic")


def _append_best(text: Text, result) -> None:  # type: ignore[no-untyped-def]
    """What runs first (COPE's best that the command's runtime runs), then the paper optimum
    where it is another candidate: the CLI's order (cope_tui/text_report.py)."""
    run, best = result.runnable, result.best
    text.append(f"{runnable_label(result)}: ", style="bold")
    text.append(f"{run.candidate.id}: {run.detail}\n")
    text.append(f"  {run.tpot_s * 1e3:.2f} ms/token, {run.tokens_per_s:.1f} tok/s, "
                f"VRAM {run.vram_used_bytes / GIB:.2f} GiB\n")
    _append_band(text, estimate_band(run))
    speedup, versus = result.runnable_speedup, result.runnable_is
    if versus == "faster":
        text.append(f"It is {speedup:.2f}x faster than your command\n", style="bold green")
    elif versus == "as_fast":
        text.append("Your command is already as fast as it\n", style="bold green")
    elif versus == "slower":
        text.append(f"Your command is {1 / speedup:.2f}x faster than it\n", style="bold yellow")
    if run is not best:
        mine = "" if result.speedup is None else f", {result.speedup:.2f}x your command"
        text.append(f"Fastest on paper ({result.paper_runs_on}): ", style="bold")
        text.append(f"{best.candidate.id}: {best.candidate.describe()}\n")
        text.append(f"  {best.tpot_s * 1e3:.2f} ms/token, {best.tokens_per_s:.1f} tok/s, "
                    f"VRAM {best.vram_used_bytes / GIB:.2f} GiB{mine}\n")
        _append_band(text, estimate_band(best))


def estimate_text(result) -> Text:  # type: ignore[no-untyped-def]
    """What a pasted command maps to, its estimate, and COPE's best beside it."""
    yours, best, req = result.yours, result.best, result.request
    text = Text()
    text.append("Your command maps to ", style="bold")
    text.append(f"{result.maps_to}: {yours.detail}\n")
    if yours.runs:
        faster = f" ({result.rank - 1} of {result.of} candidates are faster)" if result.rank is not None else ""
        if result.tied_with:
            faster += f" (as fast as {', '.join(result.tied_with[:3])})"
        text.append(f"  {yours.tpot_s * 1e3:.2f} ms/token, {yours.tokens_per_s:.1f} tok/s, VRAM "
                    f"{yours.vram_used_bytes / GIB:.2f} GiB{faster}\n")
        _append_band(text, yours.band)
    else:
        text.append(f"  {yours.refusal}\n", style="bold red")
    if best is None:
        text.append("COPE's best: ", style="bold")
        text.append(f"none at these settings: {result.no_ranking}\n")
    else:
        _append_best(text, result)
    text.append(f"Priced at {count_of(req.threads, 'thread')}, context {req.context_tokens}, {yours.fidelity} cost model\n",
                style="dim")
    unknown = result.command.unknown
    if unknown:
        text.append("Not understood (listed, not used): ", style="bold yellow")
        text.append("  ".join(unknown) + "\n")
    for note in result.notes:
        text.append(f"- {note}\n", style="dim")
    text.rstrip()
    return text


class ExportPane(VerticalScroll):
    DEFAULT_CSS = """
    ExportPane { padding: 0 1; }
    ExportPane .row { height: auto; margin-top: 1; }
    ExportPane #what-row { height: auto; }
    ExportPane #export-what { width: 1fr; }
    ExportPane #cache-line { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    ExportPane #runtime { width: 34; }
    ExportPane #binary { width: 18; }
    ExportPane #model-path, ExportPane #save-path { width: 1fr; }
    ExportPane #command { border: round $accent; padding: 0 1; height: auto; }
    ExportPane #export-head { height: auto; }
    ExportPane #paste-label { margin-top: 1; }
    ExportPane #paste-command { width: 1fr; }
    ExportPane #estimate-result { height: auto; }
    """

    def compose(self) -> ComposeResult:
        # Shown where the plan has an expert-cache command to export (else the line below
        # says, in one line, why not): one line either way, the command stays near the top.
        with Horizontal(id="what-row"):
            yield Label("Export ")
            yield Select([(ROW_TITLE, ROW)], value=ROW, allow_blank=False, id="export-what", compact=True)
        yield Static("", id="cache-line")
        yield Static("", id="export-head")
        yield Static("", id="command")
        with Horizontal(classes="row"):
            yield Select([("stock llama.cpp", "llama.cpp")], value="llama.cpp",
                         allow_blank=False, id="runtime", compact=True)
            yield Select([(b, b) for b in ("llama-server", "llama-cli", "llama-bench")], value="llama-server",
                         allow_blank=False, id="binary", compact=True)
            yield Label(" -m ")
            yield Input(placeholder="<model id>.gguf", id="model-path", compact=True)
        with Horizontal(classes="row"):
            yield Button("Copy (c)", id="copy", compact=True)
            yield Label(" ")
            yield Button("Save (s)", id="save", compact=True)
            yield Label(" to ")
            yield Input(placeholder="cope-command.sh", id="save-path", compact=True)
        yield Label("The command you run today (paste it, Enter estimates it beside COPE's best):",
                    id="paste-label")
        yield CommandInput(placeholder=PASTE_HINT, id="paste-command", compact=True)
        yield Static("", id="estimate-result")

    @property
    def runtime(self) -> str:
        return str(self.query_one("#runtime", Select).value)

    @property
    def binary(self) -> str:
        return str(self.query_one("#binary", Select).value)

    @property
    def model_path(self) -> str | None:
        return self.query_one("#model-path", Input).value.strip() or None

    @property
    def save_path(self) -> str:
        return self.query_one("#save-path", Input).value.strip() or "cope-command.sh"

    _syncing = False
    _wants_cache = False  # the person chose the cache's command: kept while a new plan is searched
    _what_options: list = [(ROW_TITLE, ROW)]

    @property
    def exports_cache(self) -> bool:
        return str(self.query_one("#export-what", Select).value) == LLAMA_CACHE_ID

    def offer(self, app) -> CacheOffer:  # type: ignore[no-untyped-def]
        return cache_offer(app.llama_search, cpu_only=app.cpu_only is not None, failed=app.search_failed,
                           build=app.builds.get(STOCK_NAME))

    def export(self, app, *, out=None):  # type: ignore[no-untyped-def]
        """What Copy and Save write: the expert cache's command as `cope export --candidate
        llama-cache` composes it (cope_tui/service/cache_export.py, from the search the Results
        pane shows), else the selected row's (the app's current_export). `out`: where the row's
        artefacts go (the cache's command has none)."""
        offer = self.offer(app)
        if not (self.exports_cache and offer.found is not None):
            return app.current_export(out=out)
        try:
            return cache_export(app.advice, runtime=STOCK_NAME, binary=None, model_path=self.model_path,
                                workload=workload_of(app.choices), found=offer.found)
        except CopeInputError as exc:
            app.say(f"Export: {exc}", "error")
            return None

    def sync_what(self, app) -> None:  # type: ignore[no-untyped-def]
        """Offer the expert cache's command only where the plan has one, and say in one line
        what it gives or why it is not offered; the program and runtime pickers are the row's."""
        offer = self.offer(app)
        options = [(ROW_TITLE, ROW)]
        if offer.found is not None:
            gain = f", {offer.found.speedup:.2f}x faster" if offer.found.speedup else ""  # than the plain partition
            options.append((f"llama.cpp's expert cache (--moe-cache-mib){gain}", LLAMA_CACHE_ID))
        select = self.query_one("#export-what", Select)
        value = LLAMA_CACHE_ID if self._wants_cache and offer.found is not None else ROW
        # Not a choice of the person's: no Changed message (it would arrive after _syncing is
        # reset, and a plan searched anew would forget that the cache was chosen).
        with self.prevent(Select.Changed):
            if options != self._what_options:  # set again only when they change (it resets the value)
                select.set_options(options)
                self._what_options = options
            select.value = value
        self.query_one("#what-row").display = offer.found is not None
        shown = self.query_one("#cache-line", Static)
        shown.update(Text(offer.line, style="dim"))
        shown.tooltip = offer.line  # the whole line where the terminal cuts it
        shown.display = offer.found is None
        for picker in ("#runtime", "#binary"):  # the cache's command is stock llama-server's
            self.query_one(picker, Select).disabled = value == LLAMA_CACHE_ID

    def sync_runtimes(self, app) -> None:  # type: ignore[no-untyped-def]
        """The runtime selector offers every runtime that runs the selected row (stock
        llama.cpp, with its nearest candidate, when none does); it keeps the runtime in
        use when the new row offers it, else picks the run-now one, an installed one, an
        exact one, in that order."""
        estimate = app.selected_estimate()
        if estimate is None or app.runs is None:
            return
        row = app.runs.row(estimate.candidate.id)
        runs = list(row.runs)
        options, values = [], []
        for run in runs:
            info = runtime_named(run.support.runtime).info
            marks = ("" if run.support.exact else " ~") + (" (installed)" if info.name in app.installed else "")
            options.append((info.title + marks, info.name))
            values.append(info.name)
        if not options:
            options, values = [(runtime_named(STOCK_NAME).info.title + " (nearest)", STOCK_NAME)], [STOCK_NAME]
        select = self.query_one("#runtime", Select)
        keep = str(select.value)
        pick = app.runs.run_now
        preferred = [keep] if keep in values and self._shown_row == row.id else []
        if pick is not None and pick.row is row:
            preferred.append(pick.runtime)
        preferred += [r.support.runtime for r in runs if r.runs_exactly and r.support.runtime in app.installed]
        preferred += [r.support.runtime for r in runs if r.runs_exactly] + values
        self._syncing = True
        try:
            select.set_options(options)
            select.value = next(v for v in preferred if v in values)
        finally:
            self._syncing = False
        self._shown_row = row.id

    _shown_row: str | None = None

    def update_from(self, app, *, sync: bool = True) -> None:  # type: ignore[no-untyped-def]
        if sync:
            self.sync_runtimes(app)
        self.sync_what(app)
        export = self.export(app)
        if export is None:
            return
        head = Text()
        head.append(f"{export.candidate_id}  ", style="bold")
        head.append(f" {label_text(export.label)} ", style=f"reverse {RUNS_STYLE.get(export.label, '')}")
        head.append(f"\n{runtime_line(export)}", style="bold")
        head.append(f"\n{export.reason}")
        if export.nearest_id is not None:
            near = "no estimate" if export.nearest_tpot_s is None else (
                f"{export.nearest_tpot_s * 1e3:.2f} ms/token, {1 / export.nearest_tpot_s:.1f} tok/s")
            own = "" if export.candidate_tpot_s is None else (
                f" against {export.candidate_tpot_s * 1e3:.2f} ms/token for {export.candidate_id}")
            head.append(f"\nThe command runs the nearest that runs here: {export.nearest_id} "
                        f"({near}{own})", style="bold yellow")
            estimates = app.advice.rec.estimates if app.advice is not None else ()
            nearest = next((e for e in estimates if e.candidate.id == export.nearest_id), None)
            if nearest is not None and export.nearest_tpot_s is not None:
                head.append(f"\nerror band of {export.nearest_id}: {estimate_band(nearest).text()}", style="italic")
        for name in export.artefact_names:
            head.append(f"\nartefact {name}: written beside the saved command (s), or to the cache folder's "
                        "exports/ when copied (c)", style="dim")
        for placeholder in export.placeholders:
            head.append(f"\nplaceholder {placeholder.word}: put {placeholder.put}", style="bold yellow")
        for note in export.notes:
            head.append(f"\n{note}", style="bold yellow" if note.startswith(("SYNTHETIC", "does not fit"))
                        else "dim")
        self.query_one("#export-head", Static).update(head)
        self.query_one("#command", Static).update(Text(export.display()))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.select.id == "export-what":
            self._wants_cache = event.value == LLAMA_CACHE_ID
        if not self._syncing:
            self.update_from(self.app, sync=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "save-path":
            self.app.action_save()
        elif event.input.id == "paste-command":
            self.app.estimate_pasted(event.value)
        else:
            self.update_from(self.app)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "copy":
            self.app.action_copy()
        elif event.button.id == "save":
            self.app.action_save()

    def show_estimate(self, result) -> None:  # type: ignore[no-untyped-def]
        self._show_result(estimate_text(result))

    def show_estimate_status(self, text: str, *, error: bool = False) -> None:
        self._show_result(Text(text, style="bold red" if error else "dim"))

    def _show_result(self, text: Text) -> None:
        shown = self.query_one("#estimate-result", Static)
        shown.update(text)
        self.call_after_refresh(shown.scroll_visible, animate=False)  # below the fold on small terminals
