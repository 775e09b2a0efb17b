"""A profile that knows how often each expert was routed, but not in which order.

A RoutingTrace is token by token; some sources give only counts per layer and expert
(llama.cpp's importance matrix, engine/traces/imatrix.py). `PopularityProfile` stands where the
advice wants a profile trace (`AdviseRequest.profile`): it answers `popularity()` and the
fit check (`engine.traces.check_trace_fits_model` reads meta, top_k), and its
`expert_ids` is None, so what needs a routing order falls back to the popularity:
mutable caches allocate by the popularity curve, as fixed residency does
(engine/replays/residency.py: allocate_slots with curves None).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.traces.trace import RoutingTrace, TraceMeta

# What such a profile says and what it cannot, in every output that describes it.
REAL_PART = "per-layer expert popularity (routed-token counts)"
MISSING_PART = "order and timing of routing (which experts a token takes together, which tokens follow which)"


@dataclass(frozen=True)
class PopularityProfile:
    counts: np.ndarray  # int64 [L, E]: tokens routed to each expert of each MoE layer
    meta: TraceMeta  # origin "imported"; source: the file; recorded_with: how it was counted
    top_k: int  # experts a token takes in each layer
    label: str  # how outputs name it ("the imatrix X (dataset D, 12 chunks of 512 tokens)")

    def __post_init__(self) -> None:
        c = np.array(self.counts, dtype=np.int64)
        where = self.meta.source
        if c.ndim != 2 or c.shape != (len(self.meta.moe_blocks), self.meta.n_experts):
            raise CopeInputError(f"popularity is {c.shape}, expected [{len(self.meta.moe_blocks)} layers, "
                                 f"{self.meta.n_experts} experts]", path=where)
        if np.any(c < 0):
            raise CopeInputError("a negative routing count", path=where)
        if np.any(c.sum(axis=1) <= 0):
            layer = int(np.flatnonzero(c.sum(axis=1) <= 0)[0])
            raise CopeInputError(f"MoE block {self.meta.moe_blocks[layer]} has no routed token", path=where)
        c.setflags(write=False)
        object.__setattr__(self, "counts", c)

    # The attributes of a RoutingTrace the advice reads of a profile.
    expert_ids = None
    predicted_ids = None
    weights = None

    @property
    def n_layers(self) -> int:
        return int(self.counts.shape[0])

    @property
    def n_tokens(self) -> int:
        """Tokens counted: a layer's routed entries over k (the largest layer's, should they differ)."""
        return int(self.counts.sum(axis=1).max() // max(self.top_k, 1))

    @property
    def n_sequences(self) -> int:
        return 1

    def popularity(self) -> np.ndarray:
        return self.counts

    def describe(self) -> dict:
        return {
            **self.meta.to_dict(),
            "tokens": self.n_tokens,
            "layers": self.n_layers,
            "top_k": self.top_k,
            "sequences": None,
            "has_router_weights": False,
            "has_predictions": False,
            "has_order": False,
            "label": self.label,
            "real": REAL_PART,
            "not_in_it": MISSING_PART,
        }


Profile = RoutingTrace | PopularityProfile


def profile_words(profile: Profile) -> str:
    """How a line of text names where the popularity came from."""
    if isinstance(profile, PopularityProfile):
        return f"popularity from {profile.label}, {profile.n_tokens} tokens (counts only, no routing order)"
    return f"popularity from {profile.n_tokens} profile tokens"


def profile_source(profile: Profile) -> str:
    """What exported side files (the fork's profile CSV, kt-kernel's counts) say they pin."""
    if isinstance(profile, PopularityProfile):
        return f"{profile.label}, {profile.n_tokens} tokens"
    return ("SYNTHETIC routing" if profile.meta.synthetic else profile.meta.source) + f", {profile.n_tokens} tokens"


__all__ = ["MISSING_PART", "REAL_PART", "PopularityProfile", "Profile", "profile_source", "profile_words"]
