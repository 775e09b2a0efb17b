"""The layer step of every execution strategy, in the functional mode (both tiers on the
CPU): its output is the dense reference MoE output for the same routing and weights."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from engine.cost.cost_model import Lanes, compose_ready_first  # noqa: E402
from engine.replays.policy import Execution  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from probes.cpu_worker import default_lane_threads  # noqa: E402
from probes.layer_step import DeviceSlots, LayerStep, copy_expert, dense_reference  # noqa: E402
from probes.operators import ExpertPool, ExpertShape  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

K = 4
N_EXPERTS = 8


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """A step's CPU lane sets the calling thread's torch threads (restored by close())."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


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


# --- as a runtime runs it: one persistent CPU worker, the host waiting only where needed ----


def test_a_cpu_lane_beside_gpu_work_runs_on_one_persistent_worker_and_one_alone_on_the_calling_thread(monkeypatch):
    pool, step, x, weights = layer()
    device, host = split(pool, [0, 1])
    step.warm(1)
    assert step.worker.starts == 1 and step.worker.ident not in (None, threading.get_ident())
    seen: list[tuple[str, int]] = []
    original = step._cpu_lane

    def spy(*args):
        seen.append((execution.value, threading.get_ident()))
        return original(*args)

    monkeypatch.setattr(step, "_cpu_lane", spy)
    for execution in (Execution.PARALLEL, Execution.READY_FIRST, Execution.SEQUENTIAL):
        for _ in range(3):
            out = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[0, 1], miss_ids=[2, 3],
                           router_weights=weights, threads=1, copy_ids=[]).output
    assert_matches(out, dense_reference(pool, {**device, **host}, x, [0, 1, 2, 3], weights))
    beside = [who for what, who in seen if what != "sequential"]
    assert len(beside) == 6 and set(beside) == {step.worker.ident}
    # Sequential: the GPU work is done when the CPU lane starts; the calling thread runs it.
    assert [who for what, who in seen if what == "sequential"] == [threading.get_ident()] * 3
    assert step.worker.starts == 1 and step.worker.jobs_run == 7  # the warm-up, then every lane beside
    # Parallel with no GPU work (no hits, nothing copied): nothing beside, the calling thread.
    seen.clear()
    execution = Execution.PARALLEL
    step.run(execution, x, device_experts={}, host_experts={**device, **host}, hit_ids=[], miss_ids=[0, 1, 2, 3],
             router_weights=weights, threads=1, copy_ids=[])
    assert seen == [("parallel", threading.get_ident())] and step.worker.jobs_run == 7


def test_a_step_with_nothing_beside_its_cpu_lane_never_starts_the_worker():
    pool, step, x, weights = layer()
    device, host = split(pool, [0, 1])
    step.warm(1, beside=False)
    for execution in (Execution.SEQUENTIAL, Execution.STAGE):
        step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[0, 1], miss_ids=[2, 3],
                 router_weights=weights, threads=1)
    assert step.worker.starts == 0 and step.worker.ident is None
    assert step.lane_threads == {"calling thread": {1}}


def test_an_error_in_the_cpu_lane_reaches_the_caller_and_the_worker_goes_on(monkeypatch):
    pool, step, x, weights = layer()
    device, host = split(pool, [0])
    kwargs = dict(device_experts=device, host_experts=host, hit_ids=[0], miss_ids=[1], threads=1)
    monkeypatch.setattr(step, "_cpu_lane", lambda *a: (_ for _ in ()).throw(RuntimeError("lane broke")))
    with pytest.raises(RuntimeError, match="lane broke"):
        step.run(Execution.PARALLEL, x, **kwargs)
    monkeypatch.undo()
    assert_matches(step.run(Execution.PARALLEL, x, **kwargs).output, dense_reference(pool, {**device, **host}, x, [0, 1]))
    assert step.worker.starts == 1


def test_default_lane_threads_leave_a_core_for_the_thread_driving_the_gpu():
    assert default_lane_threads(True, cores=8) == 7
    assert default_lane_threads(False, cores=8) == 8
    assert default_lane_threads(True, cores=1) == 1


@pytest.mark.parametrize("execution, misses, copy_ids, sync, waits", [
    (Execution.STAGE, [1, 2], None, True, 1),  # the end of the step
    (Execution.STAGE, [1, 2], None, False, 0),  # the caller waits once per token
    (Execution.SEQUENTIAL, [1, 2], None, True, 2),  # and once for the hidden state the CPU lane reads
    (Execution.PARALLEL, [1, 2], None, False, 1),
    (Execution.READY_FIRST, [1, 2], [1, 2], True, 1),  # every miss copied: no CPU lane
    (Execution.SEQUENTIAL, [], None, True, 1),
])
def test_a_step_makes_the_host_wait_only_where_the_work_needs_it(execution, misses, copy_ids, sync, waits):
    pool, step, x, weights = layer()
    device, host = split(pool, [0])
    before = step.dev.host_waits
    result = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[0], miss_ids=misses,
                      router_weights=weights, threads=1, copy_ids=copy_ids, sync=sync)
    assert step.dev.host_waits - before == waits
    assert result.elapsed_s > 0 and 0 <= result.queued_s
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [0, *misses], weights))


# --- the GPU lane's bookkeeping (graphs, router-weight cells), with eager stand-ins ------


def lane_layer(staging_slots: int = 8):
    """Device experts as Experts (as on CUDA: slots filled by one copy each), and a lane."""
    pool, _, x, weights = layer()
    step = LayerStep(pool, gpu_device="cpu", staging_slots=staging_slots, graphs=True)
    slots = DeviceSlots(pool, "cpu", 3)
    for i, e in enumerate((5, 1, 6)):
        copy_expert(slots[i], pool.experts[e])
    device = {e: slots[i] for i, e in enumerate((5, 1, 6))}
    host = {e: pool.experts[e] for e in range(N_EXPERTS) if e not in device}
    return pool, step, x, weights, device, host


@pytest.mark.parametrize("execution", list(Execution))
def test_the_lane_of_graphs_gives_the_reference_with_each_steps_router_weights(execution):
    pool, step, x, weights, device, host = lane_layer()
    assert step.lane is not None
    for t, (hits, misses) in enumerate((([5, 1], [0, 7]), ([6], [2, 3, 4]), ([5, 1, 6], [0]))):
        w = {e: weights[e] * (t + 1) for e in weights}  # other weights each step, same graphs
        result = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=hits, miss_ids=misses,
                          router_weights=w, threads=1, copy_ids=misses[:1])
        assert_matches(result.output, dense_reference(pool, {**device, **host}, x, hits + misses, w))
    assert len(step.lane.graphs) <= 3 + len(step.staging)  # one per slot, captured once


def test_a_staging_slot_reused_in_a_later_round_gets_that_rounds_weight():
    pool, step, x, weights, device, host = lane_layer(staging_slots=2)
    for execution in (Execution.STAGE, Execution.READY_FIRST):
        result = step.run(execution, x, device_experts=device, host_experts=host, hit_ids=[5], miss_ids=[0, 2, 3, 4, 7],
                          router_weights=weights, copy_ids=[0, 2, 3, 4, 7])
        assert result.copied == (0, 2, 3, 4, 7)
        assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [5, 0, 2, 3, 4, 7], weights))


def test_past_its_capacity_the_lane_runs_experts_eagerly():
    pool, step, x, weights, device, host = lane_layer()
    step.lane.capacity = len(step.lane.graphs)  # no room for the device experts' graphs
    result = step.run(Execution.PARALLEL, x, device_experts=device, host_experts=host, hit_ids=[5, 6], miss_ids=[0],
                      router_weights=weights, threads=1)
    assert not {s.buffer.data_ptr() for s in device.values()} & set(step.lane.graphs)
    assert_matches(result.output, dense_reference(pool, {**device, **host}, x, [5, 6, 0], weights))


def test_a_process_with_many_workers_exits_cleanly():
    """Workers left running at exit are stopped while the interpreter is whole (a thread
    ending during shutdown made the C++ runtime abort the process)."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from engine.replays.policy import Execution\n"
        "from tests.test_layer_step import layer, split\n"
        "for _ in range(12):\n"
        "    pool, step, x, w = layer()\n"
        "    device, host = split(pool, [0])\n"
        "    step.run(Execution.PARALLEL, x, device_experts=device, host_experts=host, hit_ids=[0], miss_ids=[1, 2],"
        " threads=1)\n"
        "print('done')\n"
    )
    for _ in range(3):  # the abort was a race: try it more than once
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "done", (r.returncode, r.stderr[-500:])
