"""The layer step of every execution strategy, in the functional mode (both tiers on the
CPU): its output is the dense reference MoE output for the same routing and weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.cost_model import Lanes, compose_ready_first  # noqa: E402
from engine.policy import Execution  # noqa: E402
from engine.quant import get_quantization  # noqa: E402
from probes.layer_step import DeviceSlots, LayerStep, dense_reference  # noqa: E402
from probes.operators import ExpertPool, ExpertShape  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

K = 4
N_EXPERTS = 8


def layer(quant: str = "Q8_0", int8: bool | None = None, staging_slots: int = 8):
    model = tiny_model(k=K, hidden=64, expert_ffn=32, experts=N_EXPERTS)
    shape = ExpertShape.of(model, get_quantization(quant))
    pool = ExpertPool(shape, "cpu", pool_bytes=1, min_experts=N_EXPERTS, seed=3, int8=int8)
    step = LayerStep(pool, gpu_device="cpu", staging_slots=staging_slots)
    x = torch.randn(1, shape.hidden_size, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    weights = {e: 0.1 + 0.1 * e for e in range(N_EXPERTS)}
    return pool, step, x, weights


def split(pool, hits):
    """Resident experts as device weights (a separate copy), the others on the host."""
    device = {e: [(w.clone(), None if s is None else s.clone()) for w, s in pool.experts[e]] for e in hits}
    host = {e: pool.experts[e] for e in range(N_EXPERTS) if e not in hits}
    return device, host


def assert_matches(out, ref):
    scale = float(ref.abs().max()) or 1.0
    assert out.shape == ref.shape
    assert torch.allclose(out.float().cpu(), ref, rtol=2e-2, atol=2e-2 * scale), float((out.cpu() - ref).abs().max())


HM = [(0, 4), (4, 0), (2, 2), (1, 3), (3, 1)]


@pytest.mark.parametrize("execution", list(Execution))
@pytest.mark.parametrize("h,m", HM)
def test_every_strategy_equals_the_dense_reference(execution, h, m):
    pool, step, x, weights = layer()
    hits, misses = [5, 1, 6, 2][:h], [0, 7, 3, 4][:m]
    device, host = split(pool, hits)
    result = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=hits, miss_ids=misses,
                      router_weights=weights, threads=1, copy_ids=misses[: m // 2])
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, hits + misses, weights))
    assert sorted(result.gpu_ids + result.cpu_ids) == sorted(hits + misses)
    assert result.elapsed_s > 0
    if execution is Execution.STAGE:
        assert result.copied == tuple(misses) and result.cpu_ids == ()
    elif execution in (Execution.SEQUENTIAL, Execution.PARALLEL):
        assert result.copied == () and result.cpu_ids == tuple(misses)


def test_the_dense_bf16_stand_in_and_an_ungated_expert_match_too():
    for quant, int8 in (("Q4_K_M", False), ("Q8_0", False)):
        pool, step, x, weights = layer(quant, int8=int8)
        assert not pool.int8
        device, host = split(pool, [0, 1])
        for execution in Execution:
            out = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[0, 1],
                           miss_ids=[2, 3], router_weights=weights, copy_ids=[3]).output
            assert_matches(out, dense_reference(pool, {**device, **host}, x, [0, 1, 2, 3], weights))


def test_ready_first_with_a_forced_split_copies_exactly_those_misses():
    pool, step, x, weights = layer()
    device, host = split(pool, [1])
    result = step.run(Execution.READY_FIRST, x, device_experts=device, host_experts=host, hit_ids=[1],
                      miss_ids=[0, 3, 4], router_weights=weights, copy_ids=[4, 0])
    assert result.copied == (0, 4) and result.cpu_ids == (3,) and result.gpu_ids == (1, 0, 4)
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [1, 0, 3, 4], weights))
    with pytest.raises(ValueError, match="not misses"):
        step.run(Execution.READY_FIRST, x, device_experts=device, host_experts=host, hit_ids=[1],
                 miss_ids=[0, 3], copy_ids=[1])
    with pytest.raises(ValueError, match="lane split"):
        step.run(Execution.READY_FIRST, x, device_experts=device, host_experts=host, hit_ids=[1], miss_ids=[0])


def test_ready_first_greedy_follows_the_cost_models_split():
    pool, step, x, weights = layer()
    lanes = Lanes(gpu_experts_s=lambda n: 1e-5 * n, cpu_experts_s=lambda n: 1e-3 * n, copy_experts_s=lambda n: 1e-4 * n,
                  sync_s=2e-5, gpu_launch_s=0.0, gpu_per_expert_s=1e-5, cpu_dispatch_s=0.0, cpu_per_expert_s=1e-3,
                  copy_latency_s=0.0, copy_per_expert_s=1e-4)
    n_copy = compose_ready_first(1, 3, lanes)[5]
    assert 0 < n_copy <= 3
    device, host = split(pool, [2])
    result = step.run(Execution.READY_FIRST, x, device_experts=device, host_experts=host, hit_ids=[2],
                      miss_ids=[5, 6, 7], router_weights=weights, lanes=lanes)
    assert result.copied == (5, 6, 7)[:n_copy]
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [2, 5, 6, 7], weights))


def test_stage_goes_in_rounds_through_a_small_staging_buffer():
    pool, step, x, weights = layer(staging_slots=2)
    device, host = split(pool, [0])
    for execution in (Execution.STAGE, Execution.READY_FIRST):
        result = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[0],
                          miss_ids=[1, 2, 3, 4, 5], router_weights=weights, copy_ids=[1, 2, 3, 4, 5])
        assert result.copied == (1, 2, 3, 4, 5)
        assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [0, 1, 2, 3, 4, 5], weights))


def test_prefetch_copies_land_in_their_slots_and_the_output_is_unchanged():
    pool, step, x, weights = layer()
    device, host = split(pool, [0, 1])
    slots = DeviceSlots(pool, "cpu", 2)
    result = step.run(Execution.PARALLEL, x, device_experts=device, host_experts=host, hit_ids=[0, 1],
                      miss_ids=[2, 3], router_weights=weights, prefetch=[(host[6], slots[0]), (host[7], slots[1])])
    assert result.prefetched == 2 and result.prefetch_event is None
    for slot, e in ((0, 6), (1, 7)):
        for (dw, ds), (sw, ss) in zip(slots[slot], host[e]):
            assert torch.equal(dw, sw) and (ds is None or torch.equal(ds, ss))
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [0, 1, 2, 3], weights))


def test_a_step_refuses_weights_on_the_wrong_tier_and_a_missing_cuda():
    pool, step, x, _ = layer()
    device, host = split(pool, [0])
    with pytest.raises(ValueError, match="no weights"):
        step.run(Execution.SEQUENTIAL, x, device_experts=device, host_experts=host, hit_ids=[1], miss_ids=[0])
    with pytest.raises(ValueError, match="both hits and misses"):
        step.run(Execution.SEQUENTIAL, x, device_experts=device, host_experts=host, hit_ids=[0], miss_ids=[0])
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="functional mode"):
            LayerStep(pool, gpu_device="cuda")


@pytest.mark.gpu
def test_every_strategy_on_cuda_equals_the_reference():  # pragma: no cover - needs CUDA
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = tiny_model(k=K, hidden=64, expert_ffn=32, experts=N_EXPERTS)
    shape = ExpertShape.of(model, get_quantization("Q8_0"))
    host_pool = ExpertPool(shape, "cpu", pool_bytes=1, min_experts=N_EXPERTS, seed=3, pin=True, int8=True)
    gpu_pool = ExpertPool(shape, "cuda", pool_bytes=1, min_experts=1, int8=True)
    step = LayerStep(gpu_pool, gpu_device="cuda", staging_slots=2)
    x = torch.randn(1, shape.hidden_size).to(torch.bfloat16).cuda()
    hits, misses = [0, 1], [2, 3]
    device = {e: [(w.cuda(), s.cuda()) for w, s in host_pool.experts[e]] for e in hits}
    host = {e: host_pool.experts[e] for e in misses}
    slots = DeviceSlots(gpu_pool, "cuda", 1)
    for execution in Execution:
        out = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=hits, miss_ids=misses,
                       copy_ids=[3], prefetch=[(host_pool.experts[5], slots[0])]).output
        assert_matches(out, dense_reference(host_pool, {e: host_pool.experts[e] for e in range(4)}, x, hits + misses))
