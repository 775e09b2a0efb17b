"""The CUDA side as a runtime runs it (needs a CUDA GPU; skipped without one): the GPU
lane, the shared block and the head as CUDA graphs, equal to eager execution and to
the dense reference; CUDA-event timing; one host wait per step; one copy per expert."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.replays.policy import Execution  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from probes import operators as ops  # noqa: E402
from probes.experts import ExpertPool, ExpertShape, copy_expert  # noqa: E402
from probes.layer_step import DeviceSlots, LayerStep, dense_reference  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

K, E, RESIDENT = 4, 8, (0, 1, 2)


@pytest.fixture(scope="module")
def setup():  # pragma: no cover - needs CUDA
    model = tiny_model(k=K, hidden=256, expert_ffn=128, experts=E)
    shape = ExpertShape.of(model, get_quantization("Q4_K_M"))
    host_pool = ExpertPool(shape, "cpu", pool_bytes=1, min_experts=E, seed=3, pin=True)
    slots = DeviceSlots(host_pool, "cuda", len(RESIDENT))
    for i, e in enumerate(RESIDENT):
        copy_expert(slots[i], host_pool.experts[e])
    torch.cuda.synchronize()
    device = {e: slots[i] for i, e in enumerate(RESIDENT)}
    host = {e: host_pool.experts[e] for e in range(len(RESIDENT), E)}
    x = torch.randn(1, shape.hidden_size, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16).cuda()
    weights = {e: 0.1 + 0.1 * e for e in range(E)}
    graphed = LayerStep(host_pool, gpu_device="cuda", staging_slots=2)
    eager = LayerStep(host_pool, gpu_device="cuda", staging_slots=2, graphs=False)
    return host_pool, device, host, x, weights, graphed, eager


def close(a, b, rel=2e-2):  # pragma: no cover - needs CUDA
    scale = float(b.abs().max()) or 1.0
    return torch.allclose(a.float().cpu(), b.float().cpu(), rtol=rel, atol=rel * scale)


@pytest.mark.parametrize("execution", list(Execution))
@pytest.mark.parametrize("hits, misses", [((0, 1, 2), (3,)), ((0,), (3, 4, 5)), ((), (3, 4, 5, 6))])
def test_the_graph_lane_equals_eager_and_the_reference(setup, execution, hits, misses):  # pragma: no cover
    host_pool, device, host, x, weights, graphed, eager = setup
    kw = dict(device_experts=device, host_experts=host, hit_ids=list(hits), miss_ids=list(misses),
              router_weights=weights, threads=2, copy_ids=list(misses[:1]))
    a = graphed.run(execution, x, **kw)
    b = eager.run(execution, x, **kw)
    assert a.gpu_ids == b.gpu_ids and a.cpu_ids == b.cpu_ids
    assert close(a.output, b.output, rel=1e-3)
    # Experts computed on the GPU read their bytes as bf16, those on the CPU as int8.
    ref = dense_reference(host_pool, host_pool.experts, x, list(hits) + list(misses), weights, device_ids=a.gpu_ids)
    assert close(a.output, ref)
    assert a.elapsed_s > 0 and isinstance(a.timing[1], torch.cuda.Event)


def test_a_step_waits_once_on_the_host_and_times_itself_with_events(setup, monkeypatch):  # pragma: no cover
    host_pool, device, host, x, weights, graphed, _ = setup
    kw = dict(device_experts=device, host_experts=host, hit_ids=[0, 1], miss_ids=[3, 4], router_weights=weights)
    graphed.run(Execution.STAGE, x, **kw)  # warm
    counts = {"device": 0, "event": 0}
    device_sync, event_sync = torch.cuda.synchronize, torch.cuda.Event.synchronize

    def count_device(*a, **k):
        counts["device"] += 1
        return device_sync(*a, **k)

    def count_event(self):
        counts["event"] += 1
        return event_sync(self)

    monkeypatch.setattr(torch.cuda, "synchronize", count_device)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", count_event)
    result = graphed.run(Execution.STAGE, x, **kw)
    assert counts == {"device": 0, "event": 1}
    counts.update(device=0, event=0)
    results = [graphed.run(Execution.STAGE, x, sync=False, **kw) for _ in range(4)]  # one token of 4 layers
    assert counts == {"device": 0, "event": 0}
    assert all(r.elapsed_s > 0 for r in results) and counts["event"] == 4  # reading a time waits for it
    assert close(results[-1].output, result.output, rel=1e-3)


def test_shared_block_and_head_graphs_equal_eager():  # pragma: no cover - needs CUDA
    import dataclasses

    model = dataclasses.replace(tiny_model(k=2, hidden=256, expert_ffn=128, experts=8), n_blocks=2, moe_blocks=(1,),
                                shared_expert_ffn_size=128)
    quant = get_quantization("Q4_K_M")
    for block in (0, 1):
        op = ops.SharedLayerOp(model, quant, block, kv_tokens=64, device="cuda", pool_bytes=1)
        assert op.graphs is not None and "CUDA graph" in op.kernel
        out = op.run().clone()
        assert close(out, op._forward(op.copies[0]), rel=1e-3)
    head = ops.TokenHeadOp(model, quant, "cuda")
    want = int(head._token_of(head.embedding[0].view(1, -1).cuda()).item())
    assert head.run() == want


def test_the_gpu_operators_measure_on_graphs_and_events(setup):  # pragma: no cover - needs CUDA
    host_pool = setup[0]
    gpu_pool = ExpertPool(host_pool.shape, "cuda", pool_bytes=1, min_experts=6, int8=host_pool.int8)
    assert "CUDA graph" in gpu_pool.kernel_stand_in() and "F.linear" in gpu_pool.kernel_stand_in()
    assert ops.gpu_experts(gpu_pool, 3, 0.05).median_s > 0
    copier = ops.H2DCopier(host_pool, 2)
    t = copier.time(2, 0.05)
    torch.cuda.synchronize()
    assert t.median_s > 0
    assert torch.equal(copier.slots[0].buffer.cpu(), host_pool.experts[(copier._next - 2) % E].buffer)
    assert ops.gpu_sync(host_pool.shape.hidden_size, 0.05).median_s > 0
