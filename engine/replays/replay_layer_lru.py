"""Per-layer LRU caches, replayed for many candidates at once (`LayerLru`).

A per-layer cache sees only its own layer's routing and the prefetch issued by the
layer before it, so the caches never interact: every layer of every candidate is one
row of numpy arrays (last-use stamps; evicting takes the smallest), and a token is a
handful of array operations over all rows. This is the fastest of the mutable-cache
engines and it is what `engine.replays.replay` runs for every per-layer LRU candidate; it
lives apart from the dispatch so that each engine can be read on its own.
"""

from __future__ import annotations

import numpy as np

from engine.replays.replay_common import Histograms, ReplayPlan, Ticks, TraceArrays, stamp_type
from engine.replays.residency import popularity_order


# --- per-layer LRU caches: every layer of every candidate at once -----------------


class LayerLru:
    """Per-layer LRU caches of several candidates, one numpy row per distinct cache.

    A row's cache sees, per token, first the prefetch issued by the layer before,
    then its own routing; rows never interact, so each phase is a handful of array
    operations over all rows. Recency is a last-use stamp per (row, expert), unique
    within a row; evicting is taking the smallest stamps. A layer's cache depends only
    on its layer, capacity and admissions (and the popularity it starts from; the
    prediction width is the batch's), so candidates and budgets that share one share
    its row (engine.replays.replay_compiled says why); `plan_rows[p, l]` is plan p's row of layer l.
    """

    def __init__(self, trace: TraceArrays, plans: list[ReplayPlan]):
        self.trace = trace
        n_layers, k, width = trace.n_layers, trace.k, trace.width
        n_experts = plans[0].popularity.shape[1]
        distinct: dict[tuple, int] = {}
        self.plan_rows = np.array([
            [distinct.setdefault((id(plan.popularity), layer, capacity, tuple(plan.admit.tolist())), len(distinct))
             for layer, capacity in enumerate(plan.slots.tolist())]
            for plan in plans
        ], dtype=np.intp).reshape(len(plans), n_layers)
        keys = list(distinct)
        n_rows = len(keys)
        self.n_experts = n_experts
        rows = np.arange(n_rows)
        self.layer = np.array([key[1] for key in keys], dtype=np.intp)
        self.row_base = (rows * n_experts)[:, None]  # flat index of (row, expert 0)
        self.capacity = np.array([key[2] for key in keys], dtype=np.int64)
        admit = np.array([key[3] for key in keys], dtype=np.int64).reshape(n_rows, k + 1)
        self.admit_flat = admit.ravel()
        self.admit_base = rows * (k + 1)
        self.stride = 2 * width + 2 * k  # stamps per token
        dtype, self.absent = stamp_type(trace.n_tokens * self.stride)
        # One more entry than (row, expert) pairs: a sink that masked writes go to,
        # cheaper than picking out the entries to write.
        self.sink = n_rows * n_experts
        self.stamp = np.full(n_rows * n_experts + 1, self.absent, dtype=dtype)
        self.prefetched = np.zeros(n_rows * n_experts + 1, dtype=bool)
        popularity = {id(plan.popularity): plan.popularity for plan in plans}
        for r, (source, layer, capacity, _) in enumerate(keys):
            self._fill(r, popularity[source], layer, capacity)
        # Rows that receive prefetch: every layer but the first, of prefetching plans.
        self.pre_rows = rows[(self.layer >= 1) & (width > 0)]
        self.pre_layer = self.layer[self.pre_rows] - 1  # the layer that predicts for them
        self.pre_base = self.row_base[self.pre_rows]
        self.pre_capacity = self.capacity[self.pre_rows]
        self.pre_column = np.broadcast_to(np.arange(width), (len(self.pre_rows), width))
        self.route_column = np.broadcast_to(np.arange(k), (n_rows, k))
        self.all_rows = rows
        self.histograms = Histograms(len(plans), n_layers, k, width)
        # Copies into each row this token, then put where the histogram wants them:
        # with the layer that issued them, the one before.
        self.copies_in = np.zeros(n_rows, dtype=np.int16)
        self.admitted = np.zeros(n_rows, dtype=np.int64)
        self.used = np.zeros(n_rows, dtype=np.int64)

    def _fill(self, r: int, popularity: np.ndarray, layer: int, capacity: int) -> None:
        """Row r holds its layer's `capacity` most popular experts, the most popular
        newest: the i-th most popular gets stamp -(i+1) (older = smaller)."""
        order = popularity_order(popularity[layer : layer + 1])[0, :capacity]
        self.stamp[r * self.n_experts + order] = -(np.arange(capacity) + 1)

    def run(self, tick: Ticks) -> None:
        trace, histograms = self.trace, self.histograms
        for t in range(trace.n_tokens):
            tick(t, trace.n_tokens)
            base = t * self.stride
            i = histograms.slot(t)
            if trace.width and self.pre_rows.size:
                self._prefetch(t, base)
                histograms.copies[i, :, :-1] = self.copies_in[self.plan_rows[:, 1:]]
            histograms.hits[i] = self._route(t, base + 2 * trace.width)[self.plan_rows]
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
        self.copies_in[rows] = n_copy

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
        rows = self.plan_rows[j]
        return self.histograms.of(j), int(self.admitted[rows].sum()), int(self.used[rows].sum())
