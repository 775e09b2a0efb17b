"""Replay against tiny traces worked out by hand, invariants, and real routing."""

from __future__ import annotations

import numpy as np
import pytest

from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency, policy_matrix
from engine.replays.replay import ReplaySetup, allocate_slots, replay


def ids_of(rows: list[list[list[int]]]) -> np.ndarray:
    """[token][layer][k] nested lists to the replay's int16 array."""
    return np.array(rows, dtype=np.int16)


def matrix(residency, execution, allocation=Allocation.UNIFORM, eviction=Eviction.LRU, prefetch=False):
    if residency is Residency.FIXED:
        eviction = None
    return Candidate(Kind.MATRIX, residency, execution, allocation, eviction, prefetch)


def by_hits(stats, layer: int) -> dict[int, int]:
    row = stats.counts[layer].sum(axis=1)
    return {h: int(c) for h, c in enumerate(row) if c}


# --- fixed residency ---------------------------------------------------------


def test_fixed_residency_counts_membership_of_the_most_popular():
    # popularity 0 > 1 > 2 > 3; two slots hold {0, 1}.
    popularity = np.array([[10, 5, 1, 0]])
    ids = ids_of([[[0, 2]], [[1, 3]], [[0, 1]]])
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=0)
    stats = replay(ids, None, matrix(Residency.FIXED, Execution.SEQUENTIAL), setup)
    assert by_hits(stats, 0) == {1: 2, 2: 1}
    assert stats.hit_rate == pytest.approx(4 / 6)


def test_fixed_residency_ignores_copies_and_predictions():
    popularity = np.array([[4, 3, 2, 1]])
    ids = ids_of([[[2]], [[0]], [[3]], [[1]], [[2]]])
    predicted = np.full((5, 1, 1), 3, dtype=np.int16)
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=1, admit_per_hits=np.array([1, 0]))
    for execution in Execution:
        stats = replay(ids, predicted, matrix(Residency.FIXED, execution), setup)
        assert by_hits(stats, 0) == {0: 3, 1: 2}, execution
        assert stats.admissions == 0 and stats.prefetch_copies == 0


# --- per-layer caches --------------------------------------------------------

# One layer, 4 experts, k = 1, two slots filled with {0, 1}; LRU order 1 then 0
# (least popular first). Routing 2, 0, 3, 1, 2.
LRU_POPULARITY = np.array([[4, 3, 2, 1]])
LRU_IDS = ids_of([[[2]], [[0]], [[3]], [[1]], [[2]]])


def test_layer_cache_under_stage_admits_every_miss_lru():
    # t0: 2 misses, evicts 1 -> {0,2}; t1: 0 hits; t2: 3 misses, evicts 2 -> {0,3};
    # t3: 1 misses, evicts 0 -> {3,1}; t4: 2 misses, evicts 3.
    setup = ReplaySetup(LRU_POPULARITY, total_slots=2, prefetch_budget=0)
    stats = replay(LRU_IDS, None, matrix(Residency.LAYER, Execution.STAGE), setup)
    assert by_hits(stats, 0) == {0: 4, 1: 1}
    assert stats.admissions == 4


def test_layer_cache_under_sequential_without_prefetch_never_changes():
    setup = ReplaySetup(LRU_POPULARITY, total_slots=2, prefetch_budget=0)
    for execution in (Execution.SEQUENTIAL, Execution.PARALLEL):
        stats = replay(LRU_IDS, None, matrix(Residency.LAYER, execution), setup)
        # Resident {0, 1} throughout: hits at t1 and t3.
        assert by_hits(stats, 0) == {0: 3, 1: 2}
        assert stats.admissions == 0


def test_ready_first_admits_only_the_misses_its_lane_split_copies():
    none = ReplaySetup(LRU_POPULARITY, total_slots=2, prefetch_budget=0, admit_per_hits=np.array([0, 0]))
    every = ReplaySetup(LRU_POPULARITY, total_slots=2, prefetch_budget=0, admit_per_hits=np.array([1, 0]))
    candidate = matrix(Residency.LAYER, Execution.READY_FIRST)
    assert by_hits(replay(LRU_IDS, None, candidate, none), 0) == {0: 3, 1: 2}
    assert by_hits(replay(LRU_IDS, None, candidate, every), 0) == {0: 4, 1: 1}


def test_score_eviction_keeps_the_often_used_expert():
    # Slots {0, 1}. Expert 0 is routed three times, then 1 once, then 2 misses under
    # stage: LRU evicts 0 (least recent) and misses it next; the decayed score
    # evicts 1 (routed less) and hits 0.
    popularity = np.array([[4, 3, 2, 1]])
    ids = ids_of([[[0]], [[0]], [[0]], [[1]], [[2]], [[0]]])
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=0)
    lru = replay(ids, None, matrix(Residency.LAYER, Execution.STAGE, eviction=Eviction.LRU), setup)
    score = replay(ids, None, matrix(Residency.LAYER, Execution.STAGE, eviction=Eviction.SCORE), setup)
    assert by_hits(lru, 0) == {1: 4, 0: 2}
    assert by_hits(score, 0) == {1: 5, 0: 1}


def test_prefetch_copies_predicted_experts_into_the_next_layer():
    # Two layers, one slot each, both holding expert 0 at the start.
    popularity = np.array([[4, 3, 2, 1], [4, 3, 2, 1]])
    ids = ids_of([[[1], [2]], [[0], [3]]])
    predicted = np.array([[[2], [-1]], [[1], [-1]]], dtype=np.int16)
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=1)
    stats = replay(ids, predicted, matrix(Residency.LAYER, Execution.SEQUENTIAL, prefetch=True), setup)
    # t0: layer 0 misses 1 and prefetches 2 into layer 1, which then hits.
    # t1: layer 0 hits 0 and prefetches 1 (wrong) into layer 1, which misses 3.
    assert stats.counts[0, 0, 1] == 1 and stats.counts[0, 1, 1] == 1
    assert stats.counts[1, 1, 0] == 1 and stats.counts[1, 0, 0] == 1
    assert stats.prefetch_copies == 2
    assert stats.prefetch_used == 1


def test_without_prefetch_flag_predictions_are_ignored():
    popularity = np.array([[4, 3, 2, 1], [4, 3, 2, 1]])
    ids = ids_of([[[1], [2]], [[0], [3]]])
    predicted = np.array([[[2], [-1]], [[1], [-1]]], dtype=np.int16)
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=1)
    stats = replay(ids, predicted, matrix(Residency.LAYER, Execution.SEQUENTIAL), setup)
    assert stats.prefetch_copies == 0
    assert by_hits(stats, 1) == {0: 2}


# --- the cross-layer pool ------------------------------------------------------


def test_pool_evicts_across_layers():
    # Global popularity: (layer 0, expert 0) = 5 beats (layer 1, expert 0) = 3, so
    # nonuniform slots are one per layer, and the pool's LRU end is (1, 0).
    popularity = np.array([[5, 0], [3, 1]])
    ids = ids_of([[[1], [0]], [[0], [1]]])
    setup = ReplaySetup(popularity, total_slots=2, prefetch_budget=0)
    pool = replay(ids, None, matrix(Residency.POOL, Execution.STAGE, Allocation.NONUNIFORM), setup)
    # t0: layer 0's miss evicts (1,0), so layer 1 then misses 0 too; t1 misses twice.
    assert by_hits(pool, 0) == {0: 2} and by_hits(pool, 1) == {0: 2}
    assert pool.admissions == 4
    per_layer = replay(ids, None, matrix(Residency.LAYER, Execution.STAGE, Allocation.NONUNIFORM), setup)
    # Separate caches protect layer 1's expert 0: it hits at t0.
    assert by_hits(per_layer, 1) == {1: 1, 0: 1}


# --- allocation -----------------------------------------------------------------


def test_nonuniform_slots_follow_the_global_popularity():
    popularity = np.array([[9, 8, 7, 0], [1, 1, 0, 0]])
    assert allocate_slots(popularity, 4, Allocation.NONUNIFORM).tolist() == [3, 1]
    assert allocate_slots(popularity, 4, Allocation.UNIFORM).tolist() == [2, 2]
    # Never more slots than a layer has experts, never more than asked.
    assert allocate_slots(popularity, 100, Allocation.NONUNIFORM).tolist() == [4, 4]
    # Uniform spends the remainder too, one slot where the next expert is routed most.
    assert allocate_slots(popularity, 5, Allocation.UNIFORM).tolist() == [3, 2]


# --- partitions -------------------------------------------------------------------


def test_partition_puts_whole_layers_on_one_side():
    ids = ids_of([[[0, 1], [2, 3], [1, 2]]] * 4)
    setup = ReplaySetup(np.ones((3, 4)), total_slots=0, prefetch_budget=0)
    cpu = np.array([True, False, False])
    stats = replay(ids, None, Candidate(Kind.PARTITION_FIRST), setup, cpu_layers=cpu)
    assert by_hits(stats, 0) == {0: 4}
    assert by_hits(stats, 1) == {2: 4} and by_hits(stats, 2) == {2: 4}
    assert replay(ids, None, Candidate(Kind.ALL_CPU), setup).hit_rate == 0.0
    assert replay(ids, None, Candidate(Kind.ALL_GPU), setup).hit_rate == 1.0


# --- invariants on random routing -------------------------------------------------


def random_trace(seed: int, tokens=120, layers=4, experts=16, k=4):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, experts + 1) ** 0.8
    logits = np.log(p / p.sum())[None, None, :] + rng.gumbel(size=(tokens, layers, experts))
    ids = np.argsort(-logits, axis=2)[:, :, :k].astype(np.int16)
    predicted = np.concatenate([ids[:, 1:], np.full((tokens, 1, k), -1, np.int16)], axis=1)
    flip = rng.random(predicted.shape) < 0.3
    predicted = np.where(flip & (predicted >= 0), (predicted + 7) % experts, predicted).astype(np.int16)
    # keep predictions distinct within a row
    for t in range(tokens):
        for l in range(layers - 1):
            row = list(dict.fromkeys(predicted[t, l].tolist()))
            row += [e for e in range(experts) if e not in row][: k - len(row)]
            predicted[t, l] = row
    popularity = np.stack([np.bincount(ids[:, l].ravel(), minlength=experts) for l in range(layers)])
    return ids, predicted, popularity


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("slots", [3, 17, 40, 64])
def test_every_candidate_keeps_the_histogram_invariants(seed, slots):
    ids, predicted, popularity = random_trace(seed)
    tokens, layers, k = ids.shape
    setup = ReplaySetup(popularity, total_slots=slots, prefetch_budget=2, admit_per_hits=np.array([2, 2, 1, 1, 0]))
    candidates = policy_matrix(prefetch_available=True, evictions=(Eviction.LRU, Eviction.SCORE))
    for candidate in candidates:
        stats = replay(ids, predicted, candidate, setup)
        assert stats.counts.sum() == tokens * layers, candidate.id
        assert np.all(stats.counts.sum(axis=(1, 2)) == tokens), candidate.id
        assert stats.counts.shape[1] == k + 1  # hits + misses = k in every state
        assert 0.0 <= stats.hit_rate <= 1.0
        assert stats.prefetch_used <= stats.prefetch_copies
        if candidate.residency is Residency.FIXED:
            resident = np.zeros_like(popularity, dtype=bool)
            slots_per_layer = allocate_slots(popularity, slots, candidate.allocation)
            for l in range(layers):
                order = np.argsort(-popularity[l], kind="stable")
                resident[l, order[: slots_per_layer[l]]] = True
            expected = resident[np.arange(layers)[None, :, None], ids].sum()
            assert stats.hits_per_layer().sum() == expected, candidate.id


@pytest.mark.parametrize("residency", [Residency.LAYER, Residency.POOL])
def test_lru_capacity_is_never_exceeded(residency):
    # One layer cycling through C + 1 experts: an LRU cache of C slots that admits
    # every miss never hits after the first pass; C + 1 slots always hit.
    capacity = 5
    cycle = list(range(capacity + 1)) * 20
    ids = np.array(cycle, dtype=np.int16).reshape(-1, 1, 1)
    popularity = np.zeros((1, 16))
    popularity[0, capacity + 1 :] = 1  # start filled with experts never routed
    for slots, hits in ((capacity, 0), (capacity + 1, len(cycle) - (capacity + 1))):
        setup = ReplaySetup(popularity, total_slots=slots, prefetch_budget=0)
        stats = replay(ids, None, matrix(residency, Execution.STAGE), setup)
        assert stats.hits_per_layer().sum() == hits


# --- real routing: DeepSeek-V2-Lite-Chat ------------------------------------------


def reference_lru_hits(ids: np.ndarray, initial: list[list[int]]) -> np.ndarray:
    """Per-layer LRU that admits every miss, written out plainly with lists."""
    tokens, layers, _ = ids.shape
    hits = np.zeros(layers, dtype=np.int64)
    for l in range(layers):
        cache = list(initial[l])  # index 0 is the least recently used
        for t in range(tokens):
            row = ids[t, l].tolist()
            present = [e for e in row if e in cache]
            hits[l] += len(present)
            for e in present:
                cache.remove(e)
                cache.append(e)
            for e in row:
                if e not in present:
                    cache.pop(0)
                    cache.append(e)
    return hits


def test_layer_lru_hit_rate_on_real_deepseek_routing(shared_traces):
    from engine.traces import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=40)
    profile, replayed = trace.split(0.5)
    popularity = profile.popularity()
    slots_per_layer = 16
    n_layers = trace.n_layers
    initial = []
    for l in range(n_layers):
        order = np.argsort(-popularity[l], kind="stable")[:slots_per_layer]
        initial.append([int(e) for e in order[::-1]])  # least popular first
    expected = reference_lru_hits(replayed.expert_ids, initial)

    setup = ReplaySetup(popularity, total_slots=slots_per_layer * n_layers, prefetch_budget=0)
    stats = replay(replayed.expert_ids, None, matrix(Residency.LAYER, Execution.STAGE), setup)
    assert stats.hits_per_layer().tolist() == expected.tolist()
    # A 16-of-64 LRU cache on real routing hits well above the 25% of random routing.
    assert stats.hit_rate > 0.3
