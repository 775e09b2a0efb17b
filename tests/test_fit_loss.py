"""bench/fit_published.py's loss: the mean absolute log ratio by default (the accuracy figures
are mean absolute errors), the mean squared one with `squared` (the loss before 2026-12-07's
night), which lets one far-off row outweigh many near ones."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fit_published import plain_objective  # noqa: E402


def _rows(*ratios: float) -> list:
    return [SimpleNamespace(ratio=r) for r in ratios]


def test_the_default_loss_is_the_mean_absolute_log_ratio_and_squared_the_mean_square():
    rows = _rows(2.0, 0.5, 1.0, 1.0)
    assert plain_objective(rows) == pytest.approx(2 * math.log(2) / 4)
    assert plain_objective(rows, squared=True) == pytest.approx(2 * math.log(2) ** 2 / 4)


def test_one_row_at_2x_weighs_as_a_few_rows_under_the_absolute_loss_and_as_dozens_squared():
    """The RTX 4070 box's 2.2x row against rows at 0.88: how many of them it weighs as."""
    far, near = _rows(2.2), _rows(0.88)
    absolute = plain_objective(far) / plain_objective(near)
    squared = plain_objective(far, squared=True) / plain_objective(near, squared=True)
    assert 6 < absolute < 7 and 38 < squared < 40
