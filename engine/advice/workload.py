"""Rank candidates by the whole request: time to first token + N x time per output token.

A workload is P prompt tokens and N output tokens. Each candidate of a Recommendation is
priced for prefill (engine/cost/prefill_cost.py) at the -ub its leftover VRAM allows (the budget
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

The request must fit the context: a workload sizes the KV cache for P + N tokens (the
default context when it holds them, else P + N rounded up to a multiple of 1024), and its
decode steps attend to P + N/2 tokens on average (they run at depths P..P+N), where a
decode-only plan assumes half the context (`request_context`). A --context smaller than
P + N is refused: llama-server would not take the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine.advice.advise import Recommendation
from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.cost_models import analytic_model
from engine.cost.estimate import Estimate
from engine.cost.prefill_cost import DOUBLE_BUFFERED, LLAMA_CPP, PrefillCost, PrefillModel, request_time_s
from engine.llamacpp.command_line import spell
from engine.llamacpp.llama_placement import LlamaPlacement
from engine.replays.policy import Kind
from engine.runtimes.export import Export


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    name: str = ""  # a preset's name ("" : given as numbers)

    def describe(self) -> str:
        named = f"{self.name}: " if self.name else ""
        return f"{named}{self.prompt_tokens} prompt tokens, {self.output_tokens} output tokens"

    @property
    def tokens(self) -> int:
        """What the context must hold: the prompt and every output token."""
        return self.prompt_tokens + self.output_tokens

    @property
    def decode_depth_tokens(self) -> int:
        """What a decode step attends to on average: output token i sees P + i tokens."""
        return self.prompt_tokens + self.output_tokens // 2


# A context sized for a request is rounded up to this: room for the chat template's own
# tokens, and a multiple of the 256 tokens llama.cpp pads its KV cache to.
CONTEXT_STEP_TOKENS = 1024


@dataclass(frozen=True)
class RequestContext:
    context_tokens: int  # the KV cache reserved (the exported -c)
    attention_tokens: int  # what a decode step attends to on average
    sized: bool  # True: grown past the default to hold the request


def request_context(workload: Workload, given: int | None, default: int) -> RequestContext:
    """The context a workload is planned at: `given` (--context) when it holds the request
    (else refused), the default when it does, else the request rounded up."""
    need = workload.tokens
    if given is not None:
        if given < need:
            raise CopeInputError(
                f"--context {given} is smaller than the request's {workload.prompt_tokens} prompt + "
                f"{workload.output_tokens} output = {need} tokens: give --context {need} or more, or leave "
                "--context out to size it for the request")
        return RequestContext(given, workload.decode_depth_tokens, False)
    if need <= default:
        return RequestContext(default, workload.decode_depth_tokens, False)
    rounded = -(-need // CONTEXT_STEP_TOKENS) * CONTEXT_STEP_TOKENS
    return RequestContext(rounded, workload.decode_depth_tokens, True)


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
        # by hand: a row of the request's ranking, figures taken from its decode and prefill estimates
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
    context_tokens: int = 0  # the KV cache the ranking was planned with (the exported -c)
    attention_tokens: int = 0  # what its decode steps attend to on average

    @property
    def best(self) -> WorkloadEstimate:
        return self.estimates[0]

    def of(self, candidate_id: str) -> WorkloadEstimate | None:
        return next((w for w in self.estimates if w.candidate_id == candidate_id), None)

    def to_dict(self) -> dict:
        # by hand: the workload's own figures and how it was ranked, then its rows
        return {"prompt_tokens": self.workload.prompt_tokens, "output_tokens": self.workload.output_tokens,
                "name": self.workload.name, "ranked_by": "request_s = ttft_s + output_tokens x tpot_s",
                "context_tokens": self.context_tokens, "decode_attention_tokens": self.attention_tokens,
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
    """Every candidate of `rec` priced for the whole request and ranked by it (fastest
    first; the one order every pick made for a workload follows, engine/advice/run_advice.py).
    `rec` must be planned at a context that holds the request (`request_context`)."""
    req = rec.request
    if req.context_tokens < workload.tokens:
        raise ValueError(f"planned at context {req.context_tokens}, which cannot hold the request's "
                         f"{workload.tokens} tokens: plan with the workload (request_context)")
    analytic = analytic_model(req)
    model = prefill_model(rec, analytic)
    out = []
    for e in rec.estimates:
        placement = prefill_placement(e, req.model.n_blocks)
        # What the plan leaves, less its safety margin (headroom a plan keeps, not VRAM it uses)
        headroom = max(rec.memory.vram_budget_bytes - rec.memory.safety_margin_bytes - e.vram_used_bytes, 0)
        prefill = model.choose_ubatch(placement, workload.prompt_tokens, headroom)
        overlapped = model.prompt(placement, workload.prompt_tokens, ubatch=prefill.ubatch, batch=prefill.batch,
                                  runtime=DOUBLE_BUFFERED)
        out.append(WorkloadEstimate(e, prefill, overlapped,
                                    request_time_s(prefill.ttft_s, e.tpot_s, workload.output_tokens)))
    out.sort(key=lambda w: (w.request_s, w.candidate_id))
    return WorkloadRanking(workload, tuple(out), model.gpu_flops_source, model.cpu_compute_source,
                           req.context_tokens, analytic.attention_tokens)


def export_with_batch(export: Export, ranking: WorkloadRanking) -> Export:
    """`export` with the -b/-ub chosen for the candidate it runs (llama.cpp binaries only:
    -b/-ub are common/arg.cpp's --batch-size/--ubatch-size and llama-bench's -b/-ub)."""
    chosen = ranking.of(export.exported_id)
    if chosen is None or not export.binary.startswith("llama-"):
        return export
    command = export.command.plus(*spell(export.binary, [("batch", chosen.prefill.batch),
                                                         ("ubatch", chosen.prefill.ubatch)]))
    note = (f"-b {chosen.prefill.batch} -ub {chosen.prefill.ubatch}: the micro-batch whose compute buffer fits the "
            f"VRAM this placement leaves, for {ranking.workload.describe()} "
            f"(TTFT {chosen.prefill.ttft_s:.1f} s, {chosen.prefill.tokens_per_s:.0f} prompt tok/s)")
    return replace(export, command=command, notes=tuple(export.notes) + (note,))
