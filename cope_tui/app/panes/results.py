"""Results: every candidate ranked, tokens/s against VRAM budget for the best few, and
the cost breakdown of the selected candidate."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from cope_tui.app.widgets.chart import ThroughputChart, charted, swept_title
from cope_tui.service.cpu_only import render_cpu_only
from cope_tui.text_report import nothing_fits, runs_on_text
from engine.core.spans import count_of
from engine.hardware.memory import GIB

COMPACT_COLUMNS = ("#", "policy", "ms/tok", "tok/s", "xbase", "VRAM", "hits", "runs on")
WIDE_AT = 110  # narrower terminals get the compact table
_ABBREV = (("ready-first", "ready1st"), ("sequential", "seq"), ("parallel", "par"), ("nonuniform", "nonu"),
           ("uniform", "uni"), ("prefetch", "pf"))


def compact_id(candidate_id: str) -> str:
    for long, short in _ABBREV:
        candidate_id = candidate_id.replace(long, short)
    return candidate_id
RUNS_STYLE = {"runs-on-stock": "green", "needs-fork": "yellow", "not-expressible": "red"}
COLUMNS = ("#", "residency", "execution", "policy", "TPOT ms", "tok/s", "x base", "VRAM GiB", "hits", "runs on")


def runs_style(runs_on: str) -> str:
    if runs_on in ("none", "no RAM"):
        return "red"
    return "green" if not runs_on.startswith("~") else "yellow"


def policy_cells(estimate) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    c = estimate.candidate
    if c.residency is None:
        return c.kind.value, "-", estimate.detail.split(" (")[0].replace(" on the CPU", "")
    knobs = [c.allocation.value]
    if c.eviction is not None:
        knobs.append(c.eviction.value)
    if c.prefetch:
        knobs.append("prefetch")
    return c.residency.value, c.execution.value, " ".join(knobs)


def breakdown_text(estimate, baseline, label: str) -> Text:  # type: ignore[no-untyped-def]
    b = estimate.breakdown
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{estimate.candidate.id}", style="bold")
    text.append(f"  {label}\n", style=RUNS_STYLE.get(label, "") or runs_style(label.removeprefix("runs on: ")))
    text.append(f"{estimate.tpot_s * 1e3:.2f} ms/token, {estimate.tokens_per_s:.1f} tok/s\n")
    text.append(f"{baseline.tpot_s / estimate.tpot_s:.2f}x the base, hits {estimate.stats.hit_rate:.1%}\n")
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


class ResultsPane(Vertical):
    DEFAULT_CSS = """
    ResultsPane #results-summary { height: auto; max-height: 2; padding: 0 1; }
    ResultsPane #results-message { height: auto; max-height: 8; padding: 0 1; display: none; }
    ResultsPane #results-table { height: 1fr; min-height: 5; }
    ResultsPane #cpu-only-plan { height: 1fr; min-height: 5; padding: 0 1; display: none; overflow-y: auto; }
    ResultsPane #results-bottom { height: 45%; min-height: 11; }
    ResultsPane ThroughputChart { width: 1fr; border: round $primary; padding: 0 1;
        border-title-align: left; }
    ResultsPane #breakdown-box { width: 1fr; border: round $secondary; padding: 0 1; height: 100%; }
    ResultsPane #breakdown { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("computing the default recommendation...", id="results-summary")
        # Hidden while a row can be run: says why none can, or why there is no ranking.
        yield Static("", id="results-message")
        yield DataTable(id="results-table", cursor_type="row", zebra_stripes=True)
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
                       f"vs base = against {baseline.candidate.id}")
        ranking = getattr(app, "workload_ranking", None)
        if ranking is not None:
            best = ranking.best
            summary.append(f"; {ranking.workload.describe()}: fastest request {best.candidate_id} "
                           f"{best.request_s:.1f} s (TTFT {best.prefill.ttft_s:.1f} s, "
                           f"{best.prefill.tokens_per_s:.0f} prompt + {best.estimate.tokens_per_s:.1f} decode tok/s)",
                           style="bold")
        self.query_one("#results-summary", Static).update(summary)
        # No row to run (nothing fits RAM, no runtime runs any): the CLI's words, not a second wording.
        self.show_message(nothing_fits(runs) if runs.run_now is None else None)
        self.query_one("#cpu-only-plan", Static).display = False
        self.query_one("#results-bottom").display = True
        table = self.query_one(DataTable)
        table.display = True
        self.compact = self.app.size.width < WIDE_AT
        table.clear(columns=True)
        table.add_columns(*(COMPACT_COLUMNS if self.compact else COLUMNS))
        app.labels = {row.id: row.label for row in runs.rows}
        rank_of = {row.id: rank for rank, row in enumerate(runs.rows, start=1)}
        pinned = runs.run_now.row if runs.run_now is not None else None
        shown = runs.shown()
        ordered = ([pinned] if pinned is not None else []) + [r for r in shown if r is not pinned]
        for row in ordered:
            e = row.estimate
            where = runs_on_text(row)
            figures = (f"{e.tpot_s * 1e3:.2f}", f"{e.tokens_per_s:.1f}", f"{baseline.tpot_s / e.tpot_s:.2f}",
                       f"{e.vram_used_bytes / GIB:.2f}", f"{e.stats.hit_rate:.1%}")
            # The run-now row: pinned on top, its rank marked.
            rank = Text(f"▶{rank_of[row.id]}", style="bold green") if row is pinned else Text(str(rank_of[row.id]))
            tail = " (base)" if e is baseline else ""
            tail += f" (+{row.group_size - 1} same)" if row.group_size > 1 else ""
            if self.compact:
                table.add_row(rank, compact_id(e.candidate.id) + tail, *figures,
                              Text(where, style=runs_style(where)), key=e.candidate.id)
                continue
            residency, execution, policy = policy_cells(e)
            table.add_row(rank, residency, execution, policy + tail, *figures,
                          Text(where, style=runs_style(where)), key=e.candidate.id)
        ids = [row.id for row in ordered]
        row = ids.index(app.selected_id) if app.selected_id in ids else 0
        table.move_cursor(row=row)
        self.show_selected(app)
        self.show_sweep(app)

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
        table.display = False
        self.query_one("#results-bottom").display = False  # no VRAM to sweep, no split to break down
        shown = self.query_one("#cpu-only-plan", Static)
        shown.update(Text(render_cpu_only(plan).rstrip()))
        shown.display = True

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
        if event.row_key is not None and event.row_key.value:
            self.app.select_candidate(event.row_key.value)
