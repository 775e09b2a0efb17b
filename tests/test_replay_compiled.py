"""The compiled LRU replays (numba: engine/replays/replay_kernels.py, run by
engine/replays/replay_compiled.py) against the step-wise residency of
engine/replays/residency.py (the compiled hit curves: tests/test_hit_curves.py).

The compiled loops must give exactly the step-wise replay's state counts, admissions
and prefetch used for every LRU plan: per-layer caches of any capacity (0, below the
k experts a step routes, every expert), pools smaller than a step's guesses plus its
experts, every kind of admission, with and without prefetch, replayed in chunks, with
per-layer caches shared between plans and pools that join the first pool of the same
rules once they hold the same experts. A sweep replays each distinct per-layer cache
once. tests/test_replay_equivalence.py checks the same replays against the plain
reference loop.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import engine.replays.replay as replay_module
import engine.replays.replay_compiled as replay_compiled
from engine.replays.hit_curves import lru_hit_curves
from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replays.replay import ReplaySetup, replay, replay_many
from engine.replays.replay_common import ReplayPlan, Ticks, TraceArrays
from tests.replay_reference import every_candidate, random_case, uniform_routing

LRU_KINDS = [
    Candidate(Kind.MATRIX, residency, execution, allocation, Eviction.LRU, prefetch)
    for residency in (Residency.LAYER, Residency.POOL) for execution in Execution
    for allocation in Allocation for prefetch in (False, True)
]


@pytest.fixture
def small_chunks(monkeypatch):
    """The compiled replays a few tokens at a time (chunks, and pools compared for
    joining, at every chunk's end)."""
    monkeypatch.setattr(replay_compiled, "CHUNK", 5)


def stepwise_of(ids, predicted, plans):
    """The step-wise residency's (counts, admissions, used) of arbitrary plans."""
    by_width = {}
    for plan in plans:
        by_width.setdefault(plan.width, []).append(plan)
    out = {}
    for width, group in by_width.items():
        results = replay_module._run_stepwise(TraceArrays(ids, predicted, width), group, Ticks(None, 0, 1))
        out.update({plan.key: result for plan, result in zip(group, results)})
    return [out[plan.key] for plan in plans]


def compiled_of(ids, predicted, plans):
    """The compiled engines' (counts, admissions, used) of the same plans, all in one go."""
    assert replay_compiled.fits(ids, predicted, plans[0].popularity.shape[1], max(plan.width for plan in plans))
    results = replay_compiled.replay_lru(ids, predicted, plans, Ticks(None, 0, 1))
    return [results[plan.key] for plan in plans]


def assert_same_results(got, want, label):
    for (counts, admitted, used), (want_counts, want_admitted, want_used) in zip(got, want):
        assert counts.shape == want_counts.shape, label
        assert np.array_equal(counts, want_counts), label
        assert (admitted, used) == (want_admitted, want_used), label


def random_plans(rng, popularity, k, width, n_plans):
    """LRU plans with arbitrary slots per layer (0, below k, every expert), every kind of
    admission, per-layer and pooled, with and without prefetch."""
    n_layers, n_experts = popularity.shape
    admissions = [np.zeros(k + 1, dtype=np.int64), np.arange(k, -1, -1, dtype=np.int64),
                  np.minimum(rng.integers(0, k + 1, size=k + 1), k - np.arange(k + 1)).astype(np.int64)]
    plans = []
    for i in range(n_plans):
        choice = rng.integers(0, 4)
        if choice == 0:
            slots = rng.integers(0, n_experts + 1, size=n_layers)
        elif choice == 1:
            slots = rng.integers(0, min(k, n_experts) + 1, size=n_layers)  # below k
        else:
            slots = np.full(n_layers, int(rng.integers(0, n_experts + 1)))
        slots = slots.astype(np.int64)
        admit = admissions[rng.integers(0, len(admissions))]
        pooled = bool(rng.integers(0, 2))
        plan_width = int(rng.integers(0, width + 1))
        key = ("test", i)
        plans.append(ReplayPlan(f"plan{i}", key, slots, popularity, False, pooled, Eviction.LRU, admit, plan_width))
    return plans


@pytest.mark.parametrize("seed", range(30))
def test_compiled_lru_equals_the_stepwise_residency_on_arbitrary_slots(seed, small_chunks):
    ids, predicted, popularity, _, _, _ = random_case(seed, medium=seed % 3 == 0)
    if predicted is None:
        predicted = np.zeros(ids.shape, dtype=np.int16)
    predicted = predicted.copy()
    predicted[:, -1] = 0
    rng = np.random.default_rng(seed)
    k = ids.shape[2]
    plans = random_plans(rng, popularity, k, predicted.shape[2], 12)
    assert_same_results(compiled_of(ids, predicted, plans), stepwise_of(ids, predicted, plans), seed)


@pytest.mark.parametrize("seed", range(4))
def test_keys_past_uint16_take_uint32_and_stay_exact(seed, small_chunks, monkeypatch):
    # Pools of models with 65,535 or more (layer, expert) keys index by uint32; the
    # small cases here are forced onto that path.
    assert replay_compiled.key_type(65_534) is np.uint16 and replay_compiled.key_type(65_535) is np.uint32
    monkeypatch.setattr(replay_compiled, "key_type", lambda n_keys: np.uint32)
    ids, predicted, popularity, _, _, _ = random_case(300 + seed, medium=True)
    if predicted is None:
        predicted = np.zeros(ids.shape, dtype=np.int16)
    predicted = predicted.copy()
    predicted[:, -1] = -1
    plans = random_plans(np.random.default_rng(seed), popularity, ids.shape[2], predicted.shape[2], 8)
    got = compiled_of(ids, predicted, plans)
    assert replay_compiled._Guesses(ids, predicted, 1).ids.dtype == np.uint32
    assert_same_results(got, stepwise_of(ids, predicted, plans), seed)


@pytest.mark.parametrize("seed", range(20))
def test_compiled_replay_many_equals_replay_stepwise_for_every_lru_candidate(seed, small_chunks):
    ids, predicted, popularity, total, budget, admit = random_case(100 + seed, medium=seed % 2 == 0)
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = [c for c in every_candidate(predicted is not None) if c.eviction is Eviction.LRU]
    stats = replay_many(ids, predicted, [(c, setup) for c in candidates])
    for candidate, got in zip(candidates, stats):
        want = replay(ids, predicted, candidate, setup, stepwise=True)
        assert np.array_equal(got.counts, want.counts), candidate.id
        assert (got.admissions, got.prefetch_used) == (want.admissions, want.prefetch_used), candidate.id


def test_small_pools_and_caches_below_k_match(small_chunks):
    # Pools smaller than a step's guesses plus its experts (copies cut short), and
    # per-layer caches smaller than k.
    n_layers, k = 5, 4
    ids, predicted, popularity = uniform_routing(4, 120, n_layers, 12, k, 6, 9)
    for total in (0, 1, k - 1, k + 2, 6 + k - 1, n_layers * (k - 1)):
        setup = ReplaySetup(popularity, total, 6, np.array([2, 2, 1, 0, 0]))
        jobs = [(c, setup) for c in LRU_KINDS]
        for (candidate, _), got in zip(jobs, replay_many(ids, predicted, jobs)):
            want = replay(ids, predicted, candidate, setup, stepwise=True)
            assert np.array_equal(got.counts, want.counts), (total, candidate.id)
            assert (got.admissions, got.prefetch_used) == (want.admissions, want.prefetch_used), (total, candidate.id)


def test_pools_that_come_to_hold_the_same_experts_join_and_stay_exact(small_chunks):
    # Uniform and nonuniform pools of one total start apart and converge under heavy
    # churn; the later one stops and takes its remaining counts from the first.
    ids, predicted, popularity = uniform_routing(8, 300, 4, 16, 4, 3, 30)
    setup = ReplaySetup(popularity, 24, 3, None)
    candidates = [Candidate(Kind.MATRIX, Residency.POOL, Execution.STAGE, allocation, Eviction.LRU, prefetch=True)
                  for allocation in Allocation]
    plans = [replay_module._plan(ids, predicted, c, setup) for c in candidates]
    assert not np.array_equal(plans[0].slots, plans[1].slots) and plans[0].slots.sum() == plans[1].slots.sum()
    guesses = replay_compiled._Guesses(ids, predicted, 3)
    pools = replay_compiled._CompiledPool(guesses, plans)
    replay_compiled.run_engines([pools], len(ids), Ticks(None, 0, 1))
    assert 1 in pools.joined  # the second followed the first for part of the trace
    for j, candidate in enumerate(candidates):
        want = replay(ids, predicted, candidate, setup, stepwise=True)
        counts, admitted, used = pools.result(j)
        assert np.array_equal(counts, want.counts) and (admitted, used) == (want.admissions, want.prefetch_used)


def test_a_per_layer_cache_depends_only_on_its_own_layer_capacity_and_rules():
    # What the compiled engine relies on to replay each (layer, capacity, admissions,
    # width) once: under the step rule, a layer's hits do not depend on the other
    # layers' capacities, and the copies a step issues depend only on the next layer's.
    ids, predicted, popularity, _, _, admit = random_case(21, medium=True)
    if predicted is None:
        predicted = np.zeros(ids.shape, dtype=np.int16)
    n_layers, n_experts = popularity.shape
    k = ids.shape[2]
    admit = np.minimum(admit, k - np.arange(k + 1)).astype(np.int64)
    rng = np.random.default_rng(21)
    a = rng.integers(0, n_experts + 1, size=n_layers).astype(np.int64)
    b = rng.integers(0, n_experts + 1, size=n_layers).astype(np.int64)
    layer = n_layers // 2
    b[layer] = a[layer]
    b[layer + 1] = a[layer + 1]
    width = predicted.shape[2]
    plans = [ReplayPlan(name, (name,), slots, popularity, False, False, Eviction.LRU, admit, width)
             for name, slots in (("a", a), ("b", b))]
    (counts_a, _, _), (counts_b, _, _) = stepwise_of(ids, predicted, plans)
    assert np.array_equal(counts_a[layer], counts_b[layer])
    differ = [l for l in range(n_layers) if a[l] != b[l]]
    assert differ and any(not np.array_equal(counts_a[l].sum(axis=1), counts_b[l].sum(axis=1)) for l in differ)


def test_a_sweep_replays_each_per_layer_cache_once(monkeypatch):
    # Budgets whose allocations share some layers' capacities: each (layer, capacity,
    # admissions, width) cache is replayed once, and every candidate still equals its
    # step-wise replay.
    engine_class = replay_compiled._CompiledLayerLru
    ids, predicted, popularity, _, _, admit = random_case(7, medium=True)
    cells = popularity.size
    setups = [ReplaySetup(popularity, total, 2, admit) for total in (cells // 4, cells // 4 + 1, cells // 2)]
    candidates = [c for c in LRU_KINDS if c.residency is Residency.LAYER and c.prefetch == (predicted is not None)]
    jobs = [(c, s) for s in setups for c in candidates]
    seen = []
    original = engine_class.__init__

    def spy(self, source, plans):
        original(self, source, plans)
        seen.append((self, plans))

    monkeypatch.setattr(engine_class, "__init__", spy)
    stats = replay_many(ids, predicted, jobs)
    [(engine, plans)] = seen
    distinct = {(layer, int(c), tuple(p.admit.tolist()), p.width) for p in plans for layer, c in enumerate(p.slots)}
    assert len(set(engine.plan_rows.ravel().tolist())) == len(distinct) < len(plans) * ids.shape[1]
    for (candidate, setup), got in zip(jobs, stats):
        want = replay(ids, predicted, candidate, setup, stepwise=True)
        assert np.array_equal(got.counts, want.counts), candidate.id
        assert (got.admissions, got.prefetch_used) == (want.admissions, want.prefetch_used), candidate.id


def test_ids_outside_the_model_leave_the_compiled_path():
    ids = np.zeros((3, 2, 1), dtype=np.int16)
    assert replay_compiled.fits(ids, None, 4, 0)
    assert not replay_compiled.fits(ids - 1, None, 4, 0)
    predicted = np.full((3, 2, 2), 3, dtype=np.int16)
    predicted[:, -1] = -1  # the last layer's guesses are never used
    assert replay_compiled.fits(ids, predicted, 4, 2)
    predicted[0, 0, 1] = 4
    assert not replay_compiled.fits(ids, predicted, 4, 2) and replay_compiled.fits(ids, predicted, 4, 1)


def test_kernels_compile_without_a_writable_cache(monkeypatch):
    # numba refuses cache=True where it finds no writable cache folder; the kernels then
    # compile in every process rather than fail.
    import numba

    from engine.replays import kernel_cache

    real = numba.njit

    def no_cache(*args, **options):
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return real(*args, **options)

    monkeypatch.setattr(numba, "njit", no_cache)

    def add_one(x):
        return x + 1

    assert kernel_cache.jit(add_one)(41) == 42


@pytest.mark.shared_traces
def test_compiled_lru_matches_the_stepwise_residency_on_real_deepseek_routing(shared_traces, small_chunks):
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=12)
    profile, replayed = trace.split(0.5)
    ids = replayed.expert_ids[:150]
    predicted = np.full_like(ids, 0)
    predicted[:, :-1] = np.roll(ids, 1, axis=0)[:, 1:]  # the previous token's next-layer routing
    n_layers, k = ids.shape[1:]
    popularity = profile.popularity()
    curves = lru_hit_curves(profile.expert_ids, popularity)
    for per_layer in (3, 6, 12, 40):
        setup = ReplaySetup(popularity, n_layers * per_layer + 5, 4, np.array([3, 3, 2, 2, 1, 1, 0]), curves)
        jobs = [(c, setup) for c in LRU_KINDS]
        for (candidate, _), got in zip(jobs, replay_many(ids, predicted, jobs)):
            want = replay(ids, predicted, candidate, setup, stepwise=True)
            assert np.array_equal(got.counts, want.counts), (per_layer, candidate.id)
            assert (got.admissions, got.prefetch_used) == (want.admissions, want.prefetch_used), candidate.id


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_runs_tasks_on_a_pool_of_its_own():
    """The app forks a child to plan its first ranking: a pool its parent made has no threads
    in the child, whose tasks must still run (they waited forever on the parent's pool)."""
    from engine.replays import compiled

    if compiled.threads() < 2:
        pytest.skip("one CPU: tasks run inline, no pool is made")
    # the parent's pool with all its threads (tasks that wait: one thread cannot take both)
    compiled.run_tasks([lambda: time.sleep(0.2)] * compiled.threads())
    assert len(compiled._POOL[0]._threads) == compiled.threads()
    pid = os.fork()
    if pid == 0:  # the child: run tasks on the pool, then leave without running pytest's exit
        done = []
        compiled.run_tasks([lambda: done.append(1), lambda: done.append(2)])
        os._exit(0 if sorted(done) == [1, 2] else 1)
    for _ in range(200):  # 20 s at most
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child's tasks never ran")
    assert os.waitstatus_to_exitcode(status) == 0
