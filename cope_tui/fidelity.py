"""Choosing the cost model of `cope advise`: analytic, or measured from a profile.

Atomic and combined fidelities come from the cached profile of this hardware and
model, probing first when there is none (or when asked to probe again).
"""

from __future__ import annotations

import sys
from typing import Any

from engine.errors import CopeInputError

PROBER_FACTORY = None  # tests put a fake prober factory here


def choose_cost_model(
    request: Any, *, fidelity: str | None, probe_budget_s: float, reprobe: bool
) -> Any:
    """Analytic, or atomic/combined from the cached profile (probing when there is none)."""
    from engine.cost_model import AnalyticCostModel
    from probes.runner import cached_profile

    if probe_budget_s <= 0:
        raise CopeInputError(f"--probe-budget must be positive, got {probe_budget_s}")
    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    if fidelity is None:
        fidelity = "combined" if not reprobe and cached_profile(request) is not None else "analytic"
    if fidelity == "analytic":
        return analytic

    from probes.runner import ensure_profile, measured_cost_model

    def candidates():
        from engine.advise import advise

        rec = advise(request, analytic)
        return [(e.candidate.execution, e.stats) for e in rec.estimates]

    def say(done: int, total: int, label: str) -> None:
        print(f"cope: probe {done}/{total}: {label}", file=sys.stderr, flush=True)

    outcome = ensure_profile(
        request, fidelity, budget_s=probe_budget_s, reprobe=reprobe,
        candidates=candidates, make_prober=PROBER_FACTORY, progress=say,
    )
    if outcome.ran is not None:
        r = outcome.ran
        print(f"cope: probes: {r.measured} measured, {r.skipped} already cached, {r.left} left"
              + (f" ({r.stopped})" if r.stopped else "") + f" in {r.elapsed_s:.1f} s; profile {outcome.source}",
              file=sys.stderr)
    return _Described(measured_cost_model(request, fidelity, outcome.profile, outcome.source), outcome)


class _Described:
    """A measured cost model whose describe() also says where the profile came from."""

    def __init__(self, inner, outcome):  # type: ignore[no-untyped-def]
        self._inner = inner
        self._outcome = outcome
        self.fidelity = inner.fidelity

    def state_costs(self, *a, **kw):  # type: ignore[no-untyped-def]
        return self._inner.state_costs(*a, **kw)

    def shared_per_token_s(self) -> float:
        return self._inner.shared_per_token_s()

    def token_overhead_s(self) -> float:
        return self._inner.token_overhead_s()

    def describe(self) -> dict:
        doc = dict(self._inner.describe())
        counts: dict[str, int] = {}
        for m in self._outcome.profile.measurements:
            counts[m.basis] = counts.get(m.basis, 0) + 1
        doc["profile_source"] = self._outcome.source
        doc["profile_from_cache"] = self._outcome.ran is None
        doc["measured_count"] = counts.get("measured", 0)
        doc["preset_count"] = counts.get("preset", 0)
        doc["measured_plus_preset_count"] = counts.get("measured+preset", 0)
        doc["estimated_count"] = counts.get("estimated-from-atomic", 0) + len(getattr(self._inner, "_estimated", ()))
        return doc


