"""CPU validation: the combined-fidelity estimate of the all-experts-on-CPU candidate
against a real CPU decode of the MoE layers of a replayed synthetic trace.

For Qwen3-30B-A3B's real expert shape at Q4_K_M and Q8_0, with 1 and 2 threads:
- predicted: the profile's whole layer step "sequential, 0 hits, k misses" (probed by
  probes.runner, less the preset GPU hand-over, which a CPU-only decode does not do)
  times the MoE layers: the expert time per token;
- measured: token-major decode of a synthetic trace's routing, expert work only, on
  real-sized weights from a pool of distinct experts >= 4x the last-level cache, each
  routed (layer, expert) id mapped onto the pool.

Prints predicted, measured and the error (target under 10%). Run: python bench/cpu_validation.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cope_tui.options import DEFAULT_GPU  # noqa: E402
from engine.models.catalog import load_model  # noqa: E402
from engine.cost.analytic_cost import AnalyticCostModel  # noqa: E402
from engine.replays.policy import Execution  # noqa: E402
from engine.hardware.presets import platform_from  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from engine.replays.replay import ReplayStats  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from probes.host import detect_cpu  # noqa: E402
from probes.operators import threads_set  # noqa: E402
from engine.cost.cost_model import Fidelity  # noqa: E402
from engine.cost.cost_models import build_cost_model  # noqa: E402
from probes.local_prober import LocalProber, PresetGpu  # noqa: E402
from probes.runner import ensure_profile  # noqa: E402

MODEL = "qwen3-30b-a3b"
TOKENS = 24
PROBE_BUDGET_S = 15.0


def all_cpu_stats(n_layers: int, k: int, tokens: int) -> ReplayStats:
    counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
    counts[:, 0, 0] = tokens
    return ReplayStats("all-cpu", counts, tokens, np.zeros(n_layers, dtype=np.int64), 0, 0)


def decode(pool, ids: np.ndarray, n_experts: int, threads: int) -> list[float]:
    """Per-token seconds of the MoE expert work, token-major."""
    n_tokens, n_layers, _ = ids.shape
    # Each routed (layer, expert) lands on a pool entry; a multiplicative hash spreads
    # a layer's experts over the pool.
    slot = (np.arange(n_layers)[:, None] * n_experts + np.arange(n_experts)[None, :]) * 2654435761 % pool.n_experts
    times = []
    with threads_set(threads):
        pool.run(len(ids[0, 0]), ids=slot[0, ids[0, 0]])  # warm up
        for t in range(n_tokens):
            t0 = time.perf_counter()
            for layer in range(n_layers):
                pool.run(0, ids=slot[layer, ids[t, layer]])
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    model = load_model(MODEL)
    platform = platform_from(DEFAULT_GPU, None, detect_cpu())
    trace = synthetic_trace(model, SyntheticSettings(tokens=TOKENS, seed=1, zipf_exponent=0.7, sequences=1))
    ids = trace.expert_ids
    k, n_layers = model.top_k, model.n_moe_layers
    print(f"{model.name}: {n_layers} MoE layers, top-{k}, {model.n_routed_experts} experts; CPU {platform.cpu.name}")
    print(f"{'quant':<8} {'thr':>3} {'pool':>9} {'predicted ms':>13} {'measured ms':>12} {'IQR ms':>7} {'error':>7}")
    errors = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for quant_name in ("Q4_K_M", "Q8_0"):
            quant = get_quantization(quant_name)
            analytic = AnalyticCostModel(model, quant, platform, context_tokens=8192)
            prober = LocalProber(model, quant, PresetGpu(analytic), cuda=False)
            pool = prober.cpu_pool
            for threads in (1, 2):
                request = SimpleNamespace(model=model, quant=quant, platform=platform, context_tokens=8192,
                                          threads=threads)
                out = ensure_profile(
                    request, "combined", budget_s=PROBE_BUDGET_S, root=root, make_prober=lambda: prober,
                    candidates=lambda: [(Execution.SEQUENTIAL, all_cpu_stats(n_layers, k, TOKENS))],
                )
                cost = build_cost_model(Fidelity.COMBINED, request, out.profile)
                step = cost.state_costs(Execution.SEQUENTIAL, threads, k, 0)
                expert_step_s = float(step.total_s[0] - step.sync_s[0])
                predicted = expert_step_s * n_layers
                times = decode(pool, ids, model.n_routed_experts, threads)
                measured = statistics.median(times)
                q = statistics.quantiles(times, n=4)
                error = (predicted - measured) / measured
                errors.append(abs(error))
                print(f"{quant_name:<8} {threads:>3} {pool.bytes / 2**20:>7.0f}Mi {predicted * 1e3:>13.2f} "
                      f"{measured * 1e3:>12.2f} {(q[2] - q[0]) * 1e3:>7.2f} {error:>+7.1%}")
            print(f"  kernel: {prober.kernel_stand_ins[quant_name]}")
    worst = max(errors)
    print(f"worst |error| {worst:.1%} (target < 10%: {'met' if worst < 0.10 else 'NOT met'}); "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
