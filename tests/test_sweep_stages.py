"""The budget sweep a stage at a time (issue 30, part 6): what the one-pass curves count
comes first, the step-wise replays after; the last stage is `sweep_budgets`, and `only`
prices those candidates alone, with the figures they have in the whole sweep."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.advice.advise import sweep_budgets, sweep_in_stages
from engine.core.progress import Cancelled
from engine.hardware.memory import GIB
from engine.replays.policy import Kind
from engine.replays.residency import cache_rules
from tests.test_replay_equivalence import small_request

BUDGETS = [7 * GIB, 12 * GIB, 25 * GIB]  # the last holds every expert


def figures(rec):  # type: ignore[no-untyped-def]
    return [(e.candidate.id, e.tpot_s, e.vram_used_bytes, e.detail, e.stats.counts.tobytes()) for e in rec.estimates]


def test_the_last_stage_is_the_whole_sweep_and_the_first_needs_no_step_wise_replay():
    request, cost = small_request()
    stages = list(sweep_in_stages(request, cost, BUDGETS))
    whole = sweep_budgets(request, cost, BUDGETS)
    assert len(stages) > 2  # the one-pass stage, then the step-wise ones
    assert [figures(r) for r in stages[-1]] == [figures(r) for r in whole]
    k = request.model.top_k
    for rec in stages[0]:
        assert rec.estimates  # the chart's frame: the partitions and fixed residencies
        for e in rec.estimates:
            if e.candidate.kind is Kind.MATRIX:  # the others are whole layers, no cache
                assert cache_rules(e.candidate, e.stats.setup, k, request.trace.predicted_ids).static
    for before, after in zip(stages, stages[1:]):  # each stage adds candidates, keeps the others' figures
        for a, b in zip(before, after):
            kept = {f[0]: f for f in figures(b)}
            assert all(kept[f[0]] == f for f in figures(a))
        assert sum(len(r.estimates) for r in after) > sum(len(r.estimates) for r in before)
    assert len(stages[0][-1].estimates) == len(whole[-1].estimates)  # every expert fits: all one-pass


def test_only_prices_the_candidates_asked_for_as_the_whole_sweep_does():
    request, cost = small_request()
    whole = sweep_budgets(request, cost, BUDGETS)
    wanted = {whole[0].estimates[0].candidate.id, "partition-first"}
    wanted |= {e.candidate.id for e in whole[0].estimates if e.candidate.id.startswith("layer.ready-first")}
    *_, last = sweep_in_stages(request, cost, BUDGETS, only=wanted)
    for got, want in zip(last, whole):
        by_id = {f[0]: f for f in figures(want)}
        assert {f[0] for f in figures(got)} <= wanted
        assert all(by_id[f[0]] == f for f in figures(got))
        assert np.all(np.diff([e.tpot_s for e in got.estimates]) >= 0)


def test_progress_counts_what_was_priced_and_cancel_stops_between_stages():
    request, cost = small_request()
    seen: list[tuple[int, int]] = []
    stages = sweep_in_stages(request, cost, BUDGETS, progress=lambda d, t, label: seen.append((d, t)))
    first = next(stages)
    total = seen[-1][1]
    assert seen[-1][0] == sum(len(r.estimates) for r in first) < total
    list(stages)
    assert seen[-1] == (total, total) and all(t == total for _, t in seen)
    cancel = threading.Event()
    stages = sweep_in_stages(request, cost, BUDGETS, cancel=cancel)
    next(stages)
    cancel.set()
    with pytest.raises(Cancelled):
        next(stages)
