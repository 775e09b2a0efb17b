"""The constants fitted on llama.cpp built and run on one machine (bench/fit_local.py) are
that fit's optimum, the conversion of the CPU probe to llama.cpp's kernel behaves, and
validation against COPE's executor keeps the probe's own kernel."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fit_local import BOUNDS, FITTED, SPEEDUP_BOUNDS, atomic_loss, load, loss, prepared, probe_profile  # noqa: E402
from engine.cost.analytic_cost import AnalyticAssumptions  # noqa: E402
from engine.cost.cost_models import build_cost_model  # noqa: E402
from engine.cost.cost_model import Fidelity
from engine.cost.measured_cost import LLAMA_CPP_KERNEL_SPEEDUP, AtomicCostModel, LlamaCppCpuLane  # noqa: E402
from tests.fit_optimum import assert_at_optimum  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return prepared(load())


def test_the_measured_read_shares_are_the_fit_of_the_local_runs(runs):
    assert_at_optimum(lambda a: loss(a, runs), AnalyticAssumptions(), FITTED, BOUNDS, tolerance=1e-5)


def test_the_kernel_speedup_is_the_fit_of_the_local_runs(runs):
    best = atomic_loss(LLAMA_CPP_KERNEL_SPEEDUP, runs)
    for factor in (0.95, 1.05):
        moved = LLAMA_CPP_KERNEL_SPEEDUP * factor
        if SPEEDUP_BOUNDS[0] <= moved <= SPEEDUP_BOUNDS[1]:
            assert atomic_loss(moved, runs) >= best - 1e-5, f"x{factor} fits better"


def test_the_fit_reads_no_tokens_per_second_into_the_model(runs):
    """Doubling the measured figures halves every ratio: the estimates do not move."""
    data = load()
    doubled = dict(data, runs=[dict(r, tokens_per_s=2 * r["tokens_per_s"]) for r in data["runs"]])
    a = AnalyticAssumptions()
    from bench.fit_local import ratios

    for before, after in zip(ratios(a, runs), ratios(a, prepared(doubled))):
        assert after == pytest.approx(before / 2)


def test_llama_cpps_lane_is_faster_than_the_probe_but_never_faster_than_memory():
    lane = LlamaCppCpuLane(kernel_speedup=2.0, saturated_bytes_per_s=10e9, expert_bytes=5e6)
    assert lane.per_expert_s(4e-3) == pytest.approx(2e-3)  # compute-bound: the kernel's speed-up
    assert lane.per_expert_s(0.6e-3) == pytest.approx(0.5e-3)  # memory-bound: 5 MB at 10 GB/s


def test_the_converted_curve_keeps_the_dispatch_and_converts_each_expert(runs):
    profile = probe_profile("Q8_0")
    request = runs[0][0]
    raw = AtomicCostModel(profile, n_blocks=request.model.n_blocks)
    lane = LlamaCppCpuLane(2.0, 1e15, float(request.model.expert_bytes(request.quant)))  # memory never binds
    converted = AtomicCostModel(profile, n_blocks=request.model.n_blocks, llama_cpp=lane)
    r, c = raw.lanes(1), converted.lanes(1)
    assert c.cpu_dispatch_s == pytest.approx(r.cpu_dispatch_s)
    assert c.cpu_per_expert_s == pytest.approx(r.cpu_per_expert_s / 2)
    for n in range(1, 9):
        assert c.cpu_experts_s(n) - c.cpu_dispatch_s == pytest.approx((r.cpu_experts_s(n) - r.cpu_dispatch_s) / 2)
    assert "llama.cpp" in converted.describe().details["cpu_kernel"]


def test_validation_prices_the_probes_kernel_and_advice_llama_cpps(runs):
    request = runs[0][0]
    profile = probe_profile("Q8_0")
    for fidelity in (Fidelity.ATOMIC, Fidelity.COMBINED):
        advice = build_cost_model(fidelity, request, profile)
        executor = build_cost_model(fidelity, request, profile, kernels="probe")
        k = request.model.top_k
        all_cpu = lambda m: float(m.state_costs("sequential", 1, k, 0).total_s[0])  # noqa: E731
        assert all_cpu(advice) < all_cpu(executor)
    with pytest.raises(ValueError, match="kernels"):
        build_cost_model(Fidelity.ATOMIC, request, profile, kernels="torch")


def test_a_whole_step_timed_on_the_probes_kernel_is_scaled_to_llama_cpps(runs):
    """A measured all-CPU step (h = 0) moves by what the conversion does to the composed
    step; an all-GPU one (h = k) has no CPU experts and stays as measured."""
    from engine.cost.measured_cost import CombinedCostModel
    from engine.profiles.profile import Measurement

    request = runs[0][0]
    k = request.model.top_k
    profile = probe_profile("Q8_0")
    raw = AtomicCostModel(profile, n_blocks=request.model.n_blocks)
    timed = {0: 0.050, k: 0.004}  # seconds, as a timed step would record them
    steps = [Measurement("schedule", {"execution": "sequential", "hits": h, "misses": k - h, "prefetches": 0,
                                      "threads": 1}, t, 0.0, 5) for h, t in timed.items()]
    with_steps = profile.merged(steps)
    lane = LlamaCppCpuLane(2.0, 1e15, float(request.model.expert_bytes(request.quant)))
    as_llama = AtomicCostModel(with_steps, n_blocks=request.model.n_blocks, llama_cpp=lane)
    combined = CombinedCostModel(with_steps, as_llama).state_costs("sequential", 1, k, 0).total_s
    composed = as_llama.state_costs("sequential", 1, k, 0).total_s
    probed = raw.state_costs("sequential", 1, k, 0).total_s
    assert combined[0] == pytest.approx(timed[0] * composed[0] / probed[0]) and combined[0] < timed[0]
    assert combined[k] == pytest.approx(timed[k])
    unconverted = CombinedCostModel(with_steps, raw).state_costs("sequential", 1, k, 0).total_s
    assert unconverted[0] == pytest.approx(timed[0])
