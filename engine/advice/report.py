"""The JSON document of `cope advise --json` (schema_version 2).

Shape (all times in seconds, sizes in bytes):
{
  "schema_version": 1,
  "inputs": {model, quantization, platform, vram_budget_bytes, context_tokens,
             threads, trace, profile_trace, prefetch_mode},
  "memory": {... the VRAM arithmetic ..., "lines": [...]},
  "cost_model": {"fidelity", "basis", ...},
  "notes": [...],                      # every assumption and caveat
  "baseline": "<candidate id>",        # what speedups are measured against
  "recommendation": {                 # what to run first, then the paper optimum
    "run_now": {candidate, runtime, installed, tpot_s, tokens_per_s, vram_used_bytes,
                ram_used_bytes, mmap, argv, env, command, artefacts, placeholders, notes} | null,
                # with a workload also request_s, ttft_s, prompt_tokens_per_s, ubatch, batch
                # (argv carries -b/-ub)
    "best_overall": {... the same ...} | null,   # any runtime, installed or not
    "ranked_by": "tpot_s" | "request_s",  # what run_now and best_overall are the fastest by
    "installed_runtimes": [...],
    "fastest_estimate": "<candidate id>", # rank 1, whether or not a runtime runs it
    "fastest_on_paper": {candidate, tpot_s, tokens_per_s, runtimes, runs_on},
        # rank 1 and what runs it: runtimes that run it exactly (may be []); runs_on in
        # words ("runs on stock llama.cpp", "no runtime runs it yet", ...)
  },
  "candidates": [{rank, id, kind, residency, execution, allocation, eviction,
                  prefetch, description, detail, tpot_s, tokens_per_s,
                  speedup_vs_baseline, vram_used_bytes, hit_rate, breakdown_s,
                  states, error_band, llama_cpp, runtimes, identical_to, ram_refused}, ...]
      # error_band: the regime's cross-validated error around tokens_per_s
      #   (engine/advice/error_band.py), or {regime: null, why_none}
      # fastest first; llama_cpp: runs-on-stock | needs-fork | not-expressible;
      # runtimes: [{name, exact, note, fits_ram, mmap}] of the runtimes that run it;
      # identical_to: the candidate id standing for the same placement, or null;
      # ram_refused: why it is never recommended for lack of RAM, or null
}
`cope advise` adds "runtimes": {"found": [...], "notes": [...]}, what it looked for
(probes/runtimes.py). Version 2 replaced the string "recommendation" (the fastest
estimate's id) by the object.
"""

from __future__ import annotations

from typing import Any

from engine.advice.advise import Recommendation
from engine.advice.error_band import estimate_band
from engine.advice.run_advice import CandidateRuns, RunAdvice, RunPick, pick_to_dict, plan_runs
from engine.cost.estimate import Estimate

SCHEMA_VERSION = 2


def recommendation_to_dict(rec: Recommendation, runs: RunAdvice | None = None) -> dict[str, Any]:
    """`runs`: what to run (engine/advice/run_advice.py); None: planned with no runtime installed."""
    runs = runs if runs is not None else plan_runs(rec)
    req = rec.request
    baseline = rec.baseline()
    model = req.model
    return {
        "schema_version": SCHEMA_VERSION,
        "inputs": {
            "model": {
                "id": model.id,
                "name": model.name,
                "arch": model.arch,
                "blocks": model.n_blocks,
                "moe_blocks": list(model.moe_blocks),
                "routed_experts": model.n_routed_experts,
                "top_k": model.top_k,
                "shared_experts": model.n_shared_experts,
                "expert_bytes": model.expert_bytes(req.quant),
                "non_expert_bytes": model.non_expert_bytes(req.quant),
                "provenance": model.source,
            },
            "quantization": {
                "name": req.quant.name,
                "expert_bits_per_weight": req.quant.expert_bits_per_weight,
                "non_expert_bits_per_weight": req.quant.non_expert_bits_per_weight,
                "provenance": req.quant.source,
            },
            "platform": req.platform.to_dict(),
            "vram_budget_bytes": req.vram_budget_bytes,
            "context_tokens": req.context_tokens,
            "threads": req.threads,
            "prefetch_mode": req.prefetch_mode,
            "trace": req.trace.describe(),
            "profile_trace": req.profile.describe(),
        },
        "memory": {**rec.memory.to_dict(), "lines": rec.memory.lines()},
        "cost_model": rec.cost_model.to_dict(),
        "notes": list(rec.notes),
        "baseline": baseline.candidate.id,
        "recommendation": {
            "run_now": _pick(rec, runs, runs.run_now),
            "best_overall": _pick(rec, runs, runs.best_overall),
            "ranked_by": "tpot_s" if runs.ranking is None else "request_s",
            "installed_runtimes": list(runs.installed),
            "fastest_estimate": rec.best.candidate.id,
            "fastest_on_paper": _on_paper(runs.row(rec.best.candidate.id)),
        },
        "candidates": [
            {
                **estimate_to_dict(row.estimate, rank, baseline.tpot_s),
                "llama_cpp": row.label,
                "runtimes": [r.to_dict() for r in row.runs],
                "identical_to": row.same_as,
                "ram_refused": row.ram_refused,
            }
            for rank, row in enumerate(runs.rows, start=1)
        ],
    }


def _on_paper(row: CandidateRuns) -> dict:
    """Rank 1 by estimate, and the runtime it would need (often none: the ranking covers
    policies no runtime runs yet)."""
    return {"candidate": row.id, "tpot_s": row.estimate.tpot_s, "tokens_per_s": row.estimate.tokens_per_s,
            "runtimes": row.exact_runtimes(), "runs_on": row.who_runs_it}


def _pick(rec: Recommendation, runs: RunAdvice, pick: RunPick | None) -> dict | None:
    return None if pick is None else pick_to_dict(pick, runs.export(rec, pick), runs.ranking)


def estimate_to_dict(e: Estimate, rank: int, baseline_tpot_s: float) -> dict[str, Any]:
    c = e.candidate
    return {
        "rank": rank,
        "id": c.id,
        "kind": c.kind.value,
        "residency": c.residency.value if c.residency else None,
        "execution": c.execution.value if c.residency else None,
        "allocation": c.allocation.value if c.residency else None,
        "eviction": c.eviction.value if c.eviction else None,
        "prefetch": c.prefetch,
        "description": c.describe(),
        "detail": e.detail,
        "fidelity": e.fidelity,
        "tpot_s": e.tpot_s,
        "tokens_per_s": e.tokens_per_s,
        "speedup_vs_baseline": baseline_tpot_s / e.tpot_s,
        "vram_used_bytes": e.vram_used_bytes,
        "hit_rate": e.stats.hit_rate,
        "breakdown_s": e.breakdown.to_dict(),
        "states": e.stats.summary(),
        "error_band": estimate_band(e).to_dict(e.tokens_per_s),
    }
