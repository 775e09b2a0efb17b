"""TPOT of a candidate: its state histogram priced by a cost model (DESIGN.md §5)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.records import record_dict
from engine.cost.cost_model import StateCosts
from engine.replays.policy import Candidate
from engine.replays.replay import ReplaySetup, ReplayStats

PREFETCH_MODES = ("timed", "optimistic")


@dataclass(frozen=True)
class Breakdown:
    """Seconds per output token. Lanes overlap under parallel and ready-first, so the
    lane figures can add up to more than the experts' critical path."""

    experts_critical_s: float  # routed experts, critical path of every layer step
    gpu_experts_s: float
    cpu_experts_s: float
    copies_s: float  # PCIe busy: copied misses and prefetches
    sync_s: float
    exposed_prefetch_s: float  # prefetch copies the previous layer could not hide
    shared_s: float  # attention, norms, router, shared experts: every candidate pays it
    token_overhead_s: float  # embedding, output head, sampling

    def to_dict(self) -> dict:
        return record_dict(self)


# Two pricing paths of one placement (a command's blocks summed one by one, a candidate's
# layer steps) agree to ~1e-16 s, not bit for bit: speeds this close are the same speed.
TPOT_REL_TOL = 1e-9


def faster(a_s: float, b_s: float) -> bool:
    """Whether a TPOT of `a_s` is faster than `b_s` by more than float noise (the one test
    ranks and "faster than" use)."""
    return a_s < b_s and not math.isclose(a_s, b_s, rel_tol=TPOT_REL_TOL, abs_tol=0.0)


def compare(a_s: float, b_s: float) -> str:
    """How `a_s` compares with `b_s`: "faster", "as_fast" or "slower"."""
    return "faster" if faster(a_s, b_s) else "slower" if faster(b_s, a_s) else "as_fast"


@dataclass(frozen=True)
class Estimate:
    candidate: Candidate
    tpot_s: float
    breakdown: Breakdown
    stats: ReplayStats
    vram_used_bytes: int
    fidelity: str
    detail: str = ""  # e.g. the layer set of a partition

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.tpot_s

    @property
    def setup(self) -> ReplaySetup | None:
        """What the candidate was replayed with (slots, prefetch budget, ready-first's lane
        split): executing the candidate replays exactly this."""
        return self.stats.setup

    @property
    def cpu_layers(self) -> np.ndarray | None:
        """[L] bool: the MoE layers a standalone candidate keeps on the CPU (None for matrix ones)."""
        return self.stats.cpu_layers


def price(
    stats: ReplayStats,
    costs: StateCosts,
    *,
    shared_per_token_s: float,
    token_overhead_s: float,
    prefetch_mode: str = "timed",
) -> tuple[float, Breakdown]:
    """TPOT = mean over tokens of Σ_layers cost(state) + shared + per-token costs.

    The cost of a state (h hits, p prefetch copies) is total_s[h] plus the prefetch
    time the step could not hide (timed) or nothing (optimistic); where the cost model
    measured that state whole (costs.total_by_prefetch_s), the measurement instead, in
    either mode."""
    counts = stats.counts.astype(np.float64)  # [L, k+1, P+1]
    by_hits = counts.sum(axis=(0, 2))  # [k+1]
    per_token = 1.0 / stats.n_tokens
    n_prefetch = counts.shape[2]
    if prefetch_mode == "optimistic" or n_prefetch == 1:
        exposed = np.zeros((counts.shape[1], n_prefetch))
    else:
        # The copy engine is free for prefetch once this step's own copies are done;
        # whatever does not fit in the rest of the step delays the next layer.
        window = costs.total_s - costs.copy_s
        exposed = np.maximum(costs.prefetch_s[None, :n_prefetch] - window[:, None], 0.0)
    by_state = counts.sum(axis=0)  # [k+1, P+1]
    prefetch_copies_s = float(by_state.sum(axis=0) @ costs.prefetch_s[:n_prefetch] * per_token)
    measured = _measured_with_prefetch(costs, counts.shape[1], n_prefetch)
    if measured is None:
        exposed_s = float((by_state * exposed).sum() * per_token)
        experts_s = float(by_hits @ costs.total_s * per_token)
    else:
        # A step measured whole with p prefetch copies in flight replaces the formula:
        # up to the step without prefetch it counts as experts, the rest as exposed.
        step = np.broadcast_to(costs.total_s[:, None], measured.shape)
        known = np.isfinite(measured)
        critical = np.where(known, np.minimum(measured, step), step)
        exposed = np.where(known, np.maximum(measured - step, 0.0), exposed)
        exposed_s = float((by_state * exposed).sum() * per_token)
        experts_s = float((by_state * critical).sum() * per_token)
    breakdown = Breakdown(
        experts_critical_s=experts_s,
        gpu_experts_s=float(by_hits @ costs.gpu_s * per_token),
        cpu_experts_s=float(by_hits @ costs.cpu_s * per_token),
        copies_s=float(by_hits @ costs.copy_s * per_token) + prefetch_copies_s,
        sync_s=float(by_hits @ costs.sync_s * per_token),
        exposed_prefetch_s=exposed_s,
        shared_s=shared_per_token_s,
        token_overhead_s=token_overhead_s,
    )
    tpot = experts_s + exposed_s + shared_per_token_s + token_overhead_s
    if not (math.isfinite(tpot) and tpot > 0):
        # Never rank a NaN, an infinity or a free token: the costs came from something unusable.
        raise CopeInputError(f"the cost model priced a token at {tpot!r} s (candidate {stats.candidate_id}): "
                             "its costs are unusable; probe again (--reprobe) or use --fidelity analytic")
    return tpot, breakdown


def _measured_with_prefetch(costs: StateCosts, n_hits: int, n_prefetch: int) -> np.ndarray | None:
    """costs.total_by_prefetch_s cut or NaN-padded to [n_hits, n_prefetch]; None when
    absent or with no measured state (price then uses its formula everywhere)."""
    table = costs.total_by_prefetch_s
    if table is None:
        return None
    table = np.asarray(table, dtype=np.float64)
    out = np.full((n_hits, n_prefetch), np.nan)
    rows, cols = min(n_hits, table.shape[0]), min(n_prefetch, table.shape[1])
    out[:rows, :cols] = table[:rows, :cols]
    return out if np.isfinite(out).any() else None
