"""The human-readable workload ranking (`cope advise --prompt-tokens P --output-tokens N`)."""

from __future__ import annotations

from engine.advice.advise import Recommendation
from engine.advice.workload import WorkloadRanking
from engine.cost.prefill_cost import DOUBLE_BUFFERED


def render_workload(ranking: WorkloadRanking, rec: Recommendation, *, limit: int | None = 10) -> str:
    """The candidates by request time, TTFT, prompt and decode speeds side by side."""
    w = ranking.workload
    decode_rank = {e.candidate.id: i for i, e in enumerate(rec.estimates, start=1)}
    lines = [
        f"Workload: {w.describe()}; ranked by request time = TTFT + {w.output_tokens} x TPOT "
        f"(prefill by stock llama.cpp's rules: CPU experts copied to the GPU per micro-batch)",
        f"Context: {ranking.context_tokens} tokens (-c), holding the request's {w.tokens}; decode attends to "
        f"{ranking.attention_tokens} tokens on average (the prompt and half the output)",
        f"{'rank':>4}  {'candidate':<44} {'request s':>9} {'TTFT s':>8} {'prompt t/s':>10} {'decode t/s':>10} "
        f"{'-ub':>5} {'decode rank':>11}",
    ]
    shown = ranking.estimates if limit is None else ranking.estimates[:limit]
    for rank, x in enumerate(shown, start=1):
        lines.append(
            f"{rank:>4}  {x.candidate_id:<44} {x.request_s:>9.2f} {x.prefill.ttft_s:>8.2f} "
            f"{x.prefill.tokens_per_s:>10.0f} {x.estimate.tokens_per_s:>10.1f} {x.prefill.ubatch:>5} "
            f"{decode_rank[x.candidate_id]:>11}")
    if len(shown) < len(ranking.estimates):
        lines.append(f"      ... {len(ranking.estimates) - len(shown)} more (--all to list every candidate)")
    best, decode_best = ranking.best, rec.best
    if best.candidate_id != decode_best.candidate.id:
        by_decode = ranking.of(decode_best.candidate.id)
        lines.append(
            f"Fastest request: {best.candidate_id} ({best.request_s:.1f} s: TTFT {best.prefill.ttft_s:.1f} s at "
            f"-ub {best.prefill.ubatch}, {best.estimate.tokens_per_s:.1f} tok/s after), not the decode-only pick "
            f"{decode_best.candidate.id} ({by_decode.request_s:.1f} s: TTFT {by_decode.prefill.ttft_s:.1f} s, "
            f"{decode_best.tokens_per_s:.1f} tok/s)")
    else:
        lines.append(f"Fastest request: {best.candidate_id}, the decode-only pick too ({best.request_s:.1f} s)")
    lines.append(
        f"What-if, no runtime runs it: {DOUBLE_BUFFERED.name}: {best.candidate_id} would prefill at "
        f"{best.double_buffered.tokens_per_s:.0f} tok/s (TTFT {best.double_buffered.ttft_s:.1f} s)")
    lines.append(f"GPU compute: {ranking.gpu_flops_source}")
    if ranking.cpu_compute_source:
        lines.append(f"CPU compute: {ranking.cpu_compute_source}")
    return "\n".join(lines) + "\n"
