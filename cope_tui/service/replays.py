"""`cope replay`'s job: hit rates per candidate, at given slots per layer or for a VRAM
budget, over any supported trace (the plan flags' --trace and --profile-trace)."""

from __future__ import annotations

from dataclasses import dataclass

from cope_tui.options import PlanChoices
from cope_tui.service.advice import plan
from cope_tui.service.pricing import choose_cost_model
from cope_tui.service.request import build_request
from engine.core.records import record_dict
from engine.hardware.memory import GIB
from engine.replays.hit_rates import CandidateHits, hit_rates_at_slots, hit_rates_of_estimates
from engine.replays.policy import Execution


@dataclass(frozen=True)
class ReplayReport:
    basis: str  # what the slots come from, as a person reads it
    trace: dict  # the replayed trace's description
    n_tokens: int
    rows: tuple[CandidateHits, ...]
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        return record_dict(self, names={"n_tokens": "tokens", "rows": "candidates"})


def replay_report(choices: PlanChoices, slots_per_layer: int | None = None) -> ReplayReport:
    """At `slots_per_layer` (every matrix candidate, the same total for uniform and
    nonuniform), else at the plan's VRAM budget (every candidate advise ranks, its
    slots from the memory plan, in ranking order)."""
    if slots_per_layer is None:
        advice = plan(choices)
        request, rec = advice.request, advice.rec
        rows = tuple(hit_rates_of_estimates(rec.estimates))
        basis = f"VRAM budget {request.vram_budget_bytes / GIB:g} GiB (slots from the memory plan)"
        return ReplayReport(basis, request.trace.describe(), request.trace.n_tokens, rows, rec.notes)
    request = build_request(choices)
    pricing = choose_cost_model(request, fidelity=choices.fidelity, probe_budget_s=choices.probe_budget_s,
                                reprobe=choices.reprobe)
    k = request.model.top_k
    prefetch_budget = k if request.prefetch_budget is None else request.prefetch_budget
    split = pricing.cost_model.state_costs(Execution.READY_FIRST, request.threads, k, prefetch_budget).copied
    rows = tuple(hit_rates_at_slots(request.trace, request.profile, slots_per_layer,
                                    prefetch_budget=prefetch_budget, admit_per_hits=split,
                                    evictions=request.evictions))
    notes = list(request.notes)
    notes.append(f"ready-first copies the misses its {pricing.fidelity.value} cost model sends to the copy lane")
    if request.trace.predicted_ids is None:
        notes.append("the trace has no next-layer predictions: mutable caches run without prefetch")
    basis = f"{slots_per_layer} slots per layer ({slots_per_layer * request.trace.n_layers} in all)"
    return ReplayReport(basis, request.trace.describe(), request.trace.n_tokens, rows, tuple(notes))
