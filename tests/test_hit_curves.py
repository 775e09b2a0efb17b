"""Hit curves (engine/replays/hit_curves.py): every capacity from one pass, checked against the
step-by-step replay at every capacity 0..E where they are exact; the case where COPE's
step convention breaks the inclusion property; allocation by marginal gain."""

from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np
import pytest

from engine.replays.hit_curves import (
    allocate_by_curves,
    hits_of,
    lru_hit_curves,
    popularity_curves,
    static_step_counts,
    uniform_with_remainder,
)
from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replays.replay import ReplaySetup, allocate_slots, replay, replay_many
from tests.replay_reference import random_case, reference_lru_curve, reference_replay, reference_static_counts

FIXED = Candidate(Kind.MATRIX, Residency.FIXED, Execution.PARALLEL, Allocation.UNIFORM)
# A mutable cache that nothing changes (no admissions, no predictions): static too.
UNCHANGED = Candidate(Kind.MATRIX, Residency.LAYER, Execution.SEQUENTIAL, Allocation.UNIFORM, Eviction.LRU)
STAGE_LRU = Candidate(Kind.MATRIX, Residency.LAYER, Execution.STAGE, Allocation.UNIFORM, Eviction.LRU)


def assert_curves_match_stepwise_replay(ids, popularity):
    """static_step_counts[:, C] is the step-by-step replay's state counts with C slots in
    every layer, for every C in 0..E, for fixed residency and an unchanged mutable cache."""
    n_layers, n_experts = popularity.shape
    curves = static_step_counts(ids, popularity)
    assert curves.shape == (n_layers, n_experts + 1, ids.shape[2] + 1)
    for capacity in range(n_experts + 1):
        setup = ReplaySetup(popularity, capacity * n_layers, 0)
        for candidate in (FIXED, UNCHANGED):
            stepwise = replay(ids, None, candidate, setup, stepwise=True)
            assert np.array_equal(curves[:, capacity], stepwise.counts[:, :, 0]), (candidate.id, capacity)
        counts, _, _ = reference_replay(ids, None, FIXED, setup)
        assert np.array_equal(curves[:, capacity], counts[:, :, 0]), capacity


@pytest.mark.parametrize("seed", range(12))
def test_static_curves_equal_the_stepwise_replay_at_every_capacity(seed):
    ids, _, popularity, _, _, _ = random_case(seed)
    assert_curves_match_stepwise_replay(ids, popularity)


def test_replay_of_every_budget_reads_the_static_curves():
    # A sweep's fixed candidates at several budgets in one call: each equals the reference.
    ids, predicted, popularity, _, _, admit = random_case(5, medium=True)
    cells = popularity.size
    jobs = [(Candidate(Kind.MATRIX, Residency.FIXED, execution, allocation), ReplaySetup(popularity, total, 2, admit))
            for total in (0, cells // 7, cells // 2, cells - 3, cells)
            for execution in (Execution.SEQUENTIAL, Execution.STAGE) for allocation in Allocation]
    for (candidate, setup), got in zip(jobs, replay_many(ids, predicted, jobs)):
        counts, _, _ = reference_replay(ids, predicted, candidate, setup)
        assert np.array_equal(got.counts, counts), (candidate.id, setup.total_slots)


def test_hits_of_state_counts_is_the_hits_each_capacity_makes():
    ids, _, popularity, _, _, _ = random_case(3)
    curves = static_step_counts(ids, popularity)
    hits = hits_of(curves)
    assert np.all(np.diff(hits, axis=1) >= 0)  # inclusion: more slots never hit less
    assert np.array_equal(hits[:, -1], np.full(ids.shape[1], ids.shape[0] * ids.shape[2]))  # every expert: every hit
    assert np.all(hits[:, 0] == 0)


def test_lru_with_admissions_breaks_inclusion_under_the_step_convention():
    # One layer, k = 3, experts ranked by id (0 most popular). Step 0 routes [5, 4, 0]:
    # with 4 slots 0 hits and 5, 4 are admitted, 4 last (most recent); with 5 slots 4 and
    # 0 hit first, then 5 is admitted after them, so 4 is the least recent of the step.
    # Step 1 routes three other experts; step 2 routes 4 again: still resident with 4
    # slots, evicted with 5. More slots, fewer hits: no stack algorithm, so per-layer LRU
    # with admissions is replayed, not read off a curve.
    popularity = np.arange(12, 0, -1)[None, :]
    ids = np.array([[[5, 4, 0]], [[6, 7, 8]], [[4, 9, 10]]], dtype=np.int16)
    hits = {}
    for capacity in (4, 5):
        setup = ReplaySetup(popularity, capacity, 0)
        per_step = [replay(ids[: t + 1], None, STAGE_LRU, setup).hits_per_layer()[0] for t in range(3)]
        hits[capacity] = per_step[2] - per_step[1]  # step 2's hits
        assert np.array_equal(replay(ids, None, STAGE_LRU, setup).counts,
                              reference_replay(ids, None, STAGE_LRU, setup)[0])
    assert hits == {4: 1, 5: 0}


def batch_lru_hits(ids, popularity, capacity):
    """Hits per layer of the batch LRU the curve describes, plainly: look the step up,
    then every routed expert becomes most recent in routing order, evicting down to the
    capacity (only meaningful for capacity >= k)."""
    n_tokens, n_layers, _ = ids.shape
    hits = np.zeros(n_layers, dtype=np.int64)
    for layer in range(n_layers):
        order = sorted(range(popularity.shape[1]), key=lambda e: -popularity[layer, e])
        cache = OrderedDict.fromkeys(order[:capacity][::-1])
        for t in range(n_tokens):
            row = [int(e) for e in ids[t, layer]]
            hits[layer] += sum(e in cache for e in row)
            for e in row:
                cache[e] = None
                cache.move_to_end(e)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hits


@pytest.mark.parametrize("seed", range(6))
def test_lru_curve_is_the_batch_lru_at_every_capacity_from_k(seed):
    ids, _, popularity, _, _, _ = random_case(seed, medium=seed % 2 == 1)
    k, n_experts = ids.shape[2], popularity.shape[1]
    curves = lru_hit_curves(ids, popularity)
    for capacity in range(k, n_experts + 1):
        assert np.array_equal(curves[:, capacity], batch_lru_hits(ids, popularity, capacity)), capacity


@pytest.mark.parametrize("seed", range(16))
def test_one_pass_curves_equal_the_plain_counts_at_every_capacity(seed):
    # Every capacity 0..E, below k too, on small and medium traces (ties in popularity,
    # reals, counts): the compiled one-pass counts against each capacity counted alone
    # and a recency list per layer.
    ids, _, popularity, _, _, _ = random_case(200 + seed, medium=seed % 2 == 0)
    got = static_step_counts(ids, popularity), lru_hit_curves(ids, popularity), \
        lru_hit_curves(ids, popularity, tokens=60)
    want = reference_static_counts(ids, popularity), reference_lru_curve(ids, popularity), \
        reference_lru_curve(ids[-60:], popularity)
    for a, b in zip(got, want):
        assert a.dtype == np.int64 and np.array_equal(a, b)


def test_the_lru_curve_stays_exact_past_a_renumbering_of_its_stamps():
    # The compiled curve keeps int16 last-use stamps and renumbers them every 4,000 steps
    # of top-8: 9,000 tokens cross that twice; steps that route an expert twice (at its
    # last place) are kept too.
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 24, size=(9000, 2, 8)) % (rng.integers(6, 25, size=(9000, 2, 1)))
    popularity = rng.integers(0, 5, size=(2, 24))
    got = lru_hit_curves(ids, popularity)
    assert np.array_equal(got, reference_lru_curve(ids, popularity)) and got[:, -1].tolist() == [9000 * 8] * 2


def test_the_one_pass_counts_refuse_ids_outside_the_model():
    # The compiled loops index by the ids unchecked: a bare array with an id past the
    # layer's experts (or below 0) is refused before any is read.
    popularity = np.ones((2, 4))
    for bad in (-1, 4):
        ids = np.zeros((3, 2, 1), dtype=np.int16)
        ids[2, 1, 0] = bad
        for count in (static_step_counts, lru_hit_curves):
            with pytest.raises(ValueError, match=r"expert ids outside 0\.\.3"):
                count(ids, popularity)


# --- allocation ---------------------------------------------------------------------


def best_allocation(curves, total):
    n_layers, width = curves.shape
    best = max(
        (split for split in itertools.product(range(width), repeat=n_layers) if sum(split) == total),
        key=lambda split: sum(curves[l, c] for l, c in enumerate(split)),
    )
    return sum(curves[l, c] for l, c in enumerate(best))


@pytest.mark.parametrize("seed", range(8))
def test_greedy_on_concave_curves_is_optimal_and_spends_every_slot(seed):
    rng = np.random.default_rng(seed)
    popularity = rng.integers(0, 30, size=(3, 5))
    curves = popularity_curves(popularity)
    for total in range(0, 16):
        slots = allocate_by_curves(curves, total)
        assert slots.sum() == total and np.all(slots <= 5)
        assert sum(curves[l, c] for l, c in enumerate(slots)) == best_allocation(curves, total)
        assert uniform_with_remainder(curves, total).sum() == total
        assert np.ptp(uniform_with_remainder(curves, total)) <= 1


def test_a_curve_that_is_not_concave_is_followed_along_its_hull():
    # Layer 0 gains nothing from its first slot and 10 from each of the next two (a cache
    # smaller than a step's experts); layer 1 gains 6, 5, 1. One slot at a time on the raw
    # curves would never pass layer 0's first slot: [0, 3], 12 hits. Along the hull every
    # slot of layer 0 gains 20/3: [3, 0], 20 hits, the best.
    curves = np.array([[0, 0, 10, 20], [0, 6, 11, 12]])
    assert allocate_by_curves(curves, 3).tolist() == [3, 0]
    assert best_allocation(curves, 3) == 20
    # The limit: a total that ends inside a hull segment lands below the hull ([2, 0],
    # 10 hits, where [0, 2] makes 11).
    assert allocate_by_curves(curves, 2).tolist() == [2, 0] and best_allocation(curves, 2) == 11


def test_mutable_nonuniform_gives_every_layer_k_slots_when_the_total_allows():
    rng = np.random.default_rng(0)
    popularity = rng.integers(0, 100, size=(4, 16)) * np.array([[50], [1], [1], [1]])  # layer 0 dominates
    k = 3
    assert allocate_slots(popularity, 20, Allocation.NONUNIFORM).min() < k  # fixed: popularity alone
    slots = allocate_slots(popularity, 20, Allocation.NONUNIFORM, floor=k)
    assert slots.min() >= k and slots.sum() == 20
    assert allocate_slots(popularity, 10, Allocation.NONUNIFORM, floor=k).sum() == 10  # below 4 x k: no floor


# --- real routing ----------------------------------------------------------------------


@pytest.mark.shared_traces
def test_static_curves_equal_the_stepwise_replay_on_real_deepseek_routing(shared_traces):
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=6)
    profile, replayed = trace.split(0.5)
    assert_curves_match_stepwise_replay(replayed.expert_ids[:60, :6], profile.popularity()[:6])


@pytest.mark.shared_traces
def test_nonuniform_lru_follows_the_curves_on_real_deepseek_routing(shared_traces):
    # Profile on the first half of the prompts, replay the second half: at the same
    # total slots, the nonuniform per-layer LRU gives every layer at least k slots once
    # the total allows, and hits at least as often as uniform.
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=80)
    profile, replayed = trace.split(0.5)
    popularity = profile.popularity()
    n_layers, k = replayed.n_layers, replayed.top_k
    curves = lru_hit_curves(profile.expert_ids, popularity)
    jobs = []
    for per_layer in (8, 16, 24):
        setup = ReplaySetup(popularity, per_layer * n_layers + n_layers // 2, 0, None, curves)
        jobs += [(replace_allocation(STAGE_LRU, allocation), setup) for allocation in Allocation]
    stats = replay_many(replayed.expert_ids, None, jobs)
    for uniform, nonuniform in zip(stats[::2], stats[1::2]):
        assert uniform.slots_per_layer.sum() == nonuniform.slots_per_layer.sum()
        assert nonuniform.slots_per_layer.min() >= k
        assert nonuniform.hits_per_layer().sum() >= uniform.hits_per_layer().sum()


@pytest.mark.shared_traces
def test_nonuniform_lru_on_the_whole_deepseek_trace_gives_k_slots_and_hits_at_least_uniform(shared_traces):
    # The split `cope advise` makes (curves and popularity from the first half of the
    # tokens, replay of the second), at totals from 6.5 to 48.5 slots per layer: the
    # curves on the whole profile (on its last 1,024 tokens nonuniform hit less than
    # uniform at 377, 429 and 481 slots; bench/deepseek_allocation.py prints them all).
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond")
    profile, replayed = trace.split(0.5)
    popularity = profile.popularity()
    n_layers, k = replayed.n_layers, replayed.top_k
    curves = lru_hit_curves(profile.expert_ids, popularity)
    totals = (169, 377, 429, 481, 845, 1261)
    assert min(totals) >= k * n_layers
    jobs = [(replace_allocation(STAGE_LRU, allocation), ReplaySetup(popularity, total, 0, None, curves))
            for total in totals for allocation in (Allocation.UNIFORM, Allocation.NONUNIFORM)]
    stats = replay_many(replayed.expert_ids, None, jobs)
    for total, uniform, nonuniform in zip(totals, stats[::2], stats[1::2]):
        assert uniform.slots_per_layer.sum() == nonuniform.slots_per_layer.sum() == total
        assert nonuniform.slots_per_layer.min() >= k, total
        assert nonuniform.hits_per_layer().sum() >= uniform.hits_per_layer().sum(), total


def replace_allocation(candidate, allocation):
    from dataclasses import replace

    return replace(candidate, allocation=allocation)
