"""Probe series are checked for consistency (more experts never faster, repeats not
spread wide), measured once more when they fail, and refused when they fail again, with
a note that reaches `cope advise` (issue 30)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cope_tui import cli
from cope_tui.service import pricing
from cope_tui.service.advice import plan
from cope_tui.service.request import build_request
from engine.cost.cost_model import Fidelity
from engine.profiles.probe_consistency import (
    MONOTONE_TOLERANCE,
    SPREAD_TOLERANCE,
    SeriesRef,
    check_profile,
    check_series,
    refusal_note,
)
from engine.profiles.profile import Measurement, Refusal
from engine.profiles.profile_io import load_profile, save_profile
from probes.profile_cache import load_cached, profile_path
from probes.runner import cached_profile_complete, profile_key
from tests.test_service import FAST, FakeProber

MS = 1e-3
CPU2 = SeriesRef("cpu_experts", (("threads", 2),))
# The issue's case: cpu_experts at 2 threads, the machine busy for a moment (2, 6 and 8 as
# observed; the other points as a quiet machine measures them).
BUSY = {1: 4.0, 2: 31.9, 3: 7.5, 4: 9.4, 5: 11.3, 6: 300.9, 7: 14.5, 8: 14.2}
QUIET = {n: 1.8 * n + 0.4 for n in range(1, 9)}


def series(figures: dict[int, float], threads: int = 2, spread: float = 0.1, basis: str = "measured"):
    return [Measurement("cpu_experts", {"n": n, "threads": threads}, ms * MS, spread * ms * MS, 20, basis=basis)
            for n, ms in figures.items()]


# --- the pure check --------------------------------------------------------------------


def test_the_busy_series_of_the_issue_fails_on_its_worst_inversion_and_its_note_names_the_figures():
    first = check_series(CPU2, series(BUSY))
    assert not first.ok and first.kind == "monotone" and first.at == (6, 8)
    assert first.problem == "6 experts measured 300.9 ms, slower than 8 experts at 14.2 ms"
    assert refusal_note(first, check_series(CPU2, series(BUSY))) == (
        "cpu_experts at 2 threads refused: 6 experts measured 300.9 ms, slower than 8 experts at 14.2 ms, twice")
    other = check_series(CPU2, series({**QUIET, 3: 40.0}))
    assert refusal_note(first, other) == ("cpu_experts at 2 threads refused: 3 experts measured 40.0 ms, slower "
                                          "than 4 experts at 7.6 ms (the first time: 6 experts measured 300.9 ms, "
                                          "slower than 8 experts at 14.2 ms)")


def test_a_quiet_series_passes_and_the_tolerances_are_where_they_are_stated():
    assert check_series(CPU2, series(QUIET)).ok
    # This machine's quiet 2-thread run (ms, IQR over the median up to 0.4) passes.
    measured = {1: 0.232, 2: 0.447, 3: 0.674, 4: 0.888, 5: 1.137, 6: 1.400, 7: 1.657, 8: 1.796}
    assert check_series(CPU2, series(measured, spread=0.4)).ok
    within = 1 + MONOTONE_TOLERANCE * 0.9
    assert check_series(CPU2, series({**QUIET, 7: QUIET[8] * within})).ok
    past = check_series(CPU2, series({**QUIET, 7: QUIET[8] * (1 + MONOTONE_TOLERANCE * 1.1)}))
    assert past.kind == "monotone" and past.at == (7, 8)
    assert check_series(CPU2, series(QUIET, spread=SPREAD_TOLERANCE * 0.95)).ok
    wide = check_series(CPU2, series(QUIET, spread=SPREAD_TOLERANCE * 1.05))
    assert wide.kind == "spread" and wide.at == (1,) and "1 expert measured 2.2 ms with its repeats spread" in wide.problem


def test_preset_figures_and_single_operators_are_checked_as_they_should_be():
    assert check_series(CPU2, series(BUSY, basis="preset")).ok  # the analytic model's: not a measurement
    sync = SeriesRef("sync")
    assert check_series(sync, [Measurement("sync", {}, 20e-6, 5e-6, 100)]).ok
    noisy = check_series(sync, [Measurement("sync", {}, 20e-6, 30e-6, 100)])
    assert noisy.kind == "spread" and noisy.problem.startswith("it measured 20.0 us with its repeats spread over 30.0 us")
    assert noisy.series.label == "sync"


# --- the runner: measured once more, then refused ------------------------------------


class Scripted(FakeProber):
    """FakeProber, with cpu_experts at the `bad` thread count as the busy series for its
    first `bad_passes` passes over that series."""

    def __init__(self, bad_passes: int = 2, bad_threads: int = 2):
        self.bad_passes, self.bad_threads = bad_passes, bad_threads
        self.passes: dict[int, int] = {}
        self.calls: list[tuple[str, dict]] = []

    def measure(self, operator, key, share_s):  # type: ignore[no-untyped-def]
        self.calls.append((operator, dict(key)))
        if operator == "cpu_experts" and key["threads"] == self.bad_threads:
            n = key["n"]
            seen = self.passes[n] = self.passes.get(n, 0) + 1
            if seen <= self.bad_passes and n in BUSY:
                return Measurement(operator, key, BUSY[n] * MS, 0.1 * BUSY[n] * MS, 5)
        return super().measure(operator, key, share_s)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


NOTE = "cpu_experts at 2 threads refused: 6 experts measured 300.9 ms, slower than 8 experts at 14.2 ms, twice"


def test_a_series_inconsistent_twice_is_refused_priced_analytic_and_said_in_text_and_json(cache, monkeypatch, capsys):
    prober = Scripted(bad_passes=2)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: prober)
    advice = plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    cpu_calls = [c for c in prober.calls if c[0] == "cpu_experts"]
    assert len(cpu_calls) == 16  # the series, then the whole series once more
    assert not any(op == "schedule" for op, _ in prober.calls)  # no layer steps from an unsteady machine
    assert advice.pricing.fidelity is Fidelity.ANALYTIC and advice.pricing.note == NOTE
    assert advice.pricing.probed.stopped == "refused" and advice.pricing.probed.refused == (NOTE,)
    assert NOTE in advice.rec.notes
    analytic = plan(FAST.with_(fidelity="analytic"))
    assert [e.tpot_s for e in advice.rec.estimates] == [e.tpot_s for e in analytic.rec.estimates]

    # The refusal is kept in the profile, the figures are not.
    request = build_request(FAST)
    stored = load_cached(profile_key(request))
    assert stored.refused == (Refusal("cpu_experts", {"threads": 2}, NOTE),)
    assert not stored.of("cpu_experts") and cached_profile_complete(request) is None

    # Plain advice afterwards: analytic, and says which figure was refused and why.
    args = ["advise", "--tokens", "60", "--cpu", "desktop-ddr5", "--threads", "2"]
    monkeypatch.setattr(pricing, "PROBER_FACTORY", None)  # never probes
    assert cli.main([*args, "--json"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"]["fidelity"] == "analytic" and NOTE in doc["notes"]
    assert cli.main(args) == cli.EXIT_OK
    assert f"  - {NOTE}" in capsys.readouterr().out.splitlines()


def test_a_series_that_passes_when_measured_again_is_used_with_its_second_figures(cache, monkeypatch):
    prober = Scripted(bad_passes=1)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: prober)
    advice = plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    assert advice.pricing.fidelity is Fidelity.COMBINED and advice.pricing.note is None
    assert advice.pricing.probed.refused == () and advice.pricing.probed.stopped is None
    stored = load_cached(profile_key(build_request(FAST)))
    assert stored.refused == () and stored.find("cpu_experts", {"n": 6, "threads": 2}).median_s < 10 * MS
    assert any(op == "schedule" for op, _ in prober.calls)


def test_the_next_probe_run_measures_a_refused_series_again_and_clears_the_refusal(cache, monkeypatch):
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: Scripted(bad_passes=2))
    plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    quiet = Scripted(bad_passes=0)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: quiet)
    again = plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    assert {op for op, _ in quiet.calls} == {"cpu_experts", "schedule"}  # only what the refusal left out
    assert again.pricing.fidelity is Fidelity.COMBINED and again.pricing.note is None
    assert load_cached(profile_key(build_request(FAST))).refused == ()
    assert plan(FAST).pricing.fidelity is Fidelity.COMBINED


def test_a_cached_profile_with_an_inconsistent_series_is_not_trusted_and_is_measured_again(cache, monkeypatch):
    """A profile measured before the check (or edited) whose series fails it: plain advice
    is analytic and says why; a measured fidelity measures that series again."""
    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    request = build_request(FAST)
    plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    path = profile_path(profile_key(request))
    good = load_profile(path)
    busy = good.merged(series(BUSY))
    save_profile(busy, path)
    assert cached_profile_complete(request) is None
    advice = plan(FAST)
    assert advice.pricing.fidelity is Fidelity.ANALYTIC
    assert advice.pricing.note.startswith("cpu_experts at 2 threads refused: 6 experts measured 300.9 ms, slower "
                                          "than 8 experts at 14.2 ms (in the cached profile")
    assert any(n == advice.pricing.note for n in advice.rec.notes)
    # Five threads: the 2-thread profile is not the nearest stand-in either.
    assert plan(FAST.with_(threads=5)).pricing.fidelity is Fidelity.ANALYTIC

    quiet = Scripted(bad_passes=0)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: quiet)
    redone = plan(FAST.with_(fidelity="combined", probe_budget_s=30))
    assert [c[1]["n"] for c in quiet.calls] == list(range(1, 9))  # the failing series, nothing else
    assert redone.pricing.fidelity is Fidelity.COMBINED
    assert plan(FAST).pricing.fidelity is Fidelity.COMBINED


def test_a_refusal_survives_the_profile_file_and_a_profile_without_one_is_written_as_before(tmp_path):
    from tests.test_profile import profile

    plain = profile()
    save_profile(plain, tmp_path / "a.json")
    assert "refused" not in json.loads((tmp_path / "a.json").read_text())
    refused = plain.refusing(Refusal("cpu_experts", {"threads": 8}, "cpu_experts at 8 threads refused: why"))
    assert not refused.of("cpu_experts") and len(refused.measurements) == len(plain.measurements) - 1
    save_profile(refused, tmp_path / "b.json")
    back = load_profile(tmp_path / "b.json")
    assert back == refused and back.merged([]).refused == refused.refused
    assert back.accepting("cpu_experts", {"threads": 8}).refused == ()
    doc = json.loads((tmp_path / "b.json").read_text())
    doc["refused"][0]["note"] = 3
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(Exception, match=r"refused\[0\]\.note"):
        load_profile(tmp_path / "c.json")


def test_check_profile_names_only_the_failing_series():
    from tests.test_profile import profile

    p = profile(ms=[*series(QUIET, threads=4), *series(BUSY, threads=2)])
    failing = check_profile(p)
    assert [v.series for v in failing] == [CPU2]
    assert replace(failing[0], problem="").ok
