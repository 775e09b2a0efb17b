"""The analytic model's fitted constants are the fit of the published runs (bench/fit_published.py),
and the benchmark over those runs is what docs/accuracy.md reports."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fit_published import FITTED, BOUNDS, plain_objective  # noqa: E402
from bench.published import CSV, fitted_rows, price_all, published_rows  # noqa: E402
from engine.cost.analytic_cost import AnalyticAssumptions  # noqa: E402
from tests.fit_optimum import assert_at_optimum  # noqa: E402

pytestmark = pytest.mark.skipif(not CSV.exists(), reason=f"the calibration data is not at {CSV}")


def fit_loss(rows_csv, assumptions: AnalyticAssumptions) -> float:  # type: ignore[no-untyped-def]
    return plain_objective(fitted_rows(price_all(rows_csv, assumptions)))


def test_the_constants_in_the_code_are_the_fit_of_the_published_runs():
    """Moving any fitted constant 5% either way (within its bounds) fits the published runs
    no better: the code holds the fit's optimum, not a hand-tuned value."""
    rows_csv = published_rows(CSV)
    assert_at_optimum(lambda a: fit_loss(rows_csv, a), AnalyticAssumptions(), FITTED, BOUNDS, tolerance=1e-4)


def test_the_priced_rows_are_priced_from_inputs_only():
    """The estimate of a row does not move when its published figure does."""
    rows_csv = published_rows(CSV)
    before = {p.row.index: p.price.tokens_per_s for p in price_all(rows_csv) if p.ratio is not None}
    doubled = [dict(r, tg_tok_s=str(2 * float(r["tg_tok_s"]))) if r["tg_tok_s"].replace(".", "").isdigit() else r
               for r in rows_csv]
    after = {p.row.index: p.price.tokens_per_s for p in price_all(doubled) if p.ratio is not None}
    assert before == after and len(before) > 20


def test_the_fit_prices_only_the_rows_it_uses_and_sees_them_as_the_report_does():
    """The fit's evaluations price only the stated, non-SUSPECT rows (fitted_only); the rows
    it fits and their ratios are the report's."""
    rows_csv = published_rows(CSV)
    everything = fitted_rows(price_all(rows_csv))
    fitted = price_all(rows_csv, fitted_only=True)
    assert [(p.key, p.ratio) for p in fitted_rows(fitted)] == [(p.key, p.ratio) for p in everything]
    assert len(fitted) < len(price_all(rows_csv)) and len(everything) > 20
