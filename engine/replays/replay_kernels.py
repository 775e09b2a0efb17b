"""The compiled inner loops (numba) of the LRU replays and the hit curves.

The LRU loops apply the step rules of `engine.replays.residency.StepwiseResidency` to LRU
caches (`engine.replays.residency_caches.LruCache`), one step at a time and in the same order,
so they give the same counts by construction rather than by a cleverer method (the
equivalence tests check them against the plain reference all the same). The curve
loops are `engine.replays.hit_curves`' one-pass counts, one access at a time (its tests
check them against step-by-step replays and a plain batch LRU).

Only `engine.replays.compiled.kernels()` imports this module, when a loop is first needed,
so importing the rest of engine/ never imports numba.

An LRU cache is a doubly linked list over its keys, least recently used first:
nxt[key] and prv[key], with a sentinel S = the number of keys (nxt[S] is the least
recently used, prv[S] the most recent), and a flag byte per key: RESIDENT, and
PREFETCHED on top of it for a copied guess not yet hit. A hit, an eviction and an
insertion are O(1). The list operations (`_append`, `_to_newest`, `_evict_oldest`) are
inlined by numba into the loops that call them: as plain calls the pool loop ran about a
quarter slower; inlined, the 16,000-token sweep of bench/replay.py measured the same as
with them written out in each loop (layer rows 6.05-6.59 against 5.98-6.38 thread-s,
pools 3.97-4.26 against 3.84-4.14, alternating runs on a quiet machine).
Keys, links and expert ids are unsigned (`engine.replays.replay_compiled.key_type`): numba
adds a wrap-around test to every signed index, and the list operations are chains of
indexing (without: 150 rather than 100 ns per per-layer step, 195 rather than 120 per
pool step, on the 16,000-token budget sweep of bench/replay.py). Tried there and not
kept, all slower: last-use positions with a lazily cleaned FIFO queue instead of the
list (a hit one append, but evictions skip stale entries and the queue is compacted:
140 ns per layer step, 190-260 per pool step), several rows advanced a token at a time
(160), a step's hits appended as one chain (105), next and previous links side by side
(108 and 180); and (2026-12-01) a step's routed experts and guesses split into hits and
misses without branches, then moved: 7.3 rather than 6.5 thread-seconds of layer rows
on that sweep.

Each loop takes the indices of the rows (caches, pairs, layers) it runs and releases
the GIL, so `engine.replays.compiled.in_parallel` runs disjoint parts on every core from
Python threads: numba's own parallel loops took about three times as long to compile.

Compiled once per machine (engine/replays/kernel_cache.py: the machine code kept beside
this file, or in numba's cache folder in the user's home; where no cache location is
writable, or the disk is full, the functions compile in every process instead of failing).
"""

from __future__ import annotations

import numpy as np

from engine.replays.kernel_cache import inline, jit

RESIDENT, PREFETCHED = 1, 2
STAMP_LIMIT = 32000  # lru_depths' int16 stamps are renumbered before they pass it


@inline
def _append(nx, pv, s, key):
    """`key` (not in the list) in as the most recent."""
    last = pv[s]
    nx[last] = key
    pv[key] = last
    nx[key] = s
    pv[s] = key


@inline
def _to_newest(nx, pv, s, key):
    """`key` (in the list) moved to the most recent end."""
    after, before = nx[key], pv[key]
    nx[before] = after
    pv[after] = before
    _append(nx, pv, s, key)


@inline
def _evict_oldest(nx, pv, fl, s):
    """The least recent key out of the list and its flags cleared."""
    victim = nx[s]
    after = nx[victim]
    nx[s] = after
    pv[after] = s
    fl[victim] = 0


# --- the trace as the loops read it --------------------------------------------------


@jit
def first_guesses(pred):
    """uint8 [T, L, W]: 1 where a guess is the first of its value in its row (a step
    drops repeated guesses; the first of a prefix is the first of the whole row)."""
    n_tokens, n_layers, width = pred.shape
    first = np.zeros(pred.shape, dtype=np.uint8)
    for t in range(n_tokens):
        for l in range(n_layers):
            for i in range(width):
                seen = False
                for j in range(i):
                    if pred[t, l, j] == pred[t, l, i]:
                        seen = True
                        break
                if not seen:
                    first[t, l, i] = 1
    return first


# --- LRU lists -------------------------------------------------------------------------


@jit
def fill(newest_first, lengths, nxt, prv, flags):
    """List r holds newest_first[r, :lengths[r]], the first the most recent."""
    s = flags.shape[1]
    for r in range(lengths.shape[0]):
        nx, pv, fl = nxt[r], prv[r], flags[r]
        nx[s] = s
        pv[s] = s
        for i in range(lengths[r] - 1, -1, -1):
            key = newest_first[r, i]
            if fl[key] == 0:
                _append(nx, pv, s, key)
                fl[key] = RESIDENT


@jit
def same_cache(nxt, prv, flags, a, b):
    """Whether lists a and b hold the same keys in the same order with the same flags:
    from then on, under the same rules, they do the same."""
    s = flags.shape[1]
    x, y = nxt[a, s], nxt[b, s]
    while x != s and y != s:
        if x != y or flags[a, x] != flags[b, y]:
            return False
        x, y = nxt[a, x], nxt[b, y]
    return x == s and y == s


# --- per-layer caches: one (layer, capacity, admissions, width) row at a time ----------


@jit
def layer_rows(rows, ids, pred, first, layer, capacity, admit, width, nxt, prv, flags, t0, t1, hits, copies,
               admitted, used):
    """Tokens t0..t1-1 of per-layer LRU caches, one row per cache.

    Layer-major: ids [L, T, k], pred [L, T, W] (layer l's guesses for l + 1, expert ids),
    first [L, T, W]. Row r is layer[r]'s cache with capacity[r] slots, admitting
    admit[r, h] misses after h hits, receiving the first width[r] guesses of the layer
    before. A row sees, per token, the copies of the step before (step (t, l - 1)'s
    phase 3), then its own step's hits and admissions; nothing else touches it, so the
    rows can run in parallel (`rows`: the ones this call runs). Out: hits[r, t - t0], copies[r, t - t0] (copied into the row
    during the step before); admissions and prefetched hits added to admitted[r], used[r].
    """
    k = ids.shape[2]
    s = np.uint64(flags.shape[1])  # unsigned keys throughout (replay_compiled.key_type)
    for r in rows:
        l, cap = layer[r], capacity[r]
        w = width[r] if l > 0 else 0
        nx, pv, fl, adm = nxt[r], prv[r], flags[r], admit[r]
        route = ids[l]
        guess, fresh = pred[max(l - 1, 0)], first[max(l - 1, 0)]
        misses = np.empty(k, dtype=ids.dtype)  # the expert ids' own type: no conversions
        wanted = np.empty(max(w, 1), dtype=pred.dtype)
        n_admitted = n_used = 0
        for t in range(t0, t1):
            n_copy = 0
            if w > 0:  # the guesses of the layer before: kept, then copied
                kept = n_wanted = 0
                for i in range(w):
                    if fresh[t, i]:
                        e = guess[t, i]
                        if fl[e]:
                            _to_newest(nx, pv, s, e)
                            kept += 1
                        else:
                            wanted[n_wanted] = e
                            n_wanted += 1
                n_copy = max(min(cap - kept, n_wanted), 0)
                for i in range(n_copy):
                    _evict_oldest(nx, pv, fl, s)
                    e = wanted[i]  # copy in as the most recent
                    _append(nx, pv, s, e)
                    fl[e] = RESIDENT | PREFETCHED
            copies[r, t - t0] = n_copy
            h = n_miss = 0  # the step: hits in routing order
            for j in range(k):
                e = route[t, j]
                f = fl[e]
                if f:
                    _to_newest(nx, pv, s, e)
                    h += 1
                    if f & PREFETCHED:
                        n_used += 1
                        fl[e] = RESIDENT
                else:
                    misses[n_miss] = e
                    n_miss += 1
            hits[r, t - t0] = h
            n_admit = min(adm[h], cap - h)  # then the first misses admitted
            if n_admit > 0:
                for i in range(min(n_admit, n_miss)):
                    _evict_oldest(nx, pv, fl, s)
                    e = misses[i]
                    if fl[e] == 0:  # LruCache.insert is setdefault
                        _append(nx, pv, s, e)
                        fl[e] = RESIDENT
                n_admitted += n_admit
        admitted[r] += n_admitted
        used[r] += n_used


@jit
def pair_counts(part, hits, copies, n, pairs, counts):
    """Add the first n tokens of a chunk to the state counts [Q, k+1, W+1] of each pair
    q of rows (pairs[q] = (row of layer l, row of layer l + 1 or -1)): a step of layer l
    has the first row's hits and the copies the second received (none without one)."""
    for q in part:
        r, nr = pairs[q, 0], pairs[q, 1]
        if nr >= 0:
            for i in range(n):
                counts[q, hits[r, i], copies[nr, i]] += 1
        else:
            for i in range(n):
                counts[q, hits[r, i], 0] += 1


# --- pools: one cache for every layer ---------------------------------------------------


@jit
def pool_steps(pools, ids, pred, first, n_experts, capacity, admit, width, nxt, prv, flags, t0, t1, counts,
               admitted, used):
    """Tokens t0..t1-1 of the LRU pools numbered in `pools`, every step in order.

    Token-major: ids [T, L, k], pred [T, L, W], first [T, L, W]; keys are
    layer * E + expert. Pool p: capacity[p] slots, admit[p], width[p]; state counts go
    to counts[p, l, h, copies]. A step's copies are capped by the slots that its kept
    guesses, hits and admissions leave."""
    n_layers, k = ids.shape[1], ids.shape[2]
    s = np.uint64(flags.shape[1])  # unsigned keys throughout (replay_compiled.key_type)
    for p in pools:
        cap, w = capacity[p], width[p]
        nx, pv, fl, adm, cnt = nxt[p], prv[p], flags[p], admit[p], counts[p]
        misses = np.empty(k, dtype=np.uint64)
        wanted = np.empty(max(w, 1), dtype=np.uint64)
        n_admitted = n_used = 0
        for t in range(t0, t1):
            for l in range(n_layers):
                base = np.uint64(l * n_experts)
                h = n_miss = 0
                for j in range(k):  # hits in routing order
                    key = base + ids[t, l, j]
                    f = fl[key]
                    if f:
                        _to_newest(nx, pv, s, key)
                        h += 1
                        if f & PREFETCHED:
                            n_used += 1
                            fl[key] = RESIDENT
                    else:
                        misses[n_miss] = key
                        n_miss += 1
                n_admit = max(min(adm[h], cap - h), 0)  # the first misses admitted
                for i in range(min(n_admit, n_miss)):
                    _evict_oldest(nx, pv, fl, s)
                    key = misses[i]
                    if fl[key] == 0:
                        _append(nx, pv, s, key)
                        fl[key] = RESIDENT
                n_admitted += n_admit
                n_copy = 0
                if w > 0 and l + 1 < n_layers:  # guesses for the next layer
                    kept = n_wanted = 0
                    for i in range(w):
                        if first[t, l, i]:
                            key = base + np.uint64(n_experts) + pred[t, l, i]
                            if fl[key]:
                                _to_newest(nx, pv, s, key)
                                kept += 1
                            else:
                                wanted[n_wanted] = key
                                n_wanted += 1
                    n_copy = max(min(cap - kept - h - n_admit, n_wanted), 0)
                    for i in range(n_copy):
                        _evict_oldest(nx, pv, fl, s)
                        key = wanted[i]
                        _append(nx, pv, s, key)
                        fl[key] = RESIDENT | PREFETCHED
                cnt[l, h, n_copy] += 1
        admitted[p] += n_admitted
        used[p] += n_used


# --- hit curves (engine.replays.hit_curves) ----------------------------------------------------


@jit
def static_starts(layers, ids, ranks, starts):
    """starts[l, C, h] (h = 1..k) += steps of layer l whose h-th smallest depth
    (popularity rank + 1) is C: `engine.replays.hit_curves.static_step_counts`' bincount."""
    n_tokens, n_layers, k = ids.shape
    depth = np.empty(k, dtype=np.int64)
    for t in range(n_tokens):  # token-major, as ids is laid out
        for l in layers:
            for j in range(k):  # insertion sort: k is small
                d = ranks[l, ids[t, l, j]] + 1
                i = j
                while i > 0 and depth[i - 1] > d:
                    depth[i] = depth[i - 1]
                    i -= 1
                depth[i] = d
            for h in range(k):
                starts[l, depth[h], h + 1] += 1


@jit
def lru_depths(layers, ids, initial_order, depth_counts):
    """depth_counts[l, d] += accesses of layer l at batch stack depth d
    (`engine.replays.hit_curves.lru_hit_curves`): 1 + the experts used more recently, counted
    before the step's own updates; the step's experts then most recent in routing
    order. initial_order [L, E]: each layer's experts, most recent first, before the
    first step. E + 2k must stay below 2**15 (`STAMP_LIMIT`).

    Last-use stamps, int16, compared with every expert of the layer: O(k * E) per step,
    but 16 compares per vector instruction, and the layers' stamps (L x E x 2 bytes)
    stay in the core's cache while the trace is read token-major, in the order it is
    laid out. Measured on 16,000 tokens of 48 layers of 128 experts, top-8, one thread:
    0.06 s, against 0.08 s with int64 stamps (the loop before), 0.22 s keeping a
    recency order per layer (O(k + the deepest access) per step, but the deepest is
    about 98 of 128 there), 0.4 s with a Fenwick tree over stamps, and 0.14 s reading
    one layer's routing at a time, 1.5 KB apart (a cache line missed per step)."""
    n_tokens, n_layers, k = ids.shape
    n_experts = initial_order.shape[1]
    stamp = np.empty((n_layers, n_experts), dtype=np.int16)
    for l in layers:
        for i in range(n_experts):
            stamp[l, initial_order[l, i]] = n_experts - 1 - i
    now = n_experts  # the next step's first stamp
    for t in range(n_tokens):
        if now + k > STAMP_LIMIT:  # renumber every layer 0..E-1, the same order
            for l in layers:
                ranks = np.argsort(np.argsort(stamp[l]))
                for e in range(n_experts):
                    stamp[l, e] = ranks[e]
            now = n_experts
        for l in layers:
            mine, counts = stamp[l], depth_counts[l]
            for j in range(k):
                at = mine[ids[t, l, j]]
                above = np.int16(0)  # int16 throughout, or the compare loop is not vectorised
                for e in range(n_experts):
                    above = np.int16(above + np.int16(mine[e] > at))
                counts[above + 1] += 1
            for j in range(k):
                mine[ids[t, l, j]] = now + j
        now += k
