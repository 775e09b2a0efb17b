"""Results: every candidate ranked, tokens/s against VRAM budget for the best few, and
the cost breakdown of the selected candidate."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Checkbox, DataTable, Static

from cope_tui.app.widgets.chart import ThroughputChart, charted, swept_title
from cope_tui.service.cpu_only import render_cpu_only
from cope_tui.text_report import (
    llama_words,
    nothing_fits,
    paper_only_line,
    render_run_now,
    routing_words,
    run_now_first,
    runs_on_text,
)
from engine.advice.error_band import BandAnswer, band_for, estimate_band, placement_regime
from engine.core.spans import count_of
from engine.hardware.memory import GIB
from engine.runtimes import STOCK_NAME

# The table in llama.cpp's words, as `cope advise` prints it: a runnable row by its flags
# (a Policy Matrix cell by its id), tok/s with its error band, VRAM, RAM and a one-line why.
COLUMNS = ("#", "llama.cpp flags, or candidate", "tok/s", "band", "ms/tok", "x base", "VRAM GiB", "RAM GiB", "hits",
           "runs on", "why")
COMPACT_COLUMNS = ("#", "flags, or candidate", "tok/s ±band", "VRAM", "RAM", "runs on")
WIDE_AT = 110  # narrower terminals get the compact table
_ABBREV = (("ready-first", "ready1st"), ("sequential", "seq"), ("parallel", "par"), ("nonuniform", "nonu"),
           ("uniform", "uni"), ("prefetch", "pf"), ("layers' experts on the CPU", "on CPU"),
           ("(every expert on the GPU)", "(all on GPU)"))


def compact_id(words: str) -> str:
    """A row's flags or candidate id, shortened for a narrow terminal."""
    for long, short in _ABBREV:
        words = words.replace(long, short)
    return words


PAPER_KEY = "paper-only"  # the row that heads the Policy Matrix's paper-only cells (not a candidate)
RUNS_STYLE = {"runs-on-stock": "green", "needs-fork": "yellow", "not-expressible": "red"}


def runs_style(runs_on: str) -> str:
    if runs_on in ("none", "no RAM"):
        return "red"
    return "green" if not runs_on.startswith("~") else "yellow"


def band_cell(answer: BandAnswer) -> Text:
    """A figure's cross-validated band in a table cell: its regime's MAPE, or none (dim)."""
    if answer.band is None:
        return Text("none", style="dim")
    return Text(f"±{answer.band.mape:.0%}")


def ram_bytes(row) -> int | None:  # type: ignore[no-untyped-def]
    """The host memory a row needs on the first runtime that runs it and fits (exactly first)."""
    runs = sorted(row.runs, key=lambda r: (not r.runs_exactly, not r.fits))
    host = runs[0].host if runs else None
    return host.fit.need_bytes if host is not None else None


def why_text(row) -> str:  # type: ignore[no-untyped-def]
    """Why the row reads as it does, in one line: its placement, and who runs it."""
    return f"{row.estimate.detail}; {row.who_runs_it}"


def breakdown_text(estimate, baseline, label: str) -> Text:  # type: ignore[no-untyped-def]
    b = estimate.breakdown
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{estimate.candidate.id}", style="bold")
    text.append(f"  {label}\n", style=RUNS_STYLE.get(label, "") or runs_style(label.removeprefix("runs on: ")))
    text.append(f"{estimate.tpot_s * 1e3:.2f} ms/token, {estimate.tokens_per_s:.1f} tok/s\n")
    text.append(f"{baseline.tpot_s / estimate.tpot_s:.2f}x the base, hits {estimate.stats.hit_rate:.1%}\n")
    text.append(f"error band: {estimate_band(estimate).text()}\n", style="italic")
    parts = (
        ("GPU experts", b.gpu_experts_s), ("CPU experts", b.cpu_experts_s), ("copies", b.copies_s),
        ("sync", b.sync_s), ("late prefetch", b.exposed_prefetch_s), ("shared layers", b.shared_s),
        ("head+sampling", b.token_overhead_s),
    )
    top = max(v for _, v in parts) or 1.0
    for name, value in parts:
        bar = "█" * max(int(round(value / top * 8)), 1 if value > 0 else 0)
        text.append(f"{name:<14}{value * 1e3:>6.2f} ms ")
        text.append(bar + "\n", style="cyan")
    text.append(f"{'experts path':<14}{b.experts_critical_s * 1e3:>6.2f} ms (lanes overlap)\n", style="dim")
    text.append(f"{estimate.candidate.describe()}; {estimate.detail}", style="dim")
    return text


# The key that shows the trade-off table (context x KV cache type) in the ranking's place:
# below the lead lines it sat under the fold of an 80x24 terminal.
TRADEOFF_KEY = "k"


class ResultsPane(Vertical):
    # Here, not among the app's keys: it acts on this pane, and shows in the footer while the
    # focus is in it (the table, or the trade-off table).
    BINDINGS = [Binding(TRADEOFF_KEY, "toggle_tradeoff", "Context & KV")]
    DEFAULT_CSS = """
    ResultsPane #results-summary { height: auto; max-height: 2; padding: 0 1; }
    ResultsPane #results-message { height: auto; max-height: 8; padding: 0 1; display: none; }
    ResultsPane #run-now-box { height: auto; max-height: 25%; padding: 0 1; }
    ResultsPane #run-now { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    ResultsPane #results-table { height: 1fr; min-height: 5; }
    ResultsPane #paper-row { height: auto; max-height: 2; padding: 0 1; }
    ResultsPane #paper-line { width: 1fr; height: auto; }
    ResultsPane #show-paper { height: 1; border: none; padding: 0; }
    ResultsPane #tradeoff-box { height: 1fr; padding: 0 1; display: none; }
    ResultsPane #tradeoff { height: auto; }
    ResultsPane #cpu-only-plan { height: 1fr; min-height: 5; padding: 0 1; display: none; overflow-y: auto; }
    ResultsPane #results-bottom { height: 35%; min-height: 7; }
    ResultsPane ThroughputChart { width: 1fr; border: round $primary; padding: 0 1;
        border-title-align: left; }
    ResultsPane #breakdown-box { width: 1fr; border: round $secondary; padding: 0 1; height: 100%; }
    ResultsPane #breakdown { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("computing the default recommendation...", id="results-summary")
        # Hidden while a row can be run: says why none can, or why there is no ranking.
        yield Static("", id="results-message")
        # What `cope advise` says first: the command to run, the search of llama.cpp's own
        # commands beside it (its expert cache) and llama.cpp's own placement (--fit).
        # focusable (Tab), so the keys scroll it down below its first lines
        with VerticalScroll(id="run-now-box"):
            yield Static("", id="run-now")
        # What each context and KV cache type costs beside the search's best command: in the
        # place of the ranking, the lead lines and the chart while shown (the k key), so that it
        # is seen whole on an 80x24 terminal.
        with VerticalScroll(id="tradeoff-box"):
            yield Static("", id="tradeoff")
        yield DataTable(id="results-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="paper-row"):
            yield Static("", id="paper-line")
            # The Policy Matrix's cells no runtime runs: listed under the runnable rows on demand,
            # as `cope advise --all` lists them.
            yield Checkbox("list them", id="show-paper")
        yield Static("", id="cpu-only-plan")  # in the table's place when no GPU is planned
        with Horizontal(id="results-bottom"):
            chart = ThroughputChart(id="chart")
            chart.border_title = "tok/s vs VRAM budget"
            yield chart
            with VerticalScroll(id="breakdown-box") as box:
                box.border_title = "cost per token"
                box.can_focus = False
                yield Static("", id="breakdown")

    compact: bool | None = None
    showing_tradeoff = False  # the trade-off table in the ranking's place
    _cpu_only = False  # the plan has no GPU: the CPU-only command in the table's place
    _run_now_shown = False  # the lead lines have something to say

    def _lay_out(self) -> None:
        """What is shown of the pane: the ranking view (the lead lines, the table, the chart;
        the CPU-only command without a GPU), or the trade-off table in its place."""
        trade, cpu = self.showing_tradeoff, self._cpu_only
        self.query_one("#tradeoff-box").display = trade
        self.query_one("#run-now-box").display = not trade and not cpu and self._run_now_shown
        for ranked in ("#results-table", "#paper-row", "#results-bottom"):
            self.query_one(ranked).display = not trade and not cpu
        self.query_one("#cpu-only-plan").display = not trade and cpu

    def action_toggle_tradeoff(self) -> None:
        """k: the trade-off table in the ranking's place, focused (its keys scroll it); again,
        the ranking, its table focused."""
        self.showing_tradeoff = not self.showing_tradeoff
        self._lay_out()
        target = "#tradeoff-box" if self.showing_tradeoff else "#results-table"
        if not self.showing_tradeoff and self._cpu_only:
            target = "#cpu-only-plan"
        widget = self.query_one(target)
        if widget.focusable:
            self.screen.set_focus(widget)

    def on_resize(self) -> None:
        if self.compact is not None and self.compact != (self.app.size.width < WIDE_AT):
            self.update_from(self.app)

    def show_message(self, text: str | None, *, error: bool = False) -> None:
        """A line above the table (None hides it): what `cope advise` says instead of a
        command to run, or why the ranking could not be computed."""
        shown = self.query_one("#results-message", Static)
        shown.update(Text(text or "", style="bold red" if error else "bold yellow"))
        shown.display = bool(text)

    def show_failure(self, text: str, *, ranked: bool) -> None:
        """A ranking that failed: said on the pane, above the previous rows if there are any."""
        if not ranked:
            self.query_one("#results-summary", Static).update("no ranking")
        self.show_message(text, error=True)

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        if getattr(app, "cpu_only", None) is not None:
            self.show_cpu_only(app)
            return
        advice = app.advice
        if advice is None:
            return
        rec = advice.rec
        runs = app.runs
        req = rec.request
        baseline = rec.baseline()
        summary = Text()
        if req.trace.meta.synthetic:
            summary.append(" SYNTHETIC trace ", style="bold reverse red")
            summary.append(" ")
        summary.append(f"{req.model.name} {req.quant.name} on {req.platform.gpu.name} "
                       f"({req.vram_budget_bytes / GIB:.1f} GiB budget) + {req.platform.cpu.name}, "
                       f"{count_of(req.threads, 'thread')}; {rec.cost_model.fidelity} cost model; "
                       f"x base = against {llama_words(baseline, req.model)}")
        ranking = getattr(app, "workload_ranking", None)
        if ranking is not None:
            best = ranking.best
            summary.append(f"; {ranking.workload.describe()}: fastest request {best.candidate_id} "
                           f"{best.request_s:.1f} s (TTFT {best.prefill.ttft_s:.1f} s, "
                           f"{best.prefill.tokens_per_s:.0f} prompt + {best.estimate.tokens_per_s:.1f} decode tok/s "
                           f"{band_cell(estimate_band(best.estimate)).plain})", style="bold")
        self.query_one("#results-summary", Static).update(summary)
        # No row to run (nothing fits RAM, no runtime runs any): the CLI's words, not a second wording.
        self.show_message(nothing_fits(runs) if runs.run_now is None else None)
        self._cpu_only = False
        self.show_run_now(app)
        self.fill_table(app)
        self.show_selected(app)
        self.show_sweep(app)

    def shown_rows(self, app) -> tuple[list, list]:  # type: ignore[no-untyped-def]
        """The rows some runtime runs (the run-now row first, then rank order, as `cope advise`),
        and the Policy Matrix's cells no runtime runs."""
        ordered = run_now_first(app.runs)
        return [r for r in ordered if r.runs], [r for r in ordered if not r.runs]

    def fill_table(self, app) -> None:  # type: ignore[no-untyped-def]
        runs, rec = app.runs, app.advice.rec
        model, baseline = rec.request.model, rec.baseline()
        table = self.query_one(DataTable)
        self.compact = self.app.size.width < WIDE_AT
        table.clear(columns=True)
        table.add_columns(*(COMPACT_COLUMNS if self.compact else COLUMNS))
        app.labels = {row.id: row.label for row in runs.rows}
        rank_of = {row.id: rank for rank, row in enumerate(runs.rows, start=1)}
        pinned = runs.run_now.row if runs.run_now is not None else None
        runnable, paper = self.shown_rows(app)
        with_paper = self.query_one("#show-paper", Checkbox).value
        synthetic = rec.request.trace.meta.synthetic
        self.query_one("#paper-line", Static).update(
            Text(paper_only_line(paper, synthetic) if paper else "Every cell of the Policy Matrix ranked here runs "
                 "on some runtime", style="dim"))
        self.query_one("#show-paper", Checkbox).display = bool(paper)
        listed = runnable + (paper if with_paper else [])
        for row in listed:
            if row is (paper[0] if paper else None):
                heading = f"paper only, {routing_words(synthetic)}:"  # what the rows below rest on
                table.add_row("", Text(heading, style="bold"), *[""] * (len(table.columns) - 2), key=PAPER_KEY)
            table.add_row(*self.row_cells(row, rank_of[row.id], row is pinned, baseline, model), key=row.id)
        ids = [row.id for row in listed]
        table.move_cursor(row=table.get_row_index(app.selected_id) if app.selected_id in ids else 0)

    def row_cells(self, row, rank: int, pinned: bool, baseline, model) -> list:  # type: ignore[no-untyped-def]
        e = row.estimate
        where = runs_on_text(row)
        # The run-now row: pinned on top, its rank marked.
        rank_cell = Text(f"▶{rank}", style="bold green") if pinned else Text(str(rank))
        tail = " (base)" if e is baseline else ""
        tail += f" (+{row.group_size - 1} same)" if row.group_size > 1 else ""
        ram = ram_bytes(row)
        ram_cell = f"{ram / GIB:.1f}" if ram is not None else "-"
        band = band_cell(estimate_band(e))
        runs_cell = Text(where, style=runs_style(where))
        if self.compact:
            speed = Text(f"{e.tokens_per_s:.1f} ").append_text(band)
            return [rank_cell, compact_id(llama_words(e, model)) + tail, speed, f"{e.vram_used_bytes / GIB:.2f}",
                    ram_cell, runs_cell]
        return [rank_cell, llama_words(e, model) + tail, f"{e.tokens_per_s:.1f}", band, f"{e.tpot_s * 1e3:.2f}",
                f"{baseline.tpot_s / e.tpot_s:.2f}", f"{e.vram_used_bytes / GIB:.2f}", ram_cell,
                f"{e.stats.hit_rate:.1%}", runs_cell, why_text(row)]

    def show_run_now(self, app) -> None:  # type: ignore[no-untyped-def]
        """The lines `cope advise` leads with, from the same functions (cope_tui/text_report.py,
        cope_tui/service/llama_search.py), and each figure's error band."""
        rec, runs = app.advice.rec, app.runs
        search = getattr(app, "llama_search", None)
        heading = search.heading() if search is not None else "Run this now"
        # with nothing to run, the line above the table says why: not twice
        text = "\n".join(render_run_now(rec, runs, heading=heading)) if runs.run_now is not None else ""
        if search is not None:
            text = search.placed(text + "\n\n", build=app.builds.get(STOCK_NAME), tradeoff=False,
                                 synthetic=rec.request.trace.meta.origin == "synthetic").strip("\n")
        elif getattr(app, "search_failed", None):
            text += f"\n  stock llama.cpp's commands were not searched: {app.search_failed}"
        else:
            text += "\n  searching stock llama.cpp's commands (its expert cache) and its own placement (--fit)..."
        shown = Text(no_wrap=True, overflow="ellipsis")
        for line in text.splitlines():
            if line.lstrip().startswith("#"):  # the command's notes: the Export tab shows them with it, in full
                continue
            heads = ("Run this now", "Without llama.cpp", "COPE's ranking picks", "Your stock llama.cpp")
            shown.append(line + "\n", style="bold" if line.startswith(heads) else "")
        for label, answer in band_lines(runs, search):
            shown.append(f"  error band of {label}: {answer.text()}\n", style="italic")
        if search is not None and search.tradeoff is not None:  # where advise prints it: below the figures
            shown.append(f"What context and KV cache type cost: {TRADEOFF_KEY} shows the table\n", style="bold")
        shown.rstrip()
        self.query_one("#run-now", Static).update(shown)
        self._run_now_shown = bool(shown.plain)
        self.show_tradeoff(app)
        self._lay_out()

    def show_tradeoff(self, app) -> None:  # type: ignore[no-untyped-def]
        """The trade-off table as `cope advise` prints it (engine/advice/tradeoff.py), with the
        bands of its figures; else why there is none yet, or none at all."""
        search = getattr(app, "llama_search", None)
        back = f"({TRADEOFF_KEY} again: the ranking)"
        if self._cpu_only or search is None or search.tradeoff is None:
            self.query_one("#tradeoff", Static).update(Text(f"{self._no_tradeoff(app, search)}\n{back}", style="dim"))
            return
        text = Text("\n".join(search.tradeoff.lines()) + "\n")
        for answer in tradeoff_bands(search.tradeoff, app.advice.rec.request.model):
            text.append(f"  error band of its tok/s: {answer.text()}\n", style="italic")
        text.append(back, style="dim")
        self.query_one("#tradeoff", Static).update(text)

    def _no_tradeoff(self, app, search) -> str:  # type: ignore[no-untyped-def]
        """Why there is no trade-off table (yet)."""
        if self._cpu_only:
            return "No GPU is planned: every layer is on the CPU, no placement to trade against context and KV type"
        if getattr(app, "search_failed", None):
            return f"No trade-off table: stock llama.cpp's commands were not searched: {app.search_failed}"
        if search is None:
            return "The trade-off table comes with the search of stock llama.cpp's commands, still running"
        if search.cache is None:
            return "No trade-off table: COPE searches stock llama.cpp's commands for one GPU, and this plan has several"
        return "No trade-off table: no stock llama.cpp command fits this VRAM budget"

    def show_cpu_only(self, app) -> None:  # type: ignore[no-untyped-def]
        """No GPU planned: the one CPU-only command and its price, as `cope advise --gpu none`
        prints them (cope_tui/service/cpu_only.py); no table, no sweep."""
        plan = app.cpu_only
        req = plan.request
        summary = Text()
        summary.append(f"{req.model.name} {req.quant.name} on no GPU + {req.platform.cpu.name}, "
                       f"{count_of(req.threads, 'thread')}, context {req.context_tokens}: CPU only, nothing to "
                       "split or rank", style="bold")
        self.query_one("#results-summary", Static).update(summary)
        self.show_message(None)  # a refusal is the plan's own first lines
        table = self.query_one(DataTable)
        table.clear(columns=True)
        self._cpu_only = True  # no table, no VRAM to sweep, no split to break down
        self.show_tradeoff(app)
        self._lay_out()
        shown = self.query_one("#cpu-only-plan", Static)
        text = Text(render_cpu_only(plan).rstrip())
        if plan.price.runs:
            text.append(f"\nerror band of {plan.price.tokens_per_s:.1f} tok/s: {plan.price.band.text()}", style="italic")
        shown.update(text)

    def show_selected(self, app) -> None:  # type: ignore[no-untyped-def]
        e = app.selected_estimate()
        if e is None:
            return
        label = f"runs on: {runs_on_text(app.runs.row(e.candidate.id))}" if app.runs is not None else ""
        text = breakdown_text(e, app.advice.rec.baseline(), label)
        ranking = getattr(app, "workload_ranking", None)
        w = ranking.of(e.candidate.id) if ranking is not None else None
        if w is not None:
            text.append(f"\nrequest {w.request_s:.2f} s = TTFT {w.prefill.ttft_s:.2f} s "
                        f"({w.prefill.tokens_per_s:.0f} prompt tok/s at -ub {w.prefill.ubatch}) + "
                        f"{ranking.workload.output_tokens} x {e.tpot_s * 1e3:.2f} ms ({e.tokens_per_s:.1f} decode tok/s)",
                        style="bold")
        self.query_one("#breakdown", Static).update(text)

    def show_sweep(self, app) -> None:  # type: ignore[no-untyped-def]
        chart = self.query_one(ThroughputChart)
        if not app.sweep_points or app.advice is None:
            chart.set_series([], app.sweep_message)
            return
        estimates = app.advice.rec.estimates
        shown = charted(app.advice.rec, app.services.chart_series)
        prompt = getattr(app, "chart_metric", "decode") == "prompt"
        title = "prompt tok/s vs VRAM budget (t: decode)" if prompt else "tok/s vs VRAM budget"
        chart.border_title = swept_title(title, *getattr(app, "sweep_progress", (0, 0)))
        series = []
        for mark, cid in shown:
            speeds = (lambda p: p.prompt_tokens_per_s) if prompt else (lambda p: p.tokens_per_s)
            pts = [(p.budget_bytes / GIB, speeds(p)[cid]) for p in app.sweep_points if cid in speeds(p)]
            if pts:
                series.append((mark, pts))
        legend = f"marks: ranks 1-{min(len(estimates), app.services.chart_series)} at this budget"
        if shown and shown[-1][0] == "B":
            legend += f"; B = {shown[-1][1]}"
        chart.set_series(series, legend=legend)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value and event.row_key.value != PAPER_KEY:
            self.app.select_candidate(event.row_key.value)

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        if self.app.advice is not None and self.app.runs is not None:
            self.fill_table(self.app)


def tradeoff_bands(tradeoff, model) -> list[BandAnswer]:  # type: ignore[no-untyped-def]
    """The bands of the trade-off table's figures: each cell is a plain --n-cpu-moe command, of
    the regime its host layers make; one line per distinct band."""
    answers: dict[str, BandAnswer] = {}
    for cell in tradeoff.cells:
        if not cell.fits or cell.n_cpu_moe is None:
            continue
        share = np.array([1.0 if block < cell.n_cpu_moe else 0.0 for block in model.moe_blocks])
        answer = band_for(placement_regime(share, has_gpu=True, cpu_only=False), cell.fidelity)
        answers.setdefault(answer.text(), answer)
    return list(answers.values())


def band_lines(runs, search) -> list[tuple[str, BandAnswer]]:  # type: ignore[no-untyped-def]
    """Each figure of the lead block and the band it carries (engine/advice/error_band.py), a
    figure said twice (the ranking's pick is often the search's plain partition) once."""
    lines: dict[str, BandAnswer] = {}
    if runs.run_now is not None:
        e = runs.run_now.estimate
        lines[f"{e.tokens_per_s:.1f} tok/s"] = estimate_band(e)
    if search is not None and search.cache is not None:
        for priced in (search.cache.with_cache, search.cache.partition):
            if priced is not None:
                lines.setdefault(f"{priced.tokens_per_s:.1f} tok/s", priced.band)
    default = search.default if search is not None else None
    if default is not None and default.tpot_s is not None:
        lines.setdefault(f"{1 / default.tpot_s:.1f} tok/s (llama.cpp's own placement)", default.band)
    return list(lines.items())
