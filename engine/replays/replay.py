"""Token-major replay of a routing trace under a candidate policy.

Replay only counts how often each execution state occurs; it knows nothing of time.
A state is (layer, hits h, prefetch copies p issued during that layer for the next
one); misses are k - h. The histogram is all the cost model needs (DESIGN.md §3).

Rules (DESIGN.md §4): token t runs layers 0..L-1 before token t+1 starts; caches
persist across the sequences of a trace; under copying executions a copied miss is
admitted to a mutable cache, under the others the cache changes only by prefetch;
while layer l runs, the predicted experts of layer l+1 that are not resident are
copied into layer l+1's slots (or the pool), at most `prefetch_budget` of them.

One layer step, exactly (written once, in `engine.replays.residency.StepwiseResidency`;
tests/test_replay_equivalence.py keeps an independent plain loop, and every replay here
must give the same counts):
1. the routed experts that are resident are hits and become most recently used, in
   routing order; a hit on a prefetched expert counts as prefetch used;
2. the first min(admit[h], capacity - h) misses, in routing order, are admitted, each
   evicting one expert; admitted experts are more recent than the hits;
3. the layer's predictions for layer l+1, duplicates dropped: the resident ones are
   kept and become most recent (in prediction order), then the others are copied, in
   order, at most capacity - kept - (the step's hits and admissions, in a pool),
   each evicting one expert.
LRU evicts the least recently used; score eviction the lowest decayed routing score,
ties to the lowest (layer, expert). Initial contents: each layer's most popular
experts, the least popular the least recent (in a pool: least routed of any layer).

How the work is done, fastest first:
- a cache that never changes (fixed residency, or nothing that could change it) and a
  cache holding every expert are lookups, in state counts computed for every capacity
  at once (`engine.replays.hit_curves.static_counts_at`): every budget of a sweep reads them;
- LRU caches, per-layer and pooled, run step by step in compiled loops (numba,
  `engine.replays.replay_kernels`, driven by `engine.replays.replay_compiled`): the step
  rules above, one O(1) linked-list operation per hit, eviction or insertion, on every
  core. A per-layer cache depends only on its layer, capacity, admissions, prediction
  width and first contents (no step touches another layer's cache), so each distinct one
  is replayed once for every candidate and budget that has it; pools under the same
  rules that come to hold the same experts in the same order (a uniform and a
  nonuniform fill of one total, often) are replayed once from then on;
- score eviction runs one step at a time on `engine.replays.residency`'s caches
  (`replay(..., stepwise=True)` forces that for any candidate), and so does everything when bare
  arrays hold ids outside the model's experts (the compiled loops index by them).
Candidates with the same cache dynamics (same slots, admissions, prefetch) share one
replay (`replay_many`).

Where the code lives: this module holds the public API, the planning and dispatch, and
the partition path; the rules and the step-wise caches are `engine.replays.residency`
and `engine.replays.residency_caches`; the compiled loops are
`engine.replays.replay_kernels` (numba, imported only when used: `engine.replays.compiled`)
and `engine.replays.replay_compiled`; what the dispatch and the step-wise replay share is
in `engine.replays.replay_common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from engine.core.input_limits import check_replay_slots
from engine.replays import replay_compiled
from engine.replays.hit_curves import static_counts_at
from engine.replays.policy import Candidate, Eviction, Kind
from engine.replays.replay_common import Histograms, ReplayPlan, Ticks, TraceArrays
from engine.replays.residency import (
    SCORE_DECAY_PER_TOKEN,
    ReplaySetup,
    allocate_slots,
    cache_rules,
    cpu_layers_for,
    popularity_order,
    stepwise_residency,
)
from engine.replays.residency_caches import DecayedScores


@dataclass(frozen=True)
class ReplayStats:
    candidate_id: str
    counts: np.ndarray  # int64 [L, k+1, P+1]: layer, hits, prefetch copies issued
    n_tokens: int
    slots_per_layer: np.ndarray  # int64 [L]: initial slots (pool: initial fill)
    admissions: int  # misses admitted to a mutable cache
    prefetch_used: int  # prefetched experts hit when their layer ran
    # What was replayed, so that whoever executes the candidate need not rebuild it:
    setup: ReplaySetup | None = None
    cpu_layers: np.ndarray | None = None  # [L] bool, a standalone candidate's CPU layers

    @property
    def top_k(self) -> int:
        return self.counts.shape[1] - 1

    def hits_per_layer(self) -> np.ndarray:
        by_hits = self.counts.sum(axis=2)
        return by_hits @ np.arange(self.top_k + 1)

    @property
    def hit_rate(self) -> float:
        return float(self.hits_per_layer().sum() / (self.n_tokens * self.counts.shape[0] * self.top_k))

    @property
    def prefetch_copies(self) -> int:
        return int((self.counts.sum(axis=(0, 1)) * np.arange(self.counts.shape[2])).sum())

    def summary(self) -> dict:
        by_hits = self.counts.sum(axis=(0, 2))
        return {
            "hit_rate": self.hit_rate,
            "steps": int(self.counts.sum()),
            "steps_by_hits": [int(c) for c in by_hits],
            "hit_rate_per_layer": [float(h) / (self.n_tokens * self.top_k) for h in self.hits_per_layer()],
            "admissions": self.admissions,
            "prefetch_copies": self.prefetch_copies,
            "prefetch_used": self.prefetch_used,
        }


def resident_mask(popularity: np.ndarray, slots_per_layer: np.ndarray) -> np.ndarray:
    order = popularity_order(popularity)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(order.shape[1])[None, :].repeat(order.shape[0], 0), axis=1)
    return ranks < slots_per_layer[:, None]


def replay(
    ids: np.ndarray,
    predicted: np.ndarray | None,
    candidate: Candidate,
    setup: ReplaySetup,
    *,
    cpu_layers: np.ndarray | None = None,
    stepwise: bool = False,
) -> ReplayStats:
    """Replay token-major routing `ids` [T, L, k] under `candidate`.

    `cpu_layers` ([L] bool) is the layer set of a partition candidate. `stepwise` replays
    one step at a time with `engine.replays.residency` (no lookups, no compiled loops):
    what every faster path must agree with, for the tests that check they do.
    """
    if stepwise:
        return _replay_stepwise(ids, predicted, candidate, setup, cpu_layers)
    if candidate.kind is not Kind.MATRIX:
        return _replay_partition(ids, candidate, setup, cpu_layers)
    return replay_many(ids, predicted, [(candidate, setup)])[0]


def replay_many(
    ids: np.ndarray,
    predicted: np.ndarray | None,
    jobs: Sequence[tuple[Candidate, ReplaySetup]],
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[ReplayStats]:
    """Replay matrix candidates over one trace; the same as `replay` on each, faster.

    Candidates whose caches behave the same (same slots, admissions and prefetch)
    are replayed once, and the per-layer and pool LRU caches of all candidates are
    replayed together. `progress(done, total, label)` is called every few tokens
    (it may raise to stop).
    """
    n_tokens, n_layers, k = ids.shape
    # The request checked its own figures (--tokens, the trace) before building anything;
    # this is the same budget for any other caller, before the replay's own copies.
    check_replay_slots(n_tokens, n_layers, k, what=f"a replay of {n_tokens:,} tokens",
                       remedy="replay fewer tokens")
    plans = [_plan(ids, predicted, candidate, setup) for candidate, setup in jobs]
    distinct: dict[tuple, ReplayPlan] = {}
    for plan in plans:
        distinct.setdefault(plan.key, plan)
    results = _run_plans(ids, predicted, list(distinct.values()), progress)
    out = []
    for plan, (_, setup) in zip(plans, jobs):
        counts, admissions, used = results[plan.key]
        out.append(ReplayStats(plan.candidate_id, counts, n_tokens, plan.slots, admissions, used, setup))
    return out


def _replay_stepwise(ids, predicted, candidate: Candidate, setup: ReplaySetup, cpu_layers) -> ReplayStats:
    rules = cache_rules(candidate, setup, ids.shape[2], predicted, cpu_layers=cpu_layers)
    plan = ReplayPlan(candidate.id, (), rules.slots, setup.popularity, False, rules.pooled, rules.eviction,
                      rules.admit, rules.width)
    [(counts, admissions, used)] = _run_stepwise(TraceArrays(ids, predicted, rules.width), [plan], Ticks(None, 0, 1))
    cpu = None if candidate.kind is Kind.MATRIX else cpu_layers_for(candidate.kind, ids.shape[1], layers=cpu_layers)
    return ReplayStats(candidate.id, counts, ids.shape[0], rules.slots, admissions, used, setup, cpu)


# --- planning: what a candidate's replay depends on --------------------------------


def _plan(ids, predicted, candidate: Candidate, setup: ReplaySetup) -> ReplayPlan:
    if candidate.kind is not Kind.MATRIX:
        raise ValueError(f"{candidate.id}: replay_many takes matrix candidates; use replay() for partitions")
    rules = cache_rules(candidate, setup, ids.shape[2], predicted)
    popularity, slots = setup.popularity, rules.slots
    source = id(popularity)  # the arrays outlive this call, so ids stay distinct
    if rules.static:  # fixed, never changed, or holding every expert
        return ReplayPlan(candidate.id, ("static", source, slots.tobytes(), rules.width), slots, popularity, True,
                          admit=rules.admit, width=rules.width)
    key = ("dynamic", source, slots.tobytes(), rules.pooled, rules.eviction, tuple(rules.admit.tolist()),
           rules.width)
    return ReplayPlan(candidate.id, key, slots, popularity, False, rules.pooled, rules.eviction, rules.admit, rules.width)


def _run_plans(ids, predicted, plans: list[ReplayPlan], progress) -> dict[tuple, tuple]:
    """(counts, admissions, prefetch used) by plan key."""
    results: dict[tuple, tuple] = {}
    static: dict[int, list[ReplayPlan]] = {}  # the caches that never change, by popularity
    lru: list[ReplayPlan] = []
    stepwise: list[ReplayPlan] = []
    for plan in plans:
        if plan.static:
            static.setdefault(id(plan.popularity), []).append(plan)
        elif plan.eviction is Eviction.SCORE:
            stepwise.append(plan)
        else:
            lru.append(plan)
    if plans and not replay_compiled.fits(ids, predicted, plans[0].popularity.shape[1],
                                          max(plan.width for plan in plans)):
        # Bare arrays with ids outside the model: the compiled loops and the one-pass
        # counts index by them; the step-wise residency takes any key.
        stepwise += [plan for group in static.values() for plan in group] + lru
        static, lru = {}, []
    for group in static.values():
        # One pass gives every capacity (engine.replays.hit_curves), a group of layers at a
        # time: the capacities the plans of every budget ask for are kept.
        at = static_counts_at(ids, group[0].popularity, np.stack([plan.slots for plan in group]))
        for plan, rows in zip(group, at):
            counts = rows[:, :, None].copy()
            if plan.width:
                counts = np.pad(counts, ((0, 0), (0, 0), (0, plan.width)))
            results[plan.key] = (counts, 0, 0)
    # Step by step, the plans of one prediction width together.
    groups: dict[int, list[ReplayPlan]] = {}
    for plan in stepwise:
        groups.setdefault(plan.width, []).append(plan)
    first = 1 if lru else 0  # the compiled replay is run 0 of the progress bar's runs
    runs = first + len(groups)
    if lru:
        results.update(replay_compiled.replay_lru(ids, predicted, lru, Ticks(progress, 0, runs)))
    for i, (width, group) in enumerate(groups.items(), start=first):
        for plan, result in zip(group, _run_stepwise(TraceArrays(ids, predicted, width), group, Ticks(progress, i, runs))):
            results[plan.key] = result
    return results


def _run_stepwise(trace: TraceArrays, plans: list[ReplayPlan], tick: Ticks) -> list[tuple[np.ndarray, int, int]]:
    """(counts, admissions, prefetch used) of each plan, replayed step by step. The
    decayed scores depend on the routing alone, so score caches of one popularity share
    them, stepped in lockstep (layer by layer); the others go a token at a time."""
    n_tokens, n_layers, k = trace.n_tokens, trace.n_layers, trace.k
    trace.add_keys(plans[0].popularity.shape[1])
    shared: dict[int, DecayedScores] = {}
    for plan in plans:
        if plan.eviction is Eviction.SCORE and id(plan.popularity) not in shared:
            shared[id(plan.popularity)] = DecayedScores(plan.popularity, k, trace.route_keys)
    residencies = [
        stepwise_residency(
            plan.popularity, plan.slots, plan.admit, pooled=plan.pooled, eviction=plan.eviction,
            route_keys=trace.route_keys, scores=shared.get(id(plan.popularity)),
        )
        for plan in plans
    ]
    sharing = [sum(r.scores is s for r in residencies) > 1 for s in (r.scores for r in residencies)]
    histograms = Histograms(len(plans), n_layers, k, trace.width)
    hits = [[0] * n_layers for _ in plans]
    copies = [[0] * n_layers for _ in plans]
    whole = [(r.steps, hits[j], copies[j]) for j, r in enumerate(residencies) if not sharing[j]]
    lockstep = [(r.steps, hits[j], copies[j]) for j, r in enumerate(residencies) if sharing[j]]
    every_layer, each_layer = range(n_layers), [range(layer, layer + 1) for layer in range(n_layers)]
    for t in range(n_tokens):
        tick(t, n_tokens)
        route, predictions = trace.step_keys(t)
        for steps, h, c in whole:
            steps(t, route, predictions, every_layer, h, c)
        if lockstep:
            for layer in each_layer:
                for steps, h, c in lockstep:
                    steps(t, route, predictions, layer, h, c)
        i = histograms.slot(t)
        histograms.hits[i] = hits
        histograms.copies[i] = copies
        histograms.token_done(t)
    histograms.finish(n_tokens)
    return [(histograms.of(j), r.admissions, r.prefetch_used) for j, r in enumerate(residencies)]


def _replay_partition(
    ids: np.ndarray, candidate: Candidate, setup: ReplaySetup, cpu_layers: np.ndarray | None
) -> ReplayStats:
    n_tokens, n_layers, k = ids.shape
    cpu_layers = cpu_layers_for(candidate.kind, n_layers, layers=cpu_layers)
    counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
    counts[cpu_layers, 0, 0] = n_tokens
    counts[~cpu_layers, k, 0] = n_tokens
    slots = np.where(cpu_layers, 0, setup.popularity.shape[1]).astype(np.int64)
    return ReplayStats(candidate.id, counts, n_tokens, slots, 0, 0, setup, cpu_layers)


__all__ = [
    "SCORE_DECAY_PER_TOKEN", "ReplaySetup", "ReplayStats", "allocate_slots", "popularity_order", "replay",
    "replay_many", "resident_mask",
]
