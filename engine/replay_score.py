"""Score eviction: caches that evict the resident with the lowest decayed routing score.

Every routed expert scores 1 per use and all scores decay by `SCORE_DECAY_PER_TOKEN`
per token (`_DecayedScores`); a cache (`_ScoreCache`) keeps a lazily invalidated heap
of its residents and evicts the lowest, ties to the lowest key. `_run_score` replays
one candidate step by step, per-layer caches or a pool. It lives apart from the LRU
engines because it shares nothing with them beyond the trace, the plan and the
initial contents; `engine.replay` re-exports `SCORE_DECAY_PER_TOKEN` (the probes use it).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from engine.replay_common import _Plan, _Ticks, _Trace, _initial_pool, popularity_order

SCORE_DECAY_PER_TOKEN = 0.9  # decayed routing score: a token's weight halves in ~7 tokens


# --- score eviction: step by step, a heap per cache ---------------------------------


class _DecayedScores:
    """Every routed expert, resident or not, scores 1 per use; scores decay per token.

    A score is kept as (value, token) and decayed when read, exactly as the plain loop
    reads it; an expert starts from its steady state on the profile, popularity /
    profile tokens / (1 - decay). All scores decay at the same rate, so their order
    never changes between uses: `rank` = log(score) - token * log(decay) orders them
    at any time, which is what the caches' heaps are keyed on.
    """

    def __init__(self, popularity: np.ndarray, k: int, n_tokens: int):
        decay = SCORE_DECAY_PER_TOKEN
        profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
        # Steady-state score of an expert used with probability q per token: q / (1 - decay).
        value = popularity / profile_tokens / (1 - decay)
        self.value = value.ravel().tolist()
        self.time = [0] * value.size
        self.log_decay = math.log(decay)
        self.rank = [self._rank(v, 0) for v in self.value]
        # The rank order is the order of the scores as computed only while no
        # positive score underflows; past that (very long traces of rarely routed
        # experts), evictions scan the resident set.
        smallest = min([v for v in self.value if v > 0] + [1.0])
        self.ordered = math.log(smallest) + n_tokens * self.log_decay > -575.0  # 1e-250
        # Ranks this close may hold scores in either order once rounded: compare those exactly.
        self.close = 1e-9 * (1.0 + abs(math.log(smallest)) + n_tokens * abs(self.log_decay))

    def __call__(self, key: int, t: int) -> float:
        return self.value[key] * SCORE_DECAY_PER_TOKEN ** (t - self.time[key])

    def _rank(self, value: float, t: int) -> float:
        return math.log(value) - t * self.log_decay if value > 0 else -math.inf

    def routed(self, keys: list[int], t: int) -> None:
        for key in keys:
            value = self(key, t) + 1.0
            self.value[key] = value
            self.time[key] = t
            self.rank[key] = self._rank(value, t)


class _ScoreCache:
    """Evicts the unprotected resident with the lowest score, ties to the lowest key.

    A heap of (rank, key), invalidated lazily: an entry counts while its key is
    resident and still has that rank (a routed resident gets a new entry).
    """

    def __init__(self, keys: list[int], scores: _DecayedScores):
        self.members = set(keys)
        self.capacity = len(self.members)
        self.scores = scores
        self.heap = [(scores.rank[key], key) for key in keys]
        heapq.heapify(self.heap)

    def __contains__(self, key: int) -> bool:
        return key in self.members

    def rescored(self, key: int) -> None:
        heapq.heappush(self.heap, (self.scores.rank[key], key))

    def insert(self, key: int) -> None:
        self.members.add(key)
        self.rescored(key)

    def evict(self, protect: set, t: int) -> int:
        victim = self._lowest(protect, t) if self.scores.ordered else self._scan(protect, t)
        self.members.discard(victim)
        if len(self.heap) > 4 * self.capacity + 64:  # mostly stale entries: rebuild
            self.heap = [(self.scores.rank[key], key) for key in self.members]
            heapq.heapify(self.heap)
        return victim

    def _scan(self, protect: set, t: int) -> int:
        return min((key for key in self.members if key not in protect), key=lambda key: (self.scores(key, t), key))

    def _lowest(self, protect: set, t: int) -> int:
        heap, rank, members = self.heap, self.scores.rank, self.members
        aside = []  # popped entries that stay
        best = limit = None
        while heap:
            r, key = heap[0]
            if key not in members or rank[key] != r:
                heapq.heappop(heap)  # stale
                continue
            aside.append(heapq.heappop(heap))
            if key in protect:
                continue
            if best is None:
                if r == -math.inf:  # a zero score: nothing is lower, and this is the lowest key
                    best = (0.0, key)
                    break
                best, limit = (self.scores(key, t), key), r + self.scores.close
            elif r <= limit:
                best = min(best, (self.scores(key, t), key))
            else:
                break
        for entry in aside:
            if entry[1] != best[1]:
                heapq.heappush(heap, entry)
        return best[1]


def _run_score(trace: _Trace, plan: _Plan, tick: _Ticks):
    """(hits [T, L], copies [T, L], admissions, prefetch used) under score eviction."""
    n_tokens, n_layers, k, width = trace.n_tokens, trace.n_layers, trace.k, trace.width
    n_experts = plan.popularity.shape[1]
    scores = _DecayedScores(plan.popularity, k, n_tokens)
    if plan.pooled:
        caches = [_ScoreCache(_initial_pool(plan.popularity, plan.slots).tolist(), scores)]
    else:
        order = popularity_order(plan.popularity)
        caches = [
            _ScoreCache((l * n_experts + order[l, : plan.slots[l]]).tolist(), scores) for l in range(n_layers)
        ]
    layer_base = (np.arange(n_layers) * n_experts)[None, :, None]
    route = (trace.ids + layer_base).tolist()
    if width:
        predicted = np.where(trace.first, trace.pred + (layer_base + n_experts), -1).tolist()
    admit = plan.admit.tolist()
    hits = [[0] * n_layers for _ in range(n_tokens)]
    copies = [[0] * n_layers for _ in range(n_tokens)]
    prefetched: set[int] = set()
    admissions = used = 0
    for t in range(n_tokens):
        tick(t, n_tokens)
        for l in range(n_layers):
            cache = caches[0] if plan.pooled else caches[l]
            resident = cache.members
            row = route[t][l]
            scores.routed(row, t)
            hit_keys = [key for key in row if key in resident]
            for key in hit_keys:
                cache.rescored(key)
                if key in prefetched:
                    used += 1
                    prefetched.discard(key)
            h = len(hit_keys)
            n_admit = max(min(admit[h], cache.capacity - h), 0)
            if n_admit:
                protect = set(row)
                for key in [key for key in row if key not in resident][:n_admit]:
                    prefetched.discard(cache.evict(protect, t))
                    cache.insert(key)
                admissions += n_admit
            hits[t][l] = h
            if width and l + 1 < n_layers:
                nxt = caches[0] if plan.pooled else caches[l + 1]
                wanted = [key for key in predicted[t][l] if key >= 0]
                kept = [key for key in wanted if key in nxt.members]
                wanted = [key for key in wanted if key not in nxt.members]
                in_use = {key for key in row if key in resident} if plan.pooled else set()
                n_copy = max(min(len(wanted), nxt.capacity - len(kept) - len(in_use)), 0)
                if n_copy:
                    guard = set(kept) | set(wanted) | in_use
                    for key in wanted[:n_copy]:
                        prefetched.discard(nxt.evict(guard, t))
                        nxt.insert(key)
                        prefetched.add(key)
                copies[t][l] = n_copy
    return np.array(hits), np.array(copies), admissions, used
