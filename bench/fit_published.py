"""Fit the analytic cost model's free constants, once and globally, on the published runs.

    python bench/fit_published.py [--balanced]

The constants COPE cannot read off a spec sheet (how much of the memory bandwidth a
quantized mat-vec reaches on each device, what one CPU thread streams for its core's peak, the fixed
latencies of a block, a token and a hand-over) are fitted together to the decode speeds
of the rows of ../shared/calibration/published-decode.csv whose hardware is stated
(bench/published_rows.py), minimising the mean squared log ratio of estimated to published
tokens/s (`plain_objective`). `--balanced` minimises `objective` instead: every regime (where
the command puts the experts: all-GPU, partial offload, experts on the CPU, CPU-only) weighing
the same, and within a regime every source. Measured on 2026-12-07 (docs/accuracy.md, issue
44) it is not the default: on the same 70 rows its leave-one-source-out figures are worse
(all-GPU 13.1% -> 17.2%, beyond the fold noise; bench/regime_check.py refuses it): weighing
every source of a regime the same lets one-row sources move the shared constants.
One set of constants for every row: nothing per model, per row or per source. It prints the fitted values for engine/cost/analytic_cost.py's AnalyticAssumptions and
the fit's residuals, for docs/accuracy.md. A test (tests/test_accuracy_fit.py) checks that
the constants in the code are what this fit gives.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.published import CSV, Priced, fitted_rows, price_all, published_rows  # noqa: E402
from engine.cost.analytic_cost import AnalyticAssumptions  # noqa: E402

# The constants the fit moves (in log space, so each stays positive), and where it starts.
FITTED = ("gpu_bandwidth_efficiency", "cpu_bandwidth_efficiency", "cpu_thread_bytes_per_mac", "gpu_block_overhead_s",
          "gpu_block_no_graph_s", "cpu_block_overhead_s", "sync_s", "token_fixed_s", "gpu_kv_sm_bytes_per_s",
          "cpu_kv_read_factor")
START = AnalyticAssumptions(gpu_bandwidth_efficiency=0.7, cpu_bandwidth_efficiency=0.5, cpu_thread_bytes_per_mac=0.03,
                            gpu_block_overhead_s=20e-6, gpu_block_no_graph_s=20e-6, sync_s=50e-6,
                            token_fixed_s=200e-6, gpu_kv_sm_bytes_per_s=4e9, cpu_kv_read_factor=1.5)
# token_fixed_s: the rows (48-94 blocks each) cannot tell a per-token cost from a per-block
# one, so it is held where earlier fits of this model put it (docs/accuracy.md).
# The CPU's KV read factor: below 1 it would read the cache faster than the weights stream;
# above 6 no row asks for. The GPU's per-SM cache rate: 0.5-50 GB/s an SM spans every card's
# bandwidth an SM (5.7-12 GB/s) either way, so the bound never decides (docs/accuracy.md).
# sync_s: a hand-over is a stream synchronisation and three synchronous copies (the hidden state and
# the expert ids to the CPU, the experts' outputs back: llama.cpp's ggml-backend.cpp,
# ggml_backend_sched_compute_splits), microseconds each; left free the fit takes it to nothing.
# gpu_bandwidth_efficiency: a whole dense decode step, every launch and small op included,
# streams 0.81 of the GPU's peak (llama-bench tg128 of llama 7B F16 on an RTX 4090, 13.5 GB a
# token at 61.0 tok/s of 1008 GB/s: https://github.com/ggml-org/llama.cpp/pull/4766), so the
# mat-vecs alone stream at least that; below it the rows trade bandwidth for per-kernel cost
# freely (docs/accuracy.md: a fold without the RTX 4080 rows went to 0.61 and 37 us a block).
BOUNDS = {"gpu_bandwidth_efficiency": (0.81, 0.9), "cpu_bandwidth_efficiency": (0.1, 1.0),
          "token_fixed_s": (1e-5, 5e-4), "gpu_kv_sm_bytes_per_s": (0.5e9, 50e9), "cpu_kv_read_factor": (1.0, 6.0),
          "sync_s": (5e-6, 5e-4)}


def assumptions_of(x: np.ndarray, base: AnalyticAssumptions = START) -> AnalyticAssumptions:
    values = {name: float(math.exp(v)) for name, v in zip(FITTED, x)}
    for name, (low, high) in BOUNDS.items():
        values[name] = min(max(values[name], low), high)
    return replace(base, **values)


def objective(priced: list[Priced]) -> float:
    """The fit's loss over priced rows: the squared log ratio averaged within each source of a
    regime, then over the regime's sources, then over the regimes (each regime weighs the same,
    and within it each source)."""
    by_regime: dict[str, dict[str, list[float]]] = {}
    for p in priced:
        by_regime.setdefault(p.regime, {}).setdefault(p.source, []).append(math.log(p.ratio) ** 2)
    return float(np.mean([np.mean([np.mean(errors) for errors in by_source.values()])
                          for by_source in by_regime.values()]))


def plain_objective(priced: list[Priced], squared: bool = False) -> float:
    """The fit's loss over priced rows, every row the same: the mean absolute log ratio (the
    accuracy figures are mean absolute errors), or with `squared` the mean squared one."""
    logs = np.log([p.ratio for p in priced])
    return float(np.mean(logs ** 2 if squared else np.abs(logs)))


def loss(x: np.ndarray, rows_csv, keep: Callable[[Priced], bool] = lambda p: True,  # type: ignore[no-untyped-def]
         balanced: bool = False, squared: bool = False) -> float:
    """The objective (`objective` when `balanced`, else `plain_objective`) over the fitted rows
    that `keep` keeps."""
    priced = [p for p in fitted_rows(price_all(rows_csv, assumptions_of(x), fitted_only=True)) if keep(p)]
    return objective(priced) if balanced else plain_objective(priced, squared)


def nelder_mead(f, x0: np.ndarray, *, step: float = 0.3, iterations: int = 400, tol: float = 1e-7) -> np.ndarray:
    """Minimise f from x0 (a plain Nelder-Mead: numpy only, deterministic)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(rows_csv, keep: Callable[[Priced], bool] = lambda p: True,  # type: ignore[no-untyped-def]
        start: AnalyticAssumptions = START, balanced: bool = False, squared: bool = False) -> AnalyticAssumptions:
    """The constants that fit the rows `keep` keeps best (all fitted rows by default)."""
    x0 = np.log([getattr(start, name) for name in FITTED])
    return assumptions_of(nelder_mead(lambda x: loss(x, rows_csv, keep, balanced, squared), x0))


def main() -> int:
    if not CSV.exists():
        print(f"fit_published.py: {CSV} not found", file=sys.stderr)
        return 2
    rows_csv = published_rows(CSV)
    balanced, squared = "--balanced" in sys.argv[1:], "--squared" in sys.argv[1:]
    # A local search: from the constants in the code (the last fit's), as the
    # cross-validation's folds start; from START it stops at a worse optimum (docs/accuracy.md).
    best = fit(rows_csv, start=AnalyticAssumptions(), balanced=balanced, squared=squared)
    print("fitted constants (engine/cost/analytic_cost.py AnalyticAssumptions):")
    for f in fields(AnalyticAssumptions):
        mark = "  fitted" if f.name in FITTED else ""
        value = getattr(best, f.name)
        shown = "None (a machine's own, where measured)" if value is None else f"{value:.6g}"
        print(f"  {f.name} = {shown}{mark}")
    priced = fitted_rows(price_all(rows_csv, best))
    print(f"rows fitted: {len(priced)}; mean absolute log ratio {plain_objective(priced):.5f}; mean squared "
          f"{plain_objective(priced, squared=True):.5f}; regimes and their "
          f"sources weighing the same (--balanced's objective) {objective(priced):.5f}")
    print("ratios: " + ", ".join(f"{p.key}: {p.ratio:.2f}" for p in priced))
    print(asdict(best))
    return 0


if __name__ == "__main__":
    sys.exit(main())
