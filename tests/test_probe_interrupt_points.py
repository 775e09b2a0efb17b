"""Probes stopped at random points never leak into the advice: afterwards plain
`cope advise` gives the analytic answer or the last complete profile's, never figures
from the interrupted run (issue 30). Stops come the ways the front ends stop a run: the
threading.Event that probe_then_price takes (Escape in the app) and a KeyboardInterrupt
(Ctrl-C, and SIGTERM, which the CLI raises as one); the last test sends a real SIGTERM
to a real `cope advise --fidelity combined` run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import replace

import pytest

from cope_tui.cli import Terminated
from cope_tui.service import pricing
from cope_tui.service.advice import plan
from cope_tui.service.request import build_request
from engine.core.progress import Cancelled
from engine.cost.cost_model import Fidelity
from probes.profile_cache import is_partial, partial_threads
from probes.runner import profile_key
from tests.test_probe_consistency import Scripted
from tests.test_service import FAST, FakeProber

CHOICES = FAST.with_(tokens=40)
SCALE = 5.0  # the interrupted run's figures, so any that leaked would move the ranking


def answer(advice):
    """What a person reads off the advice: the cost model and every candidate's time."""
    return advice.pricing.fidelity, tuple((e.candidate.id, e.tpot_s) for e in advice.rec.estimates)


class Stopping(Scripted):
    """A prober stopped at its `at`-th measurement (`how`: "event" sets `cancel`, which the
    run sees before the next one; "signal" raises as SIGTERM does in the CLI). `busy`: the
    2-thread CPU series fails its check the first time, so a stop can land in its re-measure."""

    def __init__(self, at: int | None, how: str = "event", cancel: threading.Event | None = None,
                 busy: bool = False, scale: float = SCALE):
        super().__init__(bad_passes=1 if busy else 0)
        self.at, self.how, self.cancel, self.scale = at, how, cancel, scale

    def measure(self, operator, key, share_s):  # type: ignore[no-untyped-def]
        if self.at is not None and len(self.calls) + 1 == self.at:
            if self.how == "signal":
                raise Terminated()
            self.cancel.set()
        m = super().measure(operator, key, share_s)
        return replace(m, median_s=m.median_s * self.scale, spread_s=m.spread_s * self.scale)


PRIORS = {
    # prior: (threads the complete earlier run measured at or None, whether the stopped run replaces it)
    "none": (None, False),
    "same threads": (2, True),  # --reprobe of a complete profile, stopped
    "other threads": (4, False),  # complete at 4, then a 2-thread run stopped
}


def _complete_earlier_run(threads: int | None, monkeypatch) -> None:
    if threads is not None:
        monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
        plan(CHOICES.with_(threads=threads, fidelity="combined", probe_budget_s=30))


def _stopped_run(prober: Stopping, reprobe: bool, monkeypatch) -> None:
    """The 2-thread combined run, stopped by `prober`: by its event as the app's probe
    worker runs it (probe_then_price), or by the signal as `cope advise` runs it."""
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: prober)
    choices = CHOICES.with_(threads=2, fidelity="combined", probe_budget_s=30, reprobe=reprobe)
    if prober.how == "signal":
        with pytest.raises(Terminated):
            plan(choices)
        return
    outcome = pricing.probe_then_price(build_request(choices), Fidelity.COMBINED, budget_s=30, reprobe=reprobe,
                                       cancel=prober.cancel)
    assert outcome.report.stopped == "cancelled" and outcome.pricing is None, "priced from a stopped run"
    with pytest.raises(Cancelled):  # the app's compute path: nothing ranked from it either
        pricing.choose_cost_model(build_request(choices), fidelity=Fidelity.COMBINED, probe_budget_s=30,
                                  reprobe=reprobe, cancel=prober.cancel)


def _phases_of_a_whole_run(prior: str, busy: bool, root, monkeypatch) -> list[str]:
    """What each measurement of the uninterrupted run is: "atomic", "again" (a series
    measured once more after failing its check) or "schedule" (a layer step)."""
    monkeypatch.setenv("COPE_CACHE_DIR", str(root))
    earlier, reprobe = PRIORS[prior]
    _complete_earlier_run(earlier, monkeypatch)
    whole = Stopping(None, busy=busy)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: whole)
    plan(CHOICES.with_(threads=2, fidelity="combined", probe_budget_s=30, reprobe=reprobe))
    seen, phases = set(), []
    for operator, key in whole.calls:
        ident = (operator, tuple(sorted(key.items())))
        phases.append("schedule" if operator == "schedule" else "again" if ident in seen else "atomic")
        seen.add(ident)
    return phases


def test_twenty_random_stops_leave_plain_advice_analytic_or_the_last_complete_profiles(tmp_path, monkeypatch):
    rng = random.Random(30)
    analytic = {t: answer(plan(CHOICES.with_(threads=t, fidelity="analytic"))) for t in (2, 3)}
    whole_runs: dict[tuple[str, bool], list[str]] = {}
    seen = set()
    for i in range(20):
        prior, how, busy = rng.choice(sorted(PRIORS)), rng.choice(("event", "signal")), rng.random() < 0.4
        if (prior, busy) not in whole_runs:
            whole_runs[prior, busy] = _phases_of_a_whole_run(prior, busy, tmp_path / f"whole-{len(whole_runs)}",
                                                             monkeypatch)
        phases = whole_runs[prior, busy]
        phase = rng.choice(sorted(set(phases)))
        points = [n for n, p in enumerate(phases, 1) if p == phase and (how == "signal" or n < len(phases))]
        at = rng.choice(points)  # an event at the last measurement would stop nothing
        seen.add((prior, how, phase))
        where = f"stop {i}: {prior}, {how} at measurement {at} of {len(phases)} ({phase})"

        monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / f"run-{i}"))
        earlier, reprobe = PRIORS[prior]
        _complete_earlier_run(earlier, monkeypatch)
        before = {t: answer(plan(CHOICES.with_(threads=t))) for t in (2, 3)}
        if earlier is None:
            assert before == analytic, where
        prober = Stopping(at, how, threading.Event(), busy)
        _stopped_run(prober, reprobe, monkeypatch)
        assert len(prober.calls) == at - (how == "signal"), where

        monkeypatch.setattr(pricing, "PROBER_FACTORY", None)  # plain advice never probes
        key = profile_key(build_request(CHOICES.with_(threads=2)))
        assert is_partial(key, threads=2) == (not reprobe), where  # a replacing run leaves the profile whole
        for threads in (2, 3):
            after = answer(plan(CHOICES.with_(threads=threads)))
            if prior == "other threads" and threads == 2:
                expected = analytic[2]  # its own count is the stopped run's: in doubt
            else:
                expected = before[threads]  # the last complete profile's (itself, or its nearest count), or analytic
            assert after == expected, f"{where}; {threads} threads"
    # Every way of stopping, every prior, and stops in each phase of a run.
    assert {(p, h) for p, h, _ in seen} == {(p, h) for p in PRIORS for h in ("event", "signal")}
    assert {phase for _, _, phase in seen} == {"atomic", "again", "schedule"}


def test_a_run_stopped_at_one_thread_count_leaves_the_others_trusted(tmp_path, monkeypatch):
    """The marker names the stopped run's thread count: a complete run at another count
    does not make the stopped one's figures complete, and keeps its own."""
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "count"))
    whole = Stopping(None)
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: whole)
    plan(CHOICES.with_(threads=4, fidelity="combined", probe_budget_s=30))
    atomic = len([c for c in whole.calls if c[0] != "schedule"])
    # Stopped at 4 threads after every atomic probe (inside the layer steps): the 4-thread
    # atomic series is whole, but it is an interrupted run's.
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    stopper = Stopping(atomic + 2, "signal")
    monkeypatch.setattr(pricing, "PROBER_FACTORY", lambda: stopper)
    with pytest.raises(Terminated):
        plan(CHOICES.with_(threads=4, fidelity="combined", probe_budget_s=30))
    assert stopper.calls[atomic][0] == "schedule"
    key = profile_key(build_request(CHOICES))
    assert partial_threads(key) == frozenset({4})
    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    two = plan(CHOICES.with_(threads=2, fidelity="combined", probe_budget_s=30))  # completes at 2
    assert two.pricing.fidelity is Fidelity.COMBINED and partial_threads(key) == frozenset({4})
    monkeypatch.setattr(pricing, "PROBER_FACTORY", None)
    at_4 = plan(CHOICES.with_(threads=4))
    assert at_4.pricing.fidelity is Fidelity.ANALYTIC and "interrupted probe run" in at_4.pricing.reason
    at_5 = plan(CHOICES.with_(threads=5))  # nearest trusted count: 2, not the stopped run's 4
    assert "measured at 2 threads, the nearest to 5" in at_5.pricing.note
    assert plan(CHOICES.with_(threads=2)).pricing.fidelity is Fidelity.COMBINED
    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    plan(CHOICES.with_(threads=4, fidelity="combined", probe_budget_s=30))  # resumed and completed
    assert partial_threads(key) is None


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is POSIX")
def test_sigterm_to_a_real_combined_run_leaves_plain_advise_analytic(tmp_path):
    """The issue's reproduction with the real prober: SIGTERM once `cope advise --fidelity
    combined` is measuring the CPU, then plain `cope advise` equals `--fidelity analytic`."""
    env = {**os.environ, "COPE_CACHE_DIR": str(tmp_path)}
    args = [sys.executable, "-m", "cope_tui.cli", "advise", "--json", "--tokens", "40", "--cpu", "desktop-ddr5",
            "--threads", "2"]
    run = subprocess.Popen([*args, "--fidelity", "combined"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        said = []
        for line in run.stderr:  # narration: "cope: probe 9/98: cpu_experts n=2 threads=2"
            said.append(line)
            if "cpu_experts n=3" in line:
                break
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143 and out == "", "".join(said) + err
    assert err.splitlines()[-1] == "cope: terminated"
    profiles = sorted(os.listdir(tmp_path / "profiles"))
    assert len(profiles) == 2 and profiles[1] == profiles[0] + ".partial"

    def advise(*more):
        done = subprocess.run([*args, *more], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    plain, analytic = advise(), advise("--fidelity", "analytic")
    assert plain["cost_model"]["fidelity"] == "analytic"
    assert plain["recommendation"] == analytic["recommendation"] and plain["candidates"] == analytic["candidates"]
