"""Which probes to run: the atomic operators every plan needs, then the combined layer
steps that replay reached, most frequent first, within a time budget (DESIGN.md §5).

A combined-schedule state is (execution, hits h, misses m = k - h, prefetch copies p,
CPU threads). Exactly the states with a non-zero count in some candidate's histogram
(summed over layers) are reachable; they are ranked by their total step count over
all candidates, so the budget goes where most of the decode time is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from engine.profiles.profile_keys import Ident, Key, measurement_id
from engine.replays.policy import Execution
from engine.replays.replay import ReplayStats

# How long one probe takes, in seconds: one figure for all, one per operator, or a
# function of (operator, key as a dict).
ProbeSeconds = Union[float, Mapping[str, float], Callable[[str, dict], float]]

_EXECUTION_ORDER = {ex: i for i, ex in enumerate(Execution)}


@dataclass(frozen=True)
class ScheduleState:
    execution: Execution
    hits: int
    misses: int
    prefetches: int
    threads: int

    @property
    def key(self) -> dict:
        return {
            "execution": self.execution.value,
            "hits": self.hits,
            "misses": self.misses,
            "prefetches": self.prefetches,
            "threads": self.threads,
        }

    @property
    def ident(self) -> Ident:
        return measurement_id("schedule", self.key)


@dataclass(frozen=True)
class PlannedState:
    state: ScheduleState
    steps: int  # layer steps in this state, over every candidate and layer
    probe_s: float  # estimated time to probe it


@dataclass(frozen=True)
class AtomicProbe:
    operator: str
    key: Key
    probe_s: float

    @property
    def ident(self) -> Ident:
        return self.operator, self.key


@dataclass(frozen=True)
class ProbePlan:
    atomic: tuple[AtomicProbe, ...]  # always run, whatever the budget
    states: tuple[PlannedState, ...]  # to probe, most frequent first
    unprobed: tuple[PlannedState, ...]  # reachable, left out by the budget
    budget_s: float
    threads: int

    @property
    def atomic_s(self) -> float:
        return sum(p.probe_s for p in self.atomic)

    @property
    def states_s(self) -> float:
        return sum(s.probe_s for s in self.states)

    @property
    def step_coverage(self) -> float:
        """Share of all reachable layer steps whose state will be measured."""
        probed = sum(s.steps for s in self.states)
        total = probed + sum(s.steps for s in self.unprobed)
        return probed / total if total else 1.0

    def idents(self) -> list[Ident]:
        """Every measurement the plan asks for, in probing order."""
        return [p.ident for p in self.atomic] + [s.state.ident for s in self.states]


def probe_seconds(estimate: ProbeSeconds) -> Callable[[str, dict], float]:
    """The estimate as a function of (operator, key)."""
    if callable(estimate):
        return estimate
    if isinstance(estimate, Mapping):
        table = dict(estimate)

        def lookup(operator: str, key: dict) -> float:
            if operator not in table:
                raise ValueError(f"no probe duration given for {operator!r}")
            return float(table[operator])

        return lookup
    seconds = float(estimate)
    return lambda operator, key: seconds


def atomic_probes(top_k: int, threads: int, estimate: ProbeSeconds, *, max_copies: int | None = None) -> tuple[AtomicProbe, ...]:
    """The single-operator probes every plan needs: GPU and CPU experts for n = 1..k,
    host-to-device copies for n = 1..max(k, max_copies), sync, a shared layer, the head."""
    seconds = probe_seconds(estimate)
    wanted: list[tuple[str, dict]] = []
    wanted += [("gpu_experts", {"n": n}) for n in range(1, top_k + 1)]
    wanted += [("cpu_experts", {"n": n, "threads": threads}) for n in range(1, top_k + 1)]
    wanted += [("h2d_copy", {"n": n}) for n in range(1, max(top_k, max_copies or 0) + 1)]
    wanted += [("sync", {}), ("shared_layer", {}), ("token_head", {})]
    return tuple(AtomicProbe(*measurement_id(op, key), float(seconds(op, key))) for op, key in wanted)


def reachable_states(candidates: Sequence[tuple[Execution, ReplayStats]], threads: int) -> dict[ScheduleState, int]:
    """Every state with a non-zero count in some candidate's histogram, with its total
    step count over the candidates (layers summed)."""
    steps: dict[ScheduleState, int] = {}
    top_k = None
    for execution, stats in candidates:
        execution = Execution(execution)
        if top_k is None:
            top_k = stats.top_k
        elif stats.top_k != top_k:
            raise ValueError(f"candidates disagree on top-k ({top_k} and {stats.top_k} in {stats.candidate_id})")
        by_state = stats.counts.sum(axis=0)  # [k+1, P+1]
        for h, p in zip(*by_state.nonzero()):
            state = ScheduleState(execution, int(h), top_k - int(h), int(p), threads)
            steps[state] = steps.get(state, 0) + int(by_state[h, p])
    return steps


def plan_probes(
    candidates: Sequence[tuple[Execution, ReplayStats]],
    *,
    threads: int,
    budget_s: float,
    probe_s: ProbeSeconds,
) -> ProbePlan:
    """The probes to run for these candidates within `budget_s` seconds.

    The atomic probes come first and always run (every fidelity above analytic needs
    them); what is left of the budget goes to the reachable combined states, most
    frequent first (ties: execution in Policy Matrix order, then hits, then prefetch
    copies), stopping at the first state that no longer fits.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    if not candidates:
        raise ValueError("no candidates to plan probes for")
    seconds = probe_seconds(probe_s)
    top_k = candidates[0][1].top_k
    max_copies = max(stats.counts.shape[2] - 1 for _, stats in candidates)
    atomic = atomic_probes(top_k, threads, seconds, max_copies=max_copies)
    left = budget_s - sum(p.probe_s for p in atomic)

    steps = reachable_states(candidates, threads)
    ranked = sorted(
        steps.items(),
        key=lambda item: (-item[1], _EXECUTION_ORDER[item[0].execution], item[0].hits, item[0].prefetches),
    )
    planned = [PlannedState(state, n, float(seconds("schedule", state.key))) for state, n in ranked]
    cut = 0
    for entry in planned:
        if entry.probe_s > left:
            break
        left -= entry.probe_s
        cut += 1
    return ProbePlan(atomic, tuple(planned[:cut]), tuple(planned[cut:]), float(budget_s), threads)
