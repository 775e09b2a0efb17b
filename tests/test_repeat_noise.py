"""The all-on-CPU candidate's executions at one thread count are repeats of one
measurement (one per VRAM budget): validate reports their spread, and says when that
spread alone exceeds the 10% target."""

from __future__ import annotations

import pytest

from cope_tui.commands.validate import render_repeats
from engine.advice.repeat_noise import noise_verdict, repeat_groups


def row(threads: int, measured_ms: float, fidelity: str = "combined", estimated_ms: float = 222.78) -> dict:
    return {"model": "qwen3-30b-a3b", "threads": threads, "fidelity": fidelity,
            "estimated_tpot_s": estimated_ms / 1e3, "measured_tpot_s": measured_ms / 1e3}


# A run on a shared 2-core machine (cope validate --threads 1,2 --fidelity combined,
# budgets 8/12/16/24 GiB): the same candidate executed 180.30 to 233.35 ms at 1 thread.
NOISY = [row(1, m) for m in (180.30, 198.88, 232.88, 233.35)] + \
        [row(2, m, estimated_ms=146.94) for m in (143.09, 124.34, 121.20, 137.84)]


def test_groups_pool_the_budgets_of_one_thread_count():
    groups = {g.threads: g for g in repeat_groups(NOISY)}
    assert set(groups) == {1, 2}
    one = groups[1]
    assert one.n_executions == 4
    assert one.median_tpot_s == pytest.approx((198.88 + 232.88) / 2e3)
    assert one.spread == pytest.approx((233.35 - 180.30) / ((198.88 + 232.88) / 2))
    assert one.error_to_median == pytest.approx((222.78 - 215.88) / 215.88)


def test_a_single_execution_is_no_repeat_and_fidelities_stay_apart():
    rows = [row(1, 200.0, "analytic"), row(1, 210.0, "analytic"), row(1, 200.0, "combined"), row(2, 150.0)]
    groups = repeat_groups(rows)
    assert [(g.threads, g.fidelity, g.n_executions) for g in groups] == [(1, "analytic", 2)]


def test_the_verdict_names_the_worst_spread_only_when_it_exceeds_the_target():
    verdict = noise_verdict(repeat_groups(NOISY), 0.10)
    assert verdict is not None and "1 thread," in verdict and "spread 25%" in verdict and "180.3 to 233.3" in verdict
    quiet = [row(1, m) for m in (235.33, 244.03, 247.66, 243.56)]
    assert noise_verdict(repeat_groups(quiet), 0.10) is None


def test_the_text_report_shows_each_group_and_the_verdict():
    lines = render_repeats(NOISY, 0.10)
    assert len(lines) == 3
    assert "4 identical executions, median 215.88 ms (180.30 to 233.35, spread 25%); est 222.78 ms +3.2%" in lines[0]
    assert "threads 2" in lines[1] and "median 131.09 ms" in lines[1] and "+12.1%" in lines[1]
    assert "cannot show the target met or missed" in lines[2]
