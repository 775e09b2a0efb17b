"""The prefill model's fitted constants are the fit of every published prompt figure
(bench/fit_prefill.py), and the published figures never enter an estimate."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fit_prefill import BOUNDS, FITTED  # noqa: E402
from bench.published import CSV, published_rows  # noqa: E402
from bench.published_prefill import price_all, summary  # noqa: E402
from engine.prefill_cost import PrefillAssumptions  # noqa: E402

pytestmark = pytest.mark.skipif(not CSV.exists(), reason=f"the calibration data is not at {CSV}")


def fit_loss(rows_csv, assumptions: PrefillAssumptions) -> float:  # type: ignore[no-untyped-def]
    ratios = [p.ratio for p in price_all(rows_csv, assumptions) if p.ratio is not None]
    return float(np.mean(np.abs(np.log(ratios))))


def test_the_prefill_constants_are_the_fit_of_the_published_prompt_figures():
    rows_csv = published_rows(CSV)
    code = PrefillAssumptions()
    best = fit_loss(rows_csv, code)
    for name in FITTED:
        for factor in (0.95, 1.05):
            value = getattr(code, name) * factor
            low, high = BOUNDS.get(name, (0.0, float("inf")))
            if not low <= value <= high:
                continue  # the fit is held at this bound
            assert fit_loss(rows_csv, replace(code, **{name: value})) >= best - 1e-9, (name, factor)


def test_published_prompt_figures_are_only_compared_with():
    rows_csv = published_rows(CSV)
    doubled = [dict(r, pp_tok_s=str(2 * float(r["pp_tok_s"]))) if r["pp_tok_s"].replace(".", "", 1).isdigit()
               else r for r in rows_csv]
    a = {p.row.index: p.estimate_tps for p in price_all(rows_csv)}
    b = {p.row.index: p.estimate_tps for p in price_all(doubled)}
    assert a == b


def test_the_ubatch_sweep_comes_out_in_the_published_order_and_gpu_rows_within_target():
    s = summary(price_all(published_rows(CSV)))
    assert all(x["right_order"] for x in s["sweeps"])
    assert s["mape"]["gpu_rows"] <= 0.25  # docs/accuracy.md: the rows where experts are copied or beside a GPU
