"""Experts as one buffer each (probes.experts): the layout, the two readings of the same
bytes, one copy per expert in the copy probe and in the layer step, the pool's size."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.replays.policy import Execution  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from probes import experts as ex  # noqa: E402
from probes import pool_size  # noqa: E402
from probes.layer_step import LayerStep, dense_reference  # noqa: E402
from probes.operators import H2DCopier  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

GiB = 1024**3


def pool(quant: str = "Q4_K_M", n: int = 6, int8: bool | None = None, hidden: int = 64, ffn: int = 32):
    model = tiny_model(k=2, hidden=hidden, expert_ffn=ffn)
    shape = ex.ExpertShape.of(model, get_quantization(quant))
    return ex.ExpertPool(shape, "cpu", pool_bytes=1, min_experts=n, seed=2, int8=int8)


def _inside(view, buffer) -> bool:
    start = buffer.data_ptr()
    first = view.data_ptr()
    last = first + view.numel() * view.element_size()
    return start <= first and last <= start + buffer.numel()


@pytest.mark.parametrize("int8", [True, False])
def test_every_matrix_and_scale_is_a_view_into_the_experts_one_buffer(int8):
    p = pool(int8=int8)
    assert p.arena.is_contiguous() and p.arena.shape == (p.n_experts, p.layout.nbytes)
    for i, expert in enumerate(p.experts):
        assert expert.buffer.data_ptr() == p.arena[i].data_ptr() and expert.buffer.is_contiguous()
        views = [t for pair in expert for t in pair if t is not None] + list(expert.dense)
        assert len(list(expert)) == 3 and all(_inside(v, expert.buffer) for v in views)
    weight_bytes = sum(n for _, n in p.layout.weight_sections())
    assert abs(weight_bytes - p.shape.expert_bytes) <= 3 * 32 * max(p.shape.hidden_size, p.shape.ffn_size)


def test_the_bytes_read_as_bf16_are_finite_and_small_and_as_int8_any_value():
    p = pool(int8=True, n=4)
    for expert in p.experts:
        for w in expert.dense:
            a = w.float().abs()
            assert torch.isfinite(a).all() and a.min() >= 2**-7 and a.max() < 2**-5
        (w_in, s_in), _ = expert.fused
        assert w_in.dtype == torch.int8 and int(w_in.min()) < -100 and int(w_in.max()) > 100
        assert bool((s_in.float() > 0).all())


def test_the_cuda_kernels_reading_is_what_the_reference_computes():
    """The GPU computes an expert as dense bf16 over the same bytes: forward's CUDA path,
    checked here on the CPU, equals dense_reference's device reading."""
    p = pool(int8=True)
    x = torch.randn(1, p.shape.hidden_size, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    expert = p.experts[3]
    w_in, w_down = expert.dense
    act = p._activation(torch.nn.functional.linear(ex.fit_line(torch, x, w_in.shape[1]), w_in))
    y = torch.nn.functional.linear(ex.fit_line(torch, act, w_down.shape[1]), w_down).float()
    ref = dense_reference(p, {3: expert}, x, [3], device_ids=[3])
    assert torch.allclose(y, ref, rtol=2e-2, atol=2e-2 * float(ref.abs().max()))
    int8_ref = dense_reference(p, {3: expert}, x, [3])
    assert not torch.allclose(ref, int8_ref)  # two readings of the same bytes: different numbers


@pytest.fixture
def copies(monkeypatch):
    """Every Tensor.copy_ from Python: (destination, source)."""
    seen = []
    original = torch.Tensor.copy_

    def counting(self, src, non_blocking=False):
        seen.append((self, src))
        return original(self, src, non_blocking=non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", counting)
    return seen


def test_copying_an_expert_is_one_copy_of_its_buffer(copies):
    p = pool()
    dst = ex.Expert(torch.zeros(p.layout.nbytes, dtype=torch.uint8), p.layout)
    copies.clear()  # the pool's own set-up
    ex.copy_expert(dst, p.experts[1])
    assert len(copies) == 1 and copies[0][1].data_ptr() == p.experts[1].buffer.data_ptr()
    assert torch.equal(dst.buffer, p.experts[1].buffer)


def test_the_copy_probe_and_the_stage_step_copy_alike(copies):
    p = pool(n=8)
    copier = H2DCopier(p, 3, device="cpu")
    copies.clear()  # the pool's own set-up
    copier.copy(3)
    probe = [(d.numel(), s.numel()) for d, s in copies]
    assert probe == [(p.layout.nbytes, p.layout.nbytes)] * 3  # one whole expert per copy
    assert [s.data_ptr() for _, s in copies] == [p.experts[i].buffer.data_ptr() for i in range(3)]
    copies.clear()
    step = LayerStep(p, gpu_device="cpu", staging_slots=3)
    host = {e: p.experts[e] for e in (4, 5, 6)}
    step.run(Execution.STAGE, p.x, device_experts={}, host_experts=host, hit_ids=[], miss_ids=[4, 5, 6])
    staged = [(d.numel(), s.numel()) for d, s in copies if s.data_ptr() in {e.buffer.data_ptr() for e in host.values()}]
    assert staged == probe


def test_the_host_pool_is_at_least_a_gibibyte_and_4x_the_machines_last_level_cache(tmp_path):
    assert pool_size.default_pool_bytes("cpu", str(tmp_path)) == pool_size.MIN_HOST_POOL_BYTES >= GiB  # sysfs unreadable
    cpu = tmp_path / "devices/system/cpu"
    # 16 CPUs, 12 L3 instances of 32 MiB (a 12-CCD EPYC's 384 MiB), private L2s.
    for c in range(16):
        for idx, (level, kind, size, shared) in enumerate(
                [(2, "Unified", "1024K", str(c)), (3, "Unified", "32768K", str(c % 12)), (1, "Instruction", "32K", str(c))]):
            d = cpu / f"cpu{c}/cache/index{idx}"
            d.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
                (d / name).write_text(f"{value}\n")
    assert pool_size.last_level_cache_bytes(str(tmp_path)) == 32 * 1024**2  # cpu0's view: one CCD
    assert pool_size.total_last_level_cache_bytes(str(tmp_path)) == 12 * 32 * 1024**2
    assert pool_size.default_pool_bytes("cpu", str(tmp_path)) == 4 * 12 * 32 * 1024**2  # 1.5 GiB
    assert pool_size.default_pool_bytes("cuda") == pool_size.DEVICE_POOL_BYTES


def test_a_pool_without_a_size_uses_the_default(monkeypatch):
    monkeypatch.setattr(ex, "default_pool_bytes", lambda device: 10 * 4096)
    model = tiny_model(k=2, hidden=64, expert_ffn=32)
    shape = ex.ExpertShape.of(model, get_quantization("Q8_0"))
    p = ex.ExpertPool(shape)
    assert p.n_experts == -(-10 * 4096 // shape.expert_bytes)


def test_the_gpu_experts_probe_runs_the_lane_one_graph_an_expert():
    from probes.operators import gpu_experts

    p = pool(n=5)
    t = gpu_experts(p, 3, 0.02)
    assert t.median_s > 0 and t.repeats >= 3
    lane = p.graph_lane("cpu")
    assert set(lane.graphs) == {e.buffer.data_ptr() for e in p.experts}  # each captured once, before timing
    assert sorted(j for _, j in lane.graphs.values()) == list(range(5))
