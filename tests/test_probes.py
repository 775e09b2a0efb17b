"""Operators, the probe runner and `cope advise --fidelity` (no GPU, no network)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from cope_tui import cli  # noqa: E402
from cope_tui.service import pricing  # noqa: E402
from engine.cost.analytic_cost import AnalyticCostModel  # noqa: E402
from engine.cost.cost_models import build_cost_model  # noqa: E402
from engine.cost.measured_cost import CombinedCostModel  # noqa: E402
from engine.hardware.presets import platform_from  # noqa: E402
from engine.replays.policy import Execution  # noqa: E402
from engine.profiles.probe_plan import plan_probes  # noqa: E402
from engine.profiles.profile import Measurement  # noqa: E402
from engine.profiles.profile_io import load_profile  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from engine.replays.replay import ReplayStats  # noqa: E402
from engine.cost.cost_model import Fidelity
from probes import operators as ops  # noqa: E402
from probes import pool_size  # noqa: E402
from probes.local_prober import GPU_OPERATORS, LocalProber, PresetGpu  # noqa: E402
from probes.runner import ensure_profile, profile_key, run_plan  # noqa: E402
from probes.profile_cache import ProfileWriter, load_cached  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

import numpy as np  # noqa: E402

TINY_POOL = 64 * 1024


def tiny_request(threads: int = 1, quant: str = "Q8_0"):
    model = tiny_model(k=2, hidden=64, expert_ffn=32)
    return SimpleNamespace(
        model=model, quant=get_quantization(quant), platform=platform_from("rtx-4060-ti-16gb", "desktop-ddr5", None),
        context_tokens=1024, threads=threads,
    )


class FakeProber:
    cuda = False
    gpu_name = "fake"
    kernel_stand_ins = {"Q8_0": "fake kernel"}

    def __init__(self, cancel_after: int | None = None, cancel: threading.Event | None = None):
        self.calls: list[tuple[str, dict]] = []
        self.cancel_after = cancel_after
        self.cancel = cancel

    def measure(self, operator, key, share_s):
        self.calls.append((operator, dict(key)))
        if self.cancel_after is not None and len(self.calls) >= self.cancel_after:
            self.cancel.set()
        basis = "preset" if operator in GPU_OPERATORS else "measured"
        return Measurement(operator, key, 1e-4 * (1 + key.get("n", 1)), 1e-6, 3, basis=basis)


def stats(k: int, hits: int, layers: int = 2, tokens: int = 5) -> ReplayStats:
    counts = np.zeros((layers, k + 1, 1), dtype=np.int64)
    counts[:, hits, 0] = tokens
    return ReplayStats("c", counts, tokens, np.zeros(layers, dtype=np.int64), 0, 0)


# --- operators ----------------------------------------------------------------------


def test_expert_pool_streams_the_quantized_bytes_and_records_its_kernel():
    req = tiny_request(quant="Q4_K_M")
    shape = ops.ExpertShape.of(req.model, req.quant)
    pool = ops.ExpertPool(shape, pool_bytes=TINY_POOL, min_experts=2)
    assert pool.n_experts >= max(2, TINY_POOL // shape.expert_bytes)
    weight_bytes = sum(w.numel() * w.element_size() for w, _ in pool.experts[0])
    assert abs(weight_bytes - shape.expert_bytes) <= 3 * 16 * max(shape.hidden_size, shape.ffn_size)
    assert "byte-equivalent" in pool.kernel_stand_in()
    out = pool.run(2)
    assert out.shape == (1, shape.hidden_size) and torch.isfinite(out.float()).all()


def test_cpu_experts_times_with_median_and_spread_and_restores_threads():
    req = tiny_request()
    pool = ops.ExpertPool(ops.ExpertShape.of(req.model, req.quant), pool_bytes=TINY_POOL)
    before = torch.get_num_threads()
    t = ops.cpu_experts(pool, 2, 1, budget_s=0.05)
    assert torch.get_num_threads() == before
    assert t.median_s > 0 and t.spread_s >= 0 and t.repeats >= 3


def test_time_repeats_stops_once_the_spread_is_small():
    t = ops.time_repeats(lambda: None, budget_s=10.0, min_repeats=5, rel_spread=1e9)
    assert t.repeats == 5


def test_last_level_cache_falls_back_when_sysfs_is_missing(tmp_path):
    assert pool_size.last_level_cache_bytes(str(tmp_path)) == pool_size.DEFAULT_LLC_BYTES


@pytest.mark.gpu
def test_gpu_experts_on_cuda():  # pragma: no cover - needs CUDA
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    req = tiny_request()
    pool = ops.ExpertPool(ops.ExpertShape.of(req.model, req.quant), "cuda", pool_bytes=TINY_POOL)
    assert ops.gpu_experts(pool, 2, 0.1).median_s > 0


# --- runner -------------------------------------------------------------------------


def test_real_local_probe_run_measures_cpu_and_fills_gpu_from_the_preset(tmp_path):
    req = tiny_request()
    analytic = AnalyticCostModel(req.model, req.quant, req.platform, context_tokens=1024)
    prober = LocalProber(req.model, req.quant, PresetGpu(analytic), pool_bytes=TINY_POOL, cuda=False)
    out = ensure_profile(
        req, Fidelity.COMBINED, budget_s=2.0, root=tmp_path, make_prober=lambda: prober,
        candidates=lambda: [(Execution.SEQUENTIAL, stats(2, 0)), (Execution.PARALLEL, stats(2, 1))],
    )
    profile = load_profile(out.source)
    bases = {m.operator: m.basis for m in profile.measurements}
    assert bases["cpu_experts"] == "measured"
    assert all(bases[op] == "preset" for op in GPU_OPERATORS)
    assert profile.find("gpu_experts", {"n": 1}).median_s == pytest.approx(analytic.gpu_experts_s(1))
    seq = profile.find("schedule", {"execution": "sequential", "hits": 0, "misses": 2, "prefetches": 0, "threads": 1})
    assert seq.basis == "measured+preset" and seq.method == "composed"
    assert all(m.method == "composed" for m in profile.of("schedule"))  # no CUDA: no step timed whole
    assert "Q8_0" in dict(profile.provenance.kernel_stand_ins)
    model = build_cost_model(Fidelity.COMBINED, req, profile)
    assert isinstance(model, CombinedCostModel)
    model.state_costs(Execution.SEQUENTIAL, 1, 2, 2)
    assert model.describe().details["states_partly_preset"] >= 1


def test_a_second_run_reuses_the_cache_and_reprobe_ignores_it(tmp_path):
    req = tiny_request()
    first = FakeProber()
    out = ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, make_prober=lambda: first)
    assert out.ran is not None and out.ran.measured == len(first.calls) > 0
    second = FakeProber()
    again = ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, make_prober=lambda: second)
    assert again.ran is None and second.calls == []
    third = FakeProber()
    redo = ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, reprobe=True, make_prober=lambda: third)
    assert redo.ran.skipped == 0 and len(third.calls) == len(first.calls)


def test_a_cancelled_run_keeps_what_it_measured_and_resumes(tmp_path):
    req = tiny_request()
    cancel = threading.Event()
    first = FakeProber(cancel_after=3, cancel=cancel)
    out = ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, make_prober=lambda: first, cancel=cancel)
    assert out.ran.stopped == "cancelled" and out.ran.measured == 3 and out.ran.left > 0
    assert len(load_cached(profile_key(req), tmp_path).measurements) == 3
    second = FakeProber()
    done = ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, make_prober=lambda: second)
    assert done.ran.skipped == 3 and done.ran.left == 0
    assert not set(map(str, second.calls)) & set(map(str, first.calls))


def test_keyboard_interrupt_keeps_the_measurements_on_disk(tmp_path):
    req = tiny_request()

    class Interrupting(FakeProber):
        def measure(self, operator, key, share_s):
            if len(self.calls) == 2:
                raise KeyboardInterrupt
            return super().measure(operator, key, share_s)

    with pytest.raises(KeyboardInterrupt):
        ensure_profile(req, Fidelity.ATOMIC, budget_s=5, root=tmp_path, make_prober=Interrupting)
    assert len(load_cached(profile_key(req), tmp_path).measurements) == 2


def test_runner_runs_atomic_first_stops_states_at_the_budget_and_reports_progress(tmp_path):
    req = tiny_request()
    plan = plan_probes([(Execution.SEQUENTIAL, stats(2, 0)), (Execution.PARALLEL, stats(2, 1))],
                       threads=1, budget_s=100.0, probe_s=1.0)
    from probes.runner import _provenance, hardware_key, model_shape
    from engine.profiles.profile import Profile

    writer = ProfileWriter(Profile(_provenance(FakeProber(), 1.0), model_shape(req), hardware_key(req)), root=tmp_path)
    ticks = iter(range(1000))
    seen = []
    prober = FakeProber()
    result = run_plan(plan, writer, prober, budget_s=len(plan.atomic) * 2 + 0.5,
                      progress=lambda d, t, label: seen.append((d, t, label)), clock=lambda: float(next(ticks)))
    operators = [op for op, _ in prober.calls]
    assert operators[: len(plan.atomic)] == [p.operator for p in plan.atomic]
    assert result.stopped == "budget" and result.left > 0
    assert seen[0][0] == 0 and seen[-1][2] == "budget"


# --- the command line ---------------------------------------------------------------


def test_cli_probes_once_then_reuses_the_cache_and_reprobe_probes_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    probers: list[FakeProber] = []

    def factory():
        probers.append(FakeProber())
        return probers[-1]

    monkeypatch.setattr(pricing, "PROBER_FACTORY", factory)
    args = ["advise", "--json", "--tokens", "40", "--cpu", "desktop-ddr5", "--threads", "2"]
    assert cli.main([*args, "--fidelity", "combined", "--probe-budget", "30"]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["cost_model"]["fidelity"] == "combined" and doc["cost_model"]["profile_from_cache"] is False
    assert doc["cost_model"]["preset_count"] > 0 and doc["cost_model"]["measured_count"] > 0
    assert "cope: probe" in err and len(probers) == 1 and probers[0].calls

    assert cli.main(args) == cli.EXIT_OK  # default: combined, from the cache
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"]["fidelity"] == "combined" and doc["cost_model"]["profile_from_cache"] is True
    assert len(probers) == 1

    assert cli.main([*args, "--fidelity", "combined", "--reprobe"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"]["profile_from_cache"] is False and len(probers) == 2


def test_cli_default_is_analytic_without_a_cached_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    assert cli.main(["advise", "--json", "--tokens", "40", "--cpu", "desktop-ddr5"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["cost_model"]["fidelity"] == "analytic"
    assert cli.main(["advise", "--probe-budget", "0", "--cpu", "desktop-ddr5"]) == cli.EXIT_INPUT


# --- layer steps and the shared work as probes ------------------------------------------


def test_the_probe_of_a_state_is_one_real_layer_step_in_the_functional_mode():
    req = tiny_request()
    analytic = AnalyticCostModel(req.model, req.quant, req.platform, context_tokens=1024)
    prober = LocalProber(req.model, req.quant, PresetGpu(analytic), pool_bytes=TINY_POOL, cuda=False)
    # Stand-in for the CUDA pool: the same kernels on the CPU device.
    prober.gpu_pool = ops.ExpertPool(prober.shape, "cpu", pool_bytes=TINY_POOL, min_experts=2, seed=1,
                                     int8=prober.cpu_pool.int8)
    for n in (1, 2):
        prober.measure("cpu_experts", {"n": n, "threads": 1}, 0.02)
    lanes = prober.lanes(1)
    # The lane is the probe's curve: its measured points, and the line through them (whose
    # slope a loaded machine can flatten to 0: two timings, not an order between them).
    assert lanes.cpu_experts_s(2) == prober._points[("cpu_experts", 1)][2]
    assert (lanes.cpu_per_expert_s, lanes.cpu_dispatch_s) == (lanes.cpu_experts_s.slope_s, lanes.cpu_experts_s.intercept_s)
    for execution in Execution:
        for hits, prefetches in ((0, 0), (1, 1), (2, 2)):
            key = {"execution": execution.value, "hits": hits, "misses": 2 - hits, "prefetches": prefetches, "threads": 1}
            m = prober._schedule_step(key, 0.02, device="cpu")
            assert m.basis == "measured" and m.method == "timed-step" and m.median_s > 0 and m.repeats >= 3


def test_shared_layer_and_head_run_on_any_device_with_the_models_shape():
    model = tiny_model(k=2, hidden=64, expert_ffn=32)
    import dataclasses

    with_dense = dataclasses.replace(model, n_blocks=3, moe_blocks=(1, 2), shared_expert_ffn_size=32)
    quant = get_quantization("Q4_K_M")
    op = ops.SharedLayerOp(with_dense, quant, block=1, kv_tokens=100, device="cpu", pool_bytes=1)
    assert op.moe and op.kv_tokens == 100 and len(op.copies) == 1
    out = op.run()
    assert out.shape == (1, 64) and torch.isfinite(out.float()).all()
    assert not ops.SharedLayerOp(with_dense, quant, block=0, kv_tokens=100, device="cpu", pool_bytes=1).moe
    t, kernel = ops.shared_layer_time(with_dense, quant, 100, 0.05, "cpu", pool_bytes=1)
    assert t.median_s > 0 and "KV cache of 100 tokens" in kernel
    head = ops.TokenHeadOp(with_dense, quant, "cpu")
    assert 0 <= head.run() < with_dense.vocab_size


@pytest.mark.gpu
def test_a_probe_run_on_cuda_times_whole_steps_and_the_shared_work():  # pragma: no cover - needs CUDA
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    req = tiny_request()
    analytic = AnalyticCostModel(req.model, req.quant, req.platform, context_tokens=1024)
    prober = LocalProber(req.model, req.quant, PresetGpu(analytic), pool_bytes=TINY_POOL, context_tokens=1024)
    for operator in ("shared_layer", "token_head", "sync"):
        assert prober.measure(operator, {}, 0.05).basis == "measured"
    for n in (1, 2):
        for operator, key in (("gpu_experts", {"n": n}), ("h2d_copy", {"n": n}), ("cpu_experts", {"n": n, "threads": 1})):
            prober.measure(operator, key, 0.05)
    for execution in Execution:
        key = {"execution": execution.value, "hits": 1, "misses": 1, "prefetches": 1, "threads": 1}
        m = prober.measure("schedule", key, 0.05)
        assert m.method == "timed-step" and m.basis == "measured"
