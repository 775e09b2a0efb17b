"""The fast replay against a plain reference, on random traces.

`reference_replay` is the replay loop as first written (OrderedDict LRU, a scan of the
resident set for score eviction), kept here deliberately simple: one step at a time,
one key at a time. It changes one thing: among equal scores, score eviction takes the
lowest key, where the first loop took whichever its set happened to yield first.
engine/replay.py batches, vectorises and shares work between candidates and budgets;
every count it returns must equal the reference's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import numpy as np
import pytest

from engine.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replay import SCORE_DECAY_PER_TOKEN, ReplaySetup, replay, replay_many

# --- the reference ------------------------------------------------------------------


def reference_replay(ids, predicted, candidate: Candidate, setup: ReplaySetup, cpu_layers=None):
    """(counts [L, k+1, P+1], admissions, prefetch_used) of one candidate."""
    n_tokens, n_layers, k = ids.shape
    popularity = np.asarray(setup.popularity)
    n_experts = popularity.shape[1]
    if candidate.kind is not Kind.MATRIX:
        if candidate.kind is Kind.ALL_GPU:
            cpu_layers = np.zeros(n_layers, dtype=bool)
        elif candidate.kind is Kind.ALL_CPU:
            cpu_layers = np.ones(n_layers, dtype=bool)
        counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
        counts[cpu_layers, 0, 0] = n_tokens
        counts[~cpu_layers, k, 0] = n_tokens
        return counts, 0, 0

    slots = reference_slots(popularity, setup.total_slots, candidate.allocation)
    order = [sorted(range(n_experts), key=lambda e: -popularity[l, e]) for l in range(n_layers)]  # stable
    admit = reference_admission(candidate, setup, k)
    prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
    if not candidate.is_mutable or not (prefetch or any(admit)):
        counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
        for l in range(n_layers):
            resident = set(order[l][: slots[l]])
            for t in range(n_tokens):
                counts[l, sum(int(e) in resident for e in ids[t, l]), 0] += 1
        return counts, 0, 0

    pred = predicted[:, :, : setup.prefetch_budget] if prefetch else None
    pooled = candidate.residency is Residency.POOL
    if pooled:
        keys = [l * n_experts + e for l in range(n_layers) for e in order[l][: slots[l]]]
        keys.sort(key=lambda key: (popularity.flat[key], -key))  # least routed first
        initial = [keys]
    else:
        initial = [[l * n_experts + e for e in order[l][: slots[l]][::-1]] for l in range(n_layers)]
    if candidate.eviction is Eviction.LRU:
        caches = [LruCache(keys) for keys in initial]
    else:
        score = DecayedScore(popularity, k)
        caches = [ScoreCache(keys, score) for keys in initial]
    budget = 0 if pred is None else pred.shape[2]
    counts = np.zeros((n_layers, k + 1, budget + 1), dtype=np.int64)
    prefetched: set[int] = set()
    admissions = used = 0
    for t in range(n_tokens):
        for l in range(n_layers):
            cache = caches[0] if pooled else caches[l]
            row = [l * n_experts + int(e) for e in ids[t, l]]
            cache.routed(row, t)
            hits = [key for key in row if key in cache]
            misses = [key for key in row if key not in cache]
            h = len(hits)
            for key in hits:
                cache.touch(key)
                if key in prefetched:
                    used += 1
                    prefetched.discard(key)
            n_admit = min(admit[h], cache.capacity - h)
            for key in misses[: max(n_admit, 0)]:
                prefetched.discard(cache.evict(protect=set(row), t=t))
                cache.insert(key)
            admissions += max(n_admit, 0)
            copies = 0
            if budget and l + 1 < n_layers:
                nxt = caches[0] if pooled else caches[l + 1]
                wanted = [key for key in dict.fromkeys((l + 1) * n_experts + int(e) for e in pred[t, l])]
                kept = [key for key in wanted if key in nxt]
                wanted = [key for key in wanted if key not in nxt]
                for key in kept:
                    nxt.touch(key)  # about to be used: protect it
                in_use = {key for key in row if key in cache} if pooled else set()  # hits and admitted
                copies = max(min(len(wanted), nxt.capacity - len(kept) - len(in_use)), 0)
                for key in wanted[:copies]:
                    prefetched.discard(nxt.evict(protect=set(kept) | set(wanted) | in_use, t=t))
                    nxt.insert(key)
                    prefetched.add(key)
            counts[l, h, copies] += 1
    return counts, admissions, used


def reference_slots(popularity, total_slots, allocation):
    n_layers, n_experts = popularity.shape
    total_slots = min(int(total_slots), n_layers * n_experts)
    if allocation is Allocation.UNIFORM:
        return [min(total_slots // n_layers, n_experts)] * n_layers
    # One slot at a time to the layer whose next most popular expert is routed most
    # (ties: the lower layer, then its more popular expert).
    ranked = [sorted(popularity[l], reverse=True) for l in range(n_layers)]
    cells = sorted(((-ranked[l][r], l, r) for l in range(n_layers) for r in range(n_experts)))
    slots = [0] * n_layers
    for _, l, _ in cells[:total_slots]:
        slots[l] += 1
    return slots


def reference_admission(candidate, setup, k):
    if not candidate.is_mutable or not candidate.copies_misses:
        return [0] * (k + 1)
    if candidate.execution is Execution.STAGE:
        return [k - h for h in range(k + 1)]
    return [min(int(a), k - h) for h, a in enumerate(setup.admit_per_hits)]


class LruCache:
    """Front of the OrderedDict = least recently used."""

    def __init__(self, keys):
        self.keys = OrderedDict.fromkeys(keys)
        self.capacity = len(self.keys)

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        pass

    def touch(self, key):
        self.keys.move_to_end(key)

    def insert(self, key):
        self.keys[key] = None

    def evict(self, protect, t):
        # The protected keys were touched this step, so they are never at the front.
        victim = next(iter(self.keys))
        assert victim not in protect
        del self.keys[victim]
        return victim


class DecayedScore:
    """Every routed expert, resident or not, scores 1 per use; scores decay per token.

    A score is kept as (value, token) and decayed when read; an expert starts from its
    steady state on the profile, popularity / profile tokens / (1 - decay).
    """

    def __init__(self, popularity, k):
        decay = SCORE_DECAY_PER_TOKEN
        profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
        self.value = (popularity / profile_tokens / (1 - decay)).ravel().tolist()
        self.time = [0] * popularity.size

    def __call__(self, key, t):
        return self.value[key] * SCORE_DECAY_PER_TOKEN ** (t - self.time[key])

    def routed(self, row, t):
        for key in row:
            self.value[key] = self(key, t) + 1.0
            self.time[key] = t


class ScoreCache:
    """Evicts the unprotected resident with the lowest decayed score, ties to the lowest key."""

    def __init__(self, keys, score: DecayedScore):
        self.keys = set(keys)
        self.capacity = len(self.keys)
        self.score = score

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        self.score.routed(row, t)

    def touch(self, key):
        pass

    def insert(self, key):
        self.keys.add(key)

    def evict(self, protect, t):
        victim = min((key for key in self.keys if key not in protect), key=lambda key: (self.score(key, t), key))
        self.keys.discard(victim)
        return victim


# --- random traces ------------------------------------------------------------------------


def random_case(seed: int, *, medium: bool = False):
    """(ids, predicted or None, popularity, total_slots, prefetch_budget, ready-first split).

    Small cases vary everything: 1-6 layers, 4-32 experts, k up to 8, capacities from 0
    to everything (smaller than k included), predictions with duplicates and of any
    width, popularity as counts, small integers (ties) or reals. Medium cases are
    longer, with pools large enough for the token-at-a-time pool replay.
    """
    rng = np.random.default_rng(seed)
    if medium:
        n_layers, n_experts = int(rng.integers(4, 13)), int(rng.choice([16, 32, 64]))
        n_tokens = int(rng.integers(80, 200))
    else:
        n_layers, n_experts = int(rng.integers(1, 7)), int(rng.choice([4, 6, 8, 16, 32]))
        n_tokens = int(rng.integers(1, 40))
    k = int(rng.integers(1, min(n_experts, 8) + 1))
    p = 1.0 / np.arange(1, n_experts + 1) ** rng.uniform(0, 1.5)
    ranks = np.argsort(rng.random((n_layers, n_experts)), axis=1)
    logits = np.log(p / p.sum())[ranks][None] + rng.gumbel(size=(n_tokens, n_layers, n_experts))
    ids = np.argsort(-logits, axis=2)[:, :, :k].astype(np.int16)
    width = int(rng.integers(1, k + 3))
    predicted = None
    if rng.random() < 0.8:
        predicted = rng.integers(0, n_experts, size=(n_tokens, n_layers, width)).astype(np.int16)
        right = rng.random(predicted.shape) < rng.uniform(0, 1)
        following = np.concatenate([ids[:, 1:], ids[:, :1]], axis=1)  # the next layer's routing
        m = min(k, width)
        predicted[:, :, :m] = np.where(right[:, :, :m], following[:, :, :m], predicted[:, :, :m])
        predicted[:, -1] = -1
    kind = rng.integers(0, 4)
    if kind == 0:
        popularity = np.stack([np.bincount(ids[:, l].ravel(), minlength=n_experts) for l in range(n_layers)])
    elif kind == 1:
        popularity = rng.integers(0, 4, size=(n_layers, n_experts))  # many ties
    elif kind == 2:
        popularity = rng.random((n_layers, n_experts))
    else:  # scores that would underflow: score eviction scans instead of using its heap
        popularity = rng.random((n_layers, n_experts)) * 1e-300
    cells = n_layers * n_experts
    if medium:
        total = int(rng.integers(cells // 4, cells))
    else:
        total = int(rng.choice([0, 1, k - 1, k, k + 1, n_layers * k, cells // 3, cells - 1, cells, cells + 5,
                                int(rng.integers(0, cells + 1))]))
    budget = int(rng.integers(0, width + 2))
    admit = rng.integers(0, k + 1, size=k + 1)
    if rng.random() < 0.5:
        admit = np.sort(admit)[::-1]  # the usual shape: fewer copies with more hits
    return ids, predicted, popularity, max(total, 0), budget, admit


def every_candidate(has_predictions: bool) -> list[Candidate]:
    out = []
    for residency in Residency:
        for execution in Execution:
            for allocation in Allocation:
                if residency is Residency.FIXED:
                    out.append(Candidate(Kind.MATRIX, residency, execution, allocation))
                    continue
                for eviction in Eviction:
                    for prefetch in (False, True) if has_predictions else (False,):
                        out.append(Candidate(Kind.MATRIX, residency, execution, allocation, eviction, prefetch))
    return out


@pytest.fixture(params=["batched", "steps"])
def pool_path(request, monkeypatch):
    """Run a test with pools replayed a token at a time with numpy (`_PoolLru`), then
    one step at a time (`_PoolSteps`); replay picks by how many pools and layers."""
    import engine.replay

    monkeypatch.setattr(engine.replay, "_POOLS_BATCHED", 0 if request.param == "batched" else 10**9)
    return request.param


def assert_same(ids, predicted, setup, candidates, stats):
    for candidate, got in zip(candidates, stats):
        counts, admissions, used = reference_replay(ids, predicted, candidate, setup)
        assert got.candidate_id == candidate.id
        assert got.counts.shape == counts.shape, candidate.id
        assert np.array_equal(got.counts, counts), candidate.id
        assert (got.admissions, got.prefetch_used) == (admissions, used), candidate.id


@pytest.mark.parametrize("seed", range(40))
def test_every_candidate_matches_the_reference_on_small_traces(seed, pool_path):
    ids, predicted, popularity, total, budget, admit = random_case(seed)
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = every_candidate(predicted is not None)
    assert_same(ids, predicted, setup, candidates, [replay(ids, predicted, c, setup) for c in candidates])


@pytest.mark.parametrize("seed", range(6))
def test_batched_replays_match_the_reference_on_medium_traces(seed, pool_path):
    ids, predicted, popularity, total, budget, admit = random_case(1000 + seed, medium=True)
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = [c for c in every_candidate(predicted is not None) if c.eviction is not Eviction.SCORE or seed < 2]
    assert_same(ids, predicted, setup, candidates, replay_many(ids, predicted, [(c, setup) for c in candidates]))


def test_candidates_of_different_setups_replayed_together_match_the_reference(pool_path):
    # Several budgets and both prediction widths in one call, as a budget sweep does.
    ids, predicted, popularity, _, _, admit = random_case(7, medium=True)
    cells = popularity.size
    setups = [
        ReplaySetup(popularity, total, budget, admit) for total in (cells // 5, cells // 2, cells) for budget in (1, 3)
    ]
    jobs = [(c, s) for s in setups for c in every_candidate(predicted is not None) if c.eviction is Eviction.LRU]
    stats = replay_many(ids, predicted, jobs)
    for (candidate, setup), got in zip(jobs, stats):
        assert_same(ids, predicted, setup, [candidate], [got])


def test_pool_lru_with_many_evictions_a_token_matches_the_reference(pool_path):
    # A large pool under heavy churn: the token-at-a-time replay corrects many
    # evictions of experts the token looks up later, and rebuilds its LRU queue often.
    rng = np.random.default_rng(3)
    n_tokens, n_layers, n_experts, k = 150, 16, 32, 6
    logits = rng.gumbel(size=(n_tokens, n_layers, n_experts))
    ids = np.argsort(-logits, axis=2)[:, :, :k].astype(np.int16)
    predicted = rng.integers(0, n_experts, size=(n_tokens, n_layers, k)).astype(np.int16)
    predicted[:, -1] = -1
    popularity = rng.integers(0, 50, size=(n_layers, n_experts))
    candidates = [
        Candidate(Kind.MATRIX, Residency.POOL, execution, allocation, Eviction.LRU, prefetch)
        for execution in Execution for allocation in Allocation for prefetch in (False, True)
    ]
    for total in (60, 200, 400):
        setup = ReplaySetup(popularity, total, k, np.array([3, 3, 2, 2, 1, 0, 0]))
        assert_same(ids, predicted, setup, candidates, replay_many(ids, predicted, [(c, setup) for c in candidates]))


def test_traces_longer_than_a_histogram_chunk_match_the_reference(pool_path):
    # The batched replays fold their per-step counts every 256 tokens.
    rng = np.random.default_rng(11)
    n_tokens, n_layers, n_experts, k = 600, 4, 16, 3
    ids = np.argsort(rng.gumbel(size=(n_tokens, n_layers, n_experts)), axis=2)[:, :, :k].astype(np.int16)
    predicted = rng.integers(0, n_experts, size=(n_tokens, n_layers, k)).astype(np.int16)
    popularity = rng.integers(0, 20, size=(n_layers, n_experts))
    setup = ReplaySetup(popularity, 30, k, np.array([2, 1, 1, 0]))
    candidates = [
        Candidate(Kind.MATRIX, residency, execution, Allocation.NONUNIFORM, Eviction.LRU, prefetch=True)
        for residency in (Residency.LAYER, Residency.POOL) for execution in (Execution.STAGE, Execution.PARALLEL)
    ]
    assert_same(ids, predicted, setup, candidates, replay_many(ids, predicted, [(c, setup) for c in candidates]))


def test_score_eviction_ties_go_to_the_lowest_key():
    # One layer, experts 0..3 resident with equal popularity, so equal scores; k = 1,
    # stage. Expert 4 misses and evicts expert 0, the lowest of the tied keys, so
    # expert 0 misses next (any other choice would make it a hit).
    popularity = np.array([[1, 1, 1, 1, 0, 0]])
    ids = np.array([[[4]], [[0]]], dtype=np.int16)
    setup = ReplaySetup(popularity, total_slots=4, prefetch_budget=0)
    candidate = Candidate(Kind.MATRIX, Residency.LAYER, Execution.STAGE, Allocation.UNIFORM, Eviction.SCORE)
    stats = replay(ids, None, candidate, setup)
    assert stats.counts[0, :, 0].tolist() == [2, 0]
    assert_same(ids, None, setup, [candidate], [stats])


def test_score_heap_settles_rounding_ties_as_the_scan_does():
    # The heap orders by log(score) - token * log(decay), which rounding can order
    # differently from the scores themselves. Key 0 holds 0.81 since token 2, key 1
    # holds 1.0 since token 0: at token 2 both score 0.81 exactly, yet key 0 ranks
    # a hair higher. The scan evicts the lower key, 0; so must the heap.
    from engine.replay_score import _DecayedScores, _ScoreCache

    scores = _DecayedScores(np.zeros((1, 2)), k=1, n_tokens=10)
    scores.value, scores.time = [0.9**2, 1.0], [2, 0]
    scores.rank = [scores._rank(v, t) for v, t in zip(scores.value, scores.time)]
    assert scores(0, 2) == scores(1, 2) and scores.rank[0] > scores.rank[1]
    assert _ScoreCache([0, 1], scores).evict(set(), 2) == 0


# --- advise and the budget sweep ---------------------------------------------------------


def small_request(tokens=40, **kw):
    from cope_tui.options import PlanChoices
    from cope_tui.service.request import build_request
    from engine.cost_model import AnalyticCostModel

    args = PlanChoices(**{"tokens": tokens, "cpu": "desktop-ddr5", "gpu": "rtx-4060-ti-16gb", **kw})
    request = build_request(args)
    cost = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return request, cost


def test_advise_shares_replays_without_changing_any_candidate(pool_path):
    from engine.advise import advise
    from engine.memory import plan_memory

    request, cost = small_request(vram_budget_gib=10)
    recommendation = advise(request, cost)
    memory = plan_memory(request.model, request.quant, vram_budget_bytes=request.vram_budget_bytes,
                         context_tokens=request.context_tokens)
    k = request.model.top_k
    split = cost.state_costs(Execution.READY_FIRST, request.threads, k, k).copied
    popularity = request.profile.popularity()
    trace = request.trace
    for estimate in recommendation.estimates:
        candidate = estimate.candidate
        if candidate.kind is not Kind.MATRIX:
            continue
        setup = ReplaySetup(popularity, memory.slots(staging=candidate.copies_misses), k, split)
        assert_same(trace.expert_ids, trace.predicted_ids, setup, [candidate], [estimate.stats])


def test_budget_sweep_is_advise_at_each_budget():
    from engine.advise import advise, sweep_budgets
    from engine.memory import GIB

    request, cost = small_request()
    budgets = [7 * GIB, 12 * GIB, 12 * GIB, 25 * GIB]  # a repeat, and one where everything fits
    swept = sweep_budgets(request, cost, budgets)
    assert len(swept) == len(budgets)
    for budget, got in zip(budgets, swept):
        want = advise(replace(request, vram_budget_bytes=budget), cost)
        assert got.request.vram_budget_bytes == budget
        assert got.memory == want.memory and got.notes == want.notes
        assert [e.candidate.id for e in got.estimates] == [e.candidate.id for e in want.estimates]
        for a, b in zip(got.estimates, want.estimates):
            assert a.tpot_s == b.tpot_s and a.vram_used_bytes == b.vram_used_bytes and a.detail == b.detail
            assert np.array_equal(a.stats.counts, b.stats.counts)
            assert (a.stats.admissions, a.stats.prefetch_used) == (b.stats.admissions, b.stats.prefetch_used)


def test_progress_is_reported_while_replaying_and_can_stop_the_work():
    from engine.advise import advise, sweep_budgets
    from engine.memory import GIB

    request, cost = small_request(tokens=40)
    calls = []
    advise(request, cost, progress=lambda done, total, label: calls.append((done, total, label)))
    assert any(label == "replaying" for _, _, label in calls)
    assert [done for done, _, _ in calls] == sorted(done for done, _, _ in calls)
    assert len({total for _, total, _ in calls}) == 1
    assert calls[-1][0] == calls[-1][1] and calls[-1][2] == "done"

    class Stop(Exception):
        pass

    def stop(done, total, label):
        if label == "replaying" and done > 0:
            raise Stop

    with pytest.raises(Stop):
        sweep_budgets(request, cost, [8 * GIB, 12 * GIB], progress=stop)
