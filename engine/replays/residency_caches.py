"""The caches a mutable residency is made of: LRU, and the decayed routing score.

A cache holds keys (layer * E + expert); `engine.replays.residency.StepwiseResidency` applies
the step rules to them and is the only thing that changes them. Each cache answers
membership (`members`), evicts one resident (`evict`, sparing the keys `protection`
names) and takes the key that replaces it (`insert`); one whose order depends on use
(`touches`) is told of hits (`hit`) and kept predictions (`keep`). The rules never ask
a cache for more evictions than it has unprotected residents.

The decayed score, the one formula behind score eviction: every routed expert,
resident or not, scores 1 per use, and every score decays by SCORE_DECAY_PER_TOKEN per
token; an expert starts from its steady state on the profile (`initial_scores`).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

SCORE_DECAY_PER_TOKEN = 0.9  # decayed routing score: a token's weight halves in ~7 tokens


def initial_scores(popularity: np.ndarray, k: int) -> np.ndarray:
    """Every expert's score before the first token: float64 [L * E], layer-major.

    The steady state of an expert routed with probability q per token is q / (1 - decay);
    q is its routing count over the profile's tokens."""
    profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
    return (popularity / profile_tokens / (1 - SCORE_DECAY_PER_TOKEN)).ravel()


class LruCache:
    """Evicts the least recently used. An OrderedDict, least recently used first; hits,
    kept predictions and inserted keys go to the end, so the keys a step protects are
    never at the front when that step evicts."""

    touches = True

    def __init__(self, keys):
        self.order = OrderedDict.fromkeys(keys)
        self.capacity = len(self.order)
        self.members = self.order
        self.hit = self.keep = self.order.move_to_end
        self.insert = self.order.setdefault  # the key is never resident: appended

    def protection(self, row, predicted):
        return None  # recency protects

    def evict(self, protect, t: int) -> int:
        return self.order.popitem(last=False)[0]


class DecayedScores:
    """The decayed routing score of every expert, at any token.

    A score is kept as (value, token of its last use) and decayed when read. The values
    after each use depend on the routing alone, never on what a cache holds, so they are
    computed ahead, a chunk of tokens at a time with numpy, with exactly the operations
    of the plain formula (powers of the decay from one table), and a step only copies
    them in (`routed`). All scores decay at the same rate, so their order changes only
    when they are used: `rank` = log(score) - token * log(decay) orders them at any
    time, which is what the caches' heaps are keyed on.
    """

    CHUNK = 256  # tokens computed ahead at a time

    def __init__(self, popularity: np.ndarray, k: int, route_keys: np.ndarray):
        self.route_keys = route_keys  # [T, L, k] keys each step is routed to
        n_tokens, self.n_layers = route_keys.shape[:2]
        self._step = -1  # the last step routed: token * L + layer
        value = initial_scores(popularity, k)
        self.value = value.tolist()
        self.time = [0] * value.size
        self.powers = [SCORE_DECAY_PER_TOKEN**n for n in range(n_tokens + 1)]
        self.log_decay = math.log(SCORE_DECAY_PER_TOKEN)
        self.rank = [math.log(v) if v > 0 else -math.inf for v in self.value]
        self._value, self._time = value.copy(), np.zeros(value.size, dtype=np.int64)
        self._powers = np.array(self.powers)
        self._chunk_start, self._rows = 0, []
        # Whether a token's keys are distinct in every layer, from a sorted copy a few MiB at a time
        self._distinct = np.empty(n_tokens, dtype=bool)
        step = max(1, 2**21 // max(route_keys.shape[1] * route_keys.shape[2], 1))
        for t0 in range(0, n_tokens, step):
            ordered_keys = np.sort(route_keys[t0:t0 + step], axis=2)
            self._distinct[t0:t0 + step] = ~(ordered_keys[:, :, 1:] == ordered_keys[:, :, :-1]).any(axis=(1, 2))
        # The rank order is the order of the scores as computed only while no positive
        # score underflows; past that (very long traces of rarely routed experts),
        # evictions scan the resident set.
        smallest = min([v for v in self.value if v > 0] + [1.0])
        self.ordered = math.log(smallest) + n_tokens * self.log_decay > -575.0  # 1e-250
        # Ranks this close may hold scores in either order once rounded: compare those exactly.
        self.close = 1e-9 * (1.0 + abs(math.log(smallest)) + n_tokens * abs(self.log_decay))

    def __call__(self, key: int, t: int) -> float:
        return self.value[key] * self.powers[t - self.time[key]]

    def routed(self, t: int, layer: int, row) -> None:
        """Step (t, layer) routed `row` (the keys route_keys[t, layer]): each gains 1.

        Steps come one at a time, in order; several caches replayed in lockstep share
        one DecayedScores, and the second call for a step changes nothing."""
        step = t * self.n_layers + layer
        if step == self._step:
            return
        if step != self._step + 1:
            raise ValueError(f"decayed scores advance one step at a time: step {step} after {self._step}")
        self._step = step
        if not self._chunk_start <= t < self._chunk_start + len(self._rows):
            self._compute_ahead(t)
        values, ranks = self._rows[t - self._chunk_start]
        value, time, rank = self.value, self.time, self.rank
        for key, v, r in zip(row, values[layer], ranks[layer]):
            value[key] = v
            time[key] = t
            rank[key] = r

    def _compute_ahead(self, start: int) -> None:
        """Scores after every use in tokens start .. start + CHUNK - 1 (in token order)."""
        if start != self._chunk_start + len(self._rows):
            raise ValueError("decayed scores are read in token order")
        keys_by_token = self.route_keys[start : start + self.CHUNK]
        value, time, powers = self._value, self._time, self._powers
        values = np.empty(keys_by_token.shape)
        for i, keys in enumerate(keys_by_token):
            t = start + i
            # One use per key in a valid trace; a key routed twice in a layer gains 1
            # per use, in routing order, so then the columns go one at a time.
            for j in (slice(None),) if self._distinct[t] else range(keys.shape[1]):
                column = keys[:, j]
                new = value[column] * powers[t - time[column]] + 1.0
                value[column] = new
                time[column] = t
                values[i][:, j] = new
        ranks = np.log(values) - (start + np.arange(len(values)))[:, None, None] * self.log_decay
        self._chunk_start, self._rows = start, list(zip(values.tolist(), ranks.tolist()))


class ScoreCache:
    """Evicts the unprotected resident with the lowest decayed score, ties to the lowest key.

    A heap of (rank, key) with exactly one entry per resident, which may be older than
    its rank: ranks only grow (a use adds to the score), so an old entry is a lower
    bound, and it is brought up to date only when it reaches the top. Hits then cost
    nothing, and the heap never holds more entries than residents.
    """

    touches = False

    def __init__(self, keys, scores: DecayedScores):
        self.members = set(keys)
        self.capacity = len(self.members)
        self.scores = scores
        self.heap = [(scores.rank[key], key) for key in self.members]
        heapq.heapify(self.heap)

    def protection(self, row, predicted) -> set:
        return set(row) if predicted is None else set(row).union(predicted)

    def insert(self, key: int) -> None:
        self.members.add(key)
        if self.scores.ordered:
            heapq.heappush(self.heap, (self.scores.rank[key], key))

    def evict(self, protect: set, t: int) -> int:
        if self.scores.ordered:
            victim = self._lowest(protect, t)
        else:
            scores = self.scores
            victim = min((key for key in self.members if key not in protect), key=lambda key: (scores(key, t), key))
        self.members.discard(victim)
        return victim

    def _lowest(self, protect: set, t: int) -> int:
        heap, rank, scores = self.heap, self.scores.rank, self.scores
        aside = []  # popped entries that stay
        best = limit = None
        while heap:
            r, key = heap[0]
            if rank[key] != r:  # used since: up to date, and back in its place
                heapq.heapreplace(heap, (rank[key], key))
                continue
            if key in protect:
                aside.append(heapq.heappop(heap))
                continue
            if best is None:
                if r == -math.inf:  # a zero score: nothing is lower, and this is the lowest key
                    best = (0.0, key)
                    heapq.heappop(heap)
                    break
                best, limit = (scores(key, t), key), r + scores.close
                aside.append(heapq.heappop(heap))
            elif r <= limit:
                best = min(best, (scores(key, t), key))
                aside.append(heapq.heappop(heap))
            else:
                break
        for entry in aside:
            if entry[1] != best[1]:
                heapq.heappush(heap, entry)
        return best[1]
