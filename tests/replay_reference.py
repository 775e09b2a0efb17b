"""The replay oracle: a plain reference loop, and random traces to run it on.

`reference_replay` is the replay loop as first written (OrderedDict LRU, a scan of the
resident set for score eviction), kept here deliberately simple and apart from
engine/: one step at a time, one key at a time, its own decayed score. It changes one
thing: among equal scores, score eviction takes the lowest key, where the first loop
took whichever its set happened to yield first. Every replay engine, the step-wise
residency and the executor's plan must give its counts (tests/test_replay_equivalence.py).

`reference_static_counts` and `reference_lru_curve` are the hit curves' one-pass counts
(engine/replays/hit_curves.py) done the long way: every capacity on its own, and a
recency list per layer (tests/test_hit_curves.py).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np

from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replays.replay import SCORE_DECAY_PER_TOKEN, ReplaySetup

# --- the reference ------------------------------------------------------------------


def reference_replay(ids, predicted, candidate: Candidate, setup: ReplaySetup, cpu_layers=None):
    """(counts [L, k+1, P+1], admissions, prefetch_used) of one candidate."""
    n_tokens, n_layers, k = ids.shape
    popularity = np.asarray(setup.popularity)
    n_experts = popularity.shape[1]
    if candidate.kind is not Kind.MATRIX:
        if candidate.kind is Kind.ALL_GPU:
            cpu_layers = np.zeros(n_layers, dtype=bool)
        elif candidate.kind is Kind.ALL_CPU:
            cpu_layers = np.ones(n_layers, dtype=bool)
        counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
        counts[cpu_layers, 0, 0] = n_tokens
        counts[~cpu_layers, k, 0] = n_tokens
        return counts, 0, 0

    mutable = candidate.is_mutable
    slots = reference_slots(popularity, setup.total_slots, candidate.allocation,
                            curves=setup.hit_curves if mutable else None, floor=k if mutable else 0)
    order = [sorted(range(n_experts), key=lambda e: -popularity[l, e]) for l in range(n_layers)]  # stable
    admit = reference_admission(candidate, setup, k)
    prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
    if not candidate.is_mutable or not (prefetch or any(admit)):
        counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
        for l in range(n_layers):
            resident = set(order[l][: slots[l]])
            for t in range(n_tokens):
                counts[l, sum(int(e) in resident for e in ids[t, l]), 0] += 1
        return counts, 0, 0

    pred = predicted[:, :, : setup.prefetch_budget] if prefetch else None
    pooled = candidate.residency is Residency.POOL
    if pooled:
        keys = [l * n_experts + e for l in range(n_layers) for e in order[l][: slots[l]]]
        keys.sort(key=lambda key: (popularity.flat[key], -key))  # least routed first
        initial = [keys]
    else:
        initial = [[l * n_experts + e for e in order[l][: slots[l]][::-1]] for l in range(n_layers)]
    if candidate.eviction is Eviction.LRU:
        caches = [LruCache(keys) for keys in initial]
    else:
        score = DecayedScore(popularity, k)
        caches = [ScoreCache(keys, score) for keys in initial]
    budget = 0 if pred is None else pred.shape[2]
    counts = np.zeros((n_layers, k + 1, budget + 1), dtype=np.int64)
    prefetched: set[int] = set()
    admissions = used = 0
    for t in range(n_tokens):
        for l in range(n_layers):
            cache = caches[0] if pooled else caches[l]
            row = [l * n_experts + int(e) for e in ids[t, l]]
            cache.routed(row, t)
            hits = [key for key in row if key in cache]
            misses = [key for key in row if key not in cache]
            h = len(hits)
            for key in hits:
                cache.touch(key)
                if key in prefetched:
                    used += 1
                    prefetched.discard(key)
            n_admit = min(admit[h], cache.capacity - h)
            for key in misses[: max(n_admit, 0)]:
                prefetched.discard(cache.evict(protect=set(row), t=t))
                cache.insert(key)
            admissions += max(n_admit, 0)
            copies = 0
            if budget and l + 1 < n_layers:
                nxt = caches[0] if pooled else caches[l + 1]
                wanted = [key for key in dict.fromkeys((l + 1) * n_experts + int(e) for e in pred[t, l])]
                kept = [key for key in wanted if key in nxt]
                wanted = [key for key in wanted if key not in nxt]
                for key in kept:
                    nxt.touch(key)  # about to be used: protect it
                in_use = {key for key in row if key in cache} if pooled else set()  # hits and admitted
                copies = max(min(len(wanted), nxt.capacity - len(kept) - len(in_use)), 0)
                for key in wanted[:copies]:
                    prefetched.discard(nxt.evict(protect=set(kept) | set(wanted) | in_use, t=t))
                    nxt.insert(key)
                    prefetched.add(key)
            counts[l, h, copies] += 1
    return counts, admissions, used


def reference_slots(popularity, total_slots, allocation, curves=None, floor=0):
    """Slots one at a time. `curves` [L, E+1] hits per capacity (default: the running
    sum of the popularity counts, most popular first)."""
    n_layers, n_experts = popularity.shape
    total_slots = min(int(total_slots), n_layers * n_experts)
    if curves is None:
        ranked = [sorted(popularity[l], reverse=True) for l in range(n_layers)]
        curves = [[0] + list(np.cumsum(ranked[l])) for l in range(n_layers)]
    curves = [[float(v) for v in curves[l]] for l in range(n_layers)]
    if allocation is Allocation.UNIFORM:
        base = min(total_slots // n_layers, n_experts)
        slots = [base] * n_layers
        gain = [curves[l][base + 1] - curves[l][base] if base < n_experts else 0.0 for l in range(n_layers)]
        for l in sorted(range(n_layers), key=lambda l: (-gain[l], l))[: total_slots - base * n_layers]:
            slots[l] += 1
        return slots
    start = floor if floor * n_layers <= total_slots else 0
    start = min(start, n_experts)
    gains = [reference_hull_gains(curves[l][start:]) for l in range(n_layers)]
    slots = [start] * n_layers
    for _ in range(total_slots - start * n_layers):
        # The layer whose next slot gains the most (ties: the lower layer).
        best = max((l for l in range(n_layers) if slots[l] < n_experts),
                   key=lambda l: (gains[l][slots[l] - start], -l))
        slots[best] += 1
    return slots


def reference_hull_gains(curve):
    """Each slot's gain along the upper concave hull of `curve`, by brute force: the hull
    at x is the best chord over points a <= x <= b."""
    return list(_hull_gains(tuple(curve)))


@lru_cache(maxsize=None)
def _hull_gains(curve: tuple) -> list:
    # Remembered per curve: the brute force is cubic in the experts (nearly all of
    # test_replay_equivalence's advise check at 128 experts a layer), and every
    # nonuniform candidate of a setup asks for the same curves.
    n = len(curve)
    if all(curve[i + 1] - curve[i] >= curve[i + 2] - curve[i + 1] for i in range(n - 2)):
        return [curve[i + 1] - curve[i] for i in range(n - 1)]

    def hull(x):
        return max(curve[a] + (curve[b] - curve[a]) * (x - a) / (b - a) if b > a else curve[a]
                   for a in range(x + 1) for b in range(x, n))

    values = [hull(x) for x in range(n)]
    return [values[i + 1] - values[i] for i in range(n - 1)]


def reference_admission(candidate, setup, k):
    if not candidate.is_mutable or not candidate.copies_misses:
        return [0] * (k + 1)
    if candidate.execution is Execution.STAGE:
        return [k - h for h in range(k + 1)]
    return [min(int(a), k - h) for h, a in enumerate(setup.admit_per_hits)]


class LruCache:
    """Front of the OrderedDict = least recently used."""

    def __init__(self, keys):
        self.keys = OrderedDict.fromkeys(keys)
        self.capacity = len(self.keys)

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        pass

    def touch(self, key):
        self.keys.move_to_end(key)

    def insert(self, key):
        self.keys[key] = None

    def evict(self, protect, t):
        # The protected keys were touched this step, so they are never at the front.
        victim = next(iter(self.keys))
        assert victim not in protect
        del self.keys[victim]
        return victim


class DecayedScore:
    """Every routed expert, resident or not, scores 1 per use; scores decay per token.

    A score is kept as (value, token) and decayed when read; an expert starts from its
    steady state on the profile, popularity / profile tokens / (1 - decay).
    """

    def __init__(self, popularity, k):
        decay = SCORE_DECAY_PER_TOKEN
        profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
        self.value = (popularity / profile_tokens / (1 - decay)).ravel().tolist()
        self.time = [0] * popularity.size

    def __call__(self, key, t):
        return self.value[key] * SCORE_DECAY_PER_TOKEN ** (t - self.time[key])

    def routed(self, row, t):
        for key in row:
            self.value[key] = self(key, t) + 1.0
            self.time[key] = t


class ScoreCache:
    """Evicts the unprotected resident with the lowest decayed score, ties to the lowest key."""

    def __init__(self, keys, score: DecayedScore):
        self.keys = set(keys)
        self.capacity = len(self.keys)
        self.score = score

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        self.score.routed(row, t)

    def touch(self, key):
        pass

    def insert(self, key):
        self.keys.add(key)

    def evict(self, protect, t):
        victim = min((key for key in self.keys if key not in protect), key=lambda key: (self.score(key, t), key))
        self.keys.discard(victim)
        return victim


def reference_static_counts(ids, popularity):
    """int64 [L, E+1, k+1]: steps of each layer with h hits when it holds its C most
    popular experts (ties: the lower id), every capacity C counted on its own."""
    n_tokens, n_layers, k = ids.shape
    n_experts = popularity.shape[1]
    counts = np.zeros((n_layers, n_experts + 1, k + 1), dtype=np.int64)
    for l in range(n_layers):
        order = sorted(range(n_experts), key=lambda e: -popularity[l, e])  # stable
        for capacity in range(n_experts + 1):
            resident = np.zeros(n_experts, dtype=bool)
            resident[order[:capacity]] = True
            counts[l, capacity] = np.bincount(resident[ids[:, l]].sum(axis=1), minlength=k + 1)
    return counts


def reference_lru_curve(ids, popularity):
    """int64 [L, E+1]: accesses of each layer at batch stack depth <= C, for every C, from
    a recency list per layer (most recent first, the most popular first at the start): an
    access's depth is its expert's place in the list before the step, plus one; then the
    step's experts go to the front in routing order, the last routed most recent."""
    n_tokens, n_layers, _ = ids.shape
    n_experts = popularity.shape[1]
    depths = np.zeros((n_layers, n_experts + 1), dtype=np.int64)
    for l in range(n_layers):
        recency = sorted(range(n_experts), key=lambda e: -popularity[l, e])
        for t in range(n_tokens):
            row = [int(e) for e in ids[t, l]]
            for e in row:
                depths[l, recency.index(e) + 1] += 1
            for e in row:
                recency.remove(e)
                recency.insert(0, e)
    return np.cumsum(depths, axis=1)


# --- random traces ------------------------------------------------------------------------


def uniform_routing(seed: int, n_tokens: int, n_layers: int, n_experts: int, k: int, width: int,
                    most: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids [T, L, k], guesses [T, L, width], popularity [L, E] in 0..most-1): k distinct
    experts a step drawn alike, guesses uniform (repeats and misses included)."""
    rng = np.random.default_rng(seed)
    ids = np.argsort(rng.gumbel(size=(n_tokens, n_layers, n_experts)), axis=2)[:, :, :k].astype(np.int16)
    predicted = rng.integers(0, n_experts, size=(n_tokens, n_layers, width)).astype(np.int16)
    return ids, predicted, rng.integers(0, most, size=(n_layers, n_experts))


def random_case(seed: int, *, medium: bool = False):
    """(ids, predicted or None, popularity, total_slots, prefetch_budget, ready-first split).

    Small cases vary everything: 1-6 layers, 4-32 experts, k up to 8, capacities from 0
    to everything (smaller than k included), predictions with duplicates and of any
    width, popularity as counts, small integers (ties) or reals. Medium cases are
    longer, with pools large enough for the token-at-a-time pool replay.
    """
    rng = np.random.default_rng(seed)
    if medium:
        n_layers, n_experts = int(rng.integers(4, 13)), int(rng.choice([16, 32, 64]))
        n_tokens = int(rng.integers(80, 200))
    else:
        n_layers, n_experts = int(rng.integers(1, 7)), int(rng.choice([4, 6, 8, 16, 32]))
        n_tokens = int(rng.integers(1, 40))
    k = int(rng.integers(1, min(n_experts, 8) + 1))
    p = 1.0 / np.arange(1, n_experts + 1) ** rng.uniform(0, 1.5)
    ranks = np.argsort(rng.random((n_layers, n_experts)), axis=1)
    logits = np.log(p / p.sum())[ranks][None] + rng.gumbel(size=(n_tokens, n_layers, n_experts))
    ids = np.argsort(-logits, axis=2)[:, :, :k].astype(np.int16)
    width = int(rng.integers(1, k + 3))
    predicted = None
    if rng.random() < 0.8:
        predicted = rng.integers(0, n_experts, size=(n_tokens, n_layers, width)).astype(np.int16)
        right = rng.random(predicted.shape) < rng.uniform(0, 1)
        following = np.concatenate([ids[:, 1:], ids[:, :1]], axis=1)  # the next layer's routing
        m = min(k, width)
        predicted[:, :, :m] = np.where(right[:, :, :m], following[:, :, :m], predicted[:, :, :m])
        predicted[:, -1] = -1
    kind = rng.integers(0, 4)
    if kind == 0:
        popularity = np.stack([np.bincount(ids[:, l].ravel(), minlength=n_experts) for l in range(n_layers)])
    elif kind == 1:
        popularity = rng.integers(0, 4, size=(n_layers, n_experts))  # many ties
    elif kind == 2:
        popularity = rng.random((n_layers, n_experts))
    else:  # scores that would underflow: score eviction scans instead of using its heap
        popularity = rng.random((n_layers, n_experts)) * 1e-300
    cells = n_layers * n_experts
    if medium:
        total = int(rng.integers(cells // 4, cells))
    else:
        total = int(rng.choice([0, 1, k - 1, k, k + 1, n_layers * k, cells // 3, cells - 1, cells, cells + 5,
                                int(rng.integers(0, cells + 1))]))
    budget = int(rng.integers(0, width + 2))
    admit = rng.integers(0, k + 1, size=k + 1)
    if rng.random() < 0.5:
        admit = np.sort(admit)[::-1]  # the usual shape: fewer copies with more hits
    return ids, predicted, popularity, max(total, 0), budget, admit


def every_candidate(has_predictions: bool) -> list[Candidate]:
    out = []
    for residency in Residency:
        for execution in Execution:
            for allocation in Allocation:
                if residency is Residency.FIXED:
                    out.append(Candidate(Kind.MATRIX, residency, execution, allocation))
                    continue
                for eviction in Eviction:
                    for prefetch in (False, True) if has_predictions else (False,):
                        out.append(Candidate(Kind.MATRIX, residency, execution, allocation, eviction, prefetch))
    return out
