"""The prefill model's fitted constants are the fit of every published prompt figure
(bench/fit_prefill.py), and the published figures never enter an estimate."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fit_prefill import BOUNDS, FITTED  # noqa: E402
from bench.published import CSV, published_rows  # noqa: E402
from bench.published_prefill import price_all, summary  # noqa: E402
from engine.cost.prefill_cost import PrefillAssumptions  # noqa: E402
from tests.fit_optimum import assert_at_optimum  # noqa: E402

pytestmark = pytest.mark.skipif(not CSV.exists(), reason=f"the calibration data is not at {CSV}")


def fit_loss(rows_csv, assumptions: PrefillAssumptions) -> float:  # type: ignore[no-untyped-def]
    ratios = [p.ratio for p in price_all(rows_csv, assumptions) if p.ratio is not None]
    return float(np.mean(np.abs(np.log(ratios))))


def test_the_prefill_constants_are_the_fit_of_the_published_prompt_figures():
    rows_csv = published_rows(CSV)
    assert_at_optimum(lambda a: fit_loss(rows_csv, a), PrefillAssumptions(), FITTED, BOUNDS, tolerance=1e-9)


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
