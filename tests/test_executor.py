"""The executor of whole candidates (probes/executor.py), in the functional mode.

Every candidate kind executed on tiny shapes: its hit, admission and prefetch counts
equal engine.replays.replay's for the same candidate, and every token's MoE output equals the
dense reference for the same routing. The VRAM budget is enforced; timed runs without
CUDA refuse GPU candidates.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engine.replays.residency import partition_layers  # noqa: E402
from engine.replays.policy import Candidate, Eviction, Execution, Kind, Residency, policy_matrix, standalone_candidates  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from engine.replays.replay import ReplaySetup, replay  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from engine.replays.residency import ResidencyPlan  # noqa: E402
from probes.executor import Executor, GpuRequired, OutOfDeviceMemory, VramBudgetExceeded  # noqa: E402
from probes.layer_step import dense_reference  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

K, E = 2, 8
MODEL = tiny_model(moe_blocks=(0, 1, 2), experts=E, k=K, hidden=64, expert_ffn=32)
QUANT = get_quantization("Q8_0")


def traces(seed: int = 5, tokens: int = 24):
    full = synthetic_trace(MODEL, SyntheticSettings(tokens=tokens, seed=seed, zipf_exponent=0.8,
                                                    predictor_accuracy=0.6, locality=0.2))
    return full.split(0.5)  # profile, replayed


def candidates():
    out = policy_matrix(prefetch_available=True, evictions=(Eviction.LRU, Eviction.SCORE))
    out += [c for c in policy_matrix(prefetch_available=False) if c.is_mutable]  # admission only
    return out + standalone_candidates(all_gpu_fits=True)


def setup_for(profile, total_slots: int = 7) -> ReplaySetup:
    return ReplaySetup(profile.popularity(), total_slots, prefetch_budget=2, admit_per_hits=np.array([1, 1, 0]))


def cpu_layers_of(candidate: Candidate):
    if candidate.kind in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST):
        return partition_layers(candidate.kind, MODEL.n_moe_layers, 1, MODEL.moe_blocks)[0]
    return None


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """These shapes are tiny: torch's intra-op threads only add hand-off cost (on two busy
    cores a 64x32 int8 matmul took milliseconds), and nothing checked here depends on their
    number. The caller's count is given back."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def executor():
    return Executor(MODEL, QUANT, mode="functional")


@pytest.mark.parametrize("total_slots", [7, 3])
def test_every_candidate_executes_the_replay_counts_and_the_dense_reference(executor, total_slots):
    profile, trace = traces()
    setup = setup_for(profile, total_slots)
    seen = set()
    dense = {}  # (t, l) -> the dense reference: the same routing and input for every candidate
    for candidate in candidates():
        cpu_layers = cpu_layers_of(candidate)
        run = executor.run(candidate, trace, setup, cpu_layers=cpu_layers)
        stats = replay(trace.expert_ids, trace.predicted_ids, candidate, setup, cpu_layers=cpu_layers)
        assert run.counts.shape == stats.counts.shape, candidate.id
        assert np.array_equal(run.counts, stats.counts), candidate.id
        assert np.array_equal(run.hits_per_layer(), stats.hits_per_layer()), candidate.id
        assert (run.admissions, run.prefetch_used) == (stats.admissions, stats.prefetch_used), candidate.id
        seen.add((candidate.kind, candidate.residency, candidate.execution))
        for t in range(trace.n_tokens):
            for l in range(MODEL.n_moe_layers):
                if (t, l) not in dense:
                    ids = [int(e) for e in trace.expert_ids[t, l]]
                    experts = {e: executor.host_mats(l * E + e) for e in ids}
                    weights = {e: float(w) for e, w in zip(ids, trace.weights[t, l])}
                    dense[t, l] = dense_reference(executor.host, experts, executor.hidden_of(t, l), ids, weights)
                ref = dense[t, l]
                out = run.outputs[(t, l)]
                scale = float(ref.abs().max()) or 1.0
                assert torch.allclose(out, ref, rtol=2e-2, atol=2e-2 * scale), (candidate.id, t, l)
    assert len(seen) == 3 * 4 + 4  # every residency x execution, and the four standalone kinds


def test_mutable_candidates_really_change_their_caches(executor):
    profile, trace = traces()
    setup = setup_for(profile, 7)
    by_id = {c.id: c for c in candidates()}
    stage = executor.run(by_id["pool.stage.uniform.lru.prefetch"], trace, setup)
    assert stage.admissions > 0 and stage.counts[:, :, 1:].sum() > 0
    fixed = executor.run(by_id["fixed.stage.uniform"], trace, setup)
    assert fixed.admissions == 0 and fixed.counts.shape[2] == 1


def test_the_vram_budget_is_enforced_by_the_executor():
    profile, trace = traces()
    setup = setup_for(profile, 7)
    probe = Executor(MODEL, QUANT, mode="functional")
    candidate = Candidate(Kind.MATRIX, execution=Execution.STAGE, residency=Residency.FIXED)
    plan = ResidencyPlan(trace.expert_ids, None, candidate, setup)
    need = (plan.n_slots + probe.staging_slots) * probe.per_expert_bytes
    tight = Executor(MODEL, QUANT, mode="functional", weights_budget_bytes=need - 1)
    with pytest.raises(VramBudgetExceeded, match="over the budget"):
        tight.run(candidate, trace, setup)
    enough = Executor(MODEL, QUANT, mode="functional", weights_budget_bytes=need)
    run = enough.run(candidate, trace, setup)
    assert 0 < run.device_weight_bytes <= need
    # all-on-CPU needs no device at all, whatever the budget
    assert tight.run(Candidate(Kind.ALL_CPU), trace, setup).device_weight_bytes == 0


def test_running_out_of_device_memory_refuses_that_candidate_and_the_next_one_runs(monkeypatch):
    import probes.layer_step as layer_step

    profile, trace = traces(tokens=6)
    setup = setup_for(profile, 7)
    runner = Executor(MODEL, QUANT, mode="functional")
    candidate = Candidate(Kind.MATRIX, execution=Execution.STAGE, residency=Residency.FIXED)

    def no_memory(*args, **kwargs):  # the allocator of a full device
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1.00 GiB free)")

    with monkeypatch.context() as patch:
        patch.setattr(layer_step.DeviceSlots, "__init__", no_memory)
        with pytest.raises(OutOfDeviceMemory, match=r"refused: out of memory on the device \(CUDA out of memory"):
            runner.run(candidate, trace, setup)
    assert runner.run(candidate, trace, setup).n_tokens == trace.n_tokens  # memory back: it runs


def test_timed_runs_without_cuda_refuse_gpu_candidates_and_run_all_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    profile, trace = traces(tokens=8)
    setup = setup_for(profile, 7)
    timed = Executor(MODEL, QUANT, mode="timed", host_pool_bytes=1 << 20)
    for candidate in candidates():
        if candidate.kind is Kind.ALL_CPU:
            continue
        with pytest.raises(GpuRequired, match="needs a CUDA GPU"):
            timed.run(candidate, trace, setup, cpu_layers=cpu_layers_of(candidate))
    run = timed.run(Candidate(Kind.ALL_CPU), trace, setup, threads=1)
    assert run.mode == "timed-cpu" and run.gpu_side == "not executed"
    assert run.tpot_s > 0 and run.experts_s > 0 and run.outputs is None
    assert run.counts[:, 0, 0].tolist() == [trace.n_tokens] * MODEL.n_moe_layers


@pytest.mark.gpu
def test_timed_cuda_run_matches_replay_counts():  # pragma: no cover - needs CUDA
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    profile, trace = traces(tokens=8)
    setup = setup_for(profile, 7)
    timed = Executor(MODEL, QUANT, mode="timed")
    for candidate in candidates():
        cpu_layers = cpu_layers_of(candidate)
        run = timed.run(candidate, trace, setup, cpu_layers=cpu_layers)
        stats = replay(trace.expert_ids, trace.predicted_ids, candidate, setup, cpu_layers=cpu_layers)
        assert np.array_equal(run.counts, stats.counts), candidate.id
        assert run.gpu_side == "executed" and run.shared_s > 0
