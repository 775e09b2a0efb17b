"""The advise pipeline: memory plan, Policy Matrix, replay, price, rank.

Inputs are values (a model, a platform, traces); the command line and the app build
them and render the Recommendation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from engine.cost_model import CostModel, StateCosts
from engine.errors import CopeInputError
from engine.estimate import Estimate, price
from engine.memory import GIB, MemoryPlan, plan_memory
from engine.model import ModelSpec
from engine.platform import Platform
from engine.policy import (
    Candidate,
    Execution,
    Eviction,
    Kind,
    policy_matrix,
    standalone_candidates,
)
from engine.quant import Quantization
from engine.replay import ReplaySetup, ReplayStats, allocate_slots, replay
from engine.trace import RoutingTrace

BASELINE_ID = Kind.PARTITION_FIRST.value  # llama.cpp's usual --n-cpu-moe setup


@dataclass(frozen=True)
class AdviseRequest:
    model: ModelSpec
    quant: Quantization
    platform: Platform
    vram_budget_bytes: int
    context_tokens: int
    threads: int
    trace: RoutingTrace  # replayed
    profile: RoutingTrace  # popularity for fixed and initial residency
    evictions: tuple[Eviction, ...] = (Eviction.LRU,)
    prefetch_mode: str = "timed"
    prefetch_budget: int | None = None  # copies per layer; None: top_k
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recommendation:
    request: AdviseRequest
    memory: MemoryPlan
    estimates: tuple[Estimate, ...]  # fastest first
    cost_model: dict
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> Estimate:
        return self.estimates[0]

    def baseline(self) -> Estimate:
        """llama.cpp's default layer partition, or all-on-GPU when everything fits."""
        by_id = {e.candidate.id: e for e in self.estimates}
        return by_id.get(BASELINE_ID) or by_id.get(Kind.ALL_GPU.value) or by_id[Kind.ALL_CPU.value]


def check_compatible(model: ModelSpec, trace: RoutingTrace, what: str) -> None:
    if trace.meta.n_experts != model.n_routed_experts or trace.top_k != model.top_k:
        raise CopeInputError(
            f"{what} has {trace.meta.n_experts} experts top-{trace.top_k}, "
            f"but {model.name} has {model.n_routed_experts} top-{model.top_k}",
            path=trace.meta.source,
        )
    if trace.n_layers != model.n_moe_layers:
        raise CopeInputError(
            f"{what} has {trace.n_layers} MoE layers, {model.name} has {model.n_moe_layers}",
            path=trace.meta.source,
        )


def advise(
    request: AdviseRequest,
    cost_model: CostModel,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> Recommendation:
    model, trace = request.model, request.trace
    check_compatible(model, trace, "the trace")
    check_compatible(model, request.profile, "the profile trace")
    memory = plan_memory(
        model, request.quant, vram_budget_bytes=request.vram_budget_bytes, context_tokens=request.context_tokens
    )
    if not memory.fits_at_all:
        raise CopeInputError(
            f"a VRAM budget of {memory.vram_budget_bytes / GIB:.1f} GiB cannot hold the non-expert "
            f"weights, KV cache and runtime buffers ({memory.fixed_bytes / GIB:.1f} GiB); "
            "raise --vram-budget or lower --context"
        )
    k = model.top_k
    budget = k if request.prefetch_budget is None else request.prefetch_budget
    has_predictions = trace.predicted_ids is not None
    notes = list(request.notes)
    if not has_predictions:
        notes.append("the trace has no next-layer predictions: mutable caches run without prefetch")

    candidates = policy_matrix(prefetch_available=has_predictions, evictions=request.evictions)
    candidates += standalone_candidates(all_gpu_fits=memory.all_gpu_fits)
    if memory.all_gpu_fits:
        candidates = [c for c in candidates if c.kind not in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST)]
        notes.append("every expert fits in the budget: layer partition is all-on-GPU")

    costs = {ex: cost_model.state_costs(ex, request.threads, k, budget) for ex in Execution}
    shared_s = cost_model.shared_per_token_s()
    overhead_s = cost_model.token_overhead_s()
    popularity = request.profile.popularity()
    replays: dict[tuple, ReplayStats] = {}

    estimates = []
    for i, candidate in enumerate(candidates):
        if progress is not None:
            progress(i, len(candidates), candidate.id)
        stats, vram, detail = _replay_candidate(
            candidate, trace, memory, popularity, budget, costs, replays
        )
        exec_costs = costs[candidate.execution]
        tpot, breakdown = price(
            stats, exec_costs, shared_per_token_s=shared_s, token_overhead_s=overhead_s,
            prefetch_mode=request.prefetch_mode,
        )
        estimates.append(Estimate(candidate, tpot, breakdown, stats, vram, cost_model.fidelity, detail))
    if progress is not None:
        progress(len(candidates), len(candidates), "done")
    estimates.sort(key=lambda e: (e.tpot_s, e.candidate.id))
    return Recommendation(request, memory, tuple(estimates), cost_model.describe(), tuple(notes))


def _replay_candidate(
    candidate: Candidate,
    trace: RoutingTrace,
    memory: MemoryPlan,
    popularity: np.ndarray,
    prefetch_budget: int,
    costs: dict[Execution, StateCosts],
    replays: dict[tuple, ReplayStats],
) -> tuple[ReplayStats, int, str]:
    """Replay one candidate, reusing an earlier replay with the same cache dynamics."""
    n_layers = trace.n_layers
    if candidate.kind is not Kind.MATRIX:
        cpu_layers, detail = partition_layers(candidate.kind, n_layers, memory.gpu_layers(), trace.meta.moe_blocks)
        stats = replay(trace.expert_ids, None, candidate, _setup(popularity, 0, 0), cpu_layers=cpu_layers)
        gpu_experts = int((~cpu_layers).sum()) * memory.n_routed_experts_per_layer
        return stats, memory.vram_used_bytes(gpu_experts, staging=False), detail

    staging = candidate.copies_misses
    total_slots = memory.slots(staging=staging)
    admit = costs[Execution.READY_FIRST].copied if candidate.execution is Execution.READY_FIRST else None
    setup = _setup(popularity, total_slots, prefetch_budget, admit)
    # Sequential and parallel caches change the same way (prefetch only), and a
    # ready-first split that copies every miss behaves like stage: replay each
    # distinct dynamic once.
    admits = "none"
    if candidate.is_mutable and candidate.copies_misses:
        k = trace.top_k
        table = (k - np.arange(k + 1)) if candidate.execution is Execution.STAGE else np.minimum(admit, k - np.arange(k + 1))
        admits = tuple(int(a) for a in table)
    key = (
        candidate.residency, candidate.allocation, candidate.eviction, candidate.prefetch,
        admits if candidate.is_mutable else None, total_slots,
    )
    if key not in replays:
        predicted = trace.predicted_ids if candidate.prefetch else None
        replays[key] = replay(trace.expert_ids, predicted, candidate, setup)
    stats = replace(replays[key], candidate_id=candidate.id)
    slots_used = int(allocate_slots(popularity, total_slots, candidate.allocation).sum())
    detail = f"{slots_used} expert slots"
    return stats, memory.vram_used_bytes(slots_used, staging=staging), detail


def _setup(popularity, total_slots, prefetch_budget, admit=None) -> ReplaySetup:
    return ReplaySetup(popularity, total_slots, prefetch_budget, admit)


def partition_layers(
    kind: Kind, n_layers: int, gpu_layers: int, moe_blocks: tuple[int, ...]
) -> tuple[np.ndarray, str]:
    """CPU-resident MoE layers of a layer-partition candidate, and how llama.cpp says it."""
    cpu = np.zeros(n_layers, dtype=bool)
    n_cpu = max(n_layers - gpu_layers, 0)
    if kind is Kind.ALL_CPU:
        cpu[:] = True
        return cpu, "--cpu-moe"
    if kind is Kind.ALL_GPU:
        return cpu, "all experts on the GPU"
    if kind is Kind.PARTITION_FIRST:
        cpu[:n_cpu] = True
        # --n-cpu-moe counts blocks, dense leading blocks included.
        n_blocks = moe_blocks[n_cpu - 1] + 1 if n_cpu else 0
        return cpu, f"--n-cpu-moe {n_blocks} ({n_cpu} of {n_layers} MoE layers on the CPU)"
    cpu[n_layers - n_cpu :] = True
    first = moe_blocks[n_layers - n_cpu] if n_cpu else None
    where = f"blocks {first}..{moe_blocks[-1]}" if n_cpu else "none"
    return cpu, f"last {n_cpu} MoE layers on the CPU ({where})"
