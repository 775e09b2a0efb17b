"""The Policy Matrix: every way COPE considers placing and executing routed experts.

A Candidate is a value; its `id` is a stable string that appears in JSON output and
in file names, so never change the spelling of an existing id.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from engine.core.errors import CopeInputError


class Residency(str, Enum):
    FIXED = "fixed"  # filled once with the most popular experts, never changes
    LAYER = "layer"  # mutable: a cache of slots per layer
    POOL = "pool"  # mutable: one pool of slots shared by all layers


class Execution(str, Enum):
    SEQUENTIAL = "sequential"  # GPU computes the hits, then the CPU the misses
    PARALLEL = "parallel"  # GPU hits while the CPU computes the misses
    STAGE = "stage"  # copy the misses to the GPU, then compute all there
    READY_FIRST = "ready-first"  # each miss to whichever lane finishes it first


class Allocation(str, Enum):
    UNIFORM = "uniform"  # the same slots in every layer
    NONUNIFORM = "nonuniform"  # slots where one more saves the most miss time


class Eviction(str, Enum):
    LRU = "lru"
    SCORE = "score"  # lowest decayed routing score goes first


class Kind(str, Enum):
    MATRIX = "matrix"
    PARTITION_FIRST = "partition-first"  # llama.cpp --n-cpu-moe N: first N blocks on CPU
    PARTITION_LAST = "partition-last"
    ALL_GPU = "all-gpu"
    ALL_CPU = "all-cpu"  # llama.cpp --cpu-moe


# Under these strategies a miss is copied to the GPU anyway, so a mutable cache
# admits it; under the others misses run on the CPU and the cache changes only by
# prefetch (DESIGN.md §4).
COPYING_EXECUTIONS = frozenset({Execution.STAGE, Execution.READY_FIRST})


@dataclass(frozen=True)
class Candidate:
    kind: Kind
    residency: Residency | None = None
    execution: Execution = Execution.SEQUENTIAL
    allocation: Allocation = Allocation.UNIFORM
    eviction: Eviction | None = None  # mutable residencies only
    prefetch: bool = False  # mutable residencies with a next-layer predictor only

    @property
    def id(self) -> str:
        if self.kind is not Kind.MATRIX:
            return self.kind.value
        parts = [self.residency.value, self.execution.value, self.allocation.value]
        if self.eviction is not None:
            parts.append(self.eviction.value)
        if self.prefetch:
            parts.append("prefetch")
        return ".".join(parts)

    @property
    def is_mutable(self) -> bool:
        return self.residency in (Residency.LAYER, Residency.POOL)

    @property
    def copies_misses(self) -> bool:
        return self.kind is Kind.MATRIX and self.execution in COPYING_EXECUTIONS

    def describe(self) -> str:
        if self.kind is Kind.PARTITION_FIRST:
            return "layer partition: experts of the first blocks on the CPU (--n-cpu-moe)"
        if self.kind is Kind.PARTITION_LAST:
            return "layer partition: experts of the last blocks on the CPU"
        if self.kind is Kind.ALL_GPU:
            return "every expert on the GPU"
        if self.kind is Kind.ALL_CPU:
            return "every routed expert on the CPU (--cpu-moe)"
        residency = {
            Residency.FIXED: "fixed popular experts",
            Residency.LAYER: "per-layer cache",
            Residency.POOL: "cross-layer pool",
        }[self.residency]
        extra = []
        if self.eviction is not None:
            extra.append(f"{self.eviction.value} eviction")
        if self.prefetch:
            extra.append("prefetch")
        knobs = f" ({', '.join(extra)})" if extra else ""
        return f"{residency}{knobs}, {self.allocation.value} slots, misses: {self.execution.value}"


def policy_matrix(
    *,
    prefetch_available: bool,
    evictions: tuple[Eviction, ...] = (Eviction.LRU,),
) -> list[Candidate]:
    """Every cell of the matrix: residency x execution x allocation (x eviction).

    Mutable residencies prefetch whenever the trace carries next-layer predictions:
    without them the only change a sequential or parallel cache sees is prefetch.
    """
    cells = []
    for residency in Residency:
        for execution in Execution:
            for allocation in Allocation:
                if residency is Residency.FIXED:
                    cells.append(Candidate(Kind.MATRIX, residency, execution, allocation))
                    continue
                for eviction in evictions:
                    cells.append(
                        Candidate(
                            Kind.MATRIX, residency, execution, allocation, eviction,
                            prefetch=prefetch_available,
                        )
                    )
    return cells


def standalone_candidates(*, all_gpu_fits: bool) -> list[Candidate]:
    out = [Candidate(Kind.PARTITION_FIRST), Candidate(Kind.PARTITION_LAST), Candidate(Kind.ALL_CPU)]
    if all_gpu_fits:
        out.insert(0, Candidate(Kind.ALL_GPU))
    return out


def parse_candidate_id(text: str) -> Candidate:
    """Inverse of Candidate.id, for `--candidate ID` flags."""
    for kind in Kind:
        if kind is not Kind.MATRIX and text == kind.value:
            return Candidate(kind)
    parts = text.split(".")
    try:
        residency = Residency(parts[0])
        execution = Execution(parts[1])
        allocation = Allocation(parts[2])
        rest = parts[3:]
        eviction = None
        if rest and rest[0] in {e.value for e in Eviction}:
            eviction = Eviction(rest.pop(0))
        prefetch = rest == ["prefetch"]
        if rest and not prefetch:
            raise ValueError(rest)
    except (IndexError, ValueError):
        raise CopeInputError(f"not a candidate id: {text!r}") from None
    candidate = Candidate(Kind.MATRIX, residency, execution, allocation, eviction, prefetch)
    if candidate.id != text or (residency is not Residency.FIXED and eviction is None):
        raise CopeInputError(f"not a candidate id: {text!r}")
    return candidate
