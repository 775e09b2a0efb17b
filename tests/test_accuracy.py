"""engine/advice/accuracy.py on hand-made predicted/measured tables."""

from __future__ import annotations

import pytest

from engine.advice.accuracy import (
    abs_pct_errors,
    config_accuracy,
    ranks,
    selected,
    spearman,
    summarize,
    top3_recovered,
)


def test_ranks_average_ties():
    assert ranks([3.0, 1.0, 2.0, 1.0]).tolist() == [4.0, 1.5, 3.0, 1.5]


def test_spearman_on_hand_made_numbers():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # one swap among 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2], [1, 2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_selection_and_top3():
    est = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    assert selected(est, {"a": 5.0, "b": 6.0, "c": 7.0, "d": 8.0}) is True
    meas = {"a": 6.0, "b": 7.0, "c": 5.0, "d": 8.0}  # measured fastest is c, estimated third
    assert selected(est, meas) is False
    assert top3_recovered(est, meas) is True
    assert top3_recovered(est, {"a": 6.0, "b": 7.0, "c": 8.0, "d": 5.0}) is False
    assert selected(est, {"a": 1.0}) is None  # one candidate measured: undefined
    assert selected(est, {"a": 5.0, "b": 5.0}) is True  # a tie in the measurement counts


def test_errors_and_summary():
    est = {"a": 1.1, "b": 1.8, "c": 3.0}
    meas = {"a": 1.0, "b": 2.0, "c": 3.0, "x": 9.0}
    errs = abs_pct_errors(est, meas)
    assert errs == pytest.approx({"a": 0.1, "b": 0.1, "c": 0.0})
    one = config_accuracy(est, meas)
    assert one.n_measured == 3 and one.selected is True and one.top3 is True and one.spearman == pytest.approx(1.0)
    two = config_accuracy({"a": 2.0, "b": 1.0, "c": 3.0}, {"a": 1.0, "b": 2.0, "c": 4.0})
    assert two.selected is False and two.spearman == pytest.approx(0.5)
    only = config_accuracy({"all-cpu": 1.0, "g": 0.5}, {"all-cpu": 0.8})
    s = summarize([one, two, only])
    assert s["configurations"] == 3
    assert s["selection_accuracy"] == pytest.approx(0.5) and s["selection_configurations"] == 2
    assert s["top3_recovery"] == pytest.approx(1.0)
    assert s["mean_spearman"] == pytest.approx(0.75) and s["spearman_configurations"] == 2
    pairs = [0.1, 0.1, 0.0, 1.0, 0.5, 0.25, 0.25]
    assert s["mape"] == pytest.approx(sum(pairs) / len(pairs)) and s["mape_pairs"] == 7
    assert summarize([])["mape"] is None
