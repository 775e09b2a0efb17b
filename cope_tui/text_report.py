"""The human-readable form of a Recommendation (what `cope advise` prints)."""

from __future__ import annotations

import os

import numpy as np

from engine.advice.advise import Recommendation
from engine.advice.command_estimate import CommandEstimate
from engine.advice.error_band import BandAnswer, estimate_band
from engine.advice.run_advice import CandidateRuns, RunAdvice, plan_runs
from engine.core.spans import count_of
from engine.cost.estimate import Estimate
from engine.hardware.memory import GIB
from engine.models.model import ModelSpec
from engine.replays.policy import Kind
from engine.runtimes import REGISTRY, STOCK_NAME, runtime_named
from engine.runtimes.export import Export
from engine.runtimes.llamacpp import label_text
from engine.traces.popularity import profile_words

def render_recommendation(rec: Recommendation, *, runs: RunAdvice | None = None, limit: int | None = None,
                          model_path: str | None = None, heading: str = "Run this now") -> str:
    """The run-now block first, then the machine, the VRAM arithmetic and the ranking."""
    runs = runs if runs is not None else plan_runs(rec)
    req = rec.request
    gpu, cpu = req.platform.gpu, req.platform.cpu
    baseline = rec.baseline()
    lines = [*render_run_now(rec, runs, model_path=model_path, heading=heading), ""]
    lines += [
        f"COPE advise: {req.model.name} {req.quant.name}, "
        f"{gpu.name} ({gpu.vram_bytes.basis}) + {cpu.name} ({cpu.physical_cores.basis}), "
        f"{count_of(req.threads, 'thread')}, context {req.context_tokens}",
        f"Trace: {_trace_line(rec)}",
        f"Cost model: {rec.cost_model.fidelity} ({rec.cost_model.basis})",
        "",
        "VRAM arithmetic:",
        *rec.memory.lines(),
        f"  RAM: {_ram_line(runs)}",
        "",
        f"{'rank':>4}  {'llama.cpp flags, or candidate':<44} {'TPOT ms':>8} {'tok/s':>7} {'vs base':>8} {'VRAM GiB':>9} {'hits':>6}  runs on",
    ]
    shown = run_now_first(runs)
    runnable = [row for row in shown if row.runs]  # what some runtime runs (exactly or approximately)
    paper = [row for row in shown if not row.runs]
    cut = runnable if limit is None else runnable[:limit]
    rank_of = {row.id: rank for rank, row in enumerate(runs.rows, start=1)}
    now_id = runs.run_now.row.id if runs.run_now is not None else None
    for row in cut:
        lines.append(_table_line(row, rank_of[row.id], baseline, now_id, req.model))
        if row.group_size > 1:
            lines.append(f"      = {row.group_size - 1} more with the same placement ({row.group_note})")
    if len(cut) < len(runnable):
        lines.append(f"      ... {len(runnable) - len(cut)} more that a runtime runs (--all to list every candidate)")
    if paper and limit is not None:
        lines += ["", paper_only_line(paper, req.trace.meta.synthetic) + "; --all lists them"]
    elif paper:
        lines += ["", f"On paper only (no runtime runs these yet; {routing_words(req.trace.meta.synthetic)}):"]
        lines += [_table_line(row, rank_of[row.id], baseline, now_id, req.model) for row in paper]
    lines += ["", RUNS_ON_LEGEND]
    best = rec.best
    b = best.breakdown
    if limit is None or best.candidate.id not in {row.id for row in paper}:
        lines += [
            "",
            f"Fastest on paper: {best.candidate.id}: {best.candidate.describe()}; {best.detail}; "
            f"{runs.row(best.candidate.id).who_runs_it}",
            f"      {best.tokens_per_s:.1f} tok/s, {baseline.tpot_s / best.tpot_s:.2f}x the baseline "
            f"{baseline.candidate.id} ({baseline.detail}, {baseline.tokens_per_s:.1f} tok/s)",
            f"      per token: experts {b.experts_critical_s * 1e3:.2f} ms (GPU {b.gpu_experts_s * 1e3:.2f}, "
            f"CPU {b.cpu_experts_s * 1e3:.2f}, copies {b.copies_s * 1e3:.2f}, sync {b.sync_s * 1e3:.2f}), "
            f"exposed prefetch {b.exposed_prefetch_s * 1e3:.2f}, shared {b.shared_s * 1e3:.2f}, "
            f"head+sampling {b.token_overhead_s * 1e3:.2f} ms",
        ]
    if rec.notes:
        lines += ["", "Notes:", *[f"  - {n}" for n in rec.notes]]
    return "\n".join(lines) + "\n"


def routing_words(synthetic: bool) -> str:
    """What routing a figure rests on."""
    return "SYNTHETIC routing" if synthetic else "replayed routing"


def paper_only_line(paper: list[CandidateRuns], synthetic: bool) -> str:
    """The Policy Matrix's cells no runtime runs, in one line: how many, how fast, on which routing."""
    fastest = min(paper, key=lambda r: r.estimate.tpot_s).estimate
    return (f"On paper only: {len(paper)} more cells of the Policy Matrix that no runtime runs yet (up to "
            f"{fastest.tokens_per_s:.1f} tok/s on {routing_words(synthetic)})")


RUNS_ON_LEGEND = ("runs on: " + ", ".join(f"{r.info.short} = {r.info.title} ({r.info.home})"
                                           for r in REGISTRY) + "; ~ approximately; no RAM: does not fit in RAM")


def llama_words(e: Estimate, model: ModelSpec) -> str:
    """A standalone candidate as llama.cpp's own flags say it (`--n-cpu-moe 22`, `--cpu-moe`);
    a Policy Matrix cell by its id."""
    kind = e.candidate.kind
    cpu = e.cpu_layers
    if kind is Kind.ALL_CPU:
        return "--cpu-moe"
    if kind is Kind.ALL_GPU:
        return "-ngl 99 (every expert on the GPU)"
    if kind is Kind.PARTITION_FIRST and cpu is not None and cpu.any():
        return f"--n-cpu-moe {model.moe_blocks[int(np.flatnonzero(cpu)[-1])] + 1}"
    if kind is Kind.PARTITION_LAST and cpu is not None and cpu.any():
        return f"-ot: last {int(cpu.sum())} layers' experts on the CPU"
    return e.candidate.id


def _table_line(row: CandidateRuns, rank: int, baseline, now_id: str | None,  # type: ignore[no-untyped-def]
                model: ModelSpec) -> str:
    e = row.estimate
    marks = [m for m, on in (("run now", row.id == now_id), ("baseline", e is baseline)) if on]
    mark = " <- " + ", ".join(marks) if marks else ""
    return (f"{rank:>4}  {llama_words(e, model):<44} {e.tpot_s * 1e3:>8.2f} {e.tokens_per_s:>7.1f} "
            f"{baseline.tpot_s / e.tpot_s:>7.2f}x {e.vram_used_bytes / GIB:>9.2f} {e.stats.hit_rate:>6.1%}"
            f"  {runs_on_text(row)}{mark}")


def run_now_first(runs: RunAdvice) -> list[CandidateRuns]:
    """The shown rows with the run-now row first (the rest keep their rank order): what
    to run leads, the fastest on paper may be a candidate no runtime runs."""
    shown = runs.shown()
    now = runs.run_now.row if runs.run_now is not None else None
    if now is None or now not in shown:
        return shown
    return [now, *(row for row in shown if row is not now)]


def runs_on_text(row: CandidateRuns) -> str:
    if row.ram_refused:
        return "no RAM"
    short = {r.info.name: r.info.short for r in REGISTRY}
    exact = [short[name] for name in row.exact_runtimes()]
    approx = ["~" + short[name] for name in row.approximate_runtimes()]
    return " ".join(exact + approx) or "none"


def _ram_line(runs: RunAdvice) -> str:
    ram = runs.plan.ram_bytes
    return "unknown (not checked; --ram-gib to give it)" if ram is None else f"{ram / GIB:.1f} GiB"


def nothing_fits(runs: RunAdvice) -> str:
    """Why nothing is recommended: the RAM that even stock llama.cpp's best placement needs."""
    for row in runs.rows:
        run = row.run_on(STOCK_NAME)
        if run is not None and run.support.exact and run.host is not None:
            fit = run.host.fit
            return (f"Run this now: nothing COPE ranked fits this machine's RAM; even {row.id} "
                    f"({row.estimate.detail}) keeps {fit.need_bytes / GIB:.1f} GiB in host memory, "
                    f"{fit.budget_bytes / GIB:.1f} GiB usable of {runs.plan.ram_bytes / GIB:.1f} GiB "
                    "(use a smaller quantization, a bigger GPU, or more RAM)")
    return "Run this now: nothing COPE ranked runs on this machine"


def render_run_now(rec: Recommendation, runs: RunAdvice, *, model_path: str | None = None,
                   heading: str = "Run this now") -> list[str]:
    """'Run this now': the best candidate an installed runtime runs (else the best stock
    llama.cpp runs), its command and figures; then how much faster another runtime is."""
    now = runs.run_now
    if now is None:
        return [nothing_fits(runs)]
    e = now.estimate
    runtime = runtime_named(now.runtime).info
    export = runs.export(rec, now, model_path=model_path)
    host = now.host
    held = "mapped" if host.mapped else ("copied" if runtime.can_map else "held by the runtime")
    lines = [
        f"{heading}: {e.candidate.id} with {runtime.title}" + _fastest_by(runs),
        f"  {e.tokens_per_s:.1f} tok/s ({e.tpot_s * 1e3:.2f} ms/token), VRAM {e.vram_used_bytes / GIB:.2f} GiB, "
        f"RAM {host.fit.need_bytes / GIB:.1f} GiB ({held}); {e.detail}",
        *_request_line(runs, e.candidate.id),
        "  " + export.display(),
    ]
    lines += [f"  # placeholder {p.word}: put {p.put}" for p in export.placeholders]
    lines += [f"  # {note}" for note in export.notes]
    if not now.installed:
        lines.append(f"  ({runtime.title} not found on PATH or in --llama-bin DIR; get it: {runtime.install}, {runtime.home})")
    speedup = runs.speedup_elsewhere
    if speedup is not None and runs.best_overall is not None:
        best = runs.best_overall
        other = runtime_named(best.runtime).info
        figure = (f"{best.estimate.tokens_per_s:.1f} tok/s" if runs.ranking is None
                  else f"request {runs.seconds(best.row):.1f} s")
        lines.append(f"{speedup:.2f}x faster with {other.title} ({best.estimate.candidate.id}, "
                     f"{figure}{_rests_on(rec, best)}): {other.install} ({other.home}), then cope export --runtime "
                     f"{other.name} --candidate {best.estimate.candidate.id} --out DIR/run.sh")
    return lines


def _rests_on(rec: Recommendation, pick) -> str:  # type: ignore[no-untyped-def]
    """What a per-expert pick's speed-up rests on where that is SYNTHETIC routing: which
    experts it keeps, and so its hit rate, were learnt from made-up routing."""
    if not rec.request.trace.meta.synthetic or pick.row.placement.layout.value != "experts":
        return ""
    return "; on SYNTHETIC routing: record or pull a real trace (cope trace) before relying on it"


def _fastest_by(runs: RunAdvice) -> str:
    return "" if runs.ranking is None else f" (fastest by request time: {runs.ranking.workload.describe()})"


def _request_line(runs: RunAdvice, candidate_id: str) -> list[str]:
    priced = runs.ranking.of(candidate_id) if runs.ranking is not None else None
    if priced is None:
        return []
    return [f"  request {priced.request_s:.1f} s = TTFT {priced.prefill.ttft_s:.1f} s "
            f"({priced.prefill.tokens_per_s:.0f} prompt tok/s at -ub {priced.prefill.ubatch}) + "
            f"{runs.ranking.workload.output_tokens} x {priced.estimate.tpot_s * 1e3:.2f} ms"]


def _trace_line(rec: Recommendation) -> str:
    t = rec.request.trace
    origin = "SYNTHETIC" if t.meta.synthetic else t.meta.origin
    return (
        f"{origin} ({t.meta.source}), {t.n_tokens} tokens x {t.n_layers} MoE layers replayed, "
        + profile_words(rec.request.profile)
    )


def runtime_line(export: Export) -> str:
    """Whether the export's runtime runs the asked candidate, and where to get it."""
    runtime = runtime_named(export.runtime).info
    if export.support == "no":
        return f"{runtime.title} does not run it"
    how = "exactly" if export.support == "exact" else "approximately"
    return f"{runtime.title} runs it {how}; get it: {runtime.install}, {runtime.home}"


def render_export(export: Export, *, side_files_written: bool = False, side_dir: str | None = None) -> str:
    """Comment lines (safe to paste into a shell) and the command; `side_dir`: the folder
    its artefacts were written to (None with side_files_written: beside the saved command)."""
    lines = [f"# {export.candidate_id}: {label_text(export.label)}", f"# {runtime_line(export)}", f"# {export.reason}"]
    if export.nearest_id is not None or export.exported_id != export.candidate_id:
        lines.append(f"# the command below runs {export.exported_id} instead")
    for name in export.artefact_names:
        where = ("write it with --out FILE" if not side_files_written else "written beside the command"
                 if side_dir is None else f"written to {os.path.join(side_dir, name)}")
        lines.append(f"# artefact {name}: {where}")
    lines += [f"# placeholder {p.word}: put {p.put}" for p in export.placeholders]
    lines += [f"# {note}" for note in export.notes]
    lines.append(export.display())
    return "\n".join(lines) + "\n"


def _priced_lines(label: str, what: str, tpot_s: float, vram_bytes: int, after: str) -> list[str]:
    """A priced line pair of `cope estimate`: what, then its speed and VRAM."""
    return [f"{label}{what}",
            f"{'':15}{tpot_s * 1e3:8.2f} ms/token  {1 / tpot_s:7.1f} tok/s  VRAM {vram_bytes / GIB:.2f} GiB{after}"]


def render_command_estimate(est: CommandEstimate) -> str:
    """What `cope estimate` prints: your command, COPE's best, the command of the best."""
    req = est.request
    yours, best = est.yours, est.best
    attended = f", attending to {req.attention_tokens} tokens" if req.attention_tokens is not None else ""
    lines = [
        f"COPE estimate: {req.model.name} {req.quant.name}, {count_of(req.threads, 'thread')}, "
        f"context {req.context_tokens}{attended}, cost model {yours.fidelity}",
    ]
    if not yours.runs:
        said = f"Your command {yours.refusal}" if yours.verdict == "would_not_run" else f"Your command:  {yours.refusal}"
        lines += [said, f"               ({yours.detail})"]
    else:
        ranked = "" if est.rank is None else f"  ({rank_text(est)})"
        lines += _priced_lines("Your command:  ", yours.detail, yours.tpot_s, yours.vram_used_bytes, ranked)
        lines.append(_band_line(yours.band))
        pp = yours.prefill
        if pp is not None:
            fit = "" if pp.fits else "  (its compute buffer does not fit the VRAM left: llama.cpp would fail)"
            lines.append(f"               pp{pp.prompt_tokens}: {pp.tokens_per_s:8.1f} prompt tok/s at -ub {pp.ubatch} "
                         f"-b {pp.batch} ({pp.prompt_s:.2f} s; copies {pp.copy_s:.2f} s){fit}")
    if best is None:
        lines.append(f"COPE's best:   none at these settings: {est.no_ranking}")
    else:
        lines += _best_lines(est)
    if est.export is not None:
        lines += ["", f"Command for {runnable_label(est)}:",
                  *("  " + line for line in render_export(est.export).splitlines())]
    if est.command.unknown:
        lines += ["", "Flags not modelled (listed, not used): " + "  ".join(est.command.unknown)]
    notes = est.notes + est.ranking_notes
    if notes:
        lines += ["", "Notes:", *[f"  - {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def runnable_label(est: CommandEstimate) -> str:
    """ "COPE's best that stock llama.cpp runs" (the runtime of the command written for it)."""
    runtime = runtime_named(est.export.runtime).info.title if est.export is not None else "llama.cpp"
    return f"COPE's best that {runtime} runs"


def _best_lines(est: CommandEstimate) -> list[str]:
    """What runs first, then the paper optimum where it is another candidate (often one no
    runtime runs yet), each against the command."""
    run, best = est.runnable, est.best
    assert run is not None and best is not None
    versus = ""
    if est.runnable_is is not None:  # None: the command is not priced (refused), nothing to compare with
        said = best_text(est) if run is best else _versus(est.runnable_is, est.runnable_speedup or 0.0)
        versus = f"  ({said})"
    lines = [f"{runnable_label(est)}:",
             *_priced_lines("               ", f"{run.candidate.id}: {run.detail}", run.tpot_s,
                            run.vram_used_bytes, versus),
             _band_line(estimate_band(run))]
    if run is not best:
        speed = f"  ({best_text(est)})" if est.best_is is not None else ""
        lines += [f"Fastest on paper ({est.paper_runs_on}):",
                  *_priced_lines("               ", f"{best.candidate.id}: {best.candidate.describe()}", best.tpot_s,
                                 best.vram_used_bytes, speed),
                  _band_line(estimate_band(best))]
    return lines


def _band_line(answer: BandAnswer) -> str:
    """How far off the figure above may be (engine/advice/error_band.py)."""
    return f"{'':15}error band: {answer.text()}"


def rank_text(est: CommandEstimate) -> str:
    """Where the command ranks; a tie ranks as equal (engine/cost/estimate.py: faster)."""
    if est.rank is None:
        return ""
    if est.rank > est.of:
        return f"slower than all {est.of} candidates"
    tied = est.tied_with
    also = "" if not tied else f", as fast as {tied[0]}" + (f" and {len(tied) - 1} more" if len(tied) > 1 else "")
    return f"rank {est.rank} of {est.of}{also}"


def best_text(est: CommandEstimate) -> str:
    """COPE's best against the command, said as an improvement only when it is faster."""
    if est.speedup is None:  # the command is not priced: there is no ratio to give
        return "yours is not priced"
    if est.best_is == "as_fast":
        return "as fast as yours: yours is already the fastest"
    if est.best_is == "slower":
        return f"{est.speedup:.2f}x yours: yours is already faster than every candidate"
    return f"{est.speedup:.2f}x yours"


def _versus(outcome: str | None, ratio: float) -> str:
    return {"as_fast": "as fast as yours", "slower": f"{ratio:.2f}x yours: slower than yours"}.get(
        outcome or "", f"{ratio:.2f}x yours")
