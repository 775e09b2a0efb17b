"""Hit rates of the Policy Matrix at given slots per layer: what `cope replay` reports.

For people who study caching policies: the same replays `advise` prices (engine.replays.replay,
every rule of DESIGN.md §4), without pricing, at the slots a person names. Advise's own
budget path gives the same figures for a VRAM budget (its estimates carry their replay).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.replays.hit_curves import lru_hit_curves
from engine.replays.policy import Eviction, Execution, policy_matrix
from engine.replays.replay import ReplaySetup, ReplayStats, replay_many
from engine.traces.popularity import PopularityProfile
from engine.traces.trace import RoutingTrace


@dataclass(frozen=True)
class CandidateHits:
    candidate_id: str
    slots_per_layer: np.ndarray  # int64 [L]: initial slots (a pool: its initial fill)
    hit_rate: float
    hit_rate_per_layer: tuple[float, ...]
    admissions: int
    prefetch_copies: int
    prefetch_used: int

    @staticmethod
    def of(stats: ReplayStats) -> "CandidateHits":
        summary = stats.summary()
        return CandidateHits(stats.candidate_id, stats.slots_per_layer, stats.hit_rate,
                             tuple(summary["hit_rate_per_layer"]), stats.admissions, stats.prefetch_copies,
                             stats.prefetch_used)

    def to_dict(self) -> dict:
        # by hand: `cope replay`'s row: slots_total before the per-layer slots, arrays as lists
        return {
            "candidate": self.candidate_id,
            "slots_total": int(self.slots_per_layer.sum()),
            "slots_per_layer": [int(s) for s in self.slots_per_layer],
            "hit_rate": self.hit_rate,
            "hit_rate_per_layer": list(self.hit_rate_per_layer),
            "admissions": self.admissions,
            "prefetch_copies": self.prefetch_copies,
            "prefetch_used": self.prefetch_used,
        }


def hit_rates_at_slots(
    trace: RoutingTrace, profile: RoutingTrace | PopularityProfile, slots_per_layer: int, *,
    prefetch_budget: int, admit_per_hits: np.ndarray | None, evictions: tuple[Eviction, ...] = (Eviction.LRU,),
) -> list[CandidateHits]:
    """Every matrix candidate replayed over `trace` with `slots_per_layer` x L slots (uniform:
    that many in every layer; nonuniform: the same total where the profile's curves say),
    the popularity and curves learnt on `profile`. `admit_per_hits`: ready-first's copy
    lane split (engine.cost.cost_model); None leaves ready-first out."""
    n_layers, n_experts = trace.n_layers, trace.meta.n_experts
    if not 0 <= slots_per_layer <= n_experts:
        raise CopeInputError(f"--slots: between 0 and the {n_experts} experts of a layer, got {slots_per_layer}")
    popularity = profile.popularity()
    curves = None if profile.expert_ids is None else lru_hit_curves(profile.expert_ids, popularity)  # None: an imatrix
    setup = ReplaySetup(popularity, slots_per_layer * n_layers, prefetch_budget, admit_per_hits, curves)
    candidates = policy_matrix(prefetch_available=trace.predicted_ids is not None, evictions=evictions)
    if admit_per_hits is None:
        candidates = [c for c in candidates if c.execution is not Execution.READY_FIRST]
    stats = replay_many(trace.expert_ids, trace.predicted_ids, [(c, setup) for c in candidates])
    return [CandidateHits.of(s) for s in stats]


def hit_rates_of_estimates(estimates) -> list[CandidateHits]:  # type: ignore[no-untyped-def]
    """The replays behind a Recommendation's estimates (a VRAM budget), in ranking order."""
    return [CandidateHits.of(e.stats) for e in estimates]


__all__ = ["CandidateHits", "hit_rates_at_slots", "hit_rates_of_estimates"]
