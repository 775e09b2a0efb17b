"""Repeats hidden in a validation run, and what their spread says about the target.

The all-on-CPU candidate does the same work at every VRAM budget (nothing of its experts
is on the GPU, whatever the budget), so `cope validate` executes it once per budget at each
thread count: those executions are repeats of one measurement. Their spread is this
machine's noise during the run, a floor under the agreement any estimate can show: when
identical executions spread 29%, an estimate cannot be within 10% of every one of them.

Pure functions over the validation's CPU-target rows (dicts with model, threads,
fidelity, estimated_tpot_s, measured_tpot_s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from engine.core.records import record_dict


@dataclass(frozen=True)
class RepeatGroup:
    """The executions of one (model, threads) that did identical work, against one
    fidelity's estimate of it."""

    model: str
    threads: int
    fidelity: str
    n_executions: int
    estimated_tpot_s: float
    median_tpot_s: float
    min_tpot_s: float
    max_tpot_s: float

    @property
    def spread(self) -> float:
        """(max - min) / median of the identical executions: the run's noise."""
        return (self.max_tpot_s - self.min_tpot_s) / self.median_tpot_s

    @property
    def error_to_median(self) -> float:
        """The estimate against the median of the repeats (signed share)."""
        return (self.estimated_tpot_s - self.median_tpot_s) / self.median_tpot_s

    def to_dict(self) -> dict:
        return record_dict(self, spread=self.spread, error_to_median=self.error_to_median)


def repeat_groups(rows: Iterable[Mapping]) -> list[RepeatGroup]:
    """One group per (model, threads, fidelity) with at least two executions."""
    seen: dict[tuple[str, int, str], tuple[float, list[float]]] = {}
    for r in rows:
        key = (r["model"], int(r["threads"]), r["fidelity"])
        _, measured = seen.setdefault(key, (float(r["estimated_tpot_s"]), []))
        measured.append(float(r["measured_tpot_s"]))
    groups = []
    for (model, threads, fidelity), (estimated, measured) in seen.items():
        if len(measured) < 2:
            continue
        m = np.asarray(measured)
        groups.append(RepeatGroup(model, threads, fidelity, len(m), estimated,
                                  float(np.median(m)), float(m.min()), float(m.max())))
    return groups


def noise_verdict(groups: list[RepeatGroup], target: float) -> str | None:
    """A sentence when the repeats spread more than the target allows, else None: then no
    estimate can meet the target on every row, and the comparison says more about the
    machine than about the estimate."""
    noisy = [g for g in groups if g.spread > target]
    if not noisy:
        return None
    worst = max(noisy, key=lambda g: g.spread)
    return (f"identical executions of the all-on-CPU candidate ({worst.model}, {worst.threads} thread{'' if worst.threads == 1 else 's'}, one per "
            f"VRAM budget) spread {worst.spread:.0%} ({worst.min_tpot_s * 1e3:.1f} to {worst.max_tpot_s * 1e3:.1f} ms):"
            f" more than the {target:.0%} target, so this run cannot show the target met or missed; rerun on a "
            f"quieter machine")
