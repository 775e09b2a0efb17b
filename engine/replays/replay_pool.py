"""LRU pools (one cache shared by all layers), several candidates a token at a time.

`PoolLru` replays the pools of several candidates a token at a time with numpy, from
the state at the start of the token, then corrects in Python the few experts evicted
within the token before the token looks them up. Pools too small or too few for it go
to the step-wise residency (`engine.replays.residency`, picked by the dispatch in
`engine.replays.replay`), and so does any token `PoolLru` cannot settle (`_exact_token`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from engine.replays.replay_common import Histograms, ReplayPlan, Ticks, TraceArrays, stamp_type
from engine.replays.residency import StepwiseResidency, initial_pool
from engine.replays.residency_caches import LruCache


# --- LRU pools: a token at a time ---------------------------------------------------


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


class PoolLru:
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
    pools are replayed step by step) and enough old residents to evict: a token that
    runs out of them is replayed step by step (`_exact_token`).
    """

    def __init__(self, trace: TraceArrays, plans: list[ReplayPlan]):
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
        dtype, self.absent = stamp_type(n_tokens * self.stride)
        self.stamp = np.full((n_pools, self.n_keys), self.absent, dtype=dtype)
        for j, plan in enumerate(plans):
            keys = initial_pool(plan.popularity, plan.slots)
            self.stamp[j, keys] = np.arange(len(keys)) - len(keys)
        self.prefetched = np.zeros((n_pools, self.n_keys), dtype=bool)
        self.queues = _Queues(self.stamp, self.absent)
        self.histograms = Histograms(n_pools, n_layers, k, width)
        self.admitted = np.zeros(n_pools, dtype=np.int64)
        self.used = np.zeros(n_pools, dtype=np.int64)
        column_k = np.arange(k)[None, :]
        self.hit_offset = np.arange(n_layers)[:, None] * step + column_k
        self.admit_offset = self.hit_offset + k
        column_p = np.arange(width)[None, :]
        self.kept_offset = np.arange(n_layers - 1)[:, None] * step + 2 * k + column_p
        self.copy_offset = self.kept_offset + width

    def run(self, tick: Ticks) -> None:
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
        """Pool j through token t one step at a time (engine.replays.residency), then back to stamps."""
        trace, stamp_row, flags = self.trace, self.stamp[j], self.prefetched[j]
        resident = np.flatnonzero(stamp_row != self.absent)
        pool = LruCache(resident[np.argsort(stamp_row[resident])].tolist())
        steps = StepwiseResidency([pool], pooled=True, admit=self.admit[j], prefetched=np.flatnonzero(flags).tolist())
        route, predictions = trace.step_keys(t)
        hits, copies = steps.token(t, route, predictions)
        i = self.histograms.slot(t)
        self.histograms.hits[i, j], self.histograms.copies[i, j] = hits, copies
        self.admitted[j] += steps.admissions
        self.used[j] += steps.prefetch_used
        # What the token touched is the tail of the LRU order: each expert it looks
        # up and finds resident moves to the end, and so does each it brings in.
        looked_up = {key for row in route for key in row}
        looked_up.update(key for row in predictions or () for key in row)
        touched = []
        for key in reversed(pool.order):
            if key not in looked_up:
                break
            touched.append(key)
        after = np.full_like(stamp_row, self.absent)
        kept = list(pool.order)
        after[kept] = stamp_row[kept]
        after[touched[::-1]] = t * self.stride + np.arange(len(touched))
        stamp_row[:] = after
        flags[:] = False
        flags[list(steps.prefetched)] = True


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

    def __init__(self, t: int, trace: TraceArrays):
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
