"""An independent, plain reference of llama.cpp's MoE expert cache LRU (ggml-org/llama.cpp
src/llama-moe-cache.cpp at 4b060f27, `moe_cache_lru::plan`), written from the source's
rules, not from COPE's compiled replay:

- empty slots are taken first, lowest index first (the list starts 0..n-1 and a filled
  slot always moves to the recent end, so the empty ones stay at the old end in order);
- otherwise the least recently used (layer, expert) of the group is evicted;
- a plan's hits become most recent in routing order, then its misses are placed in
  ascending expert id, each becoming most recent;
- an upload run is a maximal run of placed misses whose expert ids and slots both rise by one.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class ReferenceLru:
    def __init__(self, n_slots: int):
        self.free = list(range(n_slots))  # empty slots, lowest first
        self.order: OrderedDict[tuple[int, int], int] = OrderedDict()  # (layer, expert) -> slot, oldest first

    def plan(self, layer: int, ids) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
        """(hits, misses, upload runs) of one layer's selected ids."""
        unique = list(dict.fromkeys(int(e) for e in ids))
        hits = [e for e in unique if (layer, e) in self.order]
        for e in hits:
            self.order.move_to_end((layer, e))
        placed = []
        for e in sorted(set(unique) - set(hits)):
            if self.free:
                slot = self.free.pop(0)
            else:
                _, slot = self.order.popitem(last=False)
            self.order[(layer, e)] = slot
            placed.append((e, slot))
        runs = sum(1 for i, (e, s) in enumerate(placed) if i == 0 or (e, s) != (placed[i - 1][0] + 1,
                                                                               placed[i - 1][1] + 1))
        return len(hits), len(placed), runs


def reference_counts(ids: np.ndarray, layers, n_slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Per layer of `layers` (one group): hits, misses and upload runs over every token."""
    cache = ReferenceLru(n_slots)
    hits = np.zeros(len(layers), dtype=np.int64)
    misses = np.zeros(len(layers), dtype=np.int64)
    runs = np.zeros(len(layers), dtype=np.int64)
    for t in range(ids.shape[0]):
        for j, layer in enumerate(layers):
            h, m, r = cache.plan(j, ids[t, layer])
            hits[j] += h
            misses[j] += m
            runs[j] += r
    return hits, misses, runs
