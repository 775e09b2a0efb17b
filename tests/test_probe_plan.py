"""The probe planner and the measured cost models (atomic and combined)."""

from __future__ import annotations

import numpy as np
import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.advice.advise import advise
from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.cost_model import StateCosts
from engine.cost.measured_cost import AtomicCostModel, CombinedCostModel
from engine.profiles.probe_plan import ScheduleState, plan_probes, reachable_states
from engine.profiles.profile import Measurement, ProbedModel, Profile, Provenance
from engine.replays.policy import Execution
from engine.replays.replay import ReplayStats

P, S = Execution.PARALLEL, Execution.STAGE
THREADS = 8


def stats(candidate_id: str, counts: list) -> ReplayStats:
    counts = np.array(counts, dtype=np.int64)
    n_tokens = int(counts[0].sum())
    return ReplayStats(candidate_id, counts, n_tokens, np.zeros(counts.shape[0], dtype=np.int64), 0, 0)


def hand_built_candidates():
    # top-2, two layers. Counts are [layer][hits][prefetch copies].
    a = stats("a", [[[5], [0], [1]], [[0], [3], [2]]])  # parallel: h0 5, h1 3, h2 3
    b = stats("b", [[[0, 0], [0, 3], [4, 0]], [[0, 0], [0, 0], [0, 0]]])  # stage: (2,0) 4, (1,1) 3
    c = stats("c", [[[0], [0], [1]], [[0], [0], [1]]])  # parallel again: h2 +2
    return [(P, a), (S, b), (P, c)]


# --- the planner -------------------------------------------------------------------------


def test_planner_probes_exactly_the_reachable_states_most_frequent_first():
    plan = plan_probes(hand_built_candidates(), threads=THREADS, budget_s=1e9, probe_s=1.0)
    order = [(s.state.execution, s.state.hits, s.state.misses, s.state.prefetches, s.steps) for s in plan.states]
    assert order == [
        (P, 0, 2, 0, 5),  # tie at 5 steps: fewer hits first
        (P, 2, 0, 0, 5),  # 3 from a + 2 from c: the same state summed over candidates
        (S, 2, 0, 0, 4),
        (P, 1, 1, 0, 3),  # tie at 3 steps: parallel before stage (Policy Matrix order)
        (S, 1, 1, 1, 3),
    ]
    assert all(s.state.threads == THREADS for s in plan.states)
    assert plan.unprobed == () and plan.step_coverage == 1.0
    # Never a state with a zero count: stage with no hits never happened.
    assert ScheduleState(S, 0, 2, 0, THREADS) not in reachable_states(hand_built_candidates(), THREADS)


def test_planner_lists_the_atomic_probes_every_plan_needs():
    plan = plan_probes(hand_built_candidates(), threads=THREADS, budget_s=0.0, probe_s=1.0)
    atomic = [(p.operator, dict(p.key)) for p in plan.atomic]
    assert atomic == [
        ("gpu_experts", {"n": 1}), ("gpu_experts", {"n": 2}),
        ("cpu_experts", {"n": 1, "threads": 8}), ("cpu_experts", {"n": 2, "threads": 8}),
        ("h2d_copy", {"n": 1}), ("h2d_copy", {"n": 2}),
        ("sync", {}), ("shared_layer", {}), ("token_head", {}),
    ]
    # Over budget already: the atomic probes still run, no combined state does.
    assert plan.states == () and len(plan.unprobed) == 5 and plan.step_coverage == 0.0


def test_planner_stops_where_the_budget_runs_out():
    estimate = {name: 0.25 for name in ("gpu_experts", "cpu_experts", "h2d_copy", "sync", "shared_layer", "token_head")}
    estimate["schedule"] = 1.0
    plan = plan_probes(hand_built_candidates(), threads=THREADS, budget_s=9 * 0.25 + 3.5, probe_s=estimate)
    assert plan.atomic_s == 2.25 and plan.states_s == 3.0
    assert [(s.state.execution, s.state.hits) for s in plan.states] == [(P, 0), (P, 2), (S, 2)]
    assert [(s.state.execution, s.state.hits) for s in plan.unprobed] == [(P, 1), (S, 1)]
    assert plan.step_coverage == pytest.approx(14 / 20)
    assert plan.idents()[-1] == ScheduleState(S, 2, 0, 0, THREADS).ident


def test_planner_takes_a_duration_function_and_cuts_at_the_first_state_that_does_not_fit():
    def seconds(operator: str, key: dict) -> float:
        if operator != "schedule":
            return 0.0
        return 1.0 + key["misses"] if key["execution"] == "parallel" else 0.25

    plan = plan_probes(hand_built_candidates(), threads=THREADS, budget_s=5.5, probe_s=seconds)
    # (P, h0) 3 s, (P, h2) 1 s, (S, h2) 0.25 s fit; (P, h1) needs 2 s of the 1.25 s left.
    # The plan stops there: (S, h1) would fit, but it is rarer than what was cut.
    assert [s.probe_s for s in plan.states] == [3.0, 1.0, 0.25]
    assert [(s.state.execution, s.state.hits) for s in plan.unprobed] == [(P, 1), (S, 1)]


def test_planner_rejects_candidates_that_disagree_on_top_k():
    k2 = hand_built_candidates()[0]
    k1 = (P, stats("k1", [[[1], [1]]]))
    with pytest.raises(ValueError, match="top-k"):
        plan_probes([k2, k1], threads=THREADS, budget_s=10, probe_s=1.0)


def advise_run(**kw):
    args = PlanChoices(**{"tokens": 120, "cpu": "desktop-ddr5", "gpu": "rtx-4060-ti-16gb", **kw})
    request = build_request(args)
    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return request, analytic, advise(request, analytic)


def test_planner_on_real_replays_covers_every_state_they_reached():
    request, _, rec = advise_run()
    candidates = [(e.candidate.execution, e.stats) for e in rec.estimates]
    plan = plan_probes(candidates, threads=request.threads, budget_s=1e9, probe_s=0.5)
    expected = set()
    for execution, st in candidates:
        for h, p in zip(*st.counts.sum(axis=0).nonzero()):
            expected.add((execution, int(h), int(p)))
    assert {(s.state.execution, s.state.hits, s.state.prefetches) for s in plan.states} == expected
    assert sum(s.steps for s in plan.states) == sum(int(st.counts.sum()) for _, st in candidates)
    steps = [s.steps for s in plan.states]
    assert steps == sorted(steps, reverse=True)


# --- measured cost models ----------------------------------------------------------------


def analytic_profile(analytic: AnalyticCostModel, *, threads=(1, 8, 16), drop=()) -> Profile:
    """Every atomic operator, measured as exactly what the analytic model says it costs."""
    model, quant, k = analytic.model, analytic.quant, analytic.model.top_k
    ms = []
    for n in range(1, k + 1):
        ms.append(Measurement("gpu_experts", {"n": n}, analytic.gpu_experts_s(n), 0.0, 1))
        ms.append(Measurement("h2d_copy", {"n": n}, analytic.copy_experts_s(n), 0.0, 1))
        for t in threads:
            ms.append(Measurement("cpu_experts", {"n": n, "threads": t}, analytic.cpu_experts_s(n, t), 0.0, 1))
    ms.append(Measurement("sync", {}, analytic.a.sync_s, 0.0, 1))
    for block in range(model.n_blocks):
        ms.append(Measurement("shared_layer", {"block": block}, analytic.gpu_block_s(block), 0.0, 1))
    ms.append(Measurement("token_head", {}, analytic.token_overhead_s(), 0.0, 1))
    ms = [m for m in ms if (m.operator, m.key_dict) not in drop]
    provenance = Provenance("test", "analytic", "-", "-", "2025-01-01T00:00:00", 0.0, 0.0)
    shape = ProbedModel(model.name, analytic.expert_bytes, quant.name)
    return Profile(provenance, shape, {"gpu": "analytic"}, tuple(ms))


def assert_same_costs(a: StateCosts, b: StateCosts, *, exact: bool) -> None:
    assert a.execution is b.execution
    for name in ("total_s", "gpu_s", "cpu_s", "copy_s", "sync_s", "prefetch_s"):
        if exact:
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        else:
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=0, err_msg=name)
    assert np.array_equal(a.copied, b.copied)


def test_atomic_reproduces_analytic_costs_from_analytic_measurements():
    request, analytic, _ = advise_run()
    k = request.model.top_k
    atomic = AtomicCostModel(analytic_profile(analytic), n_blocks=request.model.n_blocks)
    for threads in (1, 8, 16):
        for execution in Execution:
            assert_same_costs(
                atomic.state_costs(execution, threads, k, k), analytic.state_costs(execution, threads, k, k), exact=False
            )
    assert atomic.shared_per_token_s() == pytest.approx(analytic.shared_per_token_s(), rel=1e-12)
    assert atomic.token_overhead_s() == analytic.token_overhead_s()
    assert atomic.describe().fidelity == "atomic" and atomic.describe().details["extrapolated"] == []
    # Ready-first really splits the misses between lanes here, so the greedy rule is exercised.
    copied = atomic.state_costs(Execution.READY_FIRST, 8, k, k).copied
    assert 0 < copied[0] < k


def test_atomic_prices_the_whole_pipeline_as_analytic_does():
    request, analytic, rec = advise_run()
    atomic = AtomicCostModel(analytic_profile(analytic, threads=(request.threads,)), n_blocks=request.model.n_blocks)
    measured = advise(request, atomic)
    assert measured.estimates[0].fidelity == "atomic"
    tpot = {e.candidate.id: e.tpot_s for e in rec.estimates}
    for e in measured.estimates:
        assert e.tpot_s == pytest.approx(tpot[e.candidate.id], rel=1e-9)


def test_atomic_fits_a_line_for_unmeasured_sizes_and_says_so():
    request, analytic, _ = advise_run()
    k = request.model.top_k
    atomic = AtomicCostModel(
        analytic_profile(analytic, drop=[("h2d_copy", {"n": 3})]), n_blocks=request.model.n_blocks
    )
    assert atomic.copy_experts_s(3) == pytest.approx(analytic.copy_experts_s(3), rel=1e-12)
    assert atomic.copy_experts_s(2 * k) == pytest.approx(analytic.copy_experts_s(2 * k), rel=1e-12)
    assert atomic.describe().details["extrapolated"] == ["h2d_copy n=16", "h2d_copy n=3"]


def test_atomic_names_what_the_profile_lacks():
    request, analytic, _ = advise_run()
    k = request.model.top_k
    atomic = AtomicCostModel(analytic_profile(analytic, threads=(4, 8)), n_blocks=request.model.n_blocks, source="p.json")
    with pytest.raises(CopeInputError, match=r"^p\.json: .*at 6 threads \(measured at: 4, 8\)"):
        atomic.state_costs(Execution.PARALLEL, 6, k, k)
    no_sync = AtomicCostModel(analytic_profile(analytic, drop=[("sync", {})]), n_blocks=request.model.n_blocks)
    with pytest.raises(CopeInputError, match="no sync measurement"):
        no_sync.state_costs(Execution.SEQUENTIAL, 8, k, k)
    too_many_blocks = AtomicCostModel(analytic_profile(analytic), n_blocks=request.model.n_blocks + 1)
    with pytest.raises(CopeInputError, match=f"shared_layer \\(block {request.model.n_blocks}"):
        too_many_blocks.shared_per_token_s()


def with_schedules(profile: Profile, atomic: AtomicCostModel, k: int, threads: int, *, executions, value=None):
    ms = []
    for execution in executions:
        costs = atomic.state_costs(execution, threads, k, k)
        for h in range(k + 1):
            median = costs.total_s[h] if value is None else value(execution, h, costs.total_s[h])
            key = {"execution": execution.value, "hits": h, "misses": k - h, "prefetches": 0, "threads": threads}
            ms.append(Measurement("schedule", key, float(median), 0.0, 5))
    return profile.merged(ms)


def test_combined_equals_atomic_when_every_schedule_matches_the_composition():
    request, analytic, _ = advise_run()
    k, n_blocks = request.model.top_k, request.model.n_blocks
    base = analytic_profile(analytic)
    atomic = AtomicCostModel(base, n_blocks=n_blocks)
    full = with_schedules(base, atomic, k, THREADS, executions=list(Execution))
    combined = CombinedCostModel(full, AtomicCostModel(full, n_blocks=n_blocks))
    for execution in Execution:
        assert_same_costs(combined.state_costs(execution, THREADS, k, k), atomic.state_costs(execution, THREADS, k, k), exact=True)
    assert combined.shared_per_token_s() == atomic.shared_per_token_s()
    assert combined.token_overhead_s() == atomic.token_overhead_s()
    described = combined.describe().to_dict()
    assert described["fidelity"] == "combined"
    assert described["states_measured"] == 4 * (k + 1) and described["states_estimated"] == 0


def test_combined_uses_a_measured_step_where_present_and_atomic_elsewhere():
    request, analytic, _ = advise_run()
    k, n_blocks = request.model.top_k, request.model.n_blocks
    base = analytic_profile(analytic)
    atomic = AtomicCostModel(base, n_blocks=n_blocks)
    # Contention: the measured parallel steps are 30% slower than the isolated lanes say.
    slower = with_schedules(base, atomic, k, THREADS, executions=[P], value=lambda ex, h, t: 1.3 * t)
    combined = CombinedCostModel(slower, atomic)
    got, want = combined.state_costs(P, THREADS, k, k), atomic.state_costs(P, THREADS, k, k)
    np.testing.assert_array_equal(got.total_s, 1.3 * want.total_s)
    np.testing.assert_array_equal(got.cpu_s, want.cpu_s)  # lanes stay atomic
    assert_same_costs(combined.state_costs(S, THREADS, k, k), atomic.state_costs(S, THREADS, k, k), exact=True)
    # Another thread count has no measured steps: all estimated.
    combined.state_costs(P, 16, k, k)
    described = combined.describe().to_dict()
    assert described["states_measured"] == k + 1  # parallel at 8 threads
    assert described["states_estimated"] == 2 * (k + 1)  # stage at 8, parallel at 16
    assert described["fallback"]["fidelity"] == "atomic"


def test_a_step_measured_with_prefetch_in_flight_replaces_the_exposure_formula():
    from engine.cost.estimate import price

    request, analytic, _ = advise_run()
    k, n_blocks = request.model.top_k, request.model.n_blocks
    base = analytic_profile(analytic)
    atomic = AtomicCostModel(base, n_blocks=n_blocks)
    h = k - 1

    def sched(p, median, basis="measured"):
        key = {"execution": P.value, "hits": h, "misses": k - h, "prefetches": p, "threads": THREADS}
        return Measurement("schedule", key, median, 0.0, 5, basis=basis,
                           method="timed-step" if basis == "measured" else "composed")

    slow, fast = 5e-3, 1e-9  # p=2: far slower than the step (exposed); p=1: faster (nothing exposed)
    profile = base.merged([sched(2, slow), sched(1, fast)])
    combined = CombinedCostModel(profile, atomic)
    costs = combined.state_costs(P, THREADS, k, 2)
    plain = atomic.state_costs(P, THREADS, k, 2)
    assert costs.total_by_prefetch_s.shape == (k + 1, 3) and plain.total_by_prefetch_s is None
    assert costs.total_by_prefetch_s[h, 2] == slow and np.isnan(costs.total_by_prefetch_s[0]).all()

    counts = np.zeros((2, k + 1, 3), dtype=np.int64)
    counts[:, h, 2], counts[:, h, 1], counts[:, h, 0], counts[:, 0, 1] = 3, 4, 2, 1
    st = ReplayStats("c", counts, 5, np.zeros(2, dtype=np.int64), 0, 0)
    step = plain.total_s
    window = plain.total_s - plain.copy_s
    formula = max(plain.prefetch_s[1] - window[0], 0.0)  # h=0, p=1: not measured
    for mode in ("timed", "optimistic"):
        tpot, br = price(st, costs, shared_per_token_s=0.0, token_overhead_s=0.0, prefetch_mode=mode)
        unmeasured = formula if mode == "timed" else 0.0
        want = 2 * (3 * slow + 4 * fast + 2 * step[h] + step[0] + unmeasured) / 5
        assert tpot == pytest.approx(want, rel=1e-12)
        assert br.exposed_prefetch_s == pytest.approx(2 * (3 * (slow - step[h]) + unmeasured) / 5, rel=1e-12)
        base_tpot, _ = price(st, plain, shared_per_token_s=0.0, token_overhead_s=0.0, prefetch_mode=mode)
        assert base_tpot != pytest.approx(tpot)
    assert combined.describe().details["states_with_prefetch_measured"] == 2

    # A composed step (measured CPU lane, preset GPU lanes) with prefetch is left to the formula.
    composed = CombinedCostModel(base.merged([sched(2, slow, basis="measured+preset")]), atomic)
    assert composed.state_costs(P, THREADS, k, 2).total_by_prefetch_s is None
    assert composed.describe().details["schedule_measurements_with_prefetch_unused"] == 1
