"""Where a candidate keeps its experts, before any runtime spells it.

Three layouts cover what runtimes can express:
- LAYERS: whole layers' experts on the CPU, the rest on the GPU (layer partitions,
  every expert on the GPU, every expert on the CPU); also a matrix candidate whose slots
  hold every expert, or none under sequential or parallel execution;
- STAGED: every expert on the CPU, each routed one copied to the GPU at every step (a
  matrix candidate with no slots under stage execution);
- EXPERTS: per-expert residency, `slots_per_layer` of each layer's most popular experts
  (COPE's allocation: engine/replays/residency.py allocate_slots).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from engine.hardware.memory import MemoryPlan
from engine.models.model import ModelSpec
from engine.replays.policy import Allocation, Candidate, Execution, Kind
from engine.replays.residency import allocate_slots, partition_layers


class Layout(str, Enum):
    LAYERS = "layers"
    STAGED = "staged"
    EXPERTS = "experts"


@dataclass(frozen=True)
class Placement:
    layout: Layout
    detail: str  # how a person reads it
    cpu_layers: np.ndarray | None = None  # [L] bool: LAYERS and STAGED
    slots_total: int = 0  # EXPERTS: expert slots in use
    slots_per_layer: np.ndarray | None = None  # EXPERTS: [L] int; None when the popularity is unknown

    @property
    def all_on_gpu(self) -> bool:
        return self.layout is Layout.LAYERS and not self.cpu_layers.any()  # type: ignore[union-attr]

    @property
    def all_on_cpu(self) -> bool:
        return self.layout is not Layout.EXPERTS and bool(self.cpu_layers.all())  # type: ignore[union-attr]


def slots_used(candidate: Candidate, memory: MemoryPlan, n_layers: int) -> int:
    """Expert slots a matrix candidate fills: every slot the budget leaves (uniform spends
    the remainder too, engine/replays/residency.py allocate_slots), at most every expert."""
    total = memory.slots(staging=candidate.copies_misses)
    return min(total, n_layers * memory.n_routed_experts_per_layer)


def placement_of(candidate: Candidate, model: ModelSpec, memory: MemoryPlan,
                 popularity: np.ndarray | None = None) -> Placement:
    n_layers = model.n_moe_layers
    if candidate.kind is not Kind.MATRIX:
        cpu, detail = partition_layers(candidate.kind, n_layers, memory.gpu_layers(), model.moe_blocks)
        return Placement(Layout.LAYERS, f"{candidate.describe()}: {detail}", cpu)
    used = slots_used(candidate, memory, n_layers)
    if used >= model.n_experts_total:
        return Placement(Layout.LAYERS, "every expert fits in its slots: the same as every expert on the GPU",
                         np.zeros(n_layers, dtype=bool))
    everything = np.ones(n_layers, dtype=bool)
    if used == 0 and candidate.execution is Execution.STAGE:
        return Placement(Layout.STAGED, "no expert slots: every routed expert is copied from the CPU at each "
                         "decode step", everything)
    if used == 0 and candidate.execution in (Execution.SEQUENTIAL, Execution.PARALLEL):
        return Placement(Layout.LAYERS, "no expert slots: every routed expert is computed on the CPU (--cpu-moe)",
                         everything)
    if candidate.allocation is Allocation.UNIFORM and used % n_layers == 0:
        per_layer = np.full(n_layers, used // n_layers, dtype=np.int64)
    elif popularity is not None:
        per_layer = allocate_slots(np.asarray(popularity), used, candidate.allocation)
    else:
        per_layer = None
    return Placement(Layout.EXPERTS, f"{used} expert slots", None, used, per_layer)
