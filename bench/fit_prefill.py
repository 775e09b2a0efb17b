"""Fit the prefill model's free constants, once and globally, on every published prompt figure.

    python bench/fit_prefill.py

The constants of engine/cost/prefill_cost.py that no spec sheet gives (the share of the GPU's
tensor peak prefill GEMMs reach, the share of the CPU cores' int8 SIMD peak they reach and
how much more of it a core without VNNI reaches, how much faster ik_llama.cpp's repacked
(-rtr) CPU GEMMs are, how much of the pinned host-to-device rate an expert copy reaches)
are fitted together to the prompt tokens/s of every row of
../shared/calibration/published-decode.csv that publishes one and that COPE prices
(bench/published_rows.py: PROMPT_RUNS), minimising the mean absolute log ratio of
estimated to published tokens/s (robust to the few rows no constant explains). One set of
constants for every row: nothing per model, per row or per source. It prints the values for PrefillAssumptions.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fit_published import nelder_mead  # noqa: E402
from bench.published import CSV, published_rows  # noqa: E402
from bench.published_prefill import price_all, summary  # noqa: E402
from engine.cost.prefill_cost import PrefillAssumptions  # noqa: E402

FITTED = ("gpu_flops_efficiency", "cpu_flops_efficiency", "cpu_no_vnni_factor", "ik_cpu_speedup", "copy_efficiency")
START = PrefillAssumptions(gpu_flops_efficiency=0.2, cpu_flops_efficiency=0.05, cpu_no_vnni_factor=1.2,
                           ik_cpu_speedup=2.0,
                           copy_efficiency=0.8)
BOUNDS = {"gpu_flops_efficiency": (0.01, 1.0), "cpu_flops_efficiency": (0.001, 1.0),
          "cpu_no_vnni_factor": (1.0, 2.0), "copy_efficiency": (0.1, 1.0), "ik_cpu_speedup": (1.0, 10.0)}


def assumptions_of(x: np.ndarray, base: PrefillAssumptions = START) -> PrefillAssumptions:
    values = {name: float(math.exp(v)) for name, v in zip(FITTED, x)}
    for name, (low, high) in BOUNDS.items():
        values[name] = min(max(values[name], low), high)
    return replace(base, **values)


def loss(x: np.ndarray, rows_csv) -> float:  # type: ignore[no-untyped-def]
    ratios = [p.ratio for p in price_all(rows_csv, assumptions_of(x)) if p.ratio is not None]
    return float(np.mean(np.abs(np.log(ratios))))


def fit(rows_csv) -> PrefillAssumptions:  # type: ignore[no-untyped-def]
    x0 = np.log([getattr(START, name) for name in FITTED])
    return assumptions_of(nelder_mead(lambda x: loss(x, rows_csv), x0, iterations=200))


def main() -> int:
    rows_csv = published_rows(CSV)
    fitted = fit(rows_csv)
    print({k: v for k, v in asdict(fitted).items() if k in FITTED})
    s = summary(price_all(rows_csv, fitted))
    print("MAPE:", {k: round(v, 3) for k, v in s["mape"].items()}, "sweeps:", s["sweeps"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
