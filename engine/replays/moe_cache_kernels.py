"""The compiled replay of llama.cpp's MoE expert cache (engine/llamacpp/moe_cache.py), one
group of same-layout layers at a time.

It follows `moe_cache_lru::plan` of ggml-org/llama.cpp src/llama-moe-cache.cpp at commit
4b060f27a806dab2072a66007607f0e98b6b9b40 step for step:
- the slots of a group form one list, least recently used at the head; at the start every
  slot is empty and the list runs 0, 1, ..., n_slots - 1 (`init`);
- a layer's selected ids are made unique in routing order; the cached ones are hits and
  move to the tail in that order (`touch`);
- the misses, in ascending expert id, each take the slot at the head (evicting whatever
  is there from its layer's slot map) and move it to the tail;
- the uploads of a layer: runs of misses whose expert ids and slots both rise by one are
  one copy per expert tensor (`copy`'s merge loop).

engine.llamacpp.moe_cache reaches it through engine.replays.compiled.moe_cache_kernels(), as
the replays reach theirs.
"""

from __future__ import annotations

import numpy as np

from engine.replays.kernel_cache import inline, jit


@inline
def _slot_to_tail(prev, nxt, s, head, tail):
    """`touch`: slot s to the most recently used end of the slot list (-1 ends it); the new
    head and tail."""
    if s == tail:
        return head, tail
    if prev[s] >= 0:
        nxt[prev[s]] = nxt[s]
    else:
        head = nxt[s]
    prev[nxt[s]] = prev[s]
    prev[s] = tail
    nxt[s] = -1
    nxt[tail] = s
    return head, s


@jit
def moe_cache_lru_group(ids, layers, n_experts, n_slots, hits_hist, segments):
    """Replay every token of `ids` ([T, L, k] int32, MoE-layer order) through one group's
    LRU: `layers` (int64, ascending) are the group's MoE layers, `n_slots` its slots.

    Fills hits_hist[j, h] (steps of the group's j-th layer with h distinct hits) and
    segments[j] (merged upload runs of that layer, per expert tensor)."""
    n_tokens, _, k = ids.shape
    n_layers = layers.shape[0]
    slot_of = np.full((n_layers, n_experts), -1, dtype=np.int32)
    key_layer = np.full(n_slots, -1, dtype=np.int32)
    key_expert = np.full(n_slots, -1, dtype=np.int32)
    prev = np.empty(n_slots, dtype=np.int32)
    nxt = np.empty(n_slots, dtype=np.int32)
    for s in range(n_slots):
        prev[s] = s - 1
        nxt[s] = s + 1 if s + 1 < n_slots else -1
    head = 0
    tail = n_slots - 1
    seen = np.zeros(n_experts, dtype=np.int64)
    uniq = np.empty(k, dtype=np.int32)
    gen = 0
    for t in range(n_tokens):
        for j in range(n_layers):
            row = ids[t, layers[j]]
            gen += 1
            nu = 0
            for i in range(k):
                e = row[i]
                if seen[e] != gen:
                    seen[e] = gen
                    uniq[nu] = e
                    nu += 1
            n_hit = 0
            for i in range(nu):  # hits to the tail first, in routing order
                s = slot_of[j, uniq[i]]
                if s >= 0:
                    n_hit += 1
                    head, tail = _slot_to_tail(prev, nxt, s, head, tail)
            for a in range(1, nu):  # std::sort of the unique ids (a few: insertion sort)
                v = uniq[a]
                b = a - 1
                while b >= 0 and uniq[b] > v:
                    uniq[b + 1] = uniq[b]
                    b -= 1
                uniq[b + 1] = v
            last_e = -2
            last_s = -2
            for i in range(nu):
                e = uniq[i]
                if slot_of[j, e] >= 0:
                    continue
                s = head
                if key_layer[s] >= 0:
                    slot_of[key_layer[s], key_expert[s]] = -1
                key_layer[s] = j
                key_expert[s] = e
                slot_of[j, e] = s
                head, tail = _slot_to_tail(prev, nxt, s, head, tail)
                if not (e == last_e + 1 and s == last_s + 1):
                    segments[j] += 1
                last_e = e
                last_s = s
            hits_hist[j, n_hit] += 1
