"""The advise pipeline: memory plan, Policy Matrix, replay, price, rank.

Inputs are values (a model, a platform, traces); the command line and the app build
them and render the Recommendation.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Collection, Iterator, Sequence

import numpy as np

from engine.core.errors import BudgetTooSmall, CopeInputError
from engine.core.progress import Progress, with_cancel
from engine.cost.cost_model import CostModel, CostModelDescription, StateCosts
from engine.cost.estimate import Estimate, price
from engine.cost.request import AdviseRequest
from engine.cost.multi_gpu import multi_card_notes, plan_handovers_s
from engine.hardware.memory import GIB, MemoryPlan, plan_memory
from engine.llamacpp.device_split import split_rounding_bytes
from engine.replays.hit_curves import lru_hit_curves
from engine.replays.policy import Candidate, Execution, Kind, parse_candidate_id, policy_matrix, standalone_candidates
from engine.replays.replay import ReplaySetup, ReplayStats, replay, replay_many
from engine.replays.residency import cache_rules, partition_layers
from engine.traces.trace import RoutingTrace
from engine.traces.validate import check_trace_fits_model

BASELINE_ID = Kind.PARTITION_FIRST.value  # llama.cpp's usual --n-cpu-moe setup


@dataclass(frozen=True)
class Recommendation:
    request: AdviseRequest
    memory: MemoryPlan
    estimates: tuple[Estimate, ...]  # fastest first
    cost_model: CostModelDescription
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> Estimate:
        return self.estimates[0]

    def estimate_of(self, candidate_id: str) -> Estimate:
        """The estimate of `candidate_id`; a one-line error for an id that is misspelt or
        not among this configuration's candidates."""
        parse_candidate_id(candidate_id)
        for e in self.estimates:
            if e.candidate.id == candidate_id:
                return e
        known = ", ".join(e.candidate.id for e in self.estimates[:8])
        raise CopeInputError(f"--candidate {candidate_id}: not among this configuration's candidates ({known}, ...)")

    def baseline(self) -> Estimate:
        """llama.cpp's default layer partition, or all-on-GPU when everything fits."""
        by_id = {e.candidate.id: e for e in self.estimates}
        return by_id.get(BASELINE_ID) or by_id.get(Kind.ALL_GPU.value) or by_id[Kind.ALL_CPU.value]


def advise(
    request: AdviseRequest,
    cost_model: CostModel,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Recommendation:
    """Every candidate of `request` replayed, priced and ranked; `cancel` is checked
    every few replayed tokens and between candidates (raises engine.core.progress.Cancelled)."""
    return _advise_at(request, cost_model, [request.vram_budget_bytes], with_cancel(progress, cancel))[0]


def sweep_budgets(
    request: AdviseRequest,
    cost_model: CostModel,
    budgets_bytes: Sequence[int],
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> list[Recommendation]:
    """`advise` at each VRAM budget (the request's own is ignored), in the given order.

    What does not depend on the budget is done once: popularity, state costs, and
    every replay whose cache comes out the same at several budgets (fixed and
    all-on-GPU residencies past the point where everything fits, uniform slots that
    round alike). A budget too small to hold the non-expert weights raises, as in
    `advise`.
    """
    return _advise_at(request, cost_model, budgets_bytes, with_cancel(progress, cancel))


def sweep_in_stages(
    request: AdviseRequest,
    cost_model: CostModel,
    budgets_bytes: Sequence[int],
    *,
    only: Collection[str] | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[list[Recommendation]]:
    """`sweep_budgets` a stage at a time, for a chart that should not wait: each stage
    yields every budget's Recommendation with the candidates priced so far (fastest first).

    The first stage holds what needs no step-wise replay (the partitions, and the caches a
    one-pass hit curve counts: fixed residencies, caches nothing changes), so it comes at
    once; then the caches replayed step by step, one stage per admission rule and
    prediction width (the replays that can share work share a stage: sequential and
    parallel caches that prefetch admit nothing and run alike). `only`: the candidate ids wanted (None: all). The last stage's estimates are
    those of `sweep_budgets`. `progress(done, total, label)` counts (budget, candidate)
    pairs priced and is called every few replayed tokens too; `cancel` is checked there."""
    progress = with_cancel(progress, cancel)
    trace, shared, requests, plans = _setup(request, cost_model, budgets_bytes)
    stages = _stages(plans, shared, trace, only)
    total, done = sum(len(stage) for stage in stages), 0
    estimates: list[list[Estimate]] = [[] for _ in plans]
    for n, stage in enumerate(stages):
        label = _stage_label(n, stage)

        def replaying(_done: int, _total: int, _label: str, done: int = done, label: str = label) -> None:
            progress(done, total, label)  # type: ignore[misc]

        jobs = [(candidate, setup) for _, candidate, setup in stage if setup is not None]
        stats = iter(replay_many(trace.expert_ids, trace.predicted_ids, jobs,
                                 progress=replaying if progress is not None else None) if jobs else [])
        for i, candidate, setup in stage:
            estimates[i].append(_estimate(requests[i], candidate, next(stats) if setup is not None else None,
                                          plans[i], shared, cost_model))
        done += len(stage)
        if progress is not None:
            progress(done, total, label)
        yield [Recommendation(r, plan.memory, tuple(sorted(es, key=lambda e: (e.tpot_s, e.candidate.id))),
                              cost_model.describe(), plan.notes)
               for r, plan, es in zip(requests, plans, estimates)]


def _stages(plans, shared, trace, only) -> list[list[tuple[int, Candidate, ReplaySetup | None]]]:  # type: ignore[no-untyped-def]
    """(budget index, candidate, replay setup or None for a partition) by stage: the
    one-pass ones first (always a stage, so the chart has its frame), then the step-wise
    ones by admission rule and prediction width."""
    first: list = []
    stepwise: dict[tuple, list] = {}
    k = trace.top_k
    for i, plan in enumerate(plans):
        setups = dict(plan.matrix)
        for candidate in plan.candidates:
            if only is not None and candidate.id not in only:
                continue
            setup = setups.get(candidate)
            rules = cache_rules(candidate, setup, k, trace.predicted_ids) if setup is not None else None
            if rules is None or rules.static:
                first.append((i, candidate, setup))
            else:  # caches of the same admissions and prediction width share their replays: one stage
                key = (tuple(rules.admit.tolist()), rules.width)
                stepwise.setdefault(key, []).append((i, candidate, setup))
    return [first, *stepwise.values()]


def _stage_label(n: int, stage) -> str:  # type: ignore[no-untyped-def]
    if n == 0:
        return "one-pass curves"
    executions = sorted({candidate.execution.value for _, candidate, _ in stage})
    prefetch = " with prefetch" if any(candidate.prefetch for _, candidate, _ in stage) else ""
    return f"{', '.join(executions)} caches{prefetch}"


def _estimate(request: AdviseRequest, candidate: Candidate, stats: ReplayStats | None, plan: _BudgetPlan,
              shared: _Shared, cost_model: CostModel) -> Estimate:
    """One candidate priced: a matrix one from its replay, a partition replayed here."""
    if stats is not None:
        slots_used = int(stats.slots_per_layer.sum())
        vram = plan.memory.vram_used_bytes(slots_used, staging=candidate.copies_misses)
        detail = f"{slots_used} expert slots"
    else:
        stats, vram, detail = _replay_partition_candidate(candidate, request.trace, plan.memory, shared)
    tpot, breakdown = price(
        stats, shared.costs[candidate.execution], shared_per_token_s=shared.shared_s,
        token_overhead_s=shared.overhead_s, prefetch_mode=request.prefetch_mode,
    )
    return Estimate(candidate, tpot, breakdown, stats, vram, cost_model.fidelity, detail)


@dataclass(frozen=True)
class _Shared:
    """What every budget of one request shares."""

    popularity: np.ndarray
    hit_curves: np.ndarray | None  # [L, E+1] per-layer LRU hits on the profile: mutable allocations
    prefetch_budget: int
    costs: dict[Execution, StateCosts]
    shared_s: float
    overhead_s: float
    notes: tuple[str, ...]
    moe_blocks: tuple[int, ...]  # the model's: what llama.cpp's flags count


def _setup(request, cost_model, budgets_bytes):  # type: ignore[no-untyped-def]
    """(trace, what every budget shares, each budget's request, each budget's plan)."""
    model, trace = request.model, request.trace
    check_trace_fits_model(trace, model)
    check_trace_fits_model(request.profile, model, what="profile trace")
    k = model.top_k
    prefetch_budget = k if request.prefetch_budget is None else request.prefetch_budget
    notes = list(request.notes)
    if trace.predicted_ids is None:
        notes.append("the trace has no next-layer predictions: mutable caches run without prefetch")
    notes += multi_card_notes(request)
    popularity = request.profile.popularity()
    ordered = request.profile.expert_ids is not None
    if not ordered:
        notes.append("the profile has counts but no routing order (an imatrix): mutable caches allocate slots "
                     "by its popularity, as fixed residency does")
    shared = _Shared(
        popularity=popularity,
        # an imatrix has no order to replay: None allocates by the popularity curve
        hit_curves=lru_hit_curves(request.profile.expert_ids, popularity) if ordered else None,
        prefetch_budget=prefetch_budget,
        costs={ex: cost_model.state_costs(ex, request.threads, k, prefetch_budget) for ex in Execution},
        shared_s=cost_model.shared_per_token_s(),
        # two or more cards: a hand-over at each boundary between them (engine/cost/multi_gpu.py)
        overhead_s=cost_model.token_overhead_s() + plan_handovers_s(request),
        notes=tuple(notes),
        moe_blocks=tuple(model.moe_blocks),
    )
    requests = [
        request if int(b) == request.vram_budget_bytes else replace(request, vram_budget_bytes=int(b))
        for b in budgets_bytes
    ]
    return trace, shared, requests, [_plan_budget(r, shared) for r in requests]


def _advise_at(request, cost_model, budgets_bytes, progress) -> list[Recommendation]:
    trace, shared, requests, plans = _setup(request, cost_model, budgets_bytes)

    # Progress: the replays (reported every few tokens), then one step a candidate.
    n_candidates = sum(len(plan.candidates) for plan in plans)
    replayed = 0

    def replaying(done: int, total: int, label: str) -> None:
        nonlocal replayed
        replayed = total
        progress(done, total + n_candidates, label)

    # Every matrix candidate of every budget in one call: replays that coincide are
    # made once, and the LRU caches are replayed side by side.
    jobs = [(candidate, setup) for plan in plans for candidate, setup in plan.matrix]
    matrix_stats = iter(replay_many(
        trace.expert_ids, trace.predicted_ids, jobs, progress=replaying if progress is not None else None
    ))

    done = replayed
    recommendations = []
    for r, plan in zip(requests, plans):
        matrix = {candidate for candidate, _ in plan.matrix}
        estimates = []
        for candidate in plan.candidates:
            if progress is not None:
                progress(done, replayed + n_candidates, candidate.id)
            done += 1
            stats = next(matrix_stats) if candidate in matrix else None
            estimates.append(_estimate(r, candidate, stats, plan, shared, cost_model))
        estimates.sort(key=lambda e: (e.tpot_s, e.candidate.id))
        recommendations.append(Recommendation(r, plan.memory, tuple(estimates), cost_model.describe(), plan.notes))
    if progress is not None:
        progress(done, done, "done")
    return recommendations


@dataclass(frozen=True)
class _BudgetPlan:
    memory: MemoryPlan
    candidates: list[Candidate]  # in the order they are reported
    matrix: list[tuple[Candidate, ReplaySetup]]  # the matrix candidates and their replay setups
    notes: tuple[str, ...]


def _plan_budget(request: AdviseRequest, shared: _Shared) -> _BudgetPlan:
    memory = plan_memory(
        request.model, request.quant, vram_budget_bytes=max(request.vram_budget_bytes - split_rounding_bytes(request), 0),
        context_tokens=request.context_tokens, kv_bytes_per_element=request.kv_bytes_per_element,
    )
    if not memory.fits_at_all:
        raise BudgetTooSmall(
            f"a VRAM budget of {memory.vram_budget_bytes / GIB:.1f} GiB cannot hold the non-expert "
            f"weights, KV cache and runtime buffers ({memory.fixed_bytes / GIB:.1f} GiB); "
            "raise --vram-budget or lower --context"
        )
    notes = list(shared.notes)
    has_predictions = request.trace.predicted_ids is not None
    candidates = policy_matrix(prefetch_available=has_predictions, evictions=request.evictions)
    candidates += standalone_candidates(all_gpu_fits=memory.all_gpu_fits)
    if memory.all_gpu_fits:
        candidates = [c for c in candidates if c.kind not in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST)]
        notes.append("every expert fits in the budget: layer partition is all-on-GPU")
    if memory.vram_budget_bytes < memory.fixed_bytes + memory.staging_bytes:
        # Copying strategies need GPU room for one layer's copied misses; without it
        # they would run over the budget.
        candidates = [c for c in candidates if not c.copies_misses]
        notes.append(
            f"no room for the {memory.staging_bytes / 2**20:.0f} MiB staging buffer: stage and "
            "ready-first candidates left out"
        )
    matrix = []
    for candidate in candidates:
        if candidate.kind is Kind.MATRIX:
            # A copying execution keeps room for one layer's copied misses.
            total_slots = memory.slots(staging=candidate.copies_misses)
            split = shared.costs[Execution.READY_FIRST].copied if candidate.execution is Execution.READY_FIRST else None
            matrix.append((candidate, ReplaySetup(shared.popularity, total_slots, shared.prefetch_budget, split,
                                                  shared.hit_curves)))
    return _BudgetPlan(memory, candidates, matrix, tuple(notes))


def _replay_partition_candidate(
    candidate: Candidate, trace: RoutingTrace, memory: MemoryPlan, shared: _Shared
) -> tuple[ReplayStats, int, str]:
    """Layer partition, all-on-GPU or all-on-CPU: whole layers on one side."""
    n_layers = trace.n_layers
    cpu_layers, detail = partition_layers(candidate.kind, n_layers, memory.gpu_layers(), shared.moe_blocks)
    setup = ReplaySetup(shared.popularity, memory.slots(staging=False), 0)
    stats = replay(trace.expert_ids, None, candidate, setup, cpu_layers=cpu_layers)
    gpu_experts = int((~cpu_layers).sum()) * memory.n_routed_experts_per_layer
    return stats, memory.vram_used_bytes(gpu_experts, staging=False), detail
