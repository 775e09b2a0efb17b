"""Residency: which experts a candidate holds on the GPU, and how that changes, step by step.

This is the one statement of the rules of DESIGN.md §4 (summarised in engine/replays/replay.py).
Everything else follows it: `engine.replays.replay` counts states with it, or with lookups
and compiled loops that must give the same counts (tests/test_replay_equivalence.py), and the
executor (probes/executor.py) runs `ResidencyPlan`'s steps on real weights.

- `cache_rules`: what a candidate's cache does (slots per layer, admissions per number
  of hits, the predictions a step uses, eviction, whether it ever changes), from the
  candidate and its `ReplaySetup`;
- `cpu_layers_for`: the layers whose experts a partition kind keeps on the CPU;
- `StepwiseResidency`: the caches of one candidate advanced one layer step at a time;
- `ResidencyPlan`: the same steps with the device slot of every expert, for the executor.

Keys number an expert across layers: layer * E + expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.core.spans import block_span
from engine.replays.hit_curves import allocate_by_curves, popularity_curves, popularity_order, uniform_with_remainder
from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replays.residency_caches import SCORE_DECAY_PER_TOKEN, DecayedScores, LruCache, ScoreCache, initial_scores


@dataclass(frozen=True)
class ReplaySetup:
    """What every candidate of one configuration shares."""

    popularity: np.ndarray  # [L, E] routing counts on the profile trace
    total_slots: int  # expert slots the budget leaves (for this candidate's execution)
    prefetch_budget: int  # copies per layer at most
    admit_per_hits: np.ndarray | None = None  # [k+1] misses a ready-first step copies
    # [L, E+1] hits at each capacity of a per-layer LRU on the profile trace
    # (engine.replays.hit_curves.lru_hit_curves): what mutable residencies allocate by; None:
    # the popularity curve, as fixed residency.
    hit_curves: np.ndarray | None = None


# --- what a candidate keeps where ------------------------------------------------------


def allocate_slots(
    popularity: np.ndarray, total_slots: int, allocation: Allocation, *,
    curves: np.ndarray | None = None, floor: int = 0,
) -> np.ndarray:
    """Slots per layer for `total_slots` expert slots (at most every expert); both
    allocations spend them all.

    `curves` [L, E+1]: hits at each capacity on the profile trace (engine.replays.hit_curves);
    None: a fixed residency's, the running sum of the popularity counts. Nonuniform:
    slot by slot to the layer whose next slot saves the most misses (every miss costs
    the same time whatever the layer), along each curve's concave hull, after `floor`
    slots in every layer when the total allows (a mutable cache: the k experts a step
    routes). On the popularity curve that is the global top of the popularity counts.
    Uniform: the same number in every layer, the remainder one slot each to the layers
    whose next slot saves the most.
    """
    if curves is None:
        curves = popularity_curves(popularity)
    if allocation is Allocation.UNIFORM:
        return uniform_with_remainder(curves, total_slots)
    return allocate_by_curves(curves, total_slots, floor=floor)


def cpu_layers_for(
    kind: Kind, n_layers: int, *, gpu_layers: int | None = None, layers: np.ndarray | None = None
) -> np.ndarray:
    """[L] bool: the MoE layers whose experts a standalone candidate keeps on the CPU.

    All-on-GPU: none; all-on-CPU: all. A layer partition keeps `layers` when given (an
    arbitrary set, as `cope estimate` reads from a command line), else the first (or
    last) L - `gpu_layers` layers, llama.cpp's --n-cpu-moe. engine.replays.residency.partition_layers
    adds how llama.cpp says it.
    """
    if kind is Kind.MATRIX:
        raise ValueError("a matrix candidate keeps experts, not layers, on the CPU")
    if kind is Kind.ALL_GPU:
        return np.zeros(n_layers, dtype=bool)
    if kind is Kind.ALL_CPU:
        return np.ones(n_layers, dtype=bool)
    if layers is not None:
        cpu = np.asarray(layers, dtype=bool)
        if cpu.shape != (n_layers,):
            raise ValueError(f"{kind.value}: a layer set of {n_layers} entries, got {cpu.shape}")
        return cpu
    if gpu_layers is None:
        raise ValueError(f"{kind.value} needs its layer set (cpu_layers) or the layers the GPU holds")
    cpu = np.zeros(n_layers, dtype=bool)
    n_cpu = min(max(n_layers - int(gpu_layers), 0), n_layers)
    if kind is Kind.PARTITION_FIRST:
        cpu[:n_cpu] = True
    else:
        cpu[n_layers - n_cpu :] = True
    return cpu


@dataclass(frozen=True)
class CacheRules:
    """What a candidate's cache does: everything its replay depends on besides the trace
    and the popularity order."""

    slots: np.ndarray  # int64 [L]: initial slots per layer (a pool: its initial fill)
    admit: np.ndarray  # int64 [k+1]: misses admitted by a step with h hits
    copy_split: np.ndarray | None  # int64 [k+1]: ready-first, misses sent to the copy lane
    width: int  # predictions a step uses, 0 for none: the histogram has width + 1 columns
    pooled: bool  # one cache shared by all layers
    eviction: Eviction | None
    static: bool  # never changes: lookups in the initial contents suffice


def cache_rules(
    candidate: Candidate, setup: ReplaySetup, k: int, predicted: np.ndarray | None,
    *, cpu_layers: np.ndarray | None = None,
) -> CacheRules:
    """The rules of `candidate`'s cache; `cpu_layers`: a partition's layer set."""
    popularity = setup.popularity
    n_layers, n_experts = popularity.shape
    none = np.zeros(k + 1, dtype=np.int64)
    if candidate.kind is not Kind.MATRIX:
        cpu = cpu_layers_for(candidate.kind, n_layers, layers=cpu_layers)
        slots = np.where(cpu, 0, n_experts).astype(np.int64)
        return CacheRules(slots, none, None, 0, False, None, True)
    mutable = candidate.is_mutable
    slots = allocate_slots(popularity, setup.total_slots, candidate.allocation,
                           curves=setup.hit_curves if mutable else None, floor=k if mutable else 0)
    hits = np.arange(k + 1)
    split = None
    if candidate.execution is Execution.READY_FIRST:
        if setup.admit_per_hits is None:
            raise ValueError(f"{candidate.id}: ready-first needs the cost model's lane split (admit_per_hits)")
        split = np.minimum(np.asarray(setup.admit_per_hits, dtype=np.int64), k - hits)
    admit = none
    if candidate.is_mutable and candidate.copies_misses:
        admit = (k - hits).astype(np.int64) if candidate.execution is Execution.STAGE else split
    prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
    width = min(int(setup.prefetch_budget), predicted.shape[2]) if prefetch else 0
    changes = candidate.is_mutable and (width > 0 or bool(admit.any()))
    if not changes:
        return CacheRules(slots, none, split, 0, False, None, True)
    # A cache holding every expert never misses, keeps every prediction and admits
    # nothing: as static as fixed residency (its histogram keeps its prefetch columns).
    full = bool(np.all(slots >= n_experts))
    pooled = candidate.residency is Residency.POOL
    return CacheRules(slots, admit, split, width, pooled, candidate.eviction, full)


def initial_keys(popularity: np.ndarray, slots: np.ndarray) -> list[list[int]]:
    """Each layer's first residents, most popular first (the executor's slot order)."""
    n_experts = popularity.shape[1]
    order = popularity_order(popularity)
    return [(layer * n_experts + order[layer, :n]).tolist() for layer, n in enumerate(slots.tolist())]


def initial_pool(popularity: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """A pool's first contents, least recently used first: the least routed expert of
    any layer goes first (ties: the higher key)."""
    n_layers, n_experts = popularity.shape
    order = popularity_order(popularity)
    keep = np.arange(n_experts)[None, :] < slots[:, None]
    keys = (np.arange(n_layers)[:, None] * n_experts + order)[keep]
    return keys[np.lexsort((-keys, popularity.ravel()[keys]))]


# --- the step rules -------------------------------------------------------------------


class StepwiseResidency:
    """The caches of one candidate, changed only by `steps`, one layer step at a time.

    Step (t, l), exactly (DESIGN.md §4):
    1. the routed experts that are resident are hits and become most recently used, in
       routing order; a hit on a prefetched expert counts as prefetch used;
    2. the first min(admit[h], capacity - h) misses, in routing order, are admitted,
       each evicting one expert (never one routed in this step); admitted experts are
       more recent than the hits;
    3. the predictions for layer l+1 (first occurrences): the resident ones are kept
       and become most recent, in prediction order, then the others are copied, in
       order, at most capacity - kept - (in a pool, the step's hits and admissions),
       each evicting one expert (never a predicted one, nor in a pool one this step
       routed), and count as prefetched until hit or evicted.
    The caches decide what is evicted: LRU or decayed score (engine.replays.residency_caches).
    `moves`, when a list, receives (evicted key, key that takes its place) in order.
    """

    def __init__(self, caches: list, *, pooled: bool, admit: Sequence[int], prefetched=(), scores=None):
        self.caches = caches  # one per layer, or the pool
        self.pooled = pooled
        self.admit = [int(a) for a in admit]
        self.prefetched = set(prefetched)
        self.scores = scores  # DecayedScores, told of every routing
        self.admissions = self.prefetch_used = 0
        self.moves: list | None = None

    def cache_of(self, layer: int):
        return self.caches[0] if self.pooled else self.caches[layer]

    def token(self, t: int, route: list[list[int]], predictions: list[list[int]] | None) -> tuple[list, list]:
        """Every step of token t (see `steps`); returns each step's hits and copies."""
        hits, copies = [0] * len(route), [0] * len(route)
        self.steps(t, route, predictions, range(len(route)), hits, copies)
        return hits, copies

    def steps(self, t: int, route: list[list[int]], predictions: list[list[int]] | None, layers: range,
              hits: list, copies: list) -> None:
        """Steps (t, l) for l in `layers`, in order (a whole token, or one step at a time).

        route[l]: the keys layer l is routed to; predictions[l]: the keys it predicts for
        layer l + 1, first occurrences only, for l < L - 1 (None: no prefetch). Each
        step's hits and copies go to hits[l] and copies[l]."""
        caches, pooled, prefetched, moves, admit = self.caches, self.pooled, self.prefetched, self.moves, self.admit
        routed = None if self.scores is None else self.scores.routed
        last = len(route) - 1
        used = admissions = 0
        for layer in layers:
            row = route[layer]
            cache = caches[0] if pooled else caches[layer]
            members = cache.members
            if routed is not None:
                routed(t, layer, row)
            # 1. hits
            h = 0
            hit = cache.hit if cache.touches else None
            for key in row:
                if key in members:
                    if hit is not None:
                        hit(key)
                    h += 1
                    if key in prefetched:
                        used += 1
                        prefetched.discard(key)
            hits[layer] = h
            # 2. admissions
            n_admit = admit[h]
            if n_admit > cache.capacity - h:
                n_admit = cache.capacity - h
            if n_admit > 0:
                protect, evict, insert = cache.protection(row, None), cache.evict, cache.insert
                for key in [key for key in row if key not in members][:n_admit]:
                    victim = evict(protect, t)
                    prefetched.discard(victim)
                    insert(key)
                    if moves is not None:
                        moves.append((victim, key))
                admissions += n_admit
            else:
                n_admit = 0
            # 3. prefetch for the next layer
            copies[layer] = 0
            if predictions is None or layer == last:
                continue
            nxt = cache if pooled else caches[layer + 1]
            members = nxt.members
            keep = nxt.keep if nxt.touches else None
            kept, wanted = 0, []
            for key in predictions[layer]:
                if key in members:
                    if keep is not None:
                        keep(key)  # about to be used: protect it
                    kept += 1
                else:
                    wanted.append(key)
            n_copy = nxt.capacity - kept - (h + n_admit if pooled else 0)
            if n_copy > len(wanted):
                n_copy = len(wanted)
            if n_copy <= 0:
                continue
            protect, evict, insert = nxt.protection(row, predictions[layer]), nxt.evict, nxt.insert
            for key in wanted[:n_copy]:
                victim = evict(protect, t)
                prefetched.discard(victim)
                insert(key)
                prefetched.add(key)
                if moves is not None:
                    moves.append((victim, key))
            copies[layer] = n_copy
        self.prefetch_used += used
        self.admissions += admissions


def stepwise_residency(
    popularity: np.ndarray, slots: np.ndarray, admit: np.ndarray, *, pooled: bool, eviction: Eviction | None,
    route_keys: np.ndarray, scores: DecayedScores | None = None,
) -> StepwiseResidency:
    """A candidate's caches (its rules' slots, admissions, pooling and eviction) at the
    start of the trace whose keys are `route_keys` [T, L, k]. Score eviction: `scores`
    may be shared with other candidates of the same popularity stepped in lockstep."""
    if pooled:
        initial = [initial_pool(popularity, slots).tolist()]
    else:
        initial = [keys[::-1] for keys in initial_keys(popularity, slots)]  # least recent first
    if eviction is Eviction.SCORE:
        if scores is None:
            scores = DecayedScores(popularity, route_keys.shape[2], route_keys)
        caches = [ScoreCache(keys, scores) for keys in initial]
    else:
        scores, caches = None, [LruCache(keys) for keys in initial]
    return StepwiseResidency(caches, pooled=pooled, admit=np.asarray(admit).tolist(), scores=scores)


def route_keys_of(ids: np.ndarray, n_experts: int) -> np.ndarray:
    """[T, L, k] expert ids to keys."""
    return ids.astype(np.intp) + (np.arange(ids.shape[1], dtype=np.intp) * n_experts)[None, :, None]


# --- the executor's plan: the same steps, with device slots ---------------------------


@dataclass(frozen=True)
class PlannedStep:
    hits: tuple[int, ...]  # expert ids of the layer, routing order
    misses: tuple[int, ...]
    copy_ids: tuple[int, ...] | None  # ready-first: the misses sent to the copy lane
    admitted: tuple[tuple[int, int], ...]  # (expert id, device slot) admitted after the step
    prefetch: tuple[tuple[int, int], ...]  # (key of layer l+1, device slot) copied during the step


class ResidencyPlan:
    """Which experts a candidate holds in device slots, and every step's decisions.

    `initial`: key -> slot (each layer's first residents, most popular first, layer by
    layer); `n_slots`: device slots the candidate needs; `steps(t)`: the planned steps of
    token t, layer by layer (call in token order: mutable caches advance). An admitted
    or prefetched expert takes the slot of the expert it evicts."""

    def __init__(self, ids: np.ndarray, predicted: np.ndarray | None, candidate: Candidate, setup: ReplaySetup,
                 *, cpu_layers: np.ndarray | None = None):
        self.ids = np.asarray(ids)
        n_tokens, n_layers, k = self.ids.shape
        popularity = np.asarray(setup.popularity)
        self.candidate, self.n_layers, self.n_experts = candidate, n_layers, popularity.shape[1]
        self.rules = rules = cache_rules(candidate, setup, k, predicted, cpu_layers=cpu_layers)
        self.split = None if rules.copy_split is None else rules.copy_split.tolist()
        keys = [key for layer in initial_keys(popularity, rules.slots) for key in layer]
        self.initial = {key: slot for slot, key in enumerate(keys)}
        self.n_slots = len(keys)
        self._slot_of = dict(self.initial)  # what the plan believes; the executor keeps its own
        self._layer_base = (np.arange(n_layers) * self.n_experts)[:, None]
        self.residency = None
        if not rules.static:
            self.residency = stepwise_residency(
                popularity, rules.slots, rules.admit, pooled=rules.pooled, eviction=rules.eviction,
                route_keys=route_keys_of(self.ids, self.n_experts),
            )
            self.residency.moves = []
            if rules.width:
                pred = np.asarray(predicted)[:, :, : rules.width].astype(np.int64)
                self.pred = pred + (np.arange(1, n_layers + 1) * self.n_experts)[None, :, None]

    @property
    def prefetch_columns(self) -> int:
        return self.rules.width + 1

    @property
    def admissions(self) -> int:
        return 0 if self.residency is None else self.residency.admissions

    @property
    def prefetch_used(self) -> int:
        return 0 if self.residency is None else self.residency.prefetch_used

    def copy_ids(self, misses: Sequence[int], h: int) -> tuple[int, ...] | None:
        """Ready-first: the misses of a step with h hits that go to the copy lane."""
        return None if self.split is None else tuple(misses[: self.split[h]])

    def steps(self, t: int) -> list[PlannedStep]:
        """The planned steps of token t, layer by layer."""
        rows = (self.ids[t] + self._layer_base).tolist()
        if self.residency is None:
            return [self._static_step(layer, row) for layer, row in enumerate(rows)]
        predictions = None
        if self.rules.width:
            predictions = [list(dict.fromkeys(row)) for row in self.pred[t, :-1].tolist()]
        hits, copies = [0] * self.n_layers, [0] * self.n_layers
        return [self._step(t, layer, rows, predictions, hits, copies) for layer in range(self.n_layers)]

    def _static_step(self, layer: int, row: list[int]) -> PlannedStep:
        base = layer * self.n_experts
        hits = [key - base for key in row if key in self._slot_of]
        misses = [key - base for key in row if key not in self._slot_of]
        return PlannedStep(tuple(hits), tuple(misses), self.copy_ids(misses, len(hits)), (), ())

    def _step(self, t: int, layer: int, rows, predictions, hits_out, copies_out) -> PlannedStep:
        base, residency = layer * self.n_experts, self.residency
        members = residency.cache_of(layer).members
        hits = [key - base for key in rows[layer] if key in members]
        misses = [key - base for key in rows[layer] if key not in members]
        residency.moves.clear()
        residency.steps(t, rows, predictions, range(layer, layer + 1), hits_out, copies_out)
        moved = []
        for victim, key in residency.moves:
            slot = self._slot_of.pop(victim)
            self._slot_of[key] = slot
            moved.append((key, slot))
        n_admit = len(moved) - copies_out[layer]
        admitted = tuple((key - base, slot) for key, slot in moved[:n_admit])
        return PlannedStep(tuple(hits), tuple(misses), self.copy_ids(misses, len(hits)), admitted,
                           tuple(moved[n_admit:]))


__all__ = [
    "SCORE_DECAY_PER_TOKEN", "CacheRules", "PlannedStep", "ReplaySetup", "ResidencyPlan", "StepwiseResidency",
    "allocate_slots", "cache_rules", "cpu_layers_for", "initial_keys", "initial_pool", "initial_scores",
    "popularity_order", "route_keys_of", "stepwise_residency",
]


def partition_layers(
    kind: Kind, n_layers: int, gpu_layers: int, moe_blocks: tuple[int, ...]
) -> tuple[np.ndarray, str]:
    """CPU-resident MoE layers of a standalone candidate when the GPU holds `gpu_layers`
    layers' experts (engine.replays.residency.cpu_layers_for), and how llama.cpp says it."""
    cpu = cpu_layers_for(kind, n_layers, gpu_layers=gpu_layers)
    n_cpu = int(cpu.sum())
    if kind is Kind.ALL_CPU:
        return cpu, "--cpu-moe"
    if kind is Kind.ALL_GPU:
        return cpu, "all experts on the GPU"
    if kind is Kind.PARTITION_FIRST:
        # --n-cpu-moe counts blocks, dense leading blocks included.
        n_blocks = moe_blocks[n_cpu - 1] + 1 if n_cpu else 0
        return cpu, f"--n-cpu-moe {n_blocks} ({n_cpu} of {n_layers} MoE layers on the CPU)"
    where = f"blocks {block_span(moe_blocks[n_layers - n_cpu:])}" if n_cpu else "none"
    return cpu, f"last {n_cpu} MoE layers on the CPU ({where})"
