"""The human-readable form of a Recommendation (what `cope advise` prints)."""

from __future__ import annotations

from engine.advise import Recommendation
from engine.command_estimate import CommandEstimate
from engine.export import Export, runs_where
from engine.memory import GIB

RUNS_SHORT = {"runs-on-stock": "stock", "needs-fork": "fork", "not-expressible": "no"}


def render_recommendation(rec: Recommendation, *, limit: int | None = None) -> str:
    req = rec.request
    gpu, cpu = req.platform.gpu, req.platform.cpu
    baseline = rec.baseline()
    best = rec.best
    lines = [
        f"COPE advise: {req.model.name} {req.quant.name}, "
        f"{gpu.name} ({gpu.vram_bytes.basis}) + {cpu.name} ({cpu.physical_cores.basis}), "
        f"{req.threads} threads, context {req.context_tokens}",
        f"Trace: {_trace_line(rec)}",
        f"Cost model: {rec.cost_model.fidelity} ({rec.cost_model.basis})",
        "",
        "VRAM arithmetic:",
        *rec.memory.lines(),
        "",
        f"{'rank':>4}  {'candidate':<44} {'TPOT ms':>8} {'tok/s':>7} {'vs base':>8} {'VRAM GiB':>9} {'hits':>6}  llama.cpp",
    ]
    shown = rec.estimates if limit is None else rec.estimates[:limit]
    for rank, e in enumerate(shown, start=1):
        mark = " <- baseline" if e is baseline else ""
        lines.append(
            f"{rank:>4}  {e.candidate.id:<44} {e.tpot_s * 1e3:>8.2f} {e.tokens_per_s:>7.1f} "
            f"{baseline.tpot_s / e.tpot_s:>7.2f}x {e.vram_used_bytes / GIB:>9.2f} {e.stats.hit_rate:>6.1%}"
            f"  {RUNS_SHORT[runs_where(e.candidate, req.model, rec.memory)]}{mark}"
        )
    if limit is not None and len(rec.estimates) > limit:
        lines.append(f"      ... {len(rec.estimates) - limit} more (--all to list every candidate)")
    b = best.breakdown
    lines += [
        "",
        f"Best: {best.candidate.id}: {best.candidate.describe()}; {best.detail}",
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


def _trace_line(rec: Recommendation) -> str:
    t = rec.request.trace
    origin = "SYNTHETIC" if t.meta.synthetic else t.meta.origin
    return (
        f"{origin} ({t.meta.source}), {t.n_tokens} tokens x {t.n_layers} MoE layers replayed, "
        f"popularity from {rec.request.profile.n_tokens} profile tokens"
    )


def render_export(export: Export, *, side_files_written: bool = False) -> str:
    """Comment lines (safe to paste into a shell) and the command."""
    lines = [f"# {export.candidate_id}: {export.label}", f"# {export.reason}"]
    if export.nearest_id is not None:
        lines.append(f"# the command below runs {export.exported_id} instead")
    for name, _ in export.side_files:
        lines.append(f"# side file {name}: " + ("written beside the command" if side_files_written
                                                  else "write it with --out FILE"))
    lines.append(export.display())
    return "\n".join(lines) + "\n"


def render_command_estimate(est: CommandEstimate) -> str:
    """What `cope estimate` prints: your command, COPE's best, the command of the best."""
    req = est.request
    yours, best = est.yours, est.best
    lines = [
        f"COPE estimate: {req.model.name} {req.quant.name}, {req.threads} threads, "
        f"context {req.context_tokens}, cost model {yours.fidelity}",
        f"Your command:  {yours.detail}",
        f"               {yours.tpot_s * 1e3:8.2f} ms/token  {yours.tokens_per_s:7.1f} tok/s  "
        f"VRAM {yours.vram_used_bytes / GIB:.2f} GiB  (rank {est.rank} of {est.of})",
        f"COPE's best:   {best.candidate.id}: {best.candidate.describe()}",
        f"               {best.tpot_s * 1e3:8.2f} ms/token  {best.tokens_per_s:7.1f} tok/s  "
        f"VRAM {best.vram_used_bytes / GIB:.2f} GiB  ({est.speedup:.2f}x yours)",
    ]
    if est.runs is not None:
        lines.append(f"Runs on llama.cpp: {est.runs.candidate.id}: {est.runs.tpot_s * 1e3:.2f} ms/token  "
                     f"{est.runs.tokens_per_s:.1f} tok/s  ({yours.tpot_s / est.runs.tpot_s:.2f}x yours)")
    lines += ["", "Command for COPE's best:", *("  " + line for line in render_export(est.export).splitlines())]
    if est.command.unknown:
        lines += ["", "Flags not modelled (listed, not used): " + "  ".join(est.command.unknown)]
    notes = est.notes + est.ranking_notes
    if notes:
        lines += ["", "Notes:", *[f"  - {n}" for n in notes]]
    return "\n".join(lines) + "\n"
