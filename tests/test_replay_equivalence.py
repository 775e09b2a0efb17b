"""Every way of replaying a candidate against the plain reference (tests/replay_reference.py).

Three implementations must give the reference's counts, admissions and prefetch used,
exactly, for every candidate kind: `replay`/`replay_many` (lookups and the compiled LRU
loops, a few tokens a chunk here, batched and shared between candidates and budgets),
`replay(..., stepwise=True)` (the step-wise residency of engine/replays/residency.py, which score
eviction runs), and the executor's `ResidencyPlan`, whose steps are checked here against
a slot table kept as the executor keeps its own. On random traces, and on real routing
when ../shared/traces is present.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency
from engine.replays.replay import ReplaySetup, replay, replay_many
from engine.replays.residency import ResidencyPlan
from tests.replay_reference import every_candidate, random_case, reference_replay, uniform_routing

STANDALONE = [Candidate(kind) for kind in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST, Kind.ALL_GPU, Kind.ALL_CPU)]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """The compiled replays a few tokens a chunk: progress, and pools compared for
    joining, at every chunk's end."""
    import engine.replays.replay_compiled

    monkeypatch.setattr(engine.replays.replay_compiled, "CHUNK", 7)


def assert_same(ids, predicted, setup, candidates, stats):
    for candidate, got in zip(candidates, stats):
        counts, admissions, used = reference_replay(ids, predicted, candidate, setup)
        assert got.candidate_id == candidate.id
        assert got.counts.shape == counts.shape, candidate.id
        assert np.array_equal(got.counts, counts), candidate.id
        assert (got.admissions, got.prefetch_used) == (admissions, used), candidate.id


def plan_replay(ids, predicted, candidate, setup, cpu_layers=None):
    """(counts, admissions, prefetch used) of the executor's plan, executed on a slot
    table kept here as the executor keeps its own: every step's hits must be what the
    table holds, and every admission or prefetch must take the slot of an expert that
    the step may evict."""
    plan = ResidencyPlan(ids, predicted, candidate, setup, cpu_layers=cpu_layers)
    n_tokens, n_layers, k = ids.shape
    n_experts = setup.popularity.shape[1]
    slot_of = dict(plan.initial)
    assert sorted(slot_of.values()) == list(range(plan.n_slots))
    key_at = {slot: key for key, slot in slot_of.items()}
    ready_first = candidate.kind is Kind.MATRIX and candidate.execution is Execution.READY_FIRST

    def move(key, slot, spared):
        old = key_at[slot]
        assert slot_of.pop(old) == slot and old not in spared and key not in slot_of
        slot_of[key], key_at[slot] = slot, key

    counts = np.zeros((n_layers, k + 1, plan.prefetch_columns), dtype=np.int64)
    for t in range(n_tokens):
        for l, step in enumerate(plan.steps(t)):
            row = [int(e) for e in ids[t, l]]
            keys = {l * n_experts + e for e in row}
            hits = [e for e in row if l * n_experts + e in slot_of]
            assert list(step.hits) == hits and list(step.misses) == [e for e in row if e not in hits]
            if ready_first:
                split = min(int(setup.admit_per_hits[len(hits)]), k - len(hits))
                assert step.copy_ids == tuple(step.misses[:split])
            else:
                assert step.copy_ids is None
            assert [e for e, _ in step.admitted] == list(step.misses[: len(step.admitted)])
            for e, slot in step.admitted:
                move(l * n_experts + e, slot, keys)
            predicted_keys = {key for key, _ in step.prefetch}
            for key, slot in step.prefetch:
                assert key // n_experts == l + 1
                move(key, slot, keys | predicted_keys)
            counts[l, len(hits), len(step.prefetch)] += 1
    assert len(slot_of) == plan.n_slots
    return counts, plan.admissions, plan.prefetch_used


def assert_every_way_the_same(ids, predicted, setup, candidates, stats, cpu_layers=None):
    """`stats` (from replay or replay_many), the step-wise replay and the executor's plan
    all equal the reference, for each candidate."""
    for candidate, got in zip(candidates, stats):
        layers = cpu_layers if candidate.kind in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST) else None
        want = reference_replay(ids, predicted, candidate, setup, cpu_layers=layers)
        stepwise = replay(ids, predicted, candidate, setup, cpu_layers=layers, stepwise=True)
        planned = plan_replay(ids, predicted, candidate, setup, cpu_layers=layers)
        for how, (counts, admissions, used) in (
            ("replay", (got.counts, got.admissions, got.prefetch_used)),
            ("step-wise", (stepwise.counts, stepwise.admissions, stepwise.prefetch_used)),
            ("plan", planned),
        ):
            assert counts.shape == want[0].shape, (how, candidate.id)
            assert np.array_equal(counts, want[0]), (how, candidate.id)
            assert (admissions, used) == want[1:], (how, candidate.id)
        assert np.array_equal(stepwise.slots_per_layer, got.slots_per_layer), candidate.id


@pytest.mark.parametrize("seed", range(40))
def test_every_candidate_matches_the_reference_on_small_traces(seed):
    # Every kind, standalone ones too, every way.
    ids, predicted, popularity, total, budget, admit = random_case(seed)
    setup = ReplaySetup(popularity, total, budget, admit)
    cpu_layers = np.random.default_rng(seed).random(ids.shape[1]) < 0.5
    candidates = every_candidate(predicted is not None) + STANDALONE
    stats = [replay(ids, predicted, c, setup, cpu_layers=cpu_layers) for c in candidates]
    assert_every_way_the_same(ids, predicted, setup, candidates, stats, cpu_layers)


@pytest.mark.parametrize("seed", range(6))
def test_batched_replays_match_the_reference_on_medium_traces(seed):
    ids, predicted, popularity, total, budget, admit = random_case(1000 + seed, medium=True)
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = [c for c in every_candidate(predicted is not None) if c.eviction is not Eviction.SCORE or seed < 2]
    stats = replay_many(ids, predicted, [(c, setup) for c in candidates])
    assert_every_way_the_same(ids, predicted, setup, candidates, stats)


def test_candidates_of_different_setups_replayed_together_match_the_reference():
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


def test_pool_lru_with_many_evictions_a_token_matches_the_reference():
    # Large pools under heavy churn: a token evicts experts it looks up later in the
    # same token, and uniform and nonuniform pools of one total may come to agree.
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


def test_traces_longer_than_a_histogram_chunk_match_the_reference():
    # The replays fold their per-step counts every 256 tokens, and the decayed scores
    # are computed ahead 256 tokens at a time.
    k = 3
    ids, predicted, popularity = uniform_routing(11, 600, 4, 16, k, k, 20)
    setup = ReplaySetup(popularity, 30, k, np.array([2, 1, 1, 0]))
    candidates = [
        Candidate(Kind.MATRIX, residency, execution, Allocation.NONUNIFORM, eviction, prefetch=True)
        for residency in (Residency.LAYER, Residency.POOL) for execution in (Execution.STAGE, Execution.PARALLEL)
        for eviction in Eviction
    ]
    assert_same(ids, predicted, setup, candidates, replay_many(ids, predicted, [(c, setup) for c in candidates]))


def test_an_expert_routed_twice_in_a_step_scores_twice():
    # Not in a valid trace (RoutingTrace refuses it), but replay takes bare arrays: the
    # decayed scores computed ahead must then add 1 per use, in order, as the plain loop does.
    # Only prefetch changes these caches (no admissions, which a repeated miss would
    # make twice), and it evicts by score.
    ids, predicted, popularity, total, budget, admit = random_case(1010, medium=True)
    ids = ids.copy()
    ids[::3, :, -1] = ids[::3, :, 0]  # every third token repeats its first expert in every layer
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = [
        c for c in every_candidate(True)
        if c.eviction is Eviction.SCORE and c.prefetch and not c.copies_misses
    ]
    assert_same(ids, predicted, setup, candidates, replay_many(ids, predicted, [(c, setup) for c in candidates]))
    assert_same(ids, predicted, setup, candidates, [replay(ids, predicted, c, setup, stepwise=True) for c in candidates])


@pytest.mark.parametrize("seed", [0, 12])
def test_ids_outside_the_model_are_replayed_step_by_step_as_the_reference_does(seed):
    # Bare arrays may hold ids no expert of the layer has (a RoutingTrace never does): the
    # compiled loops and the one-pass counts would index by them, so replay takes the
    # fixed and LRU caches step by step, where a key is any number, as the plain loop
    # does. (Score eviction keeps a score per expert of the model: it takes none.)
    ids, predicted, popularity, total, budget, admit = random_case(seed)
    ids = ids.copy()
    ids[::2, :, 0] = -1
    ids[1::3, :, -1] = popularity.shape[1]
    setup = ReplaySetup(popularity, total, budget, admit)
    candidates = [c for c in every_candidate(predicted is not None) if c.eviction is not Eviction.SCORE]
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
    from engine.replays.residency_caches import DecayedScores, ScoreCache

    scores = DecayedScores(np.zeros((1, 2)), k=1, route_keys=np.zeros((10, 1, 1), dtype=np.intp))
    scores.value, scores.time = [0.9**2, 1.0], [2, 0]
    scores.rank = [math.log(v) - t * scores.log_decay for v, t in zip(scores.value, scores.time)]
    assert scores(0, 2) == scores(1, 2) and scores.rank[0] > scores.rank[1]
    assert ScoreCache([0, 1], scores).evict(set(), 2) == 0


# --- advise and the budget sweep ---------------------------------------------------------


def small_request(tokens=40, **kw):
    from cope_tui.options import PlanChoices
    from cope_tui.service.request import build_request
    from engine.cost.analytic_cost import AnalyticCostModel

    args = PlanChoices(**{"tokens": tokens, "cpu": "desktop-ddr5", "gpu": "rtx-4060-ti-16gb", **kw})
    request = build_request(args)
    cost = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return request, cost


@pytest.mark.slow
def test_advise_shares_replays_without_changing_any_candidate():
    from engine.advice.advise import advise
    from engine.replays.residency import partition_layers
    from engine.replays.hit_curves import lru_hit_curves
    from engine.hardware.memory import plan_memory

    request, cost = small_request(vram_budget_gib=10)
    recommendation = advise(request, cost)
    memory = plan_memory(request.model, request.quant, vram_budget_bytes=request.vram_budget_bytes,
                         context_tokens=request.context_tokens)
    k = request.model.top_k
    split = cost.state_costs(Execution.READY_FIRST, request.threads, k, k).copied
    popularity = request.profile.popularity()
    curves = lru_hit_curves(request.profile.expert_ids, popularity)
    trace = request.trace
    for estimate in recommendation.estimates:
        candidate = estimate.candidate
        if candidate.kind is not Kind.MATRIX:
            # What an executor needs comes with the estimate: the layers it keeps on the CPU.
            layers, _ = partition_layers(candidate.kind, trace.n_layers, memory.gpu_layers(), request.model.moe_blocks)
            assert np.array_equal(estimate.cpu_layers, layers), candidate.id
            assert np.array_equal(estimate.stats.counts[:, 0, 0] > 0, layers), candidate.id
            continue
        setup = ReplaySetup(popularity, memory.slots(staging=candidate.copies_misses), k, split, curves)
        # The estimate carries the setup it was replayed with (validate executes that).
        assert estimate.cpu_layers is None and estimate.setup.total_slots == setup.total_slots
        assert estimate.setup.prefetch_budget == k and np.array_equal(estimate.setup.popularity, popularity)
        assert np.array_equal(estimate.setup.hit_curves, setup.hit_curves)
        if candidate.execution is Execution.READY_FIRST:
            assert np.array_equal(estimate.setup.admit_per_hits, split)
        assert_same(trace.expert_ids, trace.predicted_ids, setup, [candidate], [estimate.stats])


def test_budget_sweep_is_advise_at_each_budget():
    # The sweep replays each per-layer cache once for all budgets; advise replays one
    # budget's plans.
    from engine.advice.advise import advise, sweep_budgets
    from engine.hardware.memory import GIB

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
    from engine.advice.advise import advise, sweep_budgets
    from engine.hardware.memory import GIB

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


# --- real routing -----------------------------------------------------------------------


def previous_token_predictor(ids: np.ndarray) -> np.ndarray:
    """A next-layer predictor made from the routing itself: at layer l, the experts the
    previous token chose at layer l + 1 (the first token: the last token's)."""
    predicted = np.full_like(ids, -1)
    predicted[:, :-1] = np.roll(ids, 1, axis=0)[:, 1:]
    return predicted


@pytest.mark.slow
@pytest.mark.shared_traces
def test_every_way_agrees_on_real_deepseek_routing(shared_traces):
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=12)
    profile, replayed = trace.split(0.5)
    n_layers, k = replayed.expert_ids.shape[1:]
    cpu_layers = np.arange(n_layers) < n_layers // 3
    admit = np.array([3, 3, 2, 2, 1, 1, 0][: k + 1])
    everything = every_candidate(True)
    lru = [c for c in everything if c.eviction is not Eviction.SCORE] + STANDALONE
    score = [c for c in everything if c.eviction is Eviction.SCORE]
    # Score eviction only on a short stretch: the reference scans the resident set.
    for tokens, per_layer, candidates in ((80, 12, lru), (80, 40, lru), (24, 12, score)):
        ids = replayed.expert_ids[:tokens]
        predicted = previous_token_predictor(ids)
        setup = ReplaySetup(profile.popularity(), n_layers * per_layer, 4, admit)
        stats = replay_many(ids, predicted, [(c, setup) for c in candidates if c.kind is Kind.MATRIX])
        stats += [replay(ids, predicted, c, setup, cpu_layers=cpu_layers) for c in candidates if c.kind is not Kind.MATRIX]
        assert_every_way_the_same(ids, predicted, setup, candidates, stats, cpu_layers)


@pytest.mark.shared_traces
def test_every_way_agrees_under_the_real_qwen3_popularity(shared_traces):
    # The mbolt profile is aggregate (no token order): its routing counts set the
    # initial contents and the nonuniform slots; the routing replayed is drawn from them.
    from engine.models.catalog import get_model
    from engine.traces.synthetic import SyntheticSettings, popularity_from_mbolt_profile, synthetic_trace

    heat = popularity_from_mbolt_profile(shared_traces / "qwen3-30b-a3b__mbolt-profile" / "coactivation_qwen3-30b-a3b.json")
    settings = SyntheticSettings(tokens=16, seed=3, popularity=heat, predictor_accuracy=0.7)
    trace = synthetic_trace(get_model("qwen3-30b-a3b"), settings)
    ids, predicted = trace.expert_ids, trace.predicted_ids
    n_layers, k = ids.shape[1:]
    cpu_layers = np.arange(n_layers) >= n_layers // 2
    candidates = [c for c in every_candidate(True) if c.eviction is not Eviction.SCORE or c.residency is Residency.LAYER]
    candidates += STANDALONE
    setup = ReplaySetup(heat, heat.size // 3, k, np.maximum(k // 2 - np.arange(k + 1), 0))
    stats = replay_many(ids, predicted, [(c, setup) for c in candidates if c.kind is Kind.MATRIX])
    stats += [replay(ids, predicted, c, setup, cpu_layers=cpu_layers) for c in STANDALONE]
    assert_every_way_the_same(ids, predicted, setup, candidates, stats, cpu_layers)
