"""How far off an analytic figure may be: its regime's cross-validated error (issue 44).

The analytic cost model's constants are fitted on published llama.cpp and ik_llama.cpp decode
runs, and docs/accuracy.md judges them by leaving one source (one machine, one person's way
of measuring) out at a time: refit on the others, price its rows. What that gives, by regime
(where the command puts the routed experts), is the error a figure for a machine no fit has
seen carries. Every priced figure COPE shows from the analytic model comes with its regime's
band: the mean absolute percentage error of those held-out rows, their mean signed error
(positive: COPE predicts faster than published), and how many rows and sources it rests on.

The table is the record of one run of `python bench/published_cv.py` (date and commit in
CV_RUN), copied from docs/accuracy.md; a cost-model change that moves it reruns the check
(bench/regime_check.py) and updates both. Measured fidelities (atomic, combined, calibrated)
are not covered: they answer for this machine, not for the published ones, so their figures
carry no band (`band_for` says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.replays.policy import Kind

ALL_GPU = "all-GPU"
PARTIAL = "partial offload"
EXPERTS_ON_CPU = "experts on the CPU"
CPU_ONLY = "CPU-only"
REGIMES = (ALL_GPU, PARTIAL, EXPERTS_ON_CPU, CPU_ONLY)

# Where the table below comes from.
CV_RUN = "python bench/published_cv.py, leave one source out, 2026-12-08 (the DeltaNet state), 168 rows from 26 sources, mean absolute log ratio (docs/accuracy.md)"


@dataclass(frozen=True)
class ErrorBand:
    """One regime's leave-one-source-out error of the analytic model."""

    regime: str
    mape: float  # mean absolute percentage error of the held-out rows (0.10: 10%)
    signed_error: float  # mean of predicted / published - 1: positive when COPE is optimistic
    rows: int
    sources: int

    def bounds_tokens_per_s(self, tokens_per_s: float) -> tuple[float, float]:
        """The figure less and plus the regime's MAPE."""
        return tokens_per_s * (1 - self.mape), tokens_per_s * (1 + self.mape)

    def text(self) -> str:
        lean = "faster" if self.signed_error >= 0 else "slower"
        return (f"±{self.mape:.0%} (cross-validated on {self.rows} published {self.regime} runs from "
                f"{self.sources} sources; COPE {abs(self.signed_error):.1%} {lean} on average)")

    def to_dict(self, tokens_per_s: float | None) -> dict:
        low, high = self.bounds_tokens_per_s(tokens_per_s) if tokens_per_s else (None, None)
        return {"regime": self.regime, "cv_mape": self.mape, "cv_signed_error": self.signed_error,
                "cv_rows": self.rows, "cv_sources": self.sources, "tokens_per_s_low": low,
                "tokens_per_s_high": high, "basis": CV_RUN}


# Copied from docs/accuracy.md's run (CV_RUN): regime -> MAPE, mean signed error, rows, sources.
CV_BY_REGIME: dict[str, ErrorBand] = {
    ALL_GPU: ErrorBand(ALL_GPU, 0.091, 0.016, 24, 9),
    PARTIAL: ErrorBand(PARTIAL, 0.178, 0.091, 89, 12),
    EXPERTS_ON_CPU: ErrorBand(EXPERTS_ON_CPU, 0.114, 0.006, 31, 10),
    CPU_ONLY: ErrorBand(CPU_ONLY, 0.095, 0.004, 24, 8),
}


def placement_regime(expert_cpu_share: np.ndarray, *, has_gpu: bool, cpu_only: bool) -> str:
    """Where a placement puts the routed experts: all on the GPU, some on the CPU, all of them
    on the CPU beside a GPU, or no GPU at all (`expert_cpu_share`: each MoE layer's share of
    experts on the CPU)."""
    share = np.asarray(expert_cpu_share, dtype=float)
    if not has_gpu or cpu_only:
        return CPU_ONLY
    if not share.any():
        return ALL_GPU
    return EXPERTS_ON_CPU if bool((share == 1).all()) else PARTIAL


@dataclass(frozen=True)
class BandAnswer:
    """A figure's band, or why it has none."""

    band: ErrorBand | None
    why_none: str = ""

    def to_dict(self, tokens_per_s: float | None) -> dict:
        if self.band is None:
            return {"regime": None, "why_none": self.why_none}
        return self.band.to_dict(tokens_per_s)

    def text(self) -> str:
        return self.band.text() if self.band is not None else f"no cross-validated band: {self.why_none}"


def band_for(regime: str | None, fidelity: str) -> BandAnswer:
    """The band of a figure of `regime` priced at `fidelity` (None regime: a policy with no
    published run)."""
    if fidelity != "analytic":
        return BandAnswer(None, f"a {fidelity} figure is measured on this machine; the cross-validated bands are "
                                "the analytic model's on published machines")
    if regime is None:
        return BandAnswer(None, "no published run executes this policy (per-expert residency), so no held-out "
                                "figure judges it")
    band = CV_BY_REGIME[regime]
    if band.rows == 0:
        return BandAnswer(None, f"no published {regime} run was held out")
    return BandAnswer(band)


def candidate_regime(estimate) -> str | None:  # type: ignore[no-untyped-def]
    """The regime of one of COPE's candidates (engine/cost/estimate.py Estimate): its whole-layer
    placements are llama.cpp's own; a per-expert residency (the Policy Matrix) is no regime a
    published run measured (None)."""
    kind = estimate.candidate.kind
    if kind is Kind.MATRIX:
        return None
    if kind is Kind.ALL_GPU:
        return ALL_GPU
    if kind is Kind.ALL_CPU:
        return EXPERTS_ON_CPU
    cpu_layers = estimate.cpu_layers
    return placement_regime(np.asarray(cpu_layers, dtype=float), has_gpu=True, cpu_only=False)


def estimate_band(estimate) -> BandAnswer:  # type: ignore[no-untyped-def]
    """The band of one of COPE's candidate figures (its regime, at its fidelity)."""
    return band_for(candidate_regime(estimate), estimate.fidelity)


EXPERT_CACHE_UNJUDGED = ("no published run used llama.cpp's expert cache (--moe-cache-mib), so no held-out figure "
                         "judges its hit rate")


def command_band(regime: str | None, fidelity: str, *, expert_cache: bool = False) -> BandAnswer:
    """The band of a priced llama.cpp command; one that sets llama.cpp's expert cache has none
    at analytic fidelity: its speed rests on COPE's replay of the cache, which no published run checked."""
    if expert_cache and fidelity == "analytic":
        return BandAnswer(None, EXPERT_CACHE_UNJUDGED)
    return band_for(regime, fidelity)
