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
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from engine.policy import Allocation, Candidate, Eviction, Kind, Residency

SCORE_DECAY_PER_TOKEN = 0.9  # decayed routing score: a token's weight halves in ~7 tokens


def _stamp_type(n_stamps: int) -> tuple[type, int]:
    """Last-use stamps: int32 where they fit (quicker to search), else int64; the
    largest value marks an expert that is not resident."""
    dtype = np.int32 if n_stamps < np.iinfo(np.int32).max - 1 else np.int64
    return dtype, int(np.iinfo(dtype).max)


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


@dataclass(frozen=True)
class _Plan:
    candidate_id: str
    key: tuple  # equal keys: identical replays
    slots: np.ndarray  # int64 [L]
    popularity: np.ndarray
    static: bool  # the cache never changes
    pooled: bool = False
    eviction: Eviction | None = None
    admit: np.ndarray | None = None  # int64 [k+1]: misses admitted in a step with h hits
    width: int = 0  # predictions used per step (0: no prefetch)


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


class _Ticks:
    """Progress of run `index` of `runs`, each over the trace's tokens."""

    EVERY = 16  # tokens between reports

    def __init__(self, progress, index: int, runs: int):
        self.progress, self.index, self.runs = progress, index, runs

    def __call__(self, t: int, n_tokens: int) -> None:
        if self.progress is not None and t % self.EVERY == 0:
            self.progress(self.index * n_tokens + t, self.runs * n_tokens, "replaying")


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


def _histogram(hits: np.ndarray, prefetches: np.ndarray, k: int, budget: int) -> np.ndarray:
    """hits, prefetches: [T, L] per step (prefetches: copies issued during the step)."""
    n_layers = hits.shape[1]
    width = (k + 1) * (budget + 1)
    flat = np.arange(n_layers)[None, :] * width + hits.astype(np.int64) * (budget + 1) + prefetches
    counts = np.bincount(flat.ravel(), minlength=n_layers * width)
    return counts.reshape(n_layers, k + 1, budget + 1).astype(np.int64)


class _Histograms:
    """The state counts [L, k+1, P+1] of several replays, from per-step hits and
    copies that the replays write for a chunk of tokens at a time: memory stays
    the same however long the trace."""

    CHUNK = 256  # tokens

    def __init__(self, n_replays: int, n_layers: int, k: int, width: int):
        self.shape = (n_replays, n_layers, k + 1, width + 1)
        self.counts = np.zeros(int(np.prod(self.shape)), dtype=np.int64)
        self.hits = np.zeros((self.CHUNK, n_replays, n_layers), dtype=np.int16)
        self.copies = np.zeros_like(self.hits)  # issued during the step, for the next layer
        self.cell = (np.arange(n_replays * n_layers) * (k + 1) * (width + 1)).reshape(n_replays, n_layers)

    def slot(self, t: int) -> int:
        """Where token t's hits and copies go."""
        return t % self.CHUNK

    def token_done(self, t: int) -> None:
        if t % self.CHUNK == self.CHUNK - 1:
            self.flush(self.CHUNK)

    def flush(self, n: int) -> None:
        width = self.shape[3]
        flat = self.cell + self.hits[:n].astype(np.int64) * width + self.copies[:n]
        self.counts += np.bincount(flat.ravel(), minlength=self.counts.size)
        self.hits[:] = 0
        self.copies[:] = 0

    def finish(self, n_tokens: int) -> None:
        if n_tokens % self.CHUNK:
            self.flush(n_tokens % self.CHUNK)

    def of(self, j: int) -> np.ndarray:
        return self.counts.reshape(self.shape)[j]


# --- the trace, as the replays index it --------------------------------------------


class _Trace:
    """Routing and predictions as index arrays, for one prediction width P (the
    predictions a step uses): pred[t, l] are layer l's guesses for layer l + 1, and
    `first` marks the first occurrence of each (a step drops later duplicates).
    """

    def __init__(self, ids: np.ndarray, predicted: np.ndarray | None, width: int):
        self.n_tokens, self.n_layers, self.k = ids.shape
        self.width = width
        self.ids = ids.astype(np.intp)
        self.pred = self.first = None
        if width:
            pred = predicted[:, :, :width].astype(np.intp)
            # Duplicates within a row: only the first occurrence takes part.
            same = pred[:, :, :, None] == pred[:, :, None, :]  # [T, L, P, P]
            self.first = ~np.tril(same, -1).any(axis=3)
            self.pred = pred

    def add_keys(self, n_experts: int) -> None:
        """Add what a pool indexes by: keys number an expert across layers, layer * E +
        expert; pred_keys[t, l] are the keys layer l predicts (rows 0..L-2)."""
        n_layers, width = self.n_layers, self.width
        layer_base = (np.arange(n_layers, dtype=np.intp) * n_experts)[None, :, None]
        self.route_keys = self.ids + layer_base  # [T, L, k]
        if width:
            self.pred_keys = self.pred[:, : n_layers - 1] + layer_base[:, 1:]  # [T, L-1, P]
            self.pred_first = self.first[:, : n_layers - 1]
            # Routed keys that the previous layer predicted: resident by the time they
            # are routed (kept or copied; copies are never cut short in a fast pool).
            routed = self.route_keys[:, 1:, :, None]
            predicted = np.where(self.pred_first, self.pred_keys, -1)[:, :, None, :]
            self.was_predicted = np.zeros(self.route_keys.shape, dtype=bool)
            self.was_predicted[:, 1:] = (routed == predicted).any(axis=3)

    def step_keys(self, t: int) -> tuple[list[list[int]], list[list[int]] | None]:
        """Token t as lists (after `add_keys`): the keys each layer is routed to, and
        the keys each predicts for the next, first occurrences only (None: no prefetch)."""
        route = self.route_keys[t].tolist()
        if not self.width:
            return route, None
        predicted = np.where(self.pred_first[t], self.pred_keys[t], -1).tolist()
        return route, [[key for key in row if key >= 0] for row in predicted]


# --- per-layer LRU caches: every layer of every candidate at once -----------------


class _LayerLru:
    """Per-layer LRU caches of several candidates, one numpy row per (candidate, layer).

    A row's cache sees, per token, first the prefetch issued by the layer before,
    then its own routing; rows never interact, so each phase is a handful of array
    operations over all rows. Recency is a last-use stamp per (row, expert), unique
    within a row; evicting is taking the smallest stamps.
    """

    def __init__(self, trace: _Trace, plans: list[_Plan]):
        self.trace = trace
        n_layers, k, width = trace.n_layers, trace.k, trace.width
        n_experts = plans[0].popularity.shape[1]
        n_rows = len(plans) * n_layers
        self.n_experts = n_experts
        rows = np.arange(n_rows)
        self.layer = rows % n_layers
        self.row_base = (rows * n_experts)[:, None]  # flat index of (row, expert 0)
        self.capacity = np.concatenate([plan.slots for plan in plans]).astype(np.int64)
        admit = np.repeat(np.stack([plan.admit for plan in plans]), n_layers, axis=0)  # [rows, k+1]
        self.admit_flat = admit.ravel()
        self.admit_base = rows * (k + 1)
        self.stride = 2 * width + 2 * k  # stamps per token
        dtype, self.absent = _stamp_type(trace.n_tokens * self.stride)
        # One more entry than (row, expert) pairs: a sink that masked writes go to,
        # cheaper than picking out the entries to write.
        self.sink = n_rows * n_experts
        self.stamp = np.full(n_rows * n_experts + 1, self.absent, dtype=dtype)
        self.prefetched = np.zeros(n_rows * n_experts + 1, dtype=bool)
        for j, plan in enumerate(plans):
            self._fill(j, plan)
        # Rows that receive prefetch: every layer but the first, of prefetching plans.
        self.pre_rows = rows[(self.layer >= 1) & (width > 0)]
        self.pre_layer = self.layer[self.pre_rows] - 1  # the layer that predicts for them
        self.pre_base = self.row_base[self.pre_rows]
        self.pre_capacity = self.capacity[self.pre_rows]
        self.pre_column = np.broadcast_to(np.arange(width), (len(self.pre_rows), width))
        self.route_column = np.broadcast_to(np.arange(k), (n_rows, k))
        self.all_rows = rows
        self.histograms = _Histograms(len(plans), n_layers, k, width)
        # Copies into each row this token, then put where the histogram wants them:
        # with the layer that issued them, the one before.
        self.copies_in = np.zeros((len(plans), n_layers), dtype=np.int16)
        self.admitted = np.zeros(n_rows, dtype=np.int64)
        self.used = np.zeros(n_rows, dtype=np.int64)

    def _fill(self, j: int, plan: _Plan) -> None:
        """Most popular first; the i-th most popular gets stamp -(i+1) (older = smaller)."""
        n_layers, n_experts = plan.popularity.shape
        order = popularity_order(plan.popularity)
        rank = np.arange(n_experts)[None, :]
        keep = rank < plan.slots[:, None]
        flat = (j * n_layers + np.arange(n_layers))[:, None] * n_experts + order
        self.stamp[flat[keep]] = -(rank + 1).repeat(n_layers, 0)[keep]

    def run(self, tick: _Ticks) -> None:
        trace, histograms = self.trace, self.histograms
        for t in range(trace.n_tokens):
            tick(t, trace.n_tokens)
            base = t * self.stride
            i = histograms.slot(t)
            if trace.width and self.pre_rows.size:
                self._prefetch(t, base)
                histograms.copies[i, :, :-1] = self.copies_in[:, 1:]
            histograms.hits[i] = self._route(t, base + 2 * trace.width).reshape(histograms.hits.shape[1:])
            histograms.token_done(t)
        histograms.finish(trace.n_tokens)

    def _prefetch(self, t: int, base: int) -> None:
        rows, column = self.pre_rows, self.pre_column
        keys = self.trace.pred[t, self.pre_layer] + self.pre_base  # [S, P]
        first = self.trace.first[t, self.pre_layer]
        resident = self.stamp[keys] != self.absent
        kept = resident & first
        wanted = first & ~resident
        n_copy = np.minimum(wanted.sum(1), self.pre_capacity - kept.sum(1))
        np.maximum(n_copy, 0, out=n_copy)
        self.stamp[np.where(kept, keys, self.sink)] = base + column
        if n_copy.any():
            self._evict(rows, n_copy)
            new = np.where(wanted & (np.cumsum(wanted, axis=1) <= n_copy[:, None]), keys, self.sink)
            self.stamp[new] = base + keys.shape[1] + column
            self.prefetched[new] = True
        self.copies_in.reshape(-1)[rows] = n_copy

    def _route(self, t: int, base: int) -> np.ndarray:
        """The routing phase of token t; returns each row's hits."""
        trace = self.trace
        keys = trace.ids[t, self.layer] + self.row_base  # [rows, k]
        hit = self.stamp[keys] != self.absent
        h = hit.sum(1)
        self.used += (hit & self.prefetched[keys]).sum(1)
        hit_keys = np.where(hit, keys, self.sink)
        self.prefetched[hit_keys] = False
        self.stamp[hit_keys] = base + self.route_column
        n_admit = np.minimum(self.admit_flat[self.admit_base + h], self.capacity - h)
        np.maximum(n_admit, 0, out=n_admit)
        if n_admit.any():
            self._evict(self.all_rows, n_admit)
            miss = ~hit
            admitted = miss & (np.cumsum(miss, axis=1) <= n_admit[:, None])
            self.stamp[np.where(admitted, keys, self.sink)] = base + trace.k + self.route_column
            self.admitted += n_admit
        return h

    def _evict(self, rows: np.ndarray, n: np.ndarray) -> None:
        """Evict the n[i] least recently used experts of rows[i]: the smallest stamps,
        one argmin at a time (far cheaper than a partition for the few needed)."""
        busy = n > 0
        rows, n = rows[busy], n[busy]
        stamps = self.stamp[: self.sink].reshape(-1, self.n_experts)[rows]
        victims = []
        for i in range(int(n.max())):
            oldest = stamps.argmin(axis=1)
            victims.append(rows * self.n_experts + oldest)
            more = n > i + 1
            if not more.any():
                break
            rows, n, stamps, oldest = rows[more], n[more], stamps[more], oldest[more]
            stamps[np.arange(len(rows)), oldest] = self.absent
        flat = np.concatenate(victims)
        self.stamp[flat] = self.absent
        self.prefetched[flat] = False

    def result(self, j: int) -> tuple[np.ndarray, int, int]:
        """(counts, admissions, prefetch used) of plan j."""
        rows = slice(j * self.trace.n_layers, (j + 1) * self.trace.n_layers)
        return self.histograms.of(j), int(self.admitted[rows].sum()), int(self.used[rows].sum())


# --- LRU pools: a token at a time ---------------------------------------------------


def _initial_pool(popularity: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The pool's first contents, least recently used first: the least routed expert
    of any layer goes first (ties: the higher key)."""
    n_layers, n_experts = popularity.shape
    order = popularity_order(popularity)
    keep = np.arange(n_experts)[None, :] < slots[:, None]
    keys = (np.arange(n_layers)[:, None] * n_experts + order)[keep]
    return keys[np.lexsort((-keys, popularity.ravel()[keys]))]


class _Queues:
    """Each pool's residents, least recently used first, as at its last rebuild.

    One row per pool. An entry is current while its expert still has the stamp it had
    then; touching or evicting an expert makes its entry stale. The current entries
    are always the pool's oldest residents, in order: anything touched or admitted
    since is newer.
    """

    def __init__(self, stamp: np.ndarray, absent: int):
        n_pools, n_keys = stamp.shape
        self.absent = absent
        self.keys = np.zeros((n_pools, n_keys), dtype=np.intp)
        self.stamps = np.zeros((n_pools, n_keys), dtype=stamp.dtype)
        self.length = np.zeros(n_pools, dtype=np.intp)
        self.pos = np.zeros(n_pools, dtype=np.intp)  # entries before it are all stale
        self.density = np.full(n_pools, 0.5)  # share of entries still current, to size reads
        for j in range(n_pools):
            self.rebuild(j, stamp[j])

    def rebuild(self, j: int, stamp_row: np.ndarray) -> None:
        resident = np.flatnonzero(stamp_row != self.absent)
        keys = resident[np.argsort(stamp_row[resident])]
        self.keys[j, : len(keys)] = keys
        self.stamps[j, : len(keys)] = stamp_row[keys]
        self.length[j] = len(keys)
        self.pos[j] = 0

    def window(self, pools: np.ndarray, stamp: np.ndarray, width: int):
        """The next `width` entries of each pool: keys, positions, current [pools, width]."""
        positions = self.pos[pools, None] + np.arange(width)
        inside = positions < self.length[pools, None]
        np.minimum(positions, self.keys.shape[1] - 1, out=positions)
        rows = pools[:, None]
        keys = self.keys[rows, positions]
        current = inside & (stamp[rows, keys] == self.stamps[rows, positions])
        share = current.sum(axis=1) / width
        self.density[pools] = np.maximum(0.8 * self.density[pools] + 0.2 * share, 0.02)
        return keys, positions, current

    def current(self, j: int, stamp_row: np.ndarray, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, positions) of pool j's current entries among positions start..start+n-1."""
        stop = min(start + n, int(self.length[j]))
        keys = self.keys[j, start:stop]
        fresh = stamp_row[keys] == self.stamps[j, start:stop]
        return keys[fresh], start + np.flatnonzero(fresh)


_NEVER = np.iinfo(np.int32).max  # first-lookup time of an expert the token does not look up
_WINDOW = 1024  # queue entries read at once per pool; more, one pool at a time
_POOLS_BATCHED = 100  # pools x layers from which `_PoolLru` beats `_PoolSteps`


class _PoolLru:
    """LRU pools of several candidates, replayed a token at a time.

    Within a token, layer l's step happens at times 4l (routing looked up), 4l+1
    (admissions evict), 4l+2 (predictions for layer l+1 looked up), 4l+3 (copies
    evict). Each step's outcome follows from residency at the start of the token,
    except for an expert that the token evicts before it looks it up: evictions take
    the least recently used resident, so that is one of the pool's oldest experts,
    and it happens a few times a token. So: compute every step from the start-of-token
    state with numpy; walk the oldest residents in LRU order, giving each eviction its
    victim (skipping experts the token touched before that eviction); where a victim
    is looked up later in the token, correct that one step (a hit becomes a miss, a
    kept prediction a copy) and shift the later evictions; then write the token's
    evictions and touches back at once. A correction adds or removes evictions only at
    its own step, after the eviction that took the expert, so the victims already
    given stay right: one walk in LRU order settles the whole token.

    This needs copies never to be cut short (capacity >= predictions + k: smaller
    pools go to `_PoolSteps`) and enough old residents to evict: a token that runs
    out of them is replayed step by step (`_exact_token`).
    """

    def __init__(self, trace: _Trace, plans: list[_Plan]):
        self.trace = trace
        n_tokens, n_layers, k, width = trace.n_tokens, trace.n_layers, trace.k, trace.width
        n_experts = plans[0].popularity.shape[1]
        self.n_experts = n_experts
        self.n_keys = n_layers * n_experts
        n_pools = len(plans)
        self.capacity = np.array([int(plan.slots.sum()) for plan in plans], dtype=np.int64)
        self.admit = np.stack([plan.admit for plan in plans])  # [pools, k+1]
        # Stamps: token t's touches are t * stride + offset, in step order (hits,
        # admissions, kept predictions, copies); gaps do not matter, order does.
        step = 2 * k + 2 * width
        self.stride = n_layers * step
        dtype, self.absent = _stamp_type(n_tokens * self.stride)
        self.stamp = np.full((n_pools, self.n_keys), self.absent, dtype=dtype)
        for j, plan in enumerate(plans):
            keys = _initial_pool(plan.popularity, plan.slots)
            self.stamp[j, keys] = np.arange(len(keys)) - len(keys)
        self.prefetched = np.zeros((n_pools, self.n_keys), dtype=bool)
        self.queues = _Queues(self.stamp, self.absent)
        self.histograms = _Histograms(n_pools, n_layers, k, width)
        self.admitted = np.zeros(n_pools, dtype=np.int64)
        self.used = np.zeros(n_pools, dtype=np.int64)
        column_k = np.arange(k)[None, :]
        self.hit_offset = np.arange(n_layers)[:, None] * step + column_k
        self.admit_offset = self.hit_offset + k
        column_p = np.arange(width)[None, :]
        self.kept_offset = np.arange(n_layers - 1)[:, None] * step + 2 * k + column_p
        self.copy_offset = self.kept_offset + width

    def run(self, tick: _Ticks) -> None:
        for t in range(self.trace.n_tokens):
            tick(t, self.trace.n_tokens)
            token = self._outcome_from_start(t)
            victims, step_by_step = self._victims(token)
            fast = np.ones(len(self.capacity), dtype=bool)
            fast[step_by_step] = False
            self._write_back(t, token, victims, fast)
            for j in step_by_step:
                self._exact_token(j, t)
            self.histograms.token_done(t)
        self.histograms.finish(self.trace.n_tokens)

    def result(self, j: int) -> tuple[np.ndarray, int, int]:
        """(counts, admissions, prefetch used) of plan j."""
        return self.histograms.of(j), int(self.admitted[j]), int(self.used[j])

    def _outcome_from_start(self, t: int) -> "_TokenOutcome":
        """Every step of token t as if nothing it looks up were evicted before."""
        trace, n_layers = self.trace, self.trace.n_layers
        token = _TokenOutcome(t, trace)
        route = trace.route_keys[t]  # [L, k]
        resident = self.stamp[:, route] != self.absent  # [pools, L, k]
        token.prefetched = self.prefetched[:, route]
        first_lookup = np.full(self.n_keys, _NEVER, dtype=np.int32)
        first_lookup[route] = 4 * np.arange(n_layers)[:, None]
        if trace.width:
            predicted, first = trace.pred_keys[t], trace.pred_first[t]  # [L-1, P]
            token.kept = (self.stamp[:, predicted] != self.absent) & first
            token.wanted = first & ~token.kept
            was_predicted = trace.was_predicted[t]
            token.hit = resident | was_predicted  # kept, or copied in time
            token.via_copy = was_predicted & ~resident
            # Predictions are looked up a step before routing: that comes first.
            predicted_at = np.broadcast_to(4 * np.arange(n_layers - 1)[:, None] + 2, first.shape)
            first_lookup[predicted[first]] = predicted_at[first]
        else:
            token.hit = resident
        token.first_lookup = first_lookup
        token.h = token.hit.sum(axis=2)
        token.n_admit = self._admissions(np.arange(len(self.capacity))[:, None], token.h)
        # Evictions per slot: 2l admissions of step l, 2l+1 its copies.
        token.evictions = np.zeros((len(self.capacity), 2 * n_layers), dtype=np.int64)
        token.evictions[:, 0::2] = token.n_admit
        if trace.width:
            token.evictions[:, 1:-1:2] = token.wanted.sum(axis=2)
        return token

    def _admissions(self, pools, h):
        n = np.minimum(self.admit[pools, h], self.capacity[pools] - h)
        return np.maximum(n, 0)

    def _victims(self, token: "_TokenOutcome") -> tuple[np.ndarray, list[int]]:
        """Every pool's victims in the token (flat keys), correcting the token's outcome
        where a victim is looked up after its eviction; and the pools to replay step by
        step instead (too few old residents)."""
        step_by_step: list[int] = []
        totals = token.evictions.sum(axis=1)
        pools = np.flatnonzero(totals > 0)
        queues = self.queues
        # Queue entries to read: enough, mostly (a pool that needs more reads on alone).
        reads = np.minimum(1.5 * totals[pools] / queues.density[pools] + 32, min(_WINDOW, self.n_keys))
        reads = reads.astype(np.intp)
        # A queue about to run out is rebuilt now, from the same start-of-token state.
        for j in pools[queues.length[pools] - queues.pos[pools] < reads].tolist():
            queues.rebuild(j, self.stamp[j])
        victims = [np.zeros(0, dtype=np.intp)]
        # Many pools: those that need about as much are read together, as wide as the
        # most of them; a few: all at once (fewer, larger array operations).
        bucket = np.ceil(np.log2(np.maximum(reads, 1))).astype(int) if len(pools) > 16 else np.zeros(len(pools))
        for b in np.unique(bucket).tolist():
            group = bucket == b
            found, slow = self._victims_of(pools[group], int(reads[group].max()), token, totals)
            victims += found
            step_by_step += slow
        return np.concatenate(victims), step_by_step

    def _victims_of(self, pools: np.ndarray, width: int, token: "_TokenOutcome", totals: np.ndarray):
        """`_victims` for some pools, reading `width` queue entries of each at once."""
        queues = self.queues
        step_by_step = []
        keys, positions, current = queues.window(pools, self.stamp, width)
        lookup = token.first_lookup[keys]
        taken = current & (lookup == _NEVER)  # not looked up by the token: evicted in turn
        before = np.cumsum(taken, axis=1)
        # The few old residents the token looks up, in LRU order, pool by pool: each is
        # touched before its turn (not a victim) or evicted before it is looked up.
        late = [0] * len(pools)
        times = token.eviction_times(pools)  # each pool's, in order
        looked_up = current & ~taken
        rows, cols = np.nonzero(looked_up)
        entries = zip(rows.tolist(), cols.tolist(), before[rows, cols].tolist(), lookup[rows, cols].tolist())
        for r, c, n_before, when in entries:
            pool_times, number = times[r], n_before + late[r]  # the eviction it would take
            if number < len(pool_times) and when > pool_times[number]:
                late[r] += 1
                taken[r, c] = True
                self._evicted_before_lookup(int(pools[r]), int(keys[r, c]), token, pool_times)
        total = np.array([len(t) for t in times])
        count = np.cumsum(taken, axis=1)
        served = count[:, -1] >= total
        chosen = taken & (count <= total[:, None]) & served[:, None]
        victims = [(keys + (pools * self.n_keys)[:, None])[chosen]]
        moved = served & (total > 0)
        last = width - 1 - np.argmax(chosen[:, ::-1], axis=1)
        queues.pos[pools[moved]] = positions[moved, last[moved]] + 1
        for r in np.flatnonzero(~served).tolist():
            j = int(pools[r])
            seen = np.flatnonzero(current[r])
            # Its window fell short of its evictions, so every entry in it came before
            # its last victim: the looked-up ones not taken were touched in time.
            state = _Walk(
                keys=[keys[r, seen]], positions=[positions[r, seen]],
                skipped=np.flatnonzero(looked_up[r, seen] & ~taken[r, seen]).tolist(),
                n_taken=int(count[r, -1]), cursor=int(queues.pos[j]) + width,
                times=times[r],
            )
            found = self._walk_on(j, token, state)
            if found is None:
                step_by_step.append(j)
            else:
                victims.append(found + j * self.n_keys)
        return victims, step_by_step

    def _walk_on(self, j: int, token: "_TokenOutcome", walk: "_Walk") -> np.ndarray | None:
        """Continue pool j's walk past the first window, reading its queue in chunks.
        None when the pool has too few old residents for the token's evictions."""
        queues, stamp_row, first_lookup = self.queues, self.stamp[j], token.first_lookup
        n_seen = sum(len(keys) for keys in walk.keys)
        rebuilt = False
        while walk.n_taken < len(walk.times):
            want = int((len(walk.times) - walk.n_taken) / queues.density[j]) + 16
            chunk, where = queues.current(j, stamp_row, walk.cursor, want)
            walk.cursor += want
            if not chunk.size and walk.cursor >= queues.length[j]:
                if rebuilt:
                    return None
                # Out of entries: rebuild from the same start-of-token state. The
                # entries seen so far are its oldest residents, so they lead it.
                queues.rebuild(j, stamp_row)
                walk.keys, walk.positions = [np.concatenate(walk.keys)], [np.arange(n_seen)]
                walk.cursor, rebuilt = n_seen, True
                continue
            lookup = first_lookup[chunk]
            looked_up = np.flatnonzero(lookup != _NEVER).tolist()
            when = lookup[looked_up].tolist()
            late = 0
            for n_before, i in enumerate(looked_up):
                number = walk.n_taken + (i - n_before) + late  # the eviction it would take, from 0
                if number >= len(walk.times):
                    break
                if when[n_before] < walk.times[number]:
                    walk.skipped.append(n_seen + i)
                    continue
                late += 1
                self._evicted_before_lookup(j, int(chunk[i]), token, walk.times)
            walk.n_taken += len(chunk) - len(looked_up) + late
            n_seen += len(chunk)
            walk.keys.append(chunk)
            walk.positions.append(where)
        # The victims: the first len(times) entries not skipped (every skipped one
        # comes before the last victim).
        cut = len(walk.times) + len(walk.skipped)
        queues.pos[j] = int(np.concatenate(walk.positions)[cut - 1]) + 1
        return np.delete(np.concatenate(walk.keys)[:cut], walk.skipped)

    def _evicted_before_lookup(self, j: int, key: int, token: "_TokenOutcome", times: list) -> None:
        """Correct pool j's token for `key`, which was evicted before the token first
        looks it up, and `times` (the pool's eviction times, sorted) to match."""
        layer = key // self.n_experts
        route = token.route_rows()
        if token.first_lookup[key] == 4 * layer - 2:
            # Predicted by the layer before: copied instead of kept, one more eviction;
            # routed next step, it is a hit either way, now a prefetched one.
            p = token.pred_rows()[layer - 1].index(key)
            token.kept[j, layer - 1, p] = False
            token.wanted[j, layer - 1, p] = True
            if key in route[layer]:
                token.via_copy[j, layer, route[layer].index(key)] = True
            slot, delta = 2 * layer - 1, 1
        else:
            # Routed: a miss instead of a hit, which can change how many are admitted.
            token.hit[j, layer, route[layer].index(key)] = False
            token.h[j, layer] -= 1
            n_admit = int(self._admissions(j, int(token.h[j, layer])))
            slot, delta = 2 * layer, n_admit - int(token.n_admit[j, layer])
            token.n_admit[j, layer] = n_admit
        time = 2 * slot + 1
        if delta > 0:
            at = bisect_left(times, time)
            times[at:at] = [time] * delta
        elif delta < 0:
            at = bisect_left(times, time)
            del times[at : at - delta]

    def _write_back(self, t: int, token: "_TokenOutcome", victims: np.ndarray, fast: np.ndarray) -> None:
        """Apply the token to the pools in `fast`: evictions, then touches in order."""
        trace = self.trace
        stamp, prefetched = self.stamp.reshape(-1), self.prefetched.reshape(-1)
        stamp[victims] = self.absent
        prefetched[victims] = False
        base = (np.arange(len(self.capacity)) * self.n_keys)[:, None, None]
        clock = t * self.stride
        hit, n_admit = token.hit, token.n_admit
        if not fast.all():  # leave the others to `_exact_token`
            hit, n_admit = hit & fast[:, None, None], n_admit * fast[:, None]
        if trace.width:
            keys = trace.pred_keys[t][None] + base
            copied = token.wanted if fast.all() else token.wanted & fast[:, None, None]
            touched = copied | (token.kept if fast.all() else token.kept & fast[:, None, None])
            offset = np.where(copied, self.copy_offset, self.kept_offset)  # copies are never cut short
            stamp[keys[touched]] = clock + offset[touched]
            prefetched[keys[copied]] = True
            self.histograms.copies[self.histograms.slot(t), fast, :-1] = token.wanted[fast].sum(axis=2)
        miss = ~token.hit
        admitted = miss & (np.cumsum(miss, axis=2) <= n_admit[:, :, None])
        touched = hit | admitted
        keys = trace.route_keys[t][None] + base
        # A predicted expert is touched again when routed: this later stamp wins.
        offset = np.where(admitted, self.admit_offset, self.hit_offset)
        stamp[keys[touched]] = clock + offset[touched]
        prefetched[keys[hit]] = False
        self.histograms.hits[self.histograms.slot(t), fast] = token.h[fast]
        self.admitted += n_admit.sum(axis=1)
        used = token.prefetched | token.via_copy if trace.width else token.prefetched
        self.used += (hit & used).sum(axis=(1, 2))

    def _exact_token(self, j: int, t: int) -> None:
        """Pool j through token t one step at a time (`_PoolSteps`), then back to stamps."""
        trace, stamp_row, flags = self.trace, self.stamp[j], self.prefetched[j]
        resident = np.flatnonzero(stamp_row != self.absent)
        steps = _PoolSteps(
            resident[np.argsort(stamp_row[resident])].tolist(), int(self.capacity[j]),
            self.admit[j].tolist(), np.flatnonzero(flags).tolist(),
        )
        route, predictions = trace.step_keys(t)
        hits, copies = steps.token(route, predictions)
        i = self.histograms.slot(t)
        self.histograms.hits[i, j], self.histograms.copies[i, j] = hits, copies
        self.admitted[j] += steps.admitted
        self.used[j] += steps.used
        # What the token touched is the tail of the LRU order: each expert it looks
        # up and finds resident moves to the end, and so does each it brings in.
        looked_up = {key for row in route for key in row}
        looked_up.update(key for row in predictions or () for key in row)
        touched = []
        for key in reversed(steps.cache):
            if key not in looked_up:
                break
            touched.append(key)
        after = np.full_like(stamp_row, self.absent)
        kept = list(steps.cache)
        after[kept] = stamp_row[kept]
        after[touched[::-1]] = t * self.stride + np.arange(len(touched))
        stamp_row[:] = after
        flags[:] = False
        flags[list(steps.prefetched)] = True


class _PoolSteps:
    """One LRU pool, one step at a time, as the rules read: an OrderedDict, least
    recently used first. It replays pools too small for `_PoolLru`, pools too few for
    its numpy work to pay, and any token `_PoolLru` cannot take."""

    def __init__(self, keys: list[int], capacity: int, admit: list[int], prefetched=()):
        self.cache = OrderedDict.fromkeys(keys)
        self.capacity = capacity
        self.admit = admit
        self.prefetched = set(prefetched)
        self.admitted = self.used = 0

    def token(self, route: list[list[int]], predictions: list[list[int]] | None) -> tuple[list, list]:
        """One token: route[l], the keys layer l is routed to; predictions[l], the keys
        it predicts for layer l+1, first occurrences only (None: no prefetch).
        Returns each step's hits and copies."""
        cache, prefetched, capacity, admit = self.cache, self.prefetched, self.capacity, self.admit
        touch, pop = cache.move_to_end, cache.popitem
        n_layers = len(route)
        hits, copies = [0] * n_layers, [0] * n_layers
        for layer, row in enumerate(route):
            h = 0
            for key in row:
                if key in cache:
                    touch(key)
                    h += 1
                    if key in prefetched:
                        self.used += 1
                        prefetched.discard(key)
            hits[layer] = h
            n_admit = max(min(admit[h], capacity - h), 0)
            if n_admit:
                for key in [key for key in row if key not in cache][:n_admit]:
                    prefetched.discard(pop(last=False)[0])
                    cache[key] = None
                self.admitted += n_admit
            if predictions is not None and layer + 1 < n_layers:
                kept, wanted = 0, []
                for key in predictions[layer]:
                    if key in cache:
                        touch(key)  # about to be used: protect it
                        kept += 1
                    else:
                        wanted.append(key)
                n_copy = max(min(len(wanted), capacity - kept - h - n_admit), 0)
                for key in wanted[:n_copy]:
                    prefetched.discard(pop(last=False)[0])
                    cache[key] = None
                    prefetched.add(key)
                copies[layer] = n_copy
        return hits, copies


def _run_pool_steps(trace: _Trace, plan: _Plan, tick: _Ticks) -> tuple[np.ndarray, int, int]:
    """(counts, admissions, prefetch used) of one pool replayed step by step."""
    initial = _initial_pool(plan.popularity, plan.slots).tolist()
    steps = _PoolSteps(initial, len(initial), plan.admit.tolist())
    hits, copies = [], []
    for t in range(trace.n_tokens):
        tick(t, trace.n_tokens)
        h, c = steps.token(*trace.step_keys(t))
        hits.append(h)
        copies.append(c)
    return _histogram(np.array(hits), np.array(copies), trace.k, plan.width), steps.admitted, steps.used


@dataclass
class _Walk:
    """Where one pool's walk through its oldest residents stands."""

    keys: list  # chunks of current entries seen, in LRU order
    positions: list  # their queue positions
    skipped: list  # indices (into the entries seen) touched before their turn came
    n_taken: int  # entries seen that are victims
    cursor: int  # next queue position to read
    times: list  # the token's eviction times, in order (one per eviction)


class _TokenOutcome:
    """One token's steps for every pool: masks [pools, L, k] over the routed experts,
    [pools, L-1, P] over the predictions, counts [pools, L]."""

    def __init__(self, t: int, trace: _Trace):
        self.t = t
        self.trace = trace
        self._route_rows = self._pred_rows = None

    def eviction_times(self, pools: np.ndarray) -> list[list[int]]:
        """Each pool's evictions in the token, as times in order (slot s evicts at 2s + 1)."""
        counts = self.evictions[pools]
        every = np.repeat(np.tile(2 * np.arange(counts.shape[1]) + 1, len(pools)), counts.ravel()).tolist()
        ends = np.cumsum(counts.sum(axis=1)).tolist()
        return [every[start:end] for start, end in zip([0] + ends[:-1], ends)]

    def route_rows(self) -> list[list[int]]:
        if self._route_rows is None:
            self._route_rows = self.trace.route_keys[self.t].tolist()
        return self._route_rows

    def pred_rows(self) -> list[list[int]]:
        if self._pred_rows is None:
            self._pred_rows = self.trace.pred_keys[self.t].tolist()
        return self._pred_rows


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
