"""How well estimated TPOT predicts measured TPOT (DESIGN.md §6). Pure functions.

A configuration is (model, platform, CPU threads, VRAM budget); in each, some
candidates have an estimate and a measurement (TPOT in seconds, keyed by candidate id).
Only candidates with both count. Per configuration:
- selected: the estimated fastest is the measured fastest (ties in the measurement
  count as a match), defined when at least 2 candidates were measured;
- top-3: the measured fastest is among the 3 fastest estimates (same condition);
- Spearman rank correlation of estimated and measured TPOT (average ranks for ties),
  defined when at least 3 candidates were measured and neither side is constant;
- absolute percentage errors |estimated - measured| / measured.
Overall: the share of configurations selected / recovered (over those where defined),
MAPE over every pair, and the mean Spearman (over those where defined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.core.records import record_dict


def _common(estimated: Mapping[str, float], measured: Mapping[str, float]) -> list[str]:
    return sorted(c for c in estimated if c in measured and measured[c] is not None and estimated[c] is not None)


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties given their average rank."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    out = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rho (Pearson correlation of the ranks); None with under 3 points or a
    constant side."""
    if len(a) != len(b):
        raise ValueError("spearman: the two sides differ in length")
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(np.sqrt((ra @ ra) * (rb @ rb)))
    return None if den == 0 else float(ra @ rb / den)


def selected(estimated: Mapping[str, float], measured: Mapping[str, float]) -> bool | None:
    ids = _common(estimated, measured)
    if len(ids) < 2:
        return None
    best_est = min(ids, key=lambda c: (estimated[c], c))
    return measured[best_est] <= min(measured[c] for c in ids)


def top3_recovered(estimated: Mapping[str, float], measured: Mapping[str, float], n: int = 3) -> bool | None:
    ids = _common(estimated, measured)
    if len(ids) < 2:
        return None
    fastest = min(measured[c] for c in ids)
    top = sorted(ids, key=lambda c: (estimated[c], c))[:n]
    return any(measured[c] <= fastest for c in top)


def abs_pct_errors(estimated: Mapping[str, float], measured: Mapping[str, float]) -> dict[str, float]:
    return {c: abs(estimated[c] - measured[c]) / measured[c] for c in _common(estimated, measured) if measured[c] > 0}


@dataclass(frozen=True)
class ConfigAccuracy:
    n_measured: int
    selected: bool | None
    top3: bool | None
    spearman: float | None
    abs_pct_errors: dict  # candidate id -> |estimated - measured| / measured

    def to_dict(self) -> dict:
        return record_dict(self, abs_pct_errors=dict(self.abs_pct_errors))


def config_accuracy(estimated: Mapping[str, float], measured: Mapping[str, float]) -> ConfigAccuracy:
    ids = _common(estimated, measured)
    return ConfigAccuracy(
        n_measured=len(ids),
        selected=selected(estimated, measured),
        top3=top3_recovered(estimated, measured),
        spearman=spearman([estimated[c] for c in ids], [measured[c] for c in ids]),
        abs_pct_errors=abs_pct_errors(estimated, measured),
    )


def _share(flags: list[bool | None]) -> tuple[float | None, int]:
    defined = [f for f in flags if f is not None]
    return (sum(defined) / len(defined) if defined else None), len(defined)


def summarize(configs: Sequence[ConfigAccuracy]) -> dict:
    """Overall figures of one fidelity over its configurations; None where undefined."""
    selection, n_sel = _share([c.selected for c in configs])
    top3, n_top3 = _share([c.top3 for c in configs])
    errors = [e for c in configs for e in c.abs_pct_errors.values()]
    rhos = [c.spearman for c in configs if c.spearman is not None]
    return {
        "configurations": len(configs),
        "selection_accuracy": selection,
        "selection_configurations": n_sel,
        "top3_recovery": top3,
        "top3_configurations": n_top3,
        "mape": float(np.mean(errors)) if errors else None,
        "mape_pairs": len(errors),
        "mean_spearman": float(np.mean(rhos)) if rhos else None,
        "spearman_configurations": len(rhos),
    }
