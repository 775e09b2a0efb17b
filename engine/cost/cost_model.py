"""Cost models: the time of one layer step in each execution state.

Every fidelity (analytic in engine/cost/analytic_cost.py; atomic and combined from a measured
Profile in engine/cost/measured_cost.py) answers the same questions, so one replay can be
priced three ways:
- `state_costs(execution, threads, top_k, prefetch_budget)`: the time of a layer step
  with h hits and k - h misses, for h = 0..k, plus the lane busy times behind it;
- `shared_per_token_s()`: what every token pays in every block whatever the policy
  (attention at the chosen context, norms, router, shared experts, dense FFNs);
- `token_overhead_s()`: embedding, output head and sampling, once per token.

Analytic and atomic share the composition rules (`Lanes`, `compose_step`): they differ
only in where the single-operator costs come from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from engine.replays.policy import Execution


class Fidelity(str, Enum):
    ANALYTIC = "analytic"
    ATOMIC = "atomic"
    COMBINED = "combined"
    CALIBRATED = "calibrated"

    @property
    def needs_profile(self) -> bool:
        return self in (Fidelity.ATOMIC, Fidelity.COMBINED)


@dataclass(frozen=True)
class ProfileUse:
    """Where a measured cost model's profile came from and what it holds."""

    source: str  # the profile file
    from_cache: bool  # True: nothing was probed for this run
    counts_by_basis: Mapping[str, int] = field(default_factory=dict)  # measurements: measured, preset, ...
    estimated_states: int = 0  # states priced from atomic costs where no schedule was measured

    def to_dict(self) -> dict[str, Any]:
        c = self.counts_by_basis
        return {
            "profile_source": self.source,
            "profile_from_cache": self.from_cache,
            "measured_count": c.get("measured", 0),
            "preset_count": c.get("preset", 0),
            "measured_plus_preset_count": c.get("measured+preset", 0),
            "estimated_count": c.get("estimated-from-atomic", 0) + self.estimated_states,
        }


@dataclass(frozen=True)
class CostModelDescription:
    fidelity: str
    basis: str  # one line: what the figures rest on
    details: Mapping[str, Any] = field(default_factory=dict)  # the fidelity's own figures
    profile: ProfileUse | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = {"fidelity": self.fidelity, "basis": self.basis, **self.details}
        if self.profile is not None:
            doc.update(self.profile.to_dict())
        return doc


@dataclass(frozen=True)
class StateCosts:
    """Layer-step costs of one execution strategy, indexed by hits h = 0..k."""

    execution: Execution
    total_s: np.ndarray  # critical path of the step
    gpu_s: np.ndarray  # GPU busy on routed experts
    cpu_s: np.ndarray  # CPU busy on routed experts
    copy_s: np.ndarray  # PCIe busy copying missed experts
    sync_s: np.ndarray  # GPU<->CPU hand-over of the hidden state and results
    copied: np.ndarray  # int: misses sent over PCIe (ready-first's lane split)
    prefetch_s: np.ndarray  # [P+1] time to copy p prefetched experts
    # Optional [k+1, P+1]: the measured time of a whole step with h hits and p prefetch
    # copies in flight (the exposed prefetch time included); NaN where not measured.
    # Where finite, price() uses it instead of total_s[h] plus its exposure formula.
    total_by_prefetch_s: np.ndarray | None = None


class CostModel(Protocol):
    fidelity: str

    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts: ...

    def shared_per_token_s(self) -> float: ...

    def token_overhead_s(self) -> float: ...

    def describe(self) -> CostModelDescription: ...


@dataclass(frozen=True)
class Lanes:
    """Single-operator costs at one CPU thread count: all the composition rules need.

    Every fidelity that composes lanes (analytic, atomic) fills one of these; the
    rules in `compose_step` then turn it into layer-step costs the same way.
    The cost functions take a number of experts n and return 0 for n = 0.
    """

    gpu_experts_s: Callable[[int], float]  # n routed experts computed on the GPU
    cpu_experts_s: Callable[[int], float]  # n routed experts on the CPU at the thread count
    copy_experts_s: Callable[[int], float]  # n experts copied host to device
    sync_s: float  # hidden state to the CPU and results back
    gpu_launch_s: float  # fixed part of gpu_experts_s, paid by a GPU lane not yet started
    gpu_per_expert_s: float  # one more expert on the GPU
    cpu_dispatch_s: float  # fixed part of cpu_experts_s
    cpu_per_expert_s: float  # one more expert on the CPU
    copy_latency_s: float  # fixed part of copy_experts_s
    copy_per_expert_s: float  # one more expert copied


def compose_state_costs(execution: Execution, top_k: int, prefetch_budget: int, lanes: Lanes) -> StateCosts:
    """Layer-step costs for h = 0..top_k hits, composed from `lanes`."""
    k = top_k
    rows = [compose_step(execution, h, k - h, lanes) for h in range(k + 1)]
    cols = list(zip(*rows))
    return StateCosts(
        execution=execution,
        total_s=np.array(cols[0]),
        gpu_s=np.array(cols[1]),
        cpu_s=np.array(cols[2]),
        copy_s=np.array(cols[3]),
        sync_s=np.array(cols[4]),
        copied=np.array(cols[5], dtype=np.int64),
        prefetch_s=np.array([lanes.copy_experts_s(p) for p in range(prefetch_budget + 1)]),
    )


def compose_step(execution: Execution, h: int, m: int, lanes: Lanes) -> tuple:
    """(total, gpu, cpu, copy, sync, copied) of one layer step with h hits, m misses.

    Sequential sums the lanes, parallel takes the max of them, stage copies then
    computes everything on the GPU, ready-first splits the misses greedily.
    """
    gpu_hits = lanes.gpu_experts_s(h)
    cpu_misses = lanes.cpu_experts_s(m)
    sync = lanes.sync_s if m else 0.0
    if execution is Execution.SEQUENTIAL:
        return gpu_hits + sync + cpu_misses, gpu_hits, cpu_misses, 0.0, sync, 0
    if execution is Execution.PARALLEL:
        return max(gpu_hits, sync + cpu_misses), gpu_hits, cpu_misses, 0.0, sync, 0
    if execution is Execution.STAGE:
        copy = lanes.copy_experts_s(m)
        gpu_all = lanes.gpu_experts_s(h + m)
        return copy + gpu_all, gpu_all, 0.0, copy, 0.0, m
    return compose_ready_first(h, m, lanes)


def compose_ready_first(h: int, m: int, lanes: Lanes) -> tuple:
    """Greedy: each miss goes to the lane that would finish it first.

    The GPU starts on the hits at once. The CPU lane needs the hidden state
    first and hands its results back (half the sync each way); the copy lane
    moves one expert at a time, and the GPU computes it when both are done.
    """
    half_sync = lanes.sync_s / 2
    gpu_per = lanes.gpu_per_expert_s
    cpu_per = lanes.cpu_per_expert_s
    copy_per = lanes.copy_per_expert_s
    gpu_free = lanes.gpu_experts_s(h)
    cpu_free = half_sync + lanes.cpu_dispatch_s
    copy_free = lanes.copy_latency_s
    n_cpu = n_copy = 0
    for _ in range(m):
        cpu_finish = cpu_free + cpu_per + half_sync
        copy_done = copy_free + copy_per
        gpu_start = max(copy_done, gpu_free if gpu_free else lanes.gpu_launch_s)
        gpu_finish = gpu_start + gpu_per
        if gpu_finish <= cpu_finish:
            copy_free, gpu_free = copy_done, gpu_finish
            n_copy += 1
        else:
            cpu_free += cpu_per
            n_cpu += 1
    cpu_end = cpu_free + half_sync if n_cpu else 0.0
    total = max(gpu_free, cpu_end)
    gpu_busy = lanes.gpu_experts_s(h + n_copy)
    cpu_busy = lanes.cpu_experts_s(n_cpu)
    copy_busy = lanes.copy_experts_s(n_copy)
    return total, gpu_busy, cpu_busy, copy_busy, lanes.sync_s if n_cpu else 0.0, n_copy
