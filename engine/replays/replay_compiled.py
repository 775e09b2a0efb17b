"""LRU caches replayed by the compiled loops of `engine.replays.replay_kernels` (numba).

`engine.replays.replay` sends every LRU plan, per-layer or pooled, here (`replay_lru`)
when the routing and the guesses are expert ids of the model (`fits`); bare arrays that
are not go to the step-wise residency, which takes any key.

- `_CompiledLayerLru`: per-layer caches. Under the step rule a layer's cache is changed
  only by its own step (hits, admissions) and by the copies of the step before it
  (guesses of the layer before, capped by its own capacity); no step looks into
  another layer's cache. So a layer's cache depends only on its layer, capacity,
  admissions and prediction width (and the popularity it starts from), and is the same
  in every plan that has it: each such row is replayed once, however many candidates
  and budgets share it, and a plan's state counts are put together from its rows,
  step (t, l) pairing row l's hits with the copies row l + 1 received.
- `_CompiledPool`: pools, one cache per plan. Pools under the same rules (capacity,
  admissions, width) that started apart (uniform and nonuniform fill the same total
  differently) often come to hold the same experts in the same order, with the same
  ones prefetched; from then on they do the same. Every chunk of tokens each such pool
  is compared with the first of its group, and once equal it stops and takes the rest
  of its counts from that one.

Both replay a chunk of tokens at a time (progress, cancellation, bounded memory), their
work in one queue for every CPU (`run_engines`).
"""

from __future__ import annotations

import numpy as np

from engine.replays.compiled import in_parallel, kernels, parts, run_tasks, threads
from engine.replays.replay_common import ReplayPlan, Ticks
from engine.replays.residency import initial_pool, popularity_order

CHUNK = 512  # tokens between progress reports (and, in pools, comparisons)


def run_engines(engines: list, n_tokens: int, tick: Ticks) -> None:
    """Replay the engines' caches a chunk of tokens at a time, the work of all of them
    shared by the threads as it comes (a pool is one task: several keep every CPU busy)."""
    for engine in engines:
        engine.start()
    for t0 in range(0, n_tokens, CHUNK):
        tick(t0, n_tokens)
        t1 = min(t0 + CHUNK, n_tokens)
        run_tasks([task for engine in engines for task in engine.tasks(t0, t1)])
        for engine in engines:
            engine.chunk_done(t0, t1)
        tick.reached(t1, n_tokens)  # a short trace is one chunk: say it is done (or stop here)


def replay_lru(ids: np.ndarray, predicted: np.ndarray | None, plans: list[ReplayPlan],
               tick: Ticks) -> dict[tuple, tuple[np.ndarray, int, int]]:
    """(counts, admissions, prefetch used) by plan key of LRU `plans`: per-layer caches in
    one engine (each distinct layer cache once), pools in another."""
    guesses = _Guesses(ids, predicted, max(plan.width for plan in plans))
    engines = [
        engine(guesses, batch)
        for engine, batch in (
            (_CompiledLayerLru, [plan for plan in plans if not plan.pooled]),
            (_CompiledPool, [plan for plan in plans if plan.pooled]),
        )
        if batch
    ]
    run_engines(engines, ids.shape[0], tick)
    return {plan.key: engine.result(j) for engine in engines for j, plan in enumerate(engine.plans)}


def fits(ids: np.ndarray, predicted: np.ndarray | None, n_experts: int, width: int) -> bool:
    """Whether the routing and the guesses a replay uses are expert ids of the model (a
    RoutingTrace's always are; bare arrays are checked, as the loops index by them)."""
    if ids.size and (ids.min() < 0 or ids.max() >= n_experts):
        return False
    if width and ids.shape[1] > 1:
        used = predicted[:, :-1, :width]
        return not used.size or bool(used.min() >= 0 and used.max() < n_experts)
    return True


def key_type(n_keys: int) -> type:
    """The unsigned type the loops index by for keys 0..n_keys: numba checks every
    signed index for a negative value to wrap; unsigned ones it does not, which made
    the per-layer loop about a third faster and the pool loop about a fifth."""
    return np.uint16 if n_keys < np.iinfo(np.uint16).max else np.uint32


class _Guesses:
    """Routing and guesses as unsigned arrays (`key_type`), guesses cut to the widest
    plan's width (`width`, at least any plan's), with their first occurrences;
    layer-major copies made on request. Guesses of the last layer are never read (they
    may be -1: any value will do)."""

    def __init__(self, ids: np.ndarray, predicted: np.ndarray | None, width: int):
        n_tokens, n_layers = ids.shape[:2]
        used = predicted[:, :-1, :width] if width else ids[:0]
        dtype = key_type(max(int(ids.max(initial=0)), int(used.max(initial=0))) + 1)
        self.ids = np.ascontiguousarray(ids, dtype=dtype)
        if width:
            self.pred = np.ascontiguousarray(predicted[:, :, :width]).astype(dtype, casting="unsafe")
            self.first = kernels().first_guesses(self.pred)
        else:
            self.pred = np.zeros((n_tokens, n_layers, 1), dtype=dtype)
            self.first = np.zeros((n_tokens, n_layers, 1), dtype=np.uint8)

    def layer_major(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ids, pred, first as [L, T, ...]: a per-layer cache reads one layer's rows in turn."""
        return tuple(np.ascontiguousarray(a.transpose(1, 0, 2)) for a in (self.ids, self.pred, self.first))


class _Lists:
    """The LRU lists of several caches over `n_keys` keys each, filled most recent first."""

    def __init__(self, newest_first: list[np.ndarray], n_keys: int):
        n = len(newest_first)
        self.nxt = np.zeros((n, n_keys + 1), dtype=key_type(n_keys + 1))
        self.prv = np.zeros_like(self.nxt)
        self.flags = np.zeros((n, n_keys), dtype=np.uint8)
        lengths = np.array([len(keys) for keys in newest_first], dtype=np.int64)
        table = np.zeros((n, max(int(lengths.max(initial=0)), 1)), dtype=np.int32)
        for i, keys in enumerate(newest_first):
            table[i, : len(keys)] = keys
        kernels().fill(table, lengths, self.nxt, self.prv, self.flags)


class _CompiledLayerLru:
    """Per-layer LRU caches of several plans, each distinct (popularity, layer, capacity,
    admissions, width) row replayed once."""

    def __init__(self, guesses: _Guesses, plans: list[ReplayPlan]):
        self.plans = plans
        self.n_tokens, self.n_layers, self.k = guesses.ids.shape
        self.width = max(plan.width for plan in plans)
        self.guesses = guesses
        rows: dict[tuple, int] = {}
        self.plan_rows = np.zeros((len(plans), self.n_layers), dtype=np.int64)
        for p, plan in enumerate(plans):
            admit = tuple(int(a) for a in plan.admit)
            for layer, capacity in enumerate(plan.slots.tolist()):
                key = (id(plan.popularity), layer, capacity, admit, plan.width)
                self.plan_rows[p, layer] = rows.setdefault(key, len(rows))
        self.n_rows = len(rows)
        orders = {id(plan.popularity): popularity_order(plan.popularity) for plan in plans}
        keys = list(rows)
        self.layer = np.array([key[1] for key in keys], dtype=np.int64)
        self.capacity = np.array([key[2] for key in keys], dtype=np.int64)
        self.admit = np.array([key[3] for key in keys], dtype=np.int64).reshape(len(keys), self.k + 1)
        self.row_width = np.array([key[4] for key in keys], dtype=np.int64)
        n_experts = plans[0].popularity.shape[1]
        # A layer's cache starts with its most popular experts, the most popular newest.
        self.lists = _Lists([orders[source][layer, :c] for source, layer, c, _, _ in keys], n_experts)
        # A step (t, l) of a plan is counted by its pair of rows: layer l's and the next
        # layer's (whose copies it issued); plans that share a pair share its counts.
        pairs: dict[tuple[int, int], int] = {}
        self.plan_pairs = np.zeros_like(self.plan_rows)
        for p, plan in enumerate(plans):
            rows_of = self.plan_rows[p].tolist()
            for layer in range(self.n_layers):
                after = rows_of[layer + 1] if layer + 1 < self.n_layers and plan.width else -1
                self.plan_pairs[p, layer] = pairs.setdefault((rows_of[layer], after), len(pairs))
        self.pairs = np.array(list(pairs), dtype=np.int64).reshape(len(pairs), 2)
        self.counts = np.zeros((len(pairs), self.k + 1, self.width + 1), dtype=np.int64)
        self.admitted = np.zeros(self.n_rows, dtype=np.int64)
        self.used = np.zeros(self.n_rows, dtype=np.int64)

    def start(self) -> None:
        """Before the first chunk: the routing layer-major, the chunk's buffers."""
        self.layer_major = self.guesses.layer_major()
        size = min(CHUNK, max(self.n_tokens, 1))
        self.hits = np.zeros((self.n_rows, size), dtype=np.int16)
        self.copies = np.zeros_like(self.hits)
        # Rows of one layer near each other: they read the same routing, still in cache.
        self.row_parts = parts(np.argsort(self.layer, kind="stable"), 4 * threads())

    def tasks(self, t0: int, t1: int) -> list:
        """The chunk's independent work: groups of rows."""
        run, (ids, pred, first), lists = kernels().layer_rows, self.layer_major, self.lists
        return [
            lambda rows=rows: run(rows, ids, pred, first, self.layer, self.capacity, self.admit, self.row_width,
                                  lists.nxt, lists.prv, lists.flags, t0, t1, self.hits, self.copies,
                                  self.admitted, self.used)
            for rows in self.row_parts
        ]

    def chunk_done(self, t0: int, t1: int) -> None:
        """Count the chunk's steps, pair by pair."""
        add = kernels().pair_counts
        in_parallel(lambda part: add(part, self.hits, self.copies, t1 - t0, self.pairs, self.counts),
                    np.arange(len(self.pairs)))

    def result(self, j: int) -> tuple[np.ndarray, int, int]:
        """(counts, admissions, prefetch used) of plan j."""
        rows = self.plan_rows[j]
        counts = self.counts[self.plan_pairs[j], :, : self.plans[j].width + 1]
        return counts, int(self.admitted[rows].sum()), int(self.used[rows].sum())


class _CompiledPool:
    """LRU pools of several plans, one cache each; a pool that comes to equal the first
    pool of the same rules stops and follows it."""

    def __init__(self, guesses: _Guesses, plans: list[ReplayPlan]):
        self.plans = plans
        self.n_tokens, self.n_layers, self.k = guesses.ids.shape
        self.width = max(plan.width for plan in plans)
        self.guesses = guesses
        self.n_experts = plans[0].popularity.shape[1]
        self.capacity = np.array([int(plan.slots.sum()) for plan in plans], dtype=np.int64)
        self.admit = np.stack([np.asarray(plan.admit, dtype=np.int64) for plan in plans])
        self.plan_width = np.array([plan.width for plan in plans], dtype=np.int64)
        self.lists = _Lists([initial_pool(plan.popularity, plan.slots)[::-1] for plan in plans],
                            self.n_layers * self.n_experts)
        self.counts = np.zeros((len(plans), self.n_layers, self.k + 1, self.width + 1), dtype=np.int64)
        self.admitted = np.zeros(len(plans), dtype=np.int64)
        self.used = np.zeros(len(plans), dtype=np.int64)
        first_of: dict[tuple, int] = {}
        self.leader = np.array([
            first_of.setdefault((int(self.capacity[j]), tuple(self.admit[j].tolist()), plan.width), j)
            for j, plan in enumerate(plans)
        ])
        # A pool that follows another: (the other's counts, admissions and prefetched
        # hits when they became equal).
        self.joined: dict[int, tuple[np.ndarray, int, int]] = {}

    def start(self) -> None:
        self.active = list(range(len(self.plans)))

    def tasks(self, t0: int, t1: int) -> list:
        """The chunk's independent work: one pool each (a pool's steps are in order)."""
        steps, g, lists = kernels().pool_steps, self.guesses, self.lists
        return [
            lambda pools=np.array([j]): steps(pools, g.ids, g.pred, g.first, self.n_experts, self.capacity,
                                              self.admit, self.plan_width, lists.nxt, lists.prv, lists.flags, t0,
                                              t1, self.counts, self.admitted, self.used)
            for j in self.active
        ]

    def chunk_done(self, t0: int, t1: int) -> None:
        """A pool now equal to the first of its rules follows it from here."""
        if t1 >= self.n_tokens:
            return
        same, lists = kernels().same_cache, self.lists
        for j in self.active:
            leader = int(self.leader[j])
            if leader != j and same(lists.nxt, lists.prv, lists.flags, j, leader):
                self.joined[j] = (self.counts[leader].copy(), int(self.admitted[leader]), int(self.used[leader]))
        self.active = [j for j in self.active if j not in self.joined]

    def result(self, j: int) -> tuple[np.ndarray, int, int]:
        """(counts, admissions, prefetch used) of plan j."""
        counts, admitted, used = self.counts[j], int(self.admitted[j]), int(self.used[j])
        if j in self.joined:
            leader = int(self.leader[j])
            at_counts, at_admitted, at_used = self.joined[j]
            counts = counts + self.counts[leader] - at_counts
            admitted += int(self.admitted[leader]) - at_admitted
            used += int(self.used[leader]) - at_used
        return counts[:, :, : self.plans[j].width + 1].copy(), admitted, used
