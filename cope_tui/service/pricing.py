"""Choosing the cost model a request is priced with: one policy for every front end.

- No fidelity asked for: calibrated when `cope calibrate` stored a calibration of this
  machine (the request plans for its CPU), else combined when the profile cache holds a
  complete profile of this hardware and model (every atomic probe measured), else
  analytic. Never probes.
- analytic asked for: analytic. calibrated asked for: this machine's calibration, else
  a one-line error saying to run `cope calibrate --gguf FILE` first.
- atomic or combined asked for: the cached profile when it is complete (and no reprobe),
  else probe now within the budget (resuming from the cache), then price with it.

Probing writes every measurement as it comes, so a cancelled or failed run keeps what
it measured; but its figures price nothing until a run at that thread count completes
(a cancelled run is not repriced from, and plain advice does not use them, not even as
the nearest thread count's stand-in). A probe series that failed its consistency check
twice is refused (probes/runner.py): pricing is then analytic for it, and the ranking's
notes say which figure was refused and why. Imports torch only when it probes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from cope_tui.service.calibrate import calibration_for
from engine.advice.advise import advise
from engine.core.errors import CopeInputError
from engine.core.progress import Cancelled, Progress
from engine.cost.cost_model import CostModel, Fidelity, ProfileUse
from engine.cost.cost_models import build_cost_model
from engine.cost.request import AdviseRequest
from engine.profiles.profile import Profile
from engine.profiles.profile_threads import at_threads, complete_thread_counts, nearest_thread_count
from engine.replays.policy import Execution
from probes.profile_cache import is_partial, profile_path
from probes.runner import (
    cached_profile,
    cached_profile_complete,
    cached_profile_doubts,
    cached_profile_partial,
    ensure_profile,
    profile_key,
    trusted_at,
)

PROBER_FACTORY = None  # tests put a fake prober factory here: () -> Prober


@dataclass(frozen=True)
class ProbeReport:
    """What one probing run did (nothing when the cache had what was needed)."""

    measured: int = 0
    skipped: int = 0
    left: int = 0
    stopped: str | None = None  # "budget", "cancelled", "refused", "failed" or None
    elapsed_s: float = 0.0
    resumed: int = 0  # measurements an interrupted earlier run had left
    refused: tuple[str, ...] = ()  # a line for each probe series refused (inconsistent twice)

    def summary(self) -> str:
        stopped = f" ({self.stopped})" if self.stopped else ""
        resumed = f"resumed an interrupted run ({self.resumed} measurements kept): " if self.resumed else ""
        refused = "".join(f"; {line}" for line in self.refused)
        return (f"{resumed}{self.measured} measured, {self.skipped} already cached, {self.left} left{stopped} "
                f"in {self.elapsed_s:.1f} s{refused}")


@dataclass(frozen=True)
class Pricing:
    """The cost model a request is priced with, and how it was chosen."""

    cost_model: CostModel
    fidelity: Fidelity
    reason: str  # why this fidelity, for the notes
    profile_source: str | None = None  # the profile file of a measured fidelity
    probed: ProbeReport | None = None  # None: nothing was probed for it
    note: str | None = None  # said beside the ranking (a stand-in profile)


@dataclass(frozen=True)
class ProbeOutcome:
    """A probing run the app started: the pricing it allows, or why there is none."""

    fidelity: Fidelity
    report: ProbeReport
    pricing: Pricing | None  # None: too little was measured to price with
    source: str = ""  # the profile file
    error: str = ""


def analytic(request: AdviseRequest) -> Pricing:
    return Pricing(build_cost_model(Fidelity.ANALYTIC, request), Fidelity.ANALYTIC, "analytic")


def choose_cost_model(
    request: AdviseRequest,
    *,
    fidelity: Fidelity | None = None,
    probe_budget_s: float = 60.0,
    reprobe: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    kernels: str = "llama.cpp",
) -> Pricing:
    """The cost model for `request` by the policy above; raises CopeInputError when a
    measured fidelity cannot price (the probes did not finish the atomic operators).
    `kernels`: whose CPU kernels a measured fidelity prices (engine.cost.cost_models.build_cost_model)."""
    if probe_budget_s <= 0:
        raise CopeInputError(f"--probe-budget must be positive, got {probe_budget_s}")
    if fidelity is None:
        if reprobe:
            return analytic(request)
        return _default_pricing(request)
    wanted = fidelity
    if wanted is Fidelity.CALIBRATED:
        return _required_calibration(request)
    if not wanted.needs_profile:
        return analytic(request)
    outcome = probe_then_price(request, wanted, budget_s=probe_budget_s, reprobe=reprobe,
                               progress=progress, cancel=cancel, kernels=kernels)
    if outcome.report.stopped == "cancelled":
        raise Cancelled()  # what was measured is kept; nothing is priced from it
    if outcome.pricing is None and outcome.report.refused:
        said = "; ".join(outcome.report.refused)
        return Pricing(build_cost_model(Fidelity.ANALYTIC, request), Fidelity.ANALYTIC, f"analytic: {said}",
                       outcome.source, outcome.report, note=said)
    if outcome.pricing is None:
        raise CopeInputError(f"the {wanted.value} profile is incomplete ({outcome.error}); "
                             "probe again with a larger --probe-budget", path=outcome.source or None)
    return outcome.pricing


NO_CALIBRATION = "--fidelity calibrated: no calibration of this machine; run cope calibrate --gguf FILE first"


def calibrated_pricing(request: AdviseRequest) -> tuple[Pricing | None, tuple[str, ...]]:
    """Priced with this machine's calibration (`cope calibrate`), or None when there is
    none; and a line for each calibration file that could not be used (set aside)."""
    found = calibration_for(request)
    cal = found.calibration
    if cal is None:
        return None, found.problems
    use = ProfileUse(str(found.path), from_cache=True)
    model = build_cost_model(Fidelity.CALIBRATED, request, use=use, calibration=cal)
    of = "" if found.match == "model and quantization" else \
        f" of {cal.model_id} {cal.quant} (none of this model and quantization)"
    reason = f"calibrated: this machine's calibration{of}, {cal.date}, from {found.path}"
    return Pricing(model, Fidelity.CALIBRATED, "; ".join((reason, *found.problems)), str(found.path)), found.problems


def _default_pricing(request: AdviseRequest) -> Pricing:
    calibrated, problems = calibrated_pricing(request)
    if calibrated is not None:
        return calibrated
    pricing = cached_pricing(request)
    return replace(pricing, reason="; ".join((pricing.reason, *problems))) if problems else pricing


def _required_calibration(request: AdviseRequest) -> Pricing:
    calibrated, problems = calibrated_pricing(request)
    if calibrated is None:
        raise CopeInputError("; ".join((NO_CALIBRATION, *problems)))
    return calibrated


def cached_pricing(request: AdviseRequest) -> Pricing:
    """Combined from a complete cached profile, else analytic; never probes, and a
    damaged cache entry falls back to analytic with the reason."""
    try:
        found = cached_profile_complete(request)
    except (OSError, ValueError, CopeInputError) as exc:
        return Pricing(build_cost_model(Fidelity.ANALYTIC, request), Fidelity.ANALYTIC,
                       f"analytic: the cached profile could not be read ({exc})")
    if found is None:
        return _without_complete_profile(request)
    profile, source = found
    return _priced(request, Fidelity.COMBINED, profile, source, None,
                   "combined: a complete cached profile of this machine and model")


def _without_complete_profile(request: AdviseRequest) -> Pricing:
    """No complete, trusted profile at the request's threads: the nearest trusted thread
    count stands in, else analytic; the reason (and, for a refused series, the note) says why."""
    try:
        partial = cached_profile_partial(request)
        doubts = () if partial else cached_profile_doubts(request)
    except (OSError, ValueError, CopeInputError):
        partial, doubts = False, ()
    if partial:
        why = "the cached profile is an interrupted probe run's partial work (--fidelity combined resumes it)"
    else:
        why = "; ".join(doubts) or "no complete cached profile of this machine and model"
    # An interrupted run's figures are never a stand-in either: what it measured may be
    # what made someone stop it (a busy machine), and the run is not done.
    nearest = None if partial else _nearest_threads(request)
    said = "; ".join(doubts) or None
    if nearest is None:
        return Pricing(build_cost_model(Fidelity.ANALYTIC, request), Fidelity.ANALYTIC, f"analytic: {why}", note=said)
    if said is None:
        return nearest
    return replace(nearest, reason=f"{nearest.reason}; {said}", note=f"{said}; {nearest.note}")


def _nearest_threads(request: AdviseRequest) -> Pricing | None:
    """Combined from the cached profile at the nearest thread count it has complete and
    trusted (the threads changed: never probe unasked), or None. A count an interrupted
    run left partial, or whose series fail their check, never stands in."""
    try:
        profile = cached_profile(request)
        if profile is None:
            return None
        k, key = request.model.top_k, profile_key(request)
        counts = [t for t in complete_thread_counts(profile, k) if not is_partial(key, None, t) and trusted_at(profile, k, t)]
        nearest = nearest_thread_count(counts, request.threads)
        if nearest is None:
            return None
        said = (f"priced with the cached profile measured at {nearest} threads, the nearest to {request.threads} "
                f"(probe to measure at {request.threads})")
        priced = _priced(request, Fidelity.COMBINED, at_threads(profile, nearest, request.threads),
                         str(profile_path(profile_key(request))), None, f"combined: {said}")
        return replace(priced, note=said)
    except (OSError, ValueError, CopeInputError):
        return None


def probe_then_price(
    request: AdviseRequest,
    fidelity: Fidelity,
    *,
    budget_s: float,
    reprobe: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    kernels: str = "llama.cpp",
) -> ProbeOutcome:
    """Probe what `fidelity` needs (resuming the cache), then price with it; never raises
    for an incomplete profile (the outcome says why it has no pricing)."""
    def candidates():  # the states worth probing: those the analytic ranking reaches
        rec = advise(request, analytic(request).cost_model)
        return [(e.candidate.execution, e.stats) for e in rec.estimates]

    outcome = ensure_profile(request, fidelity, budget_s=budget_s, reprobe=reprobe, candidates=candidates,
                             make_prober=PROBER_FACTORY, cancel=cancel, progress=progress)
    ran = outcome.ran
    report = ProbeReport() if ran is None else ProbeReport(ran.measured, ran.skipped, ran.left, ran.stopped,
                                                           ran.elapsed_s, ran.resumed, ran.refused)
    if report.stopped == "cancelled":  # an interrupted run prices nothing until it completes
        return ProbeOutcome(fidelity, report, None, outcome.source,
                            "cancelled: its figures are used once a run completes them (the next run resumes)")
    if report.refused:  # the profile lacks the refused series: nothing to price them with
        return ProbeOutcome(fidelity, report, None, outcome.source, "; ".join(report.refused))
    reason = f"{fidelity.value}: " + ("the cached profile" if ran is None else "probed now")
    try:
        pricing = _priced(request, fidelity, outcome.profile, outcome.source, report if ran else None, reason,
                          kernels=kernels)
    except CopeInputError as exc:
        return ProbeOutcome(fidelity, report, None, outcome.source, str(exc))
    return ProbeOutcome(fidelity, report, pricing, outcome.source)


def _priced(request: AdviseRequest, fidelity: Fidelity, profile: Profile, source: str,
            probed: ProbeReport | None, reason: str, *, kernels: str = "llama.cpp") -> Pricing:
    use = ProfileUse(source, from_cache=probed is None)
    model = build_cost_model(fidelity, request, profile, use, kernels=kernels)
    k = request.model.top_k
    model.state_costs(Execution.SEQUENTIAL, request.threads, k, k)  # fail here, not while pricing
    return Pricing(model, fidelity, reason, source, probed)
