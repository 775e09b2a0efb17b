"""Speed-up from the fewest threads to more: executed against what the estimates imply.

`cope validate` executes a candidate at several thread counts; the speed-up its executor
achieved from the fewest threads to N (executed at the fewest / executed at N) should be
the one the estimates imply (estimate at the fewest / estimate at N), which for the
measured fidelities is the probes' scaling. When the two disagree by more than the
tolerance (relative to the implied speed-up), one of them does not use the threads it
was given, and a per-thread error figure means little until that is found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

SPEEDUP_TOLERANCE = 0.15


@dataclass(frozen=True)
class SpeedupCheck:
    base_threads: int
    threads: int
    estimated_base_s: float
    estimated_s: float
    executed_base_s: float
    executed_s: float
    tolerance: float = SPEEDUP_TOLERANCE

    @property
    def implied(self) -> float:
        """Speed-up the estimates imply: estimate at the base count / estimate at `threads`."""
        return self.estimated_base_s / self.estimated_s

    @property
    def achieved(self) -> float:
        """Speed-up the executor achieved: executed at the base count / executed at `threads`."""
        return self.executed_base_s / self.executed_s

    @property
    def disagreement(self) -> float:
        """(achieved - implied) / implied: negative when execution gained less than implied."""
        return (self.achieved - self.implied) / self.implied

    @property
    def warn(self) -> bool:
        return abs(self.disagreement) > self.tolerance

    def to_dict(self) -> dict:
        # by hand: JSON names say TPOT (*_tpot_s), derived figures follow, the tolerance is the report's
        return {
            "base_threads": self.base_threads, "threads": self.threads,
            "estimated_base_tpot_s": self.estimated_base_s, "estimated_tpot_s": self.estimated_s,
            "executed_base_tpot_s": self.executed_base_s, "executed_tpot_s": self.executed_s,
            "implied_speedup": self.implied, "achieved_speedup": self.achieved,
            "disagreement": self.disagreement, "warn": self.warn,
        }


def speedup_checks(estimated_s: Mapping[int, float], executed_s: Mapping[int, float],
                   tolerance: float = SPEEDUP_TOLERANCE) -> list[SpeedupCheck]:
    """One check per thread count above the fewest that has both an estimate and an
    executed time (positive), each from that fewest count; thread counts in order."""
    common = sorted(t for t in estimated_s if t in executed_s
                    and estimated_s[t] is not None and executed_s[t] is not None
                    and estimated_s[t] > 0 and executed_s[t] > 0)
    if len(common) < 2:
        return []
    base = common[0]
    return [SpeedupCheck(base, t, float(estimated_s[base]), float(estimated_s[t]), float(executed_s[base]),
                         float(executed_s[t]), tolerance) for t in common[1:]]


def describe(check: SpeedupCheck) -> str:
    """'executed 1.00x from 1 to 2 threads, the estimates imply 1.78x (-43.8%)'."""
    return (f"executed {check.achieved:.2f}x from {check.base_threads} to {check.threads} threads, "
            f"the estimates imply {check.implied:.2f}x ({check.disagreement:+.1%})")
