"""Token-major replay of a routing trace under a candidate policy.

Replay only counts how often each execution state occurs; it knows nothing of time.
A state is (layer, hits h, prefetch copies p issued during that layer for the next
one); misses are k - h. The histogram is all the cost model needs (DESIGN.md §3).

Rules (DESIGN.md §4): token t runs layers 0..L-1 before token t+1 starts; caches
persist across the sequences of a trace; under copying executions a copied miss is
admitted to a mutable cache, under the others the cache changes only by prefetch;
while layer l runs, the predicted experts of layer l+1 that are not resident are
copied into layer l+1's slots (or the pool), at most `prefetch_budget` of them.

One layer step, exactly (tests/test_replay_equivalence.py keeps this as a plain loop,
and every replay here must give the same counts):
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
  cache holding every expert are lookups;
- per-layer LRU caches are independent (a layer's cache sees only its own prefetch
  and its own routing), so every layer of every candidate is a row of numpy arrays,
  replayed token by token: last-use stamps, evict the smallest;
- LRU pools, when there are enough of them (pools x layers) for it to pay, are
  replayed a token at a time with numpy, from the state at the start of the token,
  then corrected in Python for the few experts evicted within the token before the
  token looks them up (`_PoolLru`); otherwise, and for pools too small for that, one
  step at a time (`_PoolSteps`);
- score eviction runs one step at a time, a heap per cache.
Candidates with the same cache dynamics (same slots, admissions, prefetch) share one
replay (`replay_many`).

Where the code lives: this module holds the public API, the planning and dispatch, and
the static and partition paths; the engines are `engine.replay_layer_lru`,
`engine.replay_pool` and `engine.replay_score`, and what they share is in
`engine.replay_common`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from engine.policy import Allocation, Candidate, Eviction, Kind, Residency
from engine.replay_common import _Plan, _Ticks, _Trace, _histogram, popularity_order
from engine.replay_layer_lru import _LayerLru
from engine.replay_pool import _PoolLru, _run_pool_steps
from engine.replay_score import SCORE_DECAY_PER_TOKEN, _run_score


@dataclass(frozen=True)
class ReplayStats:
    candidate_id: str
    counts: np.ndarray  # int64 [L, k+1, P+1]: layer, hits, prefetch copies issued
    n_tokens: int
    slots_per_layer: np.ndarray  # int64 [L]: initial slots (pool: initial fill)
    admissions: int  # misses admitted to a mutable cache
    prefetch_used: int  # prefetched experts hit when their layer ran

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


@dataclass(frozen=True)
class ReplaySetup:
    """What every candidate of one configuration shares."""

    popularity: np.ndarray  # [L, E] routing counts on the profile trace
    total_slots: int  # expert slots the budget leaves (for this candidate's execution)
    prefetch_budget: int  # copies per layer at most
    admit_per_hits: np.ndarray | None = None  # [k+1] misses a ready-first step copies


def allocate_slots(popularity: np.ndarray, total_slots: int, allocation: Allocation) -> np.ndarray:
    """Slots per layer for `total_slots` expert slots.

    Uniform: the same number in every layer (the remainder stays unused, as a
    per-layer runtime would leave it). Nonuniform: one slot at a time to the layer
    whose next most popular expert saves the most misses on the profile trace; every
    miss costs the same time whatever the layer, so that is the global top of the
    popularity counts.
    """
    n_layers, n_experts = popularity.shape
    total_slots = min(int(total_slots), n_layers * n_experts)
    if allocation is Allocation.UNIFORM:
        return np.full(n_layers, min(total_slots // n_layers, n_experts), dtype=np.int64)
    ranked = -np.sort(-popularity, axis=1)  # per layer, descending counts
    flat_order = np.argsort(-ranked.ravel(), kind="stable")[:total_slots]
    return np.bincount(flat_order // n_experts, minlength=n_layers).astype(np.int64)


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
) -> ReplayStats:
    """Replay token-major routing `ids` [T, L, k] under `candidate`.

    `cpu_layers` ([L] bool) is the layer set of a partition candidate.
    """
    if candidate.kind is not Kind.MATRIX:
        return _replay_partition(ids, candidate, cpu_layers, setup.popularity.shape[1])
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
    n_tokens = ids.shape[0]
    plans = [_plan(ids, predicted, candidate, setup) for candidate, setup in jobs]
    distinct: dict[tuple, _Plan] = {}
    for plan in plans:
        distinct.setdefault(plan.key, plan)
    results = _run_plans(ids, predicted, list(distinct.values()), progress)
    out = []
    for plan in plans:
        counts, admissions, used = results[plan.key]
        out.append(ReplayStats(plan.candidate_id, counts, n_tokens, plan.slots, admissions, used))
    return out


# --- planning: what a candidate's replay depends on --------------------------------


def _plan(ids, predicted, candidate: Candidate, setup: ReplaySetup) -> _Plan:
    if candidate.kind is not Kind.MATRIX:
        raise ValueError(f"{candidate.id}: replay_many takes matrix candidates; use replay() for partitions")
    k = ids.shape[2]
    popularity = setup.popularity
    slots = allocate_slots(popularity, setup.total_slots, candidate.allocation)
    admit = _admission_table(candidate, setup, k)
    prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
    width = min(int(setup.prefetch_budget), predicted.shape[2]) if prefetch else 0
    changes = candidate.is_mutable and (prefetch or admit.any())
    # A cache holding every expert never misses, keeps every prediction and admits
    # nothing: it is as static as fixed residency.
    full = bool(np.all(slots >= popularity.shape[1]))
    source = id(popularity)  # the arrays outlive this call, so ids stay distinct
    if not changes:
        return _Plan(candidate.id, ("static", source, slots.tobytes(), 0), slots, popularity, static=True)
    if full:  # the histogram keeps its prefetch columns, all zero
        return _Plan(candidate.id, ("static", source, slots.tobytes(), width), slots, popularity, True, width=width)
    pooled = candidate.residency is Residency.POOL
    key = ("dynamic", source, slots.tobytes(), pooled, candidate.eviction, tuple(admit.tolist()), width)
    return _Plan(candidate.id, key, slots, popularity, False, pooled, candidate.eviction, admit, width)


def _admission_table(candidate: Candidate, setup: ReplaySetup, k: int) -> np.ndarray:
    """Misses admitted to a mutable cache per state h (hits): int [k+1]."""
    hits = np.arange(k + 1)
    if not candidate.is_mutable or not candidate.copies_misses:
        return np.zeros(k + 1, dtype=np.int64)
    if candidate.execution.value == "stage":
        return k - hits
    if setup.admit_per_hits is None:
        raise ValueError("ready-first replay needs the cost model's lane split (admit_per_hits)")
    return np.minimum(np.asarray(setup.admit_per_hits, dtype=np.int64), k - hits)


_POOLS_BATCHED = 100  # pools x layers from which `_PoolLru` beats `_PoolSteps`


def _run_plans(ids, predicted, plans: list[_Plan], progress) -> dict[tuple, tuple]:
    """(counts, admissions, prefetch used) by plan key."""
    results: dict[tuple, tuple] = {}
    scored: list[_Plan] = []
    batches: dict[tuple, list[_Plan]] = {}
    for plan in plans:
        if plan.static:
            counts = _static_counts(ids, resident_mask(plan.popularity, plan.slots))
            if plan.width:
                counts = np.pad(counts, ((0, 0), (0, 0), (0, plan.width)))
            results[plan.key] = (counts, 0, 0)
        elif plan.eviction is Eviction.SCORE:
            scored.append(plan)
        else:
            batches.setdefault((plan.pooled, plan.width), []).append(plan)
    runs = len(scored) + len(batches)
    for i, plan in enumerate(scored):
        trace = _Trace(ids, predicted, plan.width)
        hits, copies, admissions, used = _run_score(trace, plan, _Ticks(progress, i, runs))
        results[plan.key] = (_histogram(hits, copies, trace.k, plan.width), int(admissions), int(used))
    for i, ((pooled, width), batch) in enumerate(batches.items(), start=len(scored)):
        trace = _Trace(ids, predicted, width)
        tick = _Ticks(progress, i, runs)
        if pooled:
            trace.add_keys(batch[0].popularity.shape[1])
            # Pools too small for the token-at-a-time replay, or too few for its
            # per-token numpy work to pay: one step at a time.
            fits = [int(plan.slots.sum()) >= width + trace.k for plan in batch]
            small = [plan for plan, ok in zip(batch, fits) if not ok]
            batch = [plan for plan, ok in zip(batch, fits) if ok]
            if len(batch) * trace.n_layers < _POOLS_BATCHED:
                small, batch = small + batch, []
            for plan in small:
                results[plan.key] = _run_pool_steps(trace, plan, tick)
            if not batch:
                continue
        runner = _PoolLru(trace, batch) if pooled else _LayerLru(trace, batch)
        runner.run(tick)
        for j, plan in enumerate(batch):
            results[plan.key] = runner.result(j)
    return results


def _static_counts(ids: np.ndarray, resident: np.ndarray) -> np.ndarray:
    n_tokens, n_layers, k = ids.shape
    hits = resident[np.arange(n_layers)[None, :, None], ids].sum(axis=2)  # [T, L]
    flat = np.arange(n_layers)[None, :] * (k + 1) + hits
    counts = np.bincount(flat.ravel(), minlength=n_layers * (k + 1))
    return counts.reshape(n_layers, k + 1, 1).astype(np.int64)


def _replay_partition(
    ids: np.ndarray, candidate: Candidate, cpu_layers: np.ndarray | None, n_experts: int
) -> ReplayStats:
    n_tokens, n_layers, k = ids.shape
    if candidate.kind is Kind.ALL_GPU:
        cpu_layers = np.zeros(n_layers, dtype=bool)
    elif candidate.kind is Kind.ALL_CPU:
        cpu_layers = np.ones(n_layers, dtype=bool)
    elif cpu_layers is None:
        raise ValueError(f"{candidate.id} needs its layer set")
    counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
    counts[cpu_layers, 0, 0] = n_tokens
    counts[~cpu_layers, k, 0] = n_tokens
    slots = np.where(cpu_layers, 0, n_experts).astype(np.int64)
    return ReplayStats(candidate.id, counts, n_tokens, slots, 0, 0)


__all__ = [
    "SCORE_DECAY_PER_TOKEN", "ReplaySetup", "ReplayStats", "allocate_slots", "popularity_order", "replay",
    "replay_many", "resident_mask",
]
