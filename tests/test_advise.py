"""The advise pipeline: memory plan, candidates, the analytic cost model, ranking."""

from __future__ import annotations

import numpy as np
import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.advice.advise import advise
from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.cost_model import StateCosts
from engine.cost.estimate import price
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.memory import GIB, RUNTIME_RESERVE_BYTES, SAFETY_MARGIN_FRACTION, plan_memory
from engine.models.catalog import get_model
from engine.models.quant import get_quantization
from engine.replays.policy import Execution, Kind, parse_candidate_id, policy_matrix
from engine.replays.replay import ReplayStats
from engine.replays.residency import partition_layers


def fake_cpu():
    return get_cpu_preset("desktop-ddr5")


def run(**kw):
    args = PlanChoices(**{"tokens": 200, "cpu": "desktop-ddr5", "gpu": "rtx-4060-ti-16gb", **kw})
    request = build_request(args)
    cost = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return advise(request, cost), cost


def test_memory_plan_subtracts_everything_before_expert_slots():
    model = get_model("qwen3-30b-a3b")
    quant = get_quantization("Q4_0")  # 4.5 bits a weight in every tensor of an expert
    budget = 16 * GIB
    plan = plan_memory(model, quant, vram_budget_bytes=budget, context_tokens=8192)
    # Qwen3-30B-A3B: 48 blocks x 4 KV heads x 128 dims x (K and V) x 2 bytes a token.
    assert plan.kv_cache_bytes == 8192 * 48 * 4 * 128 * 2 * 2
    expert = round(3 * 2048 * 768 * 4.5 / 8)
    assert plan.expert_bytes == expert
    room = budget - plan.non_expert_bytes - plan.kv_cache_bytes - RUNTIME_RESERVE_BYTES - int(budget * SAFETY_MARGIN_FRACTION)
    assert plan.slots(staging=False) == room // expert
    assert plan.slots(staging=True) == (room - 8 * expert) // expert
    assert not plan.all_gpu_fits
    assert plan_memory(model, quant, vram_budget_bytes=40 * GIB, context_tokens=8192).all_gpu_fits
    # What a plan of n slots uses is what the runtime allocates: the margin is headroom, not use.
    used = plan.non_expert_bytes + plan.kv_cache_bytes + RUNTIME_RESERVE_BYTES + 10 * expert
    assert plan.vram_used_bytes(10, staging=False) == used
    assert plan.vram_used_bytes(10, staging=True) == used + plan.staging_bytes
    # A runtime (the ground-truth executor) may fill what the plan keeps as margin.
    assert plan.runtime_expert_room_bytes() == room + int(budget * SAFETY_MARGIN_FRACTION)
    # The arithmetic is shown line by line.
    text = "\n".join(plan.lines())
    assert "KV cache (8192 tokens)" in text and "room for experts" in text


def test_every_matrix_cell_and_standalone_candidate_is_ranked_once():
    rec, _ = run()
    ids = [e.candidate.id for e in rec.estimates]
    assert len(ids) == len(set(ids))
    matrix_ids = {c.id for c in policy_matrix(prefetch_available=True)}
    assert matrix_ids <= set(ids)
    assert len(matrix_ids) == 3 * 4 * 2
    assert {"partition-first", "partition-last", "all-cpu"} <= set(ids)
    assert "all-gpu" not in ids  # 30B at Q4_K_M does not fit in 16 GiB
    tpots = [e.tpot_s for e in rec.estimates]
    assert tpots == sorted(tpots)
    for candidate_id in ids:
        assert parse_candidate_id(candidate_id).id == candidate_id


def test_all_gpu_appears_when_everything_fits_and_beats_all_cpu():
    rec, _ = run(gpu="rtx-5090", vram_budget_gib=32)
    by_id = {e.candidate.id: e for e in rec.estimates}
    assert "all-gpu" in by_id and "partition-first" not in by_id
    assert by_id["all-gpu"].tpot_s < by_id["all-cpu"].tpot_s
    assert by_id["all-gpu"].stats.hit_rate == 1.0
    assert rec.baseline().candidate.id == "all-gpu"


def test_more_vram_never_slows_fixed_residency():
    tpots = [
        {e.candidate.id: e.tpot_s for e in run(vram_budget_gib=gib)[0].estimates}["fixed.sequential.nonuniform"]
        for gib in (6, 10, 14)
    ]
    assert tpots[0] > tpots[1] > tpots[2]


def test_too_small_a_budget_is_a_clear_error():
    with pytest.raises(CopeInputError, match="cannot hold the non-expert weights"):
        run(vram_budget_gib=1)


def test_analytic_state_costs_are_ordered_as_the_strategies_imply():
    model = get_model("qwen3-30b-a3b")
    request = build_request(PlanChoices(tokens=10, cpu="desktop-ddr5", gpu="rtx-4090"))
    cost = AnalyticCostModel(model, request.quant, request.platform, context_tokens=4096)
    k = model.top_k
    table = {ex: cost.state_costs(ex, 8, k, k) for ex in Execution}
    seq, par, stage, rf = (table[e].total_s for e in Execution)
    assert np.all(par <= seq + 1e-12)  # overlapping lanes never lose
    assert np.all(rf <= np.minimum(par, stage) + 1e-9)  # greedy picks the better lane
    assert np.all(np.diff(seq) < 0)  # every extra hit saves time
    assert seq[k] == pytest.approx(stage[k])  # no misses: the same GPU work
    assert np.all(table[Execution.STAGE].copied == k - np.arange(k + 1))
    assert np.all((table[Execution.READY_FIRST].copied >= 0) & (table[Execution.READY_FIRST].copied <= k - np.arange(k + 1)))


def test_price_sums_state_counts_times_costs():
    # Two layers, k = 2, three tokens; hand-made histogram and costs.
    counts = np.zeros((2, 3, 2), dtype=np.int64)
    counts[0, 2, 0] = 3  # layer 0: all hits, no prefetch
    counts[1, 0, 1] = 1  # layer 1: one step with 2 misses and one prefetch
    counts[1, 1, 0] = 2
    stats = ReplayStats("x", counts, 3, np.array([2, 1]), 0, 0)
    costs = StateCosts(
        execution=Execution.SEQUENTIAL,
        total_s=np.array([3.0, 2.0, 1.0]),
        gpu_s=np.array([0.0, 1.0, 1.0]),
        cpu_s=np.array([3.0, 1.0, 0.0]),
        copy_s=np.zeros(3),
        sync_s=np.zeros(3),
        copied=np.zeros(3, dtype=np.int64),
        prefetch_s=np.array([0.0, 5.0]),
    )
    tpot, breakdown = price(stats, costs, shared_per_token_s=0.5, token_overhead_s=0.25, prefetch_mode="optimistic")
    # experts: (3 x 1.0 + 1 x 3.0 + 2 x 2.0) / 3 tokens
    assert breakdown.experts_critical_s == pytest.approx(10 / 3)
    assert tpot == pytest.approx(10 / 3 + 0.75)
    # Timed: the 5 s prefetch hides behind its 3 s step, 2 s exposed once in 3 tokens.
    tpot_timed, timed = price(stats, costs, shared_per_token_s=0.5, token_overhead_s=0.25)
    assert timed.exposed_prefetch_s == pytest.approx(2 / 3)
    assert tpot_timed == pytest.approx(tpot + 2 / 3)


def test_partition_counts_dense_leading_blocks_for_n_cpu_moe():
    # DeepSeek: block 0 dense, MoE blocks 1..26; 3 MoE layers on the CPU are blocks 1-3.
    blocks = tuple(range(1, 27))
    cpu, detail = partition_layers(Kind.PARTITION_FIRST, 26, 23, blocks)
    assert cpu.sum() == 3 and cpu[:3].all()
    assert detail.startswith("--n-cpu-moe 4 ")
    cpu, detail = partition_layers(Kind.PARTITION_LAST, 26, 23, blocks)
    assert cpu[-3:].all() and cpu.sum() == 3
    assert "blocks 24..26" in detail


def test_synthetic_origin_and_assumptions_are_reported():
    rec, _ = run()
    notes = " ".join(rec.notes)
    assert "SYNTHETIC" in notes
    assert "assumed model: qwen3-30b-a3b" in notes
    assert rec.request.trace.meta.synthetic
    # Profile and replayed halves do not overlap: popularity is learnt elsewhere.
    assert rec.request.trace.n_tokens + rec.request.profile.n_tokens == 400


def test_trace_for_another_model_is_refused(tmp_path):
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace
    from engine.traces import save_trace

    other = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=20))
    path = tmp_path / "olmoe.cope.npz"
    save_trace(other, path)
    with pytest.raises(CopeInputError) as err:
        build_request(PlanChoices(trace=str(path), cpu="desktop-ddr5"))
    assert str(path) in str(err.value)


def test_copying_candidates_left_out_when_the_staging_buffer_does_not_fit():
    # Mixtral experts are ~0.16 GiB at Q4_K_M: find a budget whose room after the fixed
    # costs is smaller than two experts' staging buffer.
    from engine.hardware.memory import plan_memory as plan

    model = get_model("mixtral-8x7b-instruct")
    quant = get_quantization("Q4_K_M")
    probe = plan(model, quant, vram_budget_bytes=4 * GIB, context_tokens=8192)
    without_margin = probe.fixed_bytes - probe.safety_margin_bytes  # the margin scales with the budget
    budget_gib = (without_margin + probe.staging_bytes / 2) / (1 - SAFETY_MARGIN_FRACTION) / GIB
    rec, _ = run(model="mixtral-8x7b-instruct", gpu="rtx-5090", vram_budget_gib=budget_gib)
    assert rec.memory.vram_budget_bytes < rec.memory.fixed_bytes + rec.memory.staging_bytes
    assert not any(e.candidate.copies_misses for e in rec.estimates)
    assert all(e.vram_used_bytes <= rec.memory.vram_budget_bytes for e in rec.estimates)
    assert any("staging buffer" in n for n in rec.notes)


def test_vram_used_never_exceeds_the_budget_over_a_range_of_budgets():
    for gib in (4, 6, 9, 12, 15.5):
        rec, _ = run(vram_budget_gib=gib)
        assert all(e.vram_used_bytes <= rec.memory.vram_budget_bytes for e in rec.estimates), gib
        assert rec.baseline().candidate.id == "partition-first"


def test_trace_with_other_block_numbers_is_refused():
    from dataclasses import replace as dc_replace

    from engine.traces.synthetic import SyntheticSettings, synthetic_trace

    model = get_model("deepseek-v2-lite-chat")  # MoE blocks 1..26
    trace = synthetic_trace(model, SyntheticSettings(tokens=20))
    shifted = dc_replace(trace, meta=dc_replace(trace.meta, moe_blocks=tuple(range(26))))
    request = build_request(PlanChoices(model="deepseek-v2-lite-chat", tokens=20, cpu="desktop-ddr5"))
    with pytest.raises(CopeInputError, match=r"numbers its MoE blocks 0\.\.25.*1\.\.26"):
        advise(dc_replace(request, trace=shifted), AnalyticCostModel(
            request.model, request.quant, request.platform, context_tokens=request.context_tokens))
