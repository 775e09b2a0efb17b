"""Hit curves: a layer's hits at every capacity 0..E at once, from one pass over a trace.

A replay answers "how many hits with C slots" for one C; a curve answers it for every C
(Mattson et al., 1970: for a cache with the inclusion property, the contents at C slots
are always among the contents at C + 1, so one pass that gives each access the smallest
capacity at which it hits gives every capacity at once). Two uses:

- exact state counts for caches that never change (fixed residency, and mutable ones
  that nothing changes): an expert is resident at C slots exactly when its popularity
  rank is below C, so the capacity at which an access hits is its rank + 1, and a step
  with sorted depths d_1 <= ... <= d_k has h hits for every C in [d_h, d_{h+1}).
  `static_step_counts` gives every layer's state counts at every capacity; a budget
  sweep indexes it instead of replaying (`engine.replays.replay`);
- the per-layer curves that nonuniform allocation follows (`allocate_by_curves`):
  slots go where one more saves the most misses on the profile trace.

Where the inclusion property holds, and where it does not (COPE's step convention,
DESIGN.md §4, engine/replays/residency.py; docs/architecture.md "Hit curves"):

- fixed residency, and any cache that never changes: yes, exactly (above);
- per-layer LRU that admits every miss (stage, C >= k), no prefetch: the k lookups of a
  step happen before its admissions, so a step is a batch, and every routed expert ends
  the step above every expert it did not route. An expert's depth at its next use is
  then D + 1 + r, D the distinct experts routed in the steps between, r the experts of
  its own last step ordered after it and not routed since. D is the same at every
  capacity; r is not: a step orders its hits before its misses, and which experts hit
  depends on the capacity. Routed [a, e, b] with b a hit at C and C+1, a a miss at both,
  e a miss at C and a hit at C+1 leaves e most recent at C and least recent at C+1; after
  C - 1 other experts e is still resident at C and evicted at C+1. So the property fails
  for k >= 3 (tests/test_hit_curves.py replays that case; on real DeepSeek routing a step
  hits more with C slots than with C + 1 in 0.03-0.06% of (step, capacity) pairs). With one order for every capacity (routing
  order, hit or not) the cache would be the top C of one recency stack and the curve
  exact for C >= k; COPE's convention is kept, so these caches are replayed;
- C < k under stage: a step keeps its hits and its first C - h misses: every resident
  is from the last step; not a stack of recency either;
- admission caps (ready-first admits split[h] misses, h depending on C), prefetch (kept
  predictions before copied ones, copies capped by C - kept), pools (one capacity for
  every layer, an initial fill that depends on the allocation) and score eviction (a
  step protects its routed experts; ties by key): the contents at C are not always
  among those at C + 1; replayed step by step.

Both one-pass computations run in compiled loops (numba, `engine.replays.replay_kernels`),
on expert ids of the model (they index by them; a RoutingTrace's always are).

`lru_hit_curves` is the batch stack-distance curve (routing order inside a step) of a
per-layer LRU that admits every miss: exact for that convention, close to COPE's, and
used only to decide allocations (the candidate is then replayed exactly).
"""

from __future__ import annotations

import numpy as np

from engine.replays import compiled

_STAMP_ROOM = 16_000  # experts + 2k the compiled curve's int16 stamps leave room for


def popularity_order(popularity: np.ndarray) -> np.ndarray:
    """[L, E] expert ids per layer, most popular first (ties: lower id first)."""
    return np.argsort(-popularity, axis=1, kind="stable")


def popularity_ranks(popularity: np.ndarray) -> np.ndarray:
    """[L, E] each expert's place in its layer's popularity order (0: the most popular)."""
    order = popularity_order(popularity)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(order.shape[1]), order.shape), axis=1)
    return ranks


# int64 counters a pass over a group of layers fills at once ([layers, E+1, k+2]: 32 MiB):
# every catalog model is one group (Qwen3-235B-A22B: 94 x 129 x 10); a forged 64 layers x
# 4,096 experts x top-64 is 5 groups of 15 layers, not 139 MiB held three times over.
_STATIC_CELLS = 2**22


def _layer_groups(n_layers: int, n_experts: int, k: int) -> list[tuple[int, int]]:
    per = max(1, _STATIC_CELLS // ((n_experts + 1) * (k + 2)))
    return [(l0, min(l0 + per, n_layers)) for l0 in range(0, n_layers, per)]


def _group_counts(ids: np.ndarray, ranks: np.ndarray, l0: int, l1: int, n_experts: int) -> np.ndarray:
    """int64 [l1 - l0, E+1, k+1]: `static_step_counts` of layers l0..l1-1."""
    n_tokens, _, k = ids.shape
    n_layers = l1 - l0
    group_ranks = np.ascontiguousarray(ranks[l0:l1])
    # starts[l, C, h]: steps whose h-th smallest depth (rank + 1) is C (h = 1..k); h = 0
    # starts at 0 for every step. A step has h hits for C in [d_h, d_{h+1}): it leaves
    # h where it enters h + 1.
    starts = np.zeros((n_layers, n_experts + 1, k + 2), dtype=np.int64)
    routed = np.ascontiguousarray(ids[:, l0:l1], dtype=np.int32)
    count = compiled.kernels().static_starts
    compiled.in_parallel(lambda layers: count(layers, routed, group_ranks, starts), np.arange(n_layers))
    starts[:, 0, 0] = n_tokens
    return np.cumsum(starts[:, :, :-1] - starts[:, :, 1:], axis=1)


def static_step_counts(ids: np.ndarray, popularity: np.ndarray) -> np.ndarray:
    """int64 [L, E+1, k+1]: steps of each layer with h hits when the layer holds its C
    most popular experts, for every C in 0..E. Exact (a lookup in a set that never
    changes); out[l, C] is what a replay of a fixed residency with C slots in layer l
    counts. (`static_counts_at` keeps only the capacities asked for.)"""
    n_tokens, n_layers, k = ids.shape
    n_experts = popularity.shape[1]
    _check_ids(ids, n_experts)
    ranks = popularity_ranks(popularity).astype(np.int32)
    groups = [_group_counts(ids, ranks, l0, l1, n_experts) for l0, l1 in _layer_groups(n_layers, n_experts, k)]
    return np.concatenate(groups).astype(np.int64) if groups else np.zeros((0, n_experts + 1, k + 1), np.int64)


def static_counts_at(ids: np.ndarray, popularity: np.ndarray, capacities: np.ndarray) -> np.ndarray:
    """int64 [P, L, k+1]: `static_step_counts(ids, popularity)[l, capacities[p, l]]` for
    every row p of `capacities` [P, L] (a capacity above E counts as E), computed a
    group of layers at a time: the [L, E+1, k+1] counts of every capacity are never held
    whole, only the rows every budget and candidate of a sweep ask for."""
    n_tokens, n_layers, k = ids.shape
    n_experts = popularity.shape[1]
    capacities = np.minimum(np.asarray(capacities, dtype=np.int64).reshape(-1, n_layers), n_experts)
    _check_ids(ids, n_experts)
    ranks = popularity_ranks(popularity).astype(np.int32)
    out = np.zeros((capacities.shape[0], n_layers, k + 1), dtype=np.int64)
    for l0, l1 in _layer_groups(n_layers, n_experts, k):
        every = _group_counts(ids, ranks, l0, l1, n_experts)
        out[:, l0:l1] = every[np.arange(l1 - l0)[None, :], capacities[:, l0:l1]]
    return out


def _check_ids(ids: np.ndarray, n_experts: int) -> None:
    """ValueError unless every id is an expert of the layer (a RoutingTrace's always are):
    the compiled loops index by them, unchecked."""
    if ids.size and not (ids.min() >= 0 and ids.max() < n_experts):
        raise ValueError(f"expert ids outside 0..{n_experts - 1}: the one-pass counts take expert ids of the model")


def hits_of(step_counts: np.ndarray) -> np.ndarray:
    """[..., E+1] hits at each capacity from state counts [..., E+1, k+1]."""
    return step_counts @ np.arange(step_counts.shape[-1])


def popularity_curves(popularity: np.ndarray) -> np.ndarray:
    """[L, E+1]: a fixed residency's hits at every capacity on the profile itself:
    the running sum of the layer's routing counts, most popular first (concave)."""
    ranked = -np.sort(-np.asarray(popularity), axis=1)
    return np.concatenate([np.zeros((ranked.shape[0], 1), dtype=ranked.dtype), np.cumsum(ranked, axis=1)], axis=1)


def lru_hit_curves(ids: np.ndarray, popularity: np.ndarray, *, tokens: int | None = None) -> np.ndarray:
    """int64 [L, E+1]: hits at every capacity of a per-layer LRU that admits every miss,
    started from the popularity order, on `ids` [T, L, k] (the whole profile; its last
    `tokens` tokens when given).

    One pass of batch stack distances: an access hits at C slots when fewer than C
    experts are more recent than its expert (its depth <= C), depths measured before
    the step's own updates, the step's experts then most recent in routing order. For
    allocation only (see the module's note on exactness). On the whole profile rather
    than its last thousand tokens: on DeepSeek-V2-Lite routing the shorter curves made
    the nonuniform cache hit less than the uniform one at some totals."""
    ids = np.asarray(ids)
    if tokens is not None:
        ids = ids[len(ids) - min(max(int(tokens), 0), len(ids)):]
    n_tokens, n_layers, k = ids.shape
    n_experts = popularity.shape[1]
    _check_ids(ids, n_experts)
    if n_experts + 2 * k >= _STAMP_ROOM:  # past any model COPE takes (engine/core/input_limits.py)
        raise ValueError(f"{n_experts} experts and top-k {k}: the LRU curve counts at most {_STAMP_ROOM:,} "
                         "experts + 2 x top-k")
    depth_counts = np.zeros((n_layers, n_experts + 1), dtype=np.int64)
    initial_order = np.ascontiguousarray(popularity_order(popularity), dtype=np.int32)
    routed = np.ascontiguousarray(ids, dtype=np.int32)
    count = compiled.kernels().lru_depths
    compiled.in_parallel(lambda layers: count(layers, routed, initial_order, depth_counts), np.arange(n_layers))
    return np.cumsum(depth_counts, axis=1)


# --- allocation by marginal gain ------------------------------------------------------


def hull_gains(curve: np.ndarray, start: int) -> np.ndarray:
    """float [E - start]: the gain of each slot past `start` along the upper concave hull
    of curve[start:] (each slot of a hull segment gains the segment's slope): the
    greedy's view of a curve that is not concave (a cache with fewer slots than k
    experts routed per step hits little, then gains fast)."""
    points = np.arange(start, curve.size)
    values = curve[start:].astype(np.float64)
    steps = np.diff(values)
    if np.all(np.diff(steps) <= 0):  # concave already: each slot gains its own step
        return steps
    hull = [0]
    for i in range(1, len(points)):
        # Drop the last hull point while it lies on or below the chord to point i.
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (values[b] - values[a]) * (i - a) <= (values[i] - values[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(i)
    gains = np.empty(len(points) - 1)
    for a, b in zip(hull[:-1], hull[1:]):
        gains[a:b] = (values[b] - values[a]) / (b - a)
    return gains


def allocate_by_curves(curves: np.ndarray, total_slots: int, *, floor: int = 0) -> np.ndarray:
    """int64 [L]: `total_slots` (at most L * E) given slot by slot to the layer whose
    next slot gains the most hits on `curves` [L, E+1], along each curve's upper concave
    hull (optimal for concave curves, which the greedy then follows exactly; a cut
    inside a hull segment of a curve that is not concave may land below the hull).
    Every layer first gets `floor` slots when the total allows it for all layers. Ties
    go to the lower layer. Every slot is spent."""
    n_layers, n_experts = curves.shape[0], curves.shape[1] - 1
    total = min(max(int(total_slots), 0), n_layers * n_experts)
    start = min(int(floor), n_experts)
    if start * n_layers > total:
        start = 0
    gains = _layer_gains(curves, start)
    picked = np.argsort(-gains.ravel(), kind="stable")[: total - start * n_layers]
    width = max(n_experts - start, 1)
    return start + np.bincount(picked // width, minlength=n_layers).astype(np.int64)


_GAINS: dict[tuple, np.ndarray] = {}  # the last few curves' hull gains: every candidate of a sweep asks


def _layer_gains(curves: np.ndarray, start: int) -> np.ndarray:
    """[L, E - start] hull gains of every layer, remembered for the same curves."""
    key = (curves.shape, str(curves.dtype), start, curves.tobytes())
    if key not in _GAINS:
        if len(_GAINS) >= 8:
            _GAINS.pop(next(iter(_GAINS)))
        n_layers, width = curves.shape[0], curves.shape[1] - 1 - start
        _GAINS[key] = np.stack([hull_gains(curves[layer], start) for layer in range(n_layers)]) if width > 0 \
            else np.zeros((n_layers, 0))
    return _GAINS[key]


def uniform_with_remainder(curves: np.ndarray, total_slots: int) -> np.ndarray:
    """int64 [L]: the same slots in every layer, and the remainder one slot each to the
    layers whose next slot gains the most on `curves` (ties: the lower layer), so that
    uniform spends as many slots as nonuniform."""
    n_layers, n_experts = curves.shape[0], curves.shape[1] - 1
    total = min(max(int(total_slots), 0), n_layers * n_experts)
    base = min(total // n_layers, n_experts)
    slots = np.full(n_layers, base, dtype=np.int64)
    extra = total - base * n_layers
    if extra:
        gain = curves[:, base + 1] - curves[:, base]
        slots[np.argsort(-gain, kind="stable")[:extra]] += 1
    return slots
