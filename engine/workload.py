"""Rank candidates by the whole request: time to first token + N x time per output token.

A workload is P prompt tokens and N output tokens. Each candidate of a Recommendation is
priced for prefill (engine/prefill_cost.py) at the -ub its leftover VRAM allows (the budget
less what the candidate uses), by stock llama.cpp's rules (copy only the routed experts of
the CPU-resident layers); the request time is TTFT + N x TPOT, and the candidates are
ranked by it. Which experts a candidate keeps in host memory at prefill:

- layer sets (partitions, all on the GPU or the CPU): the CPU layers' experts;
- per-expert residencies (fixed, caches: the MoE-cache fork runs them): every layer's
  experts stay in host memory and the VRAM cache serves decode's CPU path only (the fork's
  own runs: decode 42 -> 51 tok/s with its cache, prompt 431 -> 492), so prefill copies
  them as with all experts on the CPU.

Double-buffered copies (MoE-CORE's alternating buffers) are priced beside as a what-if no
runtime runs, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.advise import Recommendation
from engine.analytic_cost import AnalyticCostModel
from engine.estimate import Estimate
from engine.llama_placement import LlamaPlacement
from engine.policy import Kind
from engine.prefill_cost import DOUBLE_BUFFERED, LLAMA_CPP, PrefillCost, PrefillModel, request_time_s


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    name: str = ""  # a preset's name ("" : given as numbers)

    def describe(self) -> str:
        named = f"{self.name}: " if self.name else ""
        return f"{named}{self.prompt_tokens} prompt tokens, {self.output_tokens} output tokens"


@dataclass(frozen=True)
class WorkloadEstimate:
    estimate: Estimate  # the decode estimate of the candidate
    prefill: PrefillCost  # at the -ub chosen for it
    double_buffered: PrefillCost  # the same with overlapped copies (no runtime runs it)
    request_s: float

    @property
    def candidate_id(self) -> str:
        return self.estimate.candidate.id

    def to_dict(self) -> dict:
        return {"candidate": self.candidate_id, "request_s": self.request_s, "ttft_s": self.prefill.ttft_s,
                "prompt_tokens_per_s": self.prefill.tokens_per_s, "decode_tokens_per_s": self.estimate.tokens_per_s,
                "tpot_s": self.estimate.tpot_s, "ubatch": self.prefill.ubatch, "batch": self.prefill.batch,
                "prefill": self.prefill.to_dict(),
                "double_buffered_what_if": {**self.double_buffered.to_dict(), "runs_on": "no runtime (MoE-CORE's "
                                            "alternating prefill buffers)"}}


@dataclass(frozen=True)
class WorkloadRanking:
    workload: Workload
    estimates: tuple[WorkloadEstimate, ...]  # fastest request first
    gpu_flops_source: str
    cpu_compute_source: str = ""

    @property
    def best(self) -> WorkloadEstimate:
        return self.estimates[0]

    def of(self, candidate_id: str) -> WorkloadEstimate | None:
        return next((w for w in self.estimates if w.candidate_id == candidate_id), None)

    def to_dict(self) -> dict:
        return {"prompt_tokens": self.workload.prompt_tokens, "output_tokens": self.workload.output_tokens,
                "name": self.workload.name, "ranked_by": "request_s = ttft_s + output_tokens x tpot_s",
                "prefill_runtime": LLAMA_CPP.name, "gpu_flops_source": self.gpu_flops_source,
                "cpu_compute_source": self.cpu_compute_source,
                "best": self.best.candidate_id, "candidates": [w.to_dict() for w in self.estimates]}


def prefill_placement(estimate: Estimate, n_blocks: int) -> LlamaPlacement:
    """Where a candidate's experts are at prefill (see the module's note)."""
    cpu_layers = estimate.cpu_layers
    kind = estimate.candidate.kind
    if kind is Kind.MATRIX or cpu_layers is None:
        share = np.ones(estimate.stats.counts.shape[0])
    else:
        share = np.asarray(cpu_layers, dtype=np.float64)
    return LlamaPlacement(np.ones(n_blocks, dtype=bool), share, True)


def prefill_model(rec: Recommendation, analytic: AnalyticCostModel) -> PrefillModel:
    req = rec.request
    return PrefillModel(req.model, req.quant, req.platform, popularity=req.profile.popularity(), threads=req.threads,
                        gpu_bytes_per_s=analytic.gpu_stream_bytes_per_s, h2d_bytes_per_s=analytic.h2d_bytes_per_s,
                        cpu_bytes_per_s=analytic.cpu_stream_bytes_per_s(req.threads))


def rank_workload(rec: Recommendation, workload: Workload) -> WorkloadRanking:
    """Every candidate of `rec` priced for the whole request and ranked by it."""
    req = rec.request
    analytic = AnalyticCostModel(req.model, req.quant, req.platform, context_tokens=req.context_tokens,
                                 attention_tokens=req.attention_tokens, kv_bytes_per_element=req.kv_bytes_per_element)
    model = prefill_model(rec, analytic)
    out = []
    for e in rec.estimates:
        placement = prefill_placement(e, req.model.n_blocks)
        headroom = max(rec.memory.vram_budget_bytes - e.vram_used_bytes, 0)
        prefill = model.choose_ubatch(placement, workload.prompt_tokens, headroom)
        overlapped = model.prompt(placement, workload.prompt_tokens, ubatch=prefill.ubatch, batch=prefill.batch,
                                  runtime=DOUBLE_BUFFERED)
        out.append(WorkloadEstimate(e, prefill, overlapped,
                                    request_time_s(prefill.ttft_s, e.tpot_s, workload.output_tokens)))
    out.sort(key=lambda w: (w.request_s, w.candidate_id))
    return WorkloadRanking(workload, tuple(out), model.gpu_flops_source, model.cpu_compute_source)
