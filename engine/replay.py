"""Token-major replay of a routing trace under a candidate policy.

Replay only counts how often each execution state occurs; it knows nothing of time.
A state is (layer, hits h, prefetch copies p issued during that layer for the next
one); misses are k - h. The histogram is all the cost model needs (DESIGN.md §3).

Rules (DESIGN.md §4): token t runs layers 0..L-1 before token t+1 starts; caches
persist across the sequences of a trace; under copying executions a copied miss is
admitted to a mutable cache, under the others the cache changes only by prefetch;
while layer l runs, the predicted experts of layer l+1 that are not resident are
copied into layer l+1's slots (or the pool), at most `prefetch_budget` of them.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from engine.policy import Allocation, Candidate, Eviction, Kind, Residency

SCORE_DECAY_PER_TOKEN = 0.9  # decayed routing score: a token's weight halves in ~7 tokens


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


def popularity_order(popularity: np.ndarray) -> np.ndarray:
    """[L, E] expert ids per layer, most popular first (ties: lower id first)."""
    return np.argsort(-popularity, axis=1, kind="stable")


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
    n_tokens, n_layers, k = ids.shape
    if candidate.kind is not Kind.MATRIX:
        return _replay_partition(ids, candidate, cpu_layers, setup.popularity.shape[1])

    slots = allocate_slots(setup.popularity, setup.total_slots, candidate.allocation)
    resident = resident_mask(setup.popularity, slots)
    admit = _admission_table(candidate, setup, k)
    prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
    changes = candidate.is_mutable and (prefetch or admit.any())
    if not changes:
        counts = _static_counts(ids, resident)
        return ReplayStats(candidate.id, counts, n_tokens, slots, 0, 0)

    pred = predicted[:, :, : setup.prefetch_budget] if prefetch else None
    order = popularity_order(setup.popularity)
    if candidate.eviction is Eviction.LRU:
        run = _run_lru
    else:
        run = _run_score
    counts, admissions, used = run(
        ids, pred, order, slots, admit, pooled=candidate.residency is Residency.POOL,
        popularity=setup.popularity,
    )
    return ReplayStats(candidate.id, counts, n_tokens, slots, admissions, used)


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


def _cache_keys(order: np.ndarray, slots: np.ndarray, pooled: bool, popularity: np.ndarray):
    """Initial contents, least popular first so that LRU evicts them first."""
    n_layers, n_experts = order.shape
    if pooled:
        keys = [l * n_experts + int(e) for l in range(n_layers) for e in order[l, : int(slots[l])]]
        # One pool: the least routed expert of any layer is the first to go.
        keys.sort(key=lambda key: (popularity.flat[key], -key))
        return [keys]
    return [
        [l * n_experts + int(e) for e in order[l, : min(int(slots[l]), n_experts)][::-1]]
        for l in range(n_layers)
    ]


def _run_lru(ids, pred, order, slots, admit, *, pooled: bool, popularity):
    """LRU caches; OrderedDict keeps recency (front = least recent)."""
    n_tokens, n_layers, k = ids.shape
    n_experts = order.shape[1]
    keyed = (ids.astype(np.int64) + (np.arange(n_layers) * n_experts)[None, :, None]).tolist()
    pred_keyed = None
    if pred is not None:
        pred_keyed = (pred.astype(np.int64) + (np.arange(1, n_layers + 1) * n_experts)[None, :, None]).tolist()
    caches = [OrderedDict.fromkeys(keys) for keys in _cache_keys(order, slots, pooled, popularity)]
    capacity = [len(c) for c in caches]
    admit = admit.tolist()
    budget = 0 if pred is None else pred.shape[2]
    hits_out = np.zeros((n_tokens, n_layers), dtype=np.int64)
    pref_out = np.zeros((n_tokens, n_layers), dtype=np.int64)
    prefetched: set[int] = set()
    admissions = used = 0
    for t in range(n_tokens):
        row_t = keyed[t]
        hits_t = hits_out[t]
        for l in range(n_layers):
            cache = caches[0] if pooled else caches[l]
            cap = capacity[0] if pooled else capacity[l]
            h = 0
            misses = []
            for key in row_t[l]:
                if key in cache:
                    cache.move_to_end(key)
                    h += 1
                    if key in prefetched:
                        used += 1
                        prefetched.discard(key)
                else:
                    misses.append(key)
            hits_t[l] = h
            n_admit = min(admit[h], cap - h)
            for key in misses[:n_admit]:
                prefetched.discard(cache.popitem(last=False)[0])
                cache[key] = None
            admissions += max(n_admit, 0)
            if budget and l + 1 < n_layers:
                nxt = caches[0] if pooled else caches[l + 1]
                nxt_cap = capacity[0] if pooled else capacity[l + 1]
                wanted = []
                kept = 0
                for key in dict.fromkeys(pred_keyed[t][l]):
                    if key in nxt:
                        nxt.move_to_end(key)  # about to be used: protect it
                        kept += 1
                    else:
                        wanted.append(key)
                n_copy = max(min(len(wanted), nxt_cap - kept - (h + n_admit if pooled else 0)), 0)
                for key in wanted[:n_copy]:
                    prefetched.discard(nxt.popitem(last=False)[0])
                    nxt[key] = None
                    prefetched.add(key)
                pref_out[t, l] = n_copy
    return _histogram(hits_out, pref_out, k, budget), admissions, used


def _run_score(ids, pred, order, slots, admit, *, pooled: bool, popularity):
    """Caches that evict the lowest decayed routing score.

    A key's score is stored as (value, token) and decayed lazily; every routed expert
    scores 1 per use, resident or not, so a returning expert keeps its history.
    Eviction is a scan of the resident set: fine for per-layer caches, slow for large
    pools, which is why score eviction is not in the default matrix.
    """
    n_tokens, n_layers, k = ids.shape
    n_experts = order.shape[1]
    decay = SCORE_DECAY_PER_TOKEN
    profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
    # Steady-state score of an expert used with probability q per token: q / (1 - decay).
    score_value = (popularity / profile_tokens / (1 - decay)).ravel().tolist()
    score_time = [0] * (n_layers * n_experts)
    caches = [set(keys) for keys in _cache_keys(order, slots, pooled, popularity)]
    capacity = [len(c) for c in caches]
    keyed = (ids.astype(np.int64) + (np.arange(n_layers) * n_experts)[None, :, None]).tolist()
    pred_keyed = None
    if pred is not None:
        pred_keyed = (pred.astype(np.int64) + (np.arange(1, n_layers + 1) * n_experts)[None, :, None]).tolist()
    budget = 0 if pred is None else pred.shape[2]
    admit = admit.tolist()
    hits_out = np.zeros((n_tokens, n_layers), dtype=np.int64)
    pref_out = np.zeros((n_tokens, n_layers), dtype=np.int64)
    prefetched: set[int] = set()
    admissions = used = 0

    def score(key: int, t: int) -> float:
        return score_value[key] * decay ** (t - score_time[key])

    def evict(cache: set, protect: set, t: int) -> None:
        victim = min((key for key in cache if key not in protect), key=lambda key: score(key, t))
        cache.discard(victim)
        prefetched.discard(victim)

    for t in range(n_tokens):
        for l in range(n_layers):
            cache = caches[0] if pooled else caches[l]
            cap = capacity[0] if pooled else capacity[l]
            row = keyed[t][l]
            for key in row:
                score_value[key] = score(key, t) + 1.0
                score_time[key] = t
            hit_keys = [key for key in row if key in cache]
            h = len(hit_keys)
            used += sum(1 for key in hit_keys if key in prefetched)
            prefetched.difference_update(hit_keys)
            hits_out[t, l] = h
            n_admit = min(admit[h], cap - h)
            protect = set(row)
            for key in [key for key in row if key not in cache][: max(n_admit, 0)]:
                evict(cache, protect, t)
                cache.add(key)
            admissions += max(n_admit, 0)
            if budget and l + 1 < n_layers:
                nxt = caches[0] if pooled else caches[l + 1]
                nxt_cap = capacity[0] if pooled else capacity[l + 1]
                predicted_keys = list(dict.fromkeys(pred_keyed[t][l]))
                wanted = [key for key in predicted_keys if key not in nxt]
                kept = len(predicted_keys) - len(wanted)
                in_use = {key for key in row if key in cache} if pooled else set()
                guard = set(predicted_keys) | in_use
                n_copy = max(min(len(wanted), nxt_cap - kept - len(in_use)), 0)
                for key in wanted[:n_copy]:
                    evict(nxt, guard, t)
                    nxt.add(key)
                    prefetched.add(key)
                pref_out[t, l] = n_copy
    return _histogram(hits_out, pref_out, k, budget), admissions, used


def _histogram(hits: np.ndarray, prefetches: np.ndarray, k: int, budget: int) -> np.ndarray:
    n_layers = hits.shape[1]
    width = (k + 1) * (budget + 1)
    flat = np.arange(n_layers)[None, :] * width + hits * (budget + 1) + prefetches
    counts = np.bincount(flat.ravel(), minlength=n_layers * width)
    return counts.reshape(n_layers, k + 1, budget + 1).astype(np.int64)
